"""The adapter registry and how an adapter is chosen.

Selection goes by release first, then is confirmed against the functions as
found (live ``inspect.signature`` at install time, or ``ast`` on a wheel for
the guard: both pass a ``lookup``).  Outcomes:

``verified``
    the release is in the adapter's verified range and every signature fits;
``unverified``
    no verified range fits (or the one that does has drifted) but the
    signatures fit another known adapter: it is used, with a WARNING;
``unsupported``
    nothing fits: strict mode raises, default mode warns and patches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from packaging.version import Version

from ..signatures import Lookup, Mismatch, check_all
from .base import Adapter, Installation
from .fresh_config import FreshConfigAdapter
from .cached_config import CachedConfigAdapter

# Order matters only for releases outside every range: the cached-config
# layout is tried first because it is the stricter probe (it needs the
# functools.cache that newer releases have).
ADAPTERS: tuple[type[Adapter], ...] = (CachedConfigAdapter, FreshConfigAdapter)

VERIFIED = "verified"
UNVERIFIED = "unverified"
UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Selection:
    outcome: str
    adapter: Optional[type[Adapter]]
    release: Optional[Version]
    reason: str
    mismatches: tuple[Mismatch, ...] = field(default=())

    @property
    def adapter_name(self) -> Optional[str]:
        return None if self.adapter is None else self.adapter.name


def adapters_for_release(version: Optional[Version]) -> list[type[Adapter]]:
    """Adapters whose verified range contains ``version`` (by number only)."""
    return [a for a in ADAPTERS if a.covers(version)]


def select(version: Optional[Version], lookup: Lookup) -> Selection:
    """Choose an adapter for ``version`` given the functions ``lookup`` finds.

    Cost: one ``compare`` per expected function per adapter tried (a few
    microseconds each); no flashinfer code runs.
    """
    in_range = adapters_for_release(version)
    first_mismatches: tuple[Mismatch, ...] = ()
    for adapter in in_range:
        mismatches = tuple(check_all(adapter.functions, lookup))
        if not mismatches:
            return Selection(
                VERIFIED, adapter, version,
                f"flashinfer {version} is in {adapter.name}'s verified range ({adapter.verified}) "
                "and every signature matches",
            )
        first_mismatches = first_mismatches or mismatches
    tried: list[tuple[type[Adapter], tuple[Mismatch, ...]]] = []
    for adapter in ADAPTERS:
        if adapter in in_range:
            continue
        mismatches = tuple(check_all(adapter.functions, lookup))
        if not mismatches:
            where = (
                f"is in {in_range[0].name}'s range but its signatures changed"
                if in_range else "is outside every verified range"
            )
            return Selection(
                UNVERIFIED, adapter, version,
                f"flashinfer {version} {where}; its signatures match {adapter.name} "
                f"(verified on {adapter.verified}); run the release matrix to verify it",
                first_mismatches,
            )
        tried.append((adapter, mismatches))
    if first_mismatches:
        reason_mismatches = first_mismatches
        where = f"is in {in_range[0].name}'s verified range but"
    else:
        # Report against the adapter whose layout came closest (fewest problems).
        adapter, reason_mismatches = min(tried, key=lambda item: sum(len(m.problems) for m in item[1]))
        where = f"is outside every verified range and, closest to {adapter.name},"
    details = "; ".join(m.describe() for m in reason_mismatches)
    return Selection(UNSUPPORTED, None, version, f"flashinfer {version} {where} {details}", reason_mismatches)


__all__ = [
    "ADAPTERS", "Adapter", "CachedConfigAdapter", "FreshConfigAdapter", "Installation",
    "Selection", "UNSUPPORTED", "UNVERIFIED", "VERIFIED", "adapters_for_release", "select",
]
