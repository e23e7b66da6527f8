"""What fi_compat installs in place of flashinfer functions.

* :func:`memoized_function`: a bounded memo.  It is a plain Python function
  (the cheapest thing to call on the decode path) that keeps the original's
  name, docstring, module and signature (``__wrapped__``), so
  ``inspect.signature`` and flashinfer's own callers see no difference.
* :class:`CallThrough`: a wrapt proxy that rewrites a call (transparent mode).
* :class:`Tripwire`: a wrapt proxy whose call ends the process (strict at
  start-up, :mod:`fi_compat.installing.tripwire`).

All are recognisable (``_fi_compat_wrapper``) and answer for themselves:
``cache_info()``, ``cache_parameters()`` and ``cache_clear()`` are fi_compat's,
never the numbers of flashinfer's inner ``functools.cache``; ``cache_clear()``
forgets every answer, side tables included, and resets the statistics.
"""

from __future__ import annotations

import functools
import operator
import sys
from functools import _CacheInfo  # the namedtuple functools.lru_cache returns
from typing import Any, Callable, Hashable, Optional

import wrapt

from .cache import MISSING, BoundedCache

KeyFunction = Callable[[tuple, dict], Optional[Hashable]]
ComputeFunction = Callable[[tuple, dict, Hashable], Any]
FallbackFunction = Callable[[tuple, dict], Any]


