"""Adapters: how fi_compat puts its bounds in place (behaviours, not releases).

* :mod:`.base`: the contract: a :class:`Plan` of :class:`PatchStep`\\ s,
  applied all-or-nothing by :class:`Installation`;
* :mod:`.bounded_memo`: a flashinfer function behind a bounded LRU (replacing
  an unbounded ``functools.cache``, or memoizing a plain function);
* :mod:`.keys`: how a call becomes a key, and why each normalisation is safe;
* :mod:`.strategies`: the key strategies the rows name, as data the memo reads.

Which functions get which adapter is the table in :mod:`fi_compat.verdict.bounds`;
the transparent decode mode is :mod:`fi_compat.calls.transparent`.
"""

from __future__ import annotations

from . import bounded_memo, keys
from .base import Installation, PatchStep, Plan

__all__ = ["Installation", "PatchStep", "Plan", "bounded_memo", "keys"]
