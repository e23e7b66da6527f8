"""The bounded-memo adapter: one flashinfer function behind a bounded LRU.

Two cases, decided by what :mod:`fi_compat.lookup` found:

* flashinfer's function carries a ``functools`` cache (unbounded, or bounded
  far above fi_compat's size on a per-request key): its contents are
  released (``cache_clear``), and the proxy calls the uncached
  function (``__wrapped__``) on a miss, with the normalised arguments the key
  holds.  A call the key cannot bind goes to a second bounded LRU keyed on the
  raw arguments (or, if those are unhashable, straight to the uncached
  function): never to the unbounded cache.
* a plain function that the bound memoizes anyway (the tuning-config builder,
  whose fresh configs defeat the autotuner's caches): the proxy calls it on a
  miss; a call the key cannot bind goes straight to it.

One proxy object replaces the function at every module attribute that holds it
(:attr:`fi_compat.lookup.Found.aliases`).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Optional, Protocol

from ..memo.cache import BoundedCache
from ..lookup import NO_MEMO, Found
from ..lookup.memo_site import find_cache
from ..memo.proxies import memoized_function
from .base import Plan, PatchStep
from .layout import ArgumentLayout
from .strategies import KeyStrategy
from ..model.spec_model import FunctionSpec


class Row(Protocol):
    """What :func:`plan` reads of a row: :class:`fi_compat.verdict.bounds.Bound` is one.  A
    protocol, not the class, because the rows sit a layer above (they name this package's key
    strategies), and nothing here may import them, not even for the type checker."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> FunctionSpec: ...
    @property
    def strategy(self) -> KeyStrategy: ...
    @property
    def scale(self) -> int: ...
    @property
    def keep_identity(self) -> bool: ...
    @property
    def probes(self) -> bool: ...


def _layout_of(
    target: Callable, fallback_names: tuple[str, ...], fallback_defaults: dict, renamed: dict[str, str]
) -> ArgumentLayout:
    try:
        return ArgumentLayout.of(target, renamed)
    except (TypeError, ValueError):  # no introspectable signature: use the spec's
        return ArgumentLayout(fallback_names, fallback_defaults, renamed)


def _raw_fallback(target: Callable, cache: BoundedCache) -> Callable[[tuple, dict], Any]:
    """A bounded LRU on the call's raw arguments, for calls the key cannot bind."""

    def compute(args: tuple, kwargs: dict, key: Hashable) -> Any:
        return target(*args, **kwargs)

    def fallback(args: tuple, kwargs: dict) -> Any:
        raw = (args, tuple(kwargs.items())) if kwargs else args
        try:
            hash(raw)
        except TypeError:
            return target(*args, **kwargs)
        return cache.get_or_compute(raw, compute, args, kwargs, raw)

    return fallback


class _Probing(threading.local):
    """Whether this thread is inside the miss of a row that probes (``Bound.probes``)."""

    active = False


_PROBING = _Probing()


def _keeping_unless_probing(cache: BoundedCache) -> Callable[..., Any]:
    """``cache.fill``, except inside a probing row's miss: then compute and keep nothing.

    The cute-dsl batch cap's binary search asks the sizer about 13 batch sizes
    nobody launches, once per K-tile class; the batch cap keeps its own answer,
    so those entries would only push the launches' entries out of the sizer's
    memo.  Cost: one thread-local read, on misses only."""
    fill = cache.fill

    def fill_unless_probing(key: Hashable, compute: Callable, args: tuple, kwargs: dict, normalised: Any) -> Any:
        if _PROBING.active:
            return compute(args, kwargs, normalised)
        return fill(key, compute, args, kwargs, normalised)

    return fill_unless_probing


def _probing(compute: Callable[[tuple, dict, Any], Any]) -> Callable[[tuple, dict, Any], Any]:
    def compute_probing(args: tuple, kwargs: dict, normalised: Any) -> Any:
        outer, _PROBING.active = _PROBING.active, True
        try:
            return compute(args, kwargs, normalised)
        finally:
            _PROBING.active = outer

    return compute_probing


