"""The process-wide install: the state machine (``installer``), its state and its reports, the
rows judged after a lazy import, the strict tripwire and the patches layers above add.  Imports none
of its modules here (``fi_compat.install`` is the public function; this package is
``fi_compat.installing``)."""
