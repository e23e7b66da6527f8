"""Memo primitives: the bounded LRU (``cache``) and what replaces a flashinfer function
(``proxies``).  Imports none of its modules here."""
