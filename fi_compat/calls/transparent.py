"""Transparent mode: flashinfer's public decode routed through :func:`fi_compat.mla_decode`.

For callers that cannot change their code but want the call API's behaviour
(the max_seq_len policy, keyword gating).  Bounding the caches does not need
it: that patches flashinfer's internal functions, which every caller reaches.

The plan replaces the decode function at every module attribute that holds
it -- ``flashinfer``, ``flashinfer.mla``, ``flashinfer.decode``, and any other
imported module that bound it by name earlier (vLLM does ``from
flashinfer.decode import ...`` at import) -- except its home module
``flashinfer.mla._core``, where fi_compat's own call lands.  A module that
imports the name *after* install gets the proxy anyway.

Cost: one identity scan of every loaded module at install (tens of
milliseconds); per call, one extra Python frame before :func:`mla_decode`.
"""

from __future__ import annotations

from typing import Any, Callable

from ..adapters.base import Plan, PatchStep
from ..lookup.modules import holders, loaded
from ..memo.proxies import CallThrough
from ..model.specs import DECODE


def plan(route: Callable[..., Any]) -> Plan:
    """The transparent-mode plan for the decode function currently in
    ``flashinfer.mla._core``: every holder calls ``route(*args, **kwargs)``
    (the call API) instead.  Registered with the installer by
    :mod:`fi_compat.calls.call_api`, which this module never imports."""
    core = loaded(DECODE.module)
    if core is None:
        raise KeyError(DECODE.module)  # the installer calls this only once the module is imported
    original = getattr(core, DECODE.name)
    targets = holders(original, skip=(DECODE.module,))
    if not targets:
        return Plan()
    proxy = CallThrough(original, lambda wrapped, args, kwargs: route(*args, **kwargs))
    return Plan([PatchStep(DECODE.qualname, original, proxy, targets)])


def unwrap(function: Callable) -> Callable:
    """``function`` without transparent-mode proxies around it."""
    while isinstance(function, CallThrough):
        function = function.__wrapped__
    return function


__all__ = ["plan", "unwrap"]
