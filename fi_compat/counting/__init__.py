"""Counting flashinfer's memory: the ``functools`` caches of its loaded modules (``census``), the
walk over what its modules hold (``memo_walk``) and the memory it adds up to (``memory_census``).
Imports none of its modules here."""