def plan(bound: Row, found: Found, cache_size: int) -> Plan:
    """The plan that puts ``found`` (one row of :data:`fi_compat.verdict.bounds.BOUNDS`) behind a bounded memo.

    What is keyed and computed is the row's key strategy's (:meth:`KeyStrategy.memo`);
    this adds the bounded caches, the fallback for calls the key cannot take, and the
    patch at every holder.  Cost: one ``inspect.signature``; nothing of flashinfer's runs.
    """
    # A cache under decorators is bounded where it sits (found.site): the outer
    # decorators stay at the module attribute and call the proxy instead.
    site = found.site
    flashinfer_cache: Any = None
    if site is not None:
        original = flashinfer_cache = site.cache
    else:
        original = found.obj
        located = (
            find_cache(original, found.name or bound.spec.name.rsplit(".", 1)[-1]) if found.memo != NO_MEMO else None
        )
        # located.cache is not original for a stack none of whose slots fi_compat can write: replaced whole
        flashinfer_cache = None if located is None else located.cache
    replaces_cache = flashinfer_cache is not None
    target = flashinfer_cache.__wrapped__ if replaces_cache else original
    spec_defaults = bound.spec.defaults()
    # A (**kwargs) wrapper (TensorRT-LLM's builder memo) is laid out by the
    # parameters the lookup found for this release, not the newest spec's.
    names = tuple(p.name for p in found.function.params) or bound.spec.names
    layout = _layout_of(target, names, spec_defaults, bound.spec.earlier_names())
    size = cache_size * bound.scale
    cache = BoundedCache(bound.name, size, keep_identity=bound.keep_identity)
    caches = {bound.name: cache}

    fallback: Callable[[tuple, dict], Any]
    if replaces_cache:
        unkeyed = BoundedCache(f"{bound.name} (unkeyed calls)", size)
        caches[unkeyed.name] = unkeyed
        cache.forget_with(unkeyed.clear)  # one cache_clear() forgets every answer the memo gave
        fallback = _raw_fallback(target, unkeyed)
    else:

        def fallback(args: tuple, kwargs: dict) -> Any:
            return target(*args, **kwargs)

    parts = bound.strategy.memo(layout, target, fallback, cache_size, replaces_cache)
    # what the key reads and remembers (split counts, batch-cap readings) goes with the memo's answers
    for remembers in parts.remembers:
        forget = getattr(remembers, "fi_compat_forget", None)
        if forget is not None:
            cache.forget_with(forget)

    key_of, complete, count = parts.key_of, layout.complete, len(layout.names)

    def key(args: tuple, kwargs: dict) -> Optional[Hashable]:
        if not kwargs and len(args) == count:  # every parameter positionally: the tuple is complete
            return key_of(args)
        values = complete(args, kwargs)
        return None if values is None else key_of(values)

    miss = _probing(parts.compute) if bound.probes else parts.compute
    proxy = memoized_function(
        original, cache, key, miss, fallback, entry=parts.entry, fill=_keeping_unless_probing(cache)
    )
    clear = flashinfer_cache.cache_clear if replaces_cache else None
    if site is not None:  # the slots inside the decorator stack, and module attributes holding the cache
        step = PatchStep(bound.spec.qualname, original, proxy, site.holders, before=clear)
    elif found.descriptor is not None:  # a class member: put the same descriptor back around the proxy
        step = PatchStep(
            bound.spec.qualname, found.raw, proxy, found.aliases, before=clear, value=found.descriptor(proxy)
        )
    else:
        step = PatchStep(bound.spec.qualname, original, proxy, found.aliases, before=clear)
    notes = []
    if found.foreign:
        notes.append(
            f"{bound.spec.qualname} was replaced by {found.foreign}; fi_compat memoizes around it "
            "(its own memo keys on the exact max_seq_len and would miss on every batch)"
        )
    return Plan([step], caches, notes)
