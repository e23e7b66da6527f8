"""The wrapt proxies fi_compat installs in place of flashinfer functions.

A proxy keeps the original's name, docstring, signature and module (wrapt
forwards them), so ``inspect.signature`` and flashinfer's own callers see no
difference.  What it adds is recognisable (``_fi_compat_wrapper``) and answers
for itself: ``cache_info()`` and ``cache_clear()`` are fi_compat's, never the
numbers of flashinfer's inner ``functools.cache`` that a plain
``FunctionWrapper`` would forward.
"""

from __future__ import annotations

from functools import _CacheInfo  # the namedtuple functools.lru_cache returns
from typing import Any, Callable, Hashable, Optional

import wrapt

from .cache import BoundedCache

KeyFunction = Callable[[tuple, dict], Optional[Hashable]]
ComputeFunction = Callable[[tuple, dict], Any]


class FiCompatProxy(wrapt.FunctionWrapper):
    """Base of every fi_compat proxy.  ``_self_active`` lets ``uninstall()``
    turn a proxy into a pass-through when a third party has wrapped it and it
    cannot be taken out of the attribute (see docs/trtllm-coexistence.md)."""

    _fi_compat_wrapper = True

    def __init__(self, wrapped: Callable, wrapper: Callable, role: str) -> None:
        super().__init__(wrapped, wrapper)
        self._self_active = True
        self._self_role = role

    @property
    def _fi_compat_original(self) -> Callable:
        return self.__wrapped__

    @property
    def fi_compat_role(self) -> str:
        return self._self_role

    def fi_compat_deactivate(self) -> None:
        self._self_active = False


class MemoizedFunction(FiCompatProxy):
    """Bounded memo in front of a flashinfer function.

    ``key(args, kwargs)`` maps a call to a hashable key, or ``None`` for a call
    it cannot key safely (then the call goes straight through, uncounted).
    ``compute(args, kwargs)`` produces the value on a miss; it may call a
    different function than the wrapped one (e.g. ``__wrapped__`` of a
    ``functools.cache``) or pass normalised arguments.
    """

    def __init__(self, wrapped: Callable, cache: BoundedCache, key: KeyFunction,
                 compute: ComputeFunction, role: str) -> None:
        self._self_cache = cache
        self._self_key = key
        self._self_compute = compute
        super().__init__(wrapped, self._self_call, role)

    def _self_call(self, wrapped: Callable, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not self._self_active:
            return wrapped(*args, **kwargs)
        key = self._self_key(args, kwargs)
        if key is None:
            return wrapped(*args, **kwargs)
        return self._self_cache.get_or_compute(key, self._self_compute, args, kwargs)

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

    def __init__(self, wrapped: Callable, call: Callable[[Callable, tuple, dict], Any], role: str) -> None:
        self._self_rewrite = call
        super().__init__(wrapped, self._self_call, role)

    def _self_call(self, wrapped: Callable, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not self._self_active:
            return wrapped(*args, **kwargs)
        return self._self_rewrite(wrapped, args, kwargs)


def is_fi_compat_proxy(obj: object) -> bool:
    return isinstance(obj, FiCompatProxy)
