"""Key strategies: how each row of :data:`fi_compat.verdict.bounds.BOUNDS` keys its calls, by name.

A row names its strategy (``Bound(..., key="builder")``); the strategy is plain
data: the key factory from :mod:`fi_compat.adapters.keys`, the argument
translation a miss needs, and what the memo adapter
(:mod:`fi_compat.adapters.bounded_memo`) does differently for it, as flags the
adapter reads instead of comparing functions by identity.  A new kind of
key is one more :class:`KeyStrategy` here; a new cache keyed like an old one
is one more row naming it.

Cost: a dictionary lookup when a plan is made; nothing per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Optional

from . import bucket_match, keys, split_counts
from .layout import ArgumentLayout

KeyFactory = Callable[..., Callable[[tuple[Any, ...]], Optional[Hashable]]]
ArgumentsFactory = Callable[[ArgumentLayout], Optional[Callable[[tuple[Any, ...]], tuple[Any, ...]]]]
ProxyFactory = Callable[
    [ArgumentLayout, Callable[..., Any], Callable[[tuple[Any, ...], dict[str, Any]], Any], int], Callable[..., Any]
]


@dataclass(frozen=True)
class KeyStrategy:
    """One way of keying a memoized flashinfer function.

    ``key``: layout (and, with ``batch_cap``, the resolved cap) -> (complete
    argument tuple -> key, or ``None`` for a call it cannot key).  ``computes_from_key``: the key *is* the normalised
    argument tuple, and a miss calls the function with it.  ``batch_cap``: the key holds the cute-dsl batch cap, resolved for
    the installed release by :func:`fi_compat.adapters.batch_cap.batch_cap_of`.
    ``fast_entry``: the memo takes the function's own signature
    (:mod:`fi_compat.adapters.builder_entries`) instead of generic argument
    handling.  ``miss_arguments``: layout -> the arguments a miss calls the
    function with, from the complete tuple, or ``None`` where the release
    needs no translation.  ``proxy``: (layout, the uncached function, the
    bounded fallback, the cache size) -> the memo's proxy factory, for a memo that keys,
    computes and answers its calls itself (:mod:`fi_compat.adapters.bucket_match`:
    its answers are completed per call); such a strategy has no ``key``.
    ``asks_function``: the key factory takes the uncached function too, and
    asks it once per model (:mod:`fi_compat.adapters.split_counts`)."""

    name: str
    key: Optional[KeyFactory]
    computes_from_key: bool = True
    batch_cap: bool = False
    fast_entry: bool = False
    miss_arguments: Optional[ArgumentsFactory] = None
    proxy: Optional[ProxyFactory] = None
    asks_function: bool = False

    @property
    def calls_as_called(self) -> bool:
        """A miss calls flashinfer with the caller's own arguments (or the key's values,
        positionally), and the memo takes no signature of its own: parameters that became
        positional-only change nothing for it (its layout refuses them by keyword, as flashinfer
        does).  The builder's strategies (own signature, keyword translation) do not."""
        return self.proxy is None and not self.fast_entry and self.miss_arguments is None


def _fresh_builder_arguments(layout: ArgumentLayout) -> Optional[Callable[[tuple[Any, ...]], tuple[Any, ...]]]:
    """Builders without a ``cute_dsl_impl`` parameter (0.6.13 - 0.6.15.post1) use
    ``max_seq_len`` for the profile length only, so a laddered one builds the
    config the key stands for; later builders also size the cute-dsl batch cap
    from it, and are called with the caller's arguments."""
    if "cute_dsl_impl" in layout.index:
        return None
    return keys.fresh_builder_arguments(layout)


STRATEGIES: Mapping[str, KeyStrategy] = {
    strategy.name: strategy
    for strategy in (
        KeyStrategy("k-tile", keys.split_kv_key),
        KeyStrategy("split-count", split_counts.split_count_key, asks_function=True),
        KeyStrategy("batch-cap", keys.batch_cap_key),
        KeyStrategy("tuning-config", keys.tuning_config_key),
        KeyStrategy("bucket-reads", None, proxy=bucket_match.entry),
        KeyStrategy(
            "builder",
            keys.builder_key,
            computes_from_key=False,
            batch_cap=True,
            fast_entry=True,
            miss_arguments=_fresh_builder_arguments,
        ),
    )
}
"""Every key strategy by name."""


def strategy(name: str) -> KeyStrategy:
    """The strategy named ``name``; ``KeyError`` naming the known ones otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"no key strategy named {name!r}; known: {', '.join(STRATEGIES)}") from None


__all__ = ["STRATEGIES", "KeyStrategy", "strategy"]
