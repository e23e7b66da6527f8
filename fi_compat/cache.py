"""A small thread-safe LRU with the statistics ``status()`` reports.

Why not ``functools.lru_cache``: we need eviction counts, a size estimate,
one object per key even when two threads miss at once (the autotuner keys
some of its own caches on config identity), and locks that can be renewed in
a forked child.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional

_live_caches: "weakref.WeakSet[BoundedCache]" = weakref.WeakSet()


@dataclass(frozen=True)
class CacheStats:
    name: str
    hits: int
    misses: int
    evictions: int
    currsize: int
    maxsize: int
    approx_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class BoundedCache:
    """LRU mapping of at most ``maxsize`` entries.

    :meth:`get_or_compute` costs one lock round trip and an ``OrderedDict``
    move on a hit (well under a microsecond); on a miss it calls
    ``compute(*arguments)``
    *outside* the lock, so a slow flashinfer call never blocks other threads,
    then keeps whichever value reached the cache first so every caller of an
    equal key receives the same object.  Exceptions from ``compute``
    propagate and store nothing.
    """

    def __init__(self, name: str, maxsize: int, keep_identity: bool = False) -> None:
        self.name = name
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        # keep_identity: values evicted from the LRU but still alive elsewhere
        # (held by flashinfer's identity-keyed autotuner caches) are handed out
        # again for their key, so the key keeps meaning one object.  Weak: it
        # never keeps a value alive, so the bound on what fi_compat holds stays.
        self._identities: Optional[weakref.WeakValueDictionary] = weakref.WeakValueDictionary() if keep_identity else None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._bytes_per_entry: int | None = None
        _live_caches.add(self)

    def get_or_compute(self, key: Hashable, compute: Callable[..., Any], *arguments: Any) -> Any:
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is not _MISSING:
                self._data.move_to_end(key)
                self.hits += 1
                return value
            if self._identities is not None:
                value = self._identities.get(key, _MISSING)
                if value is not _MISSING:
                    self.hits += 1
                    self._insert(key, value)
                    return value
            self.misses += 1
        value = compute(*arguments)
        with self._lock:
            existing = self._data.get(key, _MISSING)
            if existing is not _MISSING:
                self._data.move_to_end(key)
                return existing
            self._insert(key, value)
        if self._bytes_per_entry is None:
            self._bytes_per_entry = approximate_size(value)
        return value

    def _insert(self, key: Hashable, value: Any) -> None:
        """Store ``key`` (lock held), evicting the least recently used past the bound."""
        self._data[key] = value
        if self._identities is not None:
            try:
                self._identities[key] = value
            except TypeError:  # a value that cannot be weakly referenced keeps no identity
                pass
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)
            self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            if self._identities is not None:
                self._identities.clear()

    def __len__(self) -> int:
        return len(self._data)

    def stats(self) -> CacheStats:
        with self._lock:
            size = len(self._data)
            return CacheStats(
                self.name,
                self.hits,
                self.misses,
                self.evictions,
                size,
                self.maxsize,
                size * (self._bytes_per_entry or 0),
            )

    def _renew_lock_after_fork(self) -> None:
        # A lock held by another thread at fork time stays held forever in the
        # child; the child has only the forking thread, so a fresh lock is safe.
        self._lock = threading.Lock()


_MISSING = object()


def _renew_all_locks() -> None:
    for cache in list(_live_caches):
        cache._renew_lock_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_all_locks)


def approximate_size(root: object, limit: int = 10_000) -> int:
    """Bytes reachable from ``root`` through containers, instance dicts, slots
    and closures, counting each object once (``sys.getsizeof``).  Modules,
    types, functions' code and globals are shared with the rest of the process
    and not counted.  An estimate for ``status()``, computed once per cache."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, type(sys), type(approximate_size.__code__))):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj, 0)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif callable(obj) and hasattr(obj, "__closure__"):
            for cell in obj.__closure__ or ():
                seen_cell = cell.cell_contents if _cell_filled(cell) else None
                total += sys.getsizeof(cell, 0)
                if seen_cell is not None:
                    stack.append(seen_cell)
            if getattr(obj, "__dict__", None):
                stack.append(obj.__dict__)
        else:
            if hasattr(obj, "__dict__"):
                stack.append(vars(obj))
            for slot in getattr(type(obj), "__slots__", ()) or ():
                if isinstance(slot, str) and hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return total


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
