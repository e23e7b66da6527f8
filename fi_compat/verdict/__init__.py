"""What fi_compat bounds (``bounds``: one row per cache) and what it does with each row on a
release (``judgement``).  Imports none of its modules here."""
