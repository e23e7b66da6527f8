"""Key strategies: how each row of :data:`fi_compat.verdict.bounds.BOUNDS` keys its calls, by name.

A row names its strategy (``Bound(..., key="builder")``); each strategy is one
object that says what it does for the memo adapter
(:mod:`fi_compat.adapters.bounded_memo`): :meth:`KeyStrategy.memo` turns the
installed function's layout into the parts of its memo (:class:`MemoParts`: how a
complete argument tuple becomes a key, what a miss computes, and an entry of its
own where it has one).  Four kinds:

* :class:`NormalisedArguments`: the key *is* the call's argument tuple with the
  length normalised, and a miss calls the function with it (the sizers, the
  batch cap, the tuning config);
* :class:`AskedNormalisation`: the same, where the normalisation asks the uncached
  function once per model (the monolithic sizer's split count);
* :class:`BuilderKey`: the builder's key (shapes and scalars, and the cute-dsl
  batch cap the builder computes), a miss with the caller's own arguments or
  with the profile length the key holds, and an entry with the builder's own
  signature (:mod:`fi_compat.adapters.builder_entries`);
* :class:`OwnProxy`: a memo that keys, computes and answers its calls itself
  (:mod:`fi_compat.adapters.bucket_match`: its answers are completed per call).

A new kind of key is one more class here; a new cache keyed like an old one is
one more row naming it.  Cost: a dictionary lookup and one call when a plan is
made; nothing per call beyond the parts it returns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Optional

from . import bucket_match, keys, sizer_keys, split_counts
from .batch_cap import batch_cap_of
from .builder_entries import fast_entry
from .layout import ArgumentLayout

KeyOf = Callable[[tuple[Any, ...]], Optional[Hashable]]
Compute = Callable[[tuple[Any, ...], dict[str, Any], Any], Any]
Fallback = Callable[[tuple[Any, ...], dict[str, Any]], Any]


def _unkeyed(values: tuple[Any, ...]) -> None:
    return None


@dataclass(frozen=True)
class MemoParts:
    """What a strategy gives the memo adapter for one installed function.

    ``key_of``: complete argument tuple -> key (``None``: a call it cannot key).
    ``compute(args, kwargs, key)``: the value on a miss.  ``entry``: an entry
    factory replacing the generic memo (:func:`fi_compat.memo.proxies.memoized_function`),
    or ``None``.  ``remembers``: objects whose ``fi_compat_forget`` the memo's
    ``cache_clear()`` calls (what the key reads and keeps besides the memo)."""

    key_of: KeyOf
    compute: Compute
    entry: Optional[Callable[..., Any]] = None
    remembers: tuple[Any, ...] = field(default=())


class KeyStrategy:
    """One way of keying a memoized flashinfer function: :meth:`memo` gives its parts.

    ``calls_as_called``: a miss calls flashinfer with the caller's own arguments (or the
    key's values, positionally) and the memo takes no signature of its own, so
    parameters that became positional-only change nothing for it (its layout refuses
    them by keyword, as flashinfer does); :func:`fi_compat.verdict.judgement.judge` reads it."""

    name: str = ""
    calls_as_called: bool = True

    def memo(
        self,
        layout: ArgumentLayout,
        target: Callable[..., Any],
        fallback: Fallback,
        cache_size: int,
        replaces_cache: bool,
    ) -> MemoParts:
        """The memo's parts for ``target`` (flashinfer's uncached function, laid out as
        ``layout``); ``fallback`` answers what the key cannot take; ``replaces_cache``:
        ``target`` sits under a ``functools`` cache fi_compat replaces."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class NormalisedArguments(KeyStrategy):
    """The key is the complete argument tuple, normalised by ``key`` (layout -> key of
    a tuple); a miss calls the function with the key's values."""

    def __init__(self, name: str, key: Callable[[ArgumentLayout], KeyOf]) -> None:
        self.name, self.key = name, key

    def key_of(self, layout: ArgumentLayout, target: Callable[..., Any]) -> KeyOf:
        return self.key(layout)

    def memo(
        self,
        layout: ArgumentLayout,
        target: Callable[..., Any],
        fallback: Fallback,
        cache_size: int,
        replaces_cache: bool,
    ) -> MemoParts:
        key_of = self.key_of(layout, target)

        def compute(args: tuple[Any, ...], kwargs: dict[str, Any], normalised: Any) -> Any:
            return target(*normalised)

        return MemoParts(key_of, compute, remembers=(key_of,))


