"""The description of flashinfer: its functions (``specs``, on ``spec_model``), how a found
signature compares (``signatures``), its releases (``release_list``) and which one is installed
(``release_detection``).  Imports nothing above itself; imports none of its modules here."""
