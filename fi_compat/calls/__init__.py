"""The call path: the stable call API (``call_api``), how a call binds to the installed function
(``binding``), the max_seq_len policy (``policy``) and the transparent decode mode
(``transparent``).  Imports none of its modules here."""
