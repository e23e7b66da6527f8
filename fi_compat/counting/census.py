"""A census of flashinfer's ``functools`` caches: proof by counting, not by promise.

:func:`take` lists every ``functools.cache`` / ``lru_cache`` object reachable
from the imported flashinfer modules -- module attributes, and functions,
static and class methods of the classes those modules define -- with its
current size and bound.  :func:`grown` compares two censuses.  fi_compat's own
proxies are listed too (``owner == "fi_compat"``), and the flashinfer cache
inside each proxy stays listed under flashinfer's name, so a call that reaches
flashinfer's unbounded cache behind fi_compat's back shows up as growth.

``status()``, ``fi-compat doctor``, the soak and the tests all count here.

Cost: one pass over every attribute of every loaded flashinfer module and
class (tens of milliseconds with 500 modules); never on a hot path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional

from ..model.specs import PACKAGE

FLASHINFER = "flashinfer"
FI_COMPAT = "fi_compat"


@dataclass(frozen=True)
class CacheCount:
    """One cache: where it is, whose it is, how full, how bounded."""

    qualname: str
    owner: str  # "flashinfer" or "fi_compat"
    currsize: int
    maxsize: Optional[int]  # None: unbounded

    @property
    def unbounded(self) -> bool:
        return self.maxsize is None

    def as_dict(self) -> dict[str, Any]:
        return {"qualname": self.qualname, "owner": self.owner, "currsize": self.currsize, "maxsize": self.maxsize}


@dataclass(frozen=True)
class Growth:
    """A cache that holds more entries than it did."""

    before: CacheCount
    after: CacheCount

    @property
    def gained(self) -> int:
        return self.after.currsize - self.before.currsize

    @property
    def qualname(self) -> str:
        return self.after.qualname

    def describe(self) -> str:
        bound = "unbounded" if self.after.maxsize is None else f"maxsize {self.after.maxsize}"
        return (
            f"{self.after.qualname} ({self.after.owner}, {bound}): "
            f"{self.before.currsize} -> {self.after.currsize} entries (+{self.gained})"
        )


def _is_cache(value: Any) -> bool:
    return callable(getattr(value, "cache_info", None)) and callable(getattr(value, "cache_clear", None))


def _is_fi_compat(value: Any) -> bool:
    return getattr(value, "_fi_compat_wrapper", False) is True


def _count(qualname: str, value: Any, owner: str) -> Optional[CacheCount]:
    try:
        info = value.cache_info()
        return CacheCount(qualname, owner, int(info.currsize), info.maxsize)
    except Exception:  # noqa: BLE001  (an object that only looks like a cache is not counted)
        return None


def _members(module_name: str, module: Any) -> Iterator[tuple[str, Any]]:
    """``(qualname, value)`` for module attributes and for class members of classes it defines."""
    for attribute, value in getattr(module, "__dict__", {}).copy().items():
        yield f"{module_name}.{attribute}", value
        if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
            for member, item in vars(value).copy().items():
                if isinstance(item, (staticmethod, classmethod)):
                    item = item.__func__
                yield f"{module_name}.{attribute}.{member}", item


def _found(modules: Optional[Mapping[str, Any]]) -> Iterator[tuple[str, str, Any]]:
    """``(qualname, owner, cache)`` of every cache once (a re-export is the same object)."""
    source = sys.modules if modules is None else modules
    seen: set[int] = set()
    for module_name in sorted(name for name in list(source) if name == PACKAGE or name.startswith(PACKAGE + ".")):
        module = source.get(module_name)
        if module is None:
            continue
        for qualname, value in _members(module_name, module):
            for owner, cache in _caches_in(value):
                if id(cache) in seen:
                    continue
                seen.add(id(cache))
                yield qualname, owner, cache


def take(modules: Optional[Mapping[str, Any]] = None) -> dict[str, CacheCount]:
    """Every functools cache in the loaded flashinfer modules, by qualname.

    A cache bound under several names (a re-export) is counted once, under
    the module and qualified name of the function it caches.  ``modules`` defaults to
    ``sys.modules``."""
    counts: dict[str, CacheCount] = {}
    for qualname, owner, cache in _found(modules):
        name = _defined_name(cache) or qualname
        counted = _count(name if owner == FLASHINFER else f"{name} [fi_compat]", cache, owner)
        if counted is not None:
            counts[counted.qualname] = counted
    return counts


def caches(modules: Optional[Mapping[str, Any]] = None) -> list[Any]:
    """The cache objects :func:`take` counts as flashinfer's (the one behind a fi_compat proxy
    too): what a test empties to start as a fresh process would."""
    return [cache for _, owner, cache in _found(modules) if owner == FLASHINFER]


def _defined_name(cache: Any) -> Optional[str]:
    """``module.qualname`` where the cached function was defined (re-exports share it)."""
    target = getattr(cache, "__wrapped__", None)
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if isinstance(module, str) and isinstance(name, str) and module.startswith(PACKAGE):
        return f"{module}.{name}"
    return None


def _caches_in(value: Any) -> Iterator[tuple[str, Any]]:
    """The caches a value is or holds: a fi_compat proxy yields itself and the
    flashinfer cache it replaced."""
    if _is_fi_compat(value):
        yield FI_COMPAT, value
        inner = getattr(value, "_fi_compat_original", None)
        if inner is not None and _is_cache(inner):
            yield FLASHINFER, inner
    elif _is_cache(value):
        yield FLASHINFER, value


def grown(before: Mapping[str, CacheCount], after: Mapping[str, CacheCount]) -> list[Growth]:
    """Caches of ``after`` holding more entries than in ``before`` (a cache new
    in ``after`` counts from zero), largest gain first."""
    growth = []
    for qualname, count in after.items():
        previous = before.get(qualname) or CacheCount(qualname, count.owner, 0, count.maxsize)
        if count.currsize > previous.currsize:
            growth.append(Growth(previous, count))
    return sorted(growth, key=lambda g: -g.gained)


def over_bound(
    after: Mapping[str, CacheCount], before: Mapping[str, CacheCount], bound: int, owners: Iterable[str] = (FLASHINFER,)
) -> list[Growth]:
    """Growth past ``bound`` entries in caches of ``owners``: the census test's
    failure condition (no flashinfer cache may grow past fi_compat's bound)."""
    wanted = set(owners)
    return [g for g in grown(before, after) if g.after.owner in wanted and g.gained > bound]


__all__ = ["CacheCount", "FI_COMPAT", "FLASHINFER", "Growth", "caches", "grown", "over_bound", "take"]
