"""Bounding a ``functools`` memo the watch found growing: where flashinfer holds it, and the plan that replaces it.

One job: :func:`holders` (every place a loaded flashinfer module holds a cache,
through the library's one holder scan, :func:`fi_compat.lookup.modules.places`)
and :func:`bounding_plan` (a bounded memo of the same name and signature at each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Optional

from ..adapters.base import Plan, PatchStep
from ..lookup.modules import Place, places
from ..memo.cache import BoundedCache
from ..memo.proxies import memoized_function
from ..model.specs import PACKAGE
from .records import Finding


def _raw_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[Hashable]:
    return (args, tuple(sorted(kwargs.items()))) if kwargs else args


def holders(cache: Any) -> Iterator[Optional[Place]]:
    """Where loaded flashinfer modules hold ``cache``: module attributes, class attributes
    (under their ``staticmethod``/``classmethod``), closure cells and ``__wrapped__`` of the
    functions each module defines; ``None`` after each module, so a step can stop on time and
    resume.  An engine module that imported the name itself is not scanned (that would read
    every module); it keeps the original."""
    return places(cache, PACKAGE, deep=True)


def bounding_plan(cache: Any, cache_size: int, name: str, found: Optional[list[Place]] = None) -> Plan:
    """The plan that puts ``cache`` (a ``functools`` cache without a bound) behind a
    bounded memo at every place :func:`holders` finds (or at ``found``, what it
    found): a :func:`fi_compat.memo.proxies.memoized_function` with the original's
    name and signature, an LRU of ``cache_size`` entries keyed on the call's
    arguments as they are; a class attribute gets the same descriptor back.
    Applying it releases what ``cache`` holds.  Empty when nothing holds it."""
    inner = getattr(cache, "__wrapped__", None)
    if not callable(inner):
        return Plan()
    where = [h for h in holders(cache) if h is not None] if found is None else found

    def compute(args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable) -> Any:
        return inner(*args, **kwargs)

    def fallback(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return inner(*args, **kwargs)

    bounded = BoundedCache(f"watch: {name}", cache_size, keep_identity=True)
    proxy = memoized_function(cache, bounded, _raw_key, compute, fallback)
    clear_once: list[Callable[[], None]] = [cache.cache_clear]

    def before() -> None:
        while clear_once:
            clear_once.pop()()

    plain = tuple(dict.fromkeys((owner, attribute) for owner, attribute, raw in where if raw is cache))
    steps = [PatchStep(name, cache, proxy, plain, before)] if plain else []
    steps += [
        PatchStep(name, raw, proxy, ((owner, attribute),), before, type(raw)(proxy))
        for owner, attribute, raw in where
        if raw is not cache
    ]
    return Plan(steps, {bounded.name: bounded} if steps else {}, [])


@dataclass(eq=False)
class Bounding:
    """A functools memo being bounded: the scan for its holders, resumed step by step."""

    finding: Finding
    cache: Any
    scan: Iterator[Optional[Place]]
    found: list[Place] = field(default_factory=list)
    message: str = ""
