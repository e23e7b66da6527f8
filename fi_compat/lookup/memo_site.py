"""Where a live ``functools`` cache sits, however many decorators flashinfer stacks over it.

flashinfer stacks decorators (``@flashinfer_api`` and others, ``functools.wraps``
style) over functions; one of them may sit over a ``functools`` cache, so the
module attribute holds a plain function with no ``cache_info`` while the cache
grows underneath.  :func:`find_cache` walks from the module attribute through
``__wrapped__`` attributes and closure cells to the cache that wraps the
function named, and lists every slot of the stack that holds it, so
:mod:`fi_compat.adapters.bounded_memo` can bound it *where it sits*: the outer
decorators keep running, and call fi_compat's memo instead of the cache.

Cost: a walk of at most :data:`MAX_NODES` objects (a few microseconds for the
usual one or two decorators); install and doctor time only.  Nothing is called.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Any, Iterator, Optional

MAX_NODES = 64
"""How many objects one walk visits at most (a decorator stack is a handful deep)."""


@dataclass(frozen=True)
class CacheSite:
    """A ``functools`` cache found under ``obj``.

    ``holders``: ``(owner, attribute)`` slots inside the decorator stack that
    hold the cache: a closure cell's ``cell_contents`` or a plain function's
    ``__wrapped__``.  Empty when ``obj`` is the cache itself (the module
    attribute is the slot then)."""

    cache: Any
    holders: tuple[tuple[Any, str], ...] = ()
    nested: bool = False  # under a decorator: the module attribute holds something else

    @property
    def in_place(self) -> bool:
        """Whether fi_compat can bound it where it sits (under a decorator, through a writable slot)."""
        return self.nested and bool(self.holders)

    @property
    def maxsize(self) -> Optional[int]:
        maxsize: Optional[int] = self.cache.cache_info().maxsize
        return maxsize


def is_functools_cache(obj: Any) -> bool:
    """``functools.cache`` / ``lru_cache`` wrappers answer ``cache_info`` and ``cache_clear`` and wrap a function."""
    return (
        callable(getattr(obj, "cache_info", None))
        and callable(getattr(obj, "cache_clear", None))
        and (hasattr(obj, "__wrapped__"))
    )


def _unproxied(obj: Any) -> Any:
    """flashinfer's object behind a fi_compat proxy (a re-install judges what flashinfer shipped)."""
    original = getattr(obj, "_fi_compat_original", None)
    return obj if original is None else original


def _slots(node: Any) -> Iterator[tuple[Any, str, Any]]:
    """``(owner, attribute, value)`` for each slot of ``node`` a decorator stack passes through."""
    wrapped = vars(node).get("__wrapped__") if isinstance(node, types.FunctionType) else None
    if wrapped is None and not isinstance(node, types.FunctionType):
        try:
            wrapped = getattr(node, "__wrapped__", None)
        except Exception:  # noqa: BLE001  (an odd proxy: nothing to follow)
            wrapped = None
        # only a plain function's __wrapped__ is a slot fi_compat may write; others are followed, not written
        owner = None
    else:
        owner = node
    if wrapped is not None:
        yield owner, "__wrapped__", wrapped
    for cell in getattr(node, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value):
            yield cell, "cell_contents", value


def find_cache(obj: Any, name: Optional[str] = None) -> Optional[CacheSite]:
    """The ``functools`` cache under ``obj`` wrapping a function called ``name``, if any.

    ``obj`` itself may be the cache (no name check then, as before decorators
    were followed).  Below it, a cache counts only if the function it wraps is
    ``name``: a decorator's closure may hold unrelated cached helpers."""
    obj = _unproxied(obj)
    if is_functools_cache(obj):
        return CacheSite(obj)
    found: Any = None
    holders: list[tuple[Any, str]] = []
    frontier, seen = [obj], {id(obj)}
    while frontier and len(seen) < MAX_NODES:
        node = frontier.pop(0)
        for owner, attribute, value in _slots(node):
            value = _unproxied(value)
            if is_functools_cache(value) and _wraps(value, name) and (found is None or value is found):
                found = value
                if owner is not None:
                    holders.append((owner, attribute))
                continue
            if id(value) not in seen and (isinstance(value, types.FunctionType) or hasattr(value, "__wrapped__")):
                seen.add(id(value))
                frontier.append(value)
    return None if found is None else CacheSite(found, tuple(holders), nested=True)


def _wraps(cache: Any, name: Optional[str]) -> bool:
    if name is None:
        return True
    try:
        return getattr(inspect.unwrap(cache), "__name__", None) == name
    except ValueError:  # a __wrapped__ cycle
        return False