class AskedNormalisation(NormalisedArguments):
    """:class:`NormalisedArguments` whose normalisation asks the uncached function
    (``key(layout, target)``), once per model (:mod:`fi_compat.adapters.split_counts`)."""

    def __init__(self, name: str, key: Callable[[ArgumentLayout, Callable[..., Any]], KeyOf]) -> None:
        self.name, self.asking = name, key

    def key_of(self, layout: ArgumentLayout, target: Callable[..., Any]) -> KeyOf:
        return self.asking(layout, target)


class BuilderKey(KeyStrategy):
    """The tuning-config builder: keyed by :func:`fi_compat.adapters.keys.builder_key`
    with the cute-dsl batch cap as the installed builder computes it
    (:func:`fi_compat.adapters.batch_cap.batch_cap_of`).  A miss calls the builder with
    the caller's arguments, except on builders without ``cute_dsl_impl`` (0.6.13 -
    0.6.15.post1), which read ``max_seq_len`` for the profile length only and are
    called with the key's laddered one (:func:`fi_compat.adapters.keys.fresh_builder_arguments`),
    so equal keys build equal configs.  The decode path's own call takes an entry with
    the builder's signature (:mod:`fi_compat.adapters.builder_entries`), where the
    builder carries no ``functools`` cache of its own."""

    name = "builder"
    calls_as_called = False

    def memo(
        self,
        layout: ArgumentLayout,
        target: Callable[..., Any],
        fallback: Fallback,
        cache_size: int,
        replaces_cache: bool,
    ) -> MemoParts:
        batch_cap = batch_cap_of(target)
        key_of = keys.builder_key(layout, batch_cap)
        if "cute_dsl_impl" in layout.index:

            def compute(args: tuple[Any, ...], kwargs: dict[str, Any], _key: Any) -> Any:
                return target(*args, **kwargs)
        else:
            arguments_of = keys.fresh_builder_arguments(layout)

            def compute(args: tuple[Any, ...], kwargs: dict[str, Any], _key: Any) -> Any:
                # by keyword: a (**kwargs) wrapper takes nothing positionally
                values = layout.complete(args, kwargs)
                assert values is not None  # a miss comes only for a keyed call: its key was made from these values
                return target(**dict(zip(layout.names, arguments_of(values))))

        # its unkeyable calls go to the original, so the entry only where that is no functools cache
        entry = None if replaces_cache else fast_entry(target)
        if entry is not None and batch_cap is not None:
            entry = functools.partial(entry, batch_cap=batch_cap)
        return MemoParts(key_of, compute, entry, remembers=(key_of, batch_cap))


class OwnProxy(KeyStrategy):
    """A memo that keys, computes and answers its calls itself: ``proxy(layout, target,
    fallback, cache_size)`` is its entry factory (:func:`fi_compat.adapters.bucket_match.entry`)."""

    calls_as_called = False

    def __init__(self, name: str, proxy: Callable[..., Callable[..., Any]]) -> None:
        self.name, self.proxy = name, proxy

    def memo(
        self,
        layout: ArgumentLayout,
        target: Callable[..., Any],
        fallback: Fallback,
        cache_size: int,
        replaces_cache: bool,
    ) -> MemoParts:
        def compute(args: tuple[Any, ...], kwargs: dict[str, Any], _key: Any) -> Any:
            return target(*args, **kwargs)

        return MemoParts(_unkeyed, compute, self.proxy(layout, target, fallback, cache_size))


STRATEGIES: Mapping[str, KeyStrategy] = {
    strategy.name: strategy
    for strategy in (
        NormalisedArguments("k-tile", sizer_keys.split_kv_key),
        AskedNormalisation("split-count", split_counts.split_count_key),
        NormalisedArguments("batch-cap", sizer_keys.batch_cap_key),
        NormalisedArguments("tuning-config", keys.tuning_config_key),
        OwnProxy("bucket-reads", bucket_match.entry),
        BuilderKey(),
    )
}
"""Every key strategy by name."""


def strategy(name: str) -> KeyStrategy:
    """The strategy named ``name``; ``KeyError`` naming the known ones otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"no key strategy named {name!r}; known: {', '.join(STRATEGIES)}") from None


__all__ = [
    "AskedNormalisation",
    "BuilderKey",
    "KeyStrategy",
    "MemoParts",
    "NormalisedArguments",
    "OwnProxy",
    "STRATEGIES",
    "strategy",
]
