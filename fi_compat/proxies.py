"""The wrapt proxies fi_compat installs in place of flashinfer functions.

A proxy keeps the original's name, docstring, signature and module (wrapt
forwards them), so ``inspect.signature`` and flashinfer's own callers see no
difference.  What it adds is recognisable (``_fi_compat_wrapper``) and answers
for itself: ``cache_info()`` and ``cache_clear()`` are fi_compat's, never the
numbers of flashinfer's inner ``functools.cache`` that a plain
``FunctionWrapper`` would forward.
"""

from __future__ import annotations

import operator
import sys
from functools import _CacheInfo  # the namedtuple functools.lru_cache returns
from typing import Any, Callable, Hashable, Optional

import wrapt

from .cache import BoundedCache

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


class MemoizedFunction(FiCompatProxy):
    """Bounded memo in front of a flashinfer function.

    ``key(args, kwargs)`` maps a call to a hashable key, or ``None`` for a call
    it cannot key (then ``fallback(args, kwargs)`` answers it: a bounded path
    too, never flashinfer's unbounded cache).  ``compute(args, kwargs, key)``
    produces the value on a miss; it may call a different function than the
    wrapped one (``__wrapped__`` of a ``functools.cache``) with normalised
    arguments.

    Cost of a hit: the key function, one lock round trip and a dict move.
    """

    def __init__(self, wrapped: Callable, cache: BoundedCache, key: KeyFunction,
                 compute: ComputeFunction, fallback: Optional[FallbackFunction] = None) -> None:
        switch = _Switch()
        get_or_compute = cache.get_or_compute
        if fallback is None:

            def fallback(args: tuple, kwargs: dict, _wrapped: Callable = wrapped) -> Any:
                return _wrapped(*args, **kwargs)

        # A closure over locals: the cheapest call path wrapt allows.
        def call(wrapped: Callable, instance: Any, args: tuple, kwargs: dict) -> Any:
            if switch.active:
                if instance is not None:
                    # Bound through a descriptor (a classmethod around the
                    # proxy, before Python 3.13): the original takes it first.
                    args = (instance, *args)
                cache_key = key(args, kwargs)
                if cache_key is not None:
                    return get_or_compute(cache_key, compute, args, kwargs, cache_key)
                return fallback(args, kwargs)
            return wrapped(*args, **kwargs)

        super().__init__(wrapped, call, switch)
        self._self_cache = cache

    @property
    def fi_compat_cache(self) -> BoundedCache:
        return self._self_cache

    def cache_info(self) -> _CacheInfo:
        stats = self._self_cache.stats()
        return _CacheInfo(stats.hits, stats.misses, stats.maxsize, stats.currsize)

    def cache_clear(self) -> None:
        self._self_cache.clear()


class CallThrough(FiCompatProxy):
    """A proxy that rewrites a call (the transparent decode mode)."""

    def __init__(self, wrapped: Callable, rewrite: Callable[[Callable, tuple, dict], Any]) -> None:
        switch = _Switch()

        def call(wrapped: Callable, instance: Any, args: tuple, kwargs: dict) -> Any:
            if switch.active:
                return rewrite(wrapped, args, kwargs)
            return wrapped(*args, **kwargs)

        super().__init__(wrapped, call, switch)


def is_fi_compat_proxy(obj: object) -> bool:
    return isinstance(obj, FiCompatProxy)