class _Switch:
    """Whether a proxy still acts.  Kept outside the proxy so the hot path reads
    a plain slot instead of going through the proxy's attribute machinery."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = True


class FiCompatProxy(wrapt.FunctionWrapper):
    """Base of every fi_compat proxy.  :meth:`fi_compat_deactivate` lets
    ``uninstall()`` turn a proxy into a pass-through when a third party has
    wrapped it and it cannot be taken out of the attribute (docs/design.md)."""

    _fi_compat_wrapper = True

    def __init__(self, wrapped: Callable, wrapper: Callable, switch: _Switch) -> None:
        super().__init__(wrapped, wrapper)
        self._self_switch = switch

    @property
    def _fi_compat_original(self) -> Callable:
        return self.__wrapped__

    @property
    def _self_active(self) -> bool:
        return self._self_switch.active

    def fi_compat_deactivate(self) -> None:
        self._self_switch.active = False

    def __reduce_ex__(self, protocol: int) -> Any:
        """Pickle by reference, as a plain function pickles: the original's
        module and qualified name, so unpickling returns whatever that
        attribute is then (this proxy while installed, the original after
        ``uninstall()``).

        A proxy that is the attribute there pickles as that name; one that is
        not (a transparent-mode proxy on a re-export) pickles as its original,
        which is.  Anything else raises ``pickle.PicklingError`` exactly as a
        plain function that was replaced would."""
        original = self.__wrapped__
        module = sys.modules.get(getattr(original, "__module__", None) or "")
        qualname = getattr(original, "__qualname__", None)
        current: Any = module
        for part in (qualname or "").split("."):
            current = getattr(current, part, None)
        if qualname is not None and current is self:
            return qualname  # pickle's own by-name path checks module.qualname is self
        return operator.getitem, ((original,), 0)

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(2)


EntryFactory = Callable[[Callable, _Switch, Callable, Callable, ComputeFunction], Callable]
"""``factory(original, switch, lookup, fill, compute)`` -> a function with the
original's exact signature that computes the key from its own parameters
(:mod:`fi_compat.adapters.builder_entries`)."""


def memoized_function(
    wrapped: Callable,
    cache: BoundedCache,
    key: KeyFunction,
    compute: ComputeFunction,
    fallback: Optional[FallbackFunction] = None,
    entry: Optional[EntryFactory] = None,
    fill: Optional[Callable[..., Any]] = None,
) -> Callable:
    """Bounded memo in front of a flashinfer function.

    ``memoized_function(wrapped, cache, key, compute, fallback)`` returns a
    plain Python function, not a wrapt proxy: a hit is then one Python call
    (no ``FunctionWrapper`` dispatch, no descriptor binding object under a
    ``classmethod``); :func:`is_memo` recognises it.  It carries what a proxy would: ``__wrapped__`` (so
    ``inspect.signature`` shows the original's), the original's name,
    qualified name, module and docstring (``functools.update_wrapper``), and
    fi_compat's own ``cache_info()`` / ``cache_parameters()`` / ``cache_clear()`` / ``fi_compat_cache``
    / ``fi_compat_deactivate()``.  It pickles by reference like the original
    (``module.qualname`` names it while installed).

    ``key(args, kwargs)`` maps a call to a hashable key, or ``None`` for a call
    it cannot key (then ``fallback(args, kwargs)`` answers it: a bounded path
    too, never flashinfer's unbounded cache); a key that turns out unhashable
    goes to the fallback as well.  ``compute(args, kwargs, key)`` produces the
    value on a miss; it may call a different function than the wrapped one
    (``__wrapped__`` of a ``functools.cache``) with normalised arguments.
    ``fill(key, compute, args, kwargs, normalised)``, when given, answers a
    miss instead of :meth:`BoundedCache.fill` (it may compute without keeping).
    ``entry``, when given, replaces the generic ``(*args, **kwargs)`` function
    with one specialised to the original's signature (keywords bind straight
    to locals: no kwargs dict, no argument gathering); a function it returns
    with a ``fi_compat_forget`` attribute has that called by ``cache_clear()``
    (its own side tables).

    Cost of a hit: the key function and :meth:`BoundedCache.lookup` (no lock).
    """
    switch = _Switch()
    lookup = cache.lookup
    fill = cache.fill if fill is None else fill
    if fallback is None:

        def fallback(args: tuple, kwargs: dict, _wrapped: Callable = wrapped) -> Any:
            return _wrapped(*args, **kwargs)

    if entry is not None:
        proxy = entry(wrapped, switch, lookup, fill, compute)
    else:

        def proxy(*args: Any, **kwargs: Any) -> Any:
            if switch.active:
                cache_key = key(args, kwargs)
                if cache_key is not None:
                    try:
                        value = lookup(cache_key)
                    except TypeError:  # an unhashable argument in the key
                        return fallback(args, kwargs)
                    if value is not MISSING:
                        return value
                    return fill(cache_key, compute, args, kwargs, cache_key)
                return fallback(args, kwargs)
            return wrapped(*args, **kwargs)

    functools.update_wrapper(proxy, wrapped)
    proxy.__wrapped__ = wrapped

    def cache_info() -> _CacheInfo:
        stats = cache.stats()
        return _CacheInfo(stats.hits, stats.misses, stats.maxsize, stats.currsize)

    def cache_parameters() -> dict[str, Any]:
        # fi_compat's bound, not the wrapped functools cache's (update_wrapper copied that one's);
        # keys compare by value across types (1 == 1.0), as an untyped lru_cache's do
        return {"maxsize": cache.maxsize, "typed": False}

    # a proxy that keeps answers of its own (a last-answer slot, a spec index) says how to forget them
    forget = getattr(proxy, "fi_compat_forget", None)
    if forget is not None:
        cache.forget_with(forget)

    def deactivate() -> None:
        switch.active = False
        proxy._self_active = False

    proxy._fi_compat_wrapper = True
    proxy._fi_compat_memo = True
    proxy._fi_compat_original = wrapped
    proxy._self_active = True
    proxy.fi_compat_cache = cache
    proxy.cache_info = cache_info
    proxy.cache_parameters = cache_parameters
    proxy.cache_clear = cache.clear
    proxy.fi_compat_deactivate = deactivate
    return proxy


class CallThrough(FiCompatProxy):
    """A proxy that rewrites a call (the transparent decode mode)."""

    def __init__(self, wrapped: Callable, rewrite: Callable[[Callable, tuple, dict], Any]) -> None:
        switch = _Switch()

        def call(wrapped: Callable, instance: Any, args: tuple, kwargs: dict) -> Any:
            if switch.active:
                return rewrite(wrapped, args, kwargs)
            return wrapped(*args, **kwargs)

        super().__init__(wrapped, call, switch)


class Tripwire(FiCompatProxy):
    """A proxy whose call runs ``trip()`` instead of the original (:mod:`fi_compat.installing.tripwire`:
    ``trip`` ends the process); a pass-through once deactivated.  Not a
    :class:`CallThrough`, so :func:`fi_compat.calls.transparent.unwrap` keeps it and the
    call API trips too.  Cost: nothing on any path that is served (it is only
    armed when the process is to end at its first call)."""

    def __init__(self, wrapped: Callable, trip: Callable[[], Any]) -> None:
        switch = _Switch()

        def call(wrapped: Callable, instance: Any, args: tuple, kwargs: dict) -> Any:
            if switch.active:
                return trip()
            return wrapped(*args, **kwargs)

        super().__init__(wrapped, call, switch)


def is_memo(obj: object) -> bool:
    """A memo :func:`memoized_function` made (a plain function, so no ``isinstance``)."""
    return getattr(obj, "_fi_compat_memo", False) is True


def is_fi_compat_proxy(obj: object) -> bool:
    """A proxy or memoized function fi_compat installed (``__wrapped__`` is the original)."""
    return getattr(obj, "_fi_compat_wrapper", False) is True
