"""A small thread-safe LRU with the statistics ``status()`` reports.

Why not ``functools.lru_cache``: we need eviction counts, a size estimate,
one object per key even when two threads miss at once (the autotuner keys
some of its own caches on config identity), and locks that can be renewed in
a forked child.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Optional

_live_caches: "weakref.WeakSet[BoundedCache]" = weakref.WeakSet()

#: How many identities a keep_identity cache remembers per entry it holds: as
#: many as the nearest-profile rows hold per entry (bounds.py, ``scale=16``),
#: the identity-keyed caches whose keys keep those values alive.
IDENTITY_SCALE = 16

MISSING: Any = object()
"""What :meth:`BoundedCache.lookup` returns for a key it does not hold."""


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


class _Entry:
    """One cached value, its key, and the hit count at its latest hit.  A hit
    updates the stamp in place (no second hash of the key) and marks the entry
    in a dict keyed by the entry itself (identity hash: one C call)."""

    __slots__ = ("value", "key", "stamp")

    def __init__(self, value: Any, key: Hashable) -> None:
        self.value, self.key, self.stamp = value, key, 0


class BoundedCache:
    """LRU mapping of at most ``maxsize`` entries.

    A hit takes no lock (:meth:`lookup`): one dict read (the only time the key
    is hashed), one counter step stored in the entry as its recency stamp, and
    one mark in a dict keyed by the entry itself; each a single operation the
    GIL makes atomic (a few hundred nanoseconds in all).  Recency is
    applied lazily: the next miss, under the lock, moves the entries marked
    since the previous miss to the most-recent end in stamp order before it
    evicts, so eviction is least-recently-used.  The marks hold at most one
    entry per cached key.

    A miss (:meth:`fill`, or :meth:`get_or_compute` for both) calls
    ``compute(*arguments)`` *outside* the lock, so a slow flashinfer call
    never blocks other threads, then keeps whichever value reached the cache
    first so every caller of an equal key receives the same object.
    Exceptions from ``compute`` propagate and store nothing.  The counters
    are exact under threads as long as the GIL serialises bytecode (not on a
    free-threaded build).
    """

    def __init__(self, name: str, maxsize: int, keep_identity: bool = False) -> None:
        self.name = name
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, _Entry] = OrderedDict()
        # the entries hit since the last miss (keys: the entries, by identity)
        self._used: dict[_Entry, None] = {}
        # keep_identity: values evicted from the LRU but still alive elsewhere
        # (held by flashinfer's identity-keyed autotuner caches) are handed out
        # again for their key, so the key keeps meaning one object.  Weak: it
        # never keeps a value alive; capped: a caller that keeps every value
        # alive cannot grow it past IDENTITY_SCALE x maxsize keys (the oldest
        # goes; its key then builds a new object, as flashinfer alone would).
        self._identities: Optional[weakref.WeakValueDictionary] = (
            weakref.WeakValueDictionary() if keep_identity else None
        )
        self._identity_cap = IDENTITY_SCALE * maxsize
        self._lock = threading.Lock()
        # itertools.count steps in one C call: an exact hit count without the lock
        self._hit_count = itertools.count(1)
        self._hits_offset = 1
        self.misses = 0
        self.evictions = 0
        self._bytes_per_entry: int | None = None
        # what else remembers this cache's answers (a last-answer slot, a spec
        # index, readings a key is made of): forgotten with it (forget_with)
        self._side_tables: list[Callable[[], None]] = []
        self.lookup = self._make_lookup()
        _live_caches.add(self)

    @property
    def hits(self) -> int:
        # repr(count(n)) == "count(n)": the only way to read a count without stepping it
        return int(repr(self._hit_count)[6:-1]) - self._hits_offset

    @hits.setter
    def hits(self, value: int) -> None:
        # the count itself cannot be rewound: lookup() closures hold its __next__
        self._hits_offset = int(repr(self._hit_count)[6:-1]) - value

    def _make_lookup(self) -> Callable[[Hashable], Any]:
        """The lock-free hit path as a closure over bound methods: no attribute
        lookups on ``self`` per call."""
        read = self._data.get
        used = self._used
        count = self._hit_count.__next__

        def lookup(key: Hashable) -> Any:
            """The cached value for ``key`` (a hit, counted), or :data:`MISSING`
            (not counted: :meth:`fill` counts the miss).  Raises ``TypeError``
            for an unhashable key."""
            entry = read(key)
            if entry is None:
                return MISSING
            entry.stamp = count()
            used[entry] = None
            return entry.value

        return lookup

    def get_or_compute(self, key: Hashable, compute: Callable[..., Any], *arguments: Any) -> Any:
        value = self.lookup(key)
        if value is not MISSING:
            return value
        return self.fill(key, compute, *arguments)

    def fill(self, key: Hashable, compute: Callable[..., Any], *arguments: Any) -> Any:
        """The miss path: ``compute(*arguments)`` unless another thread (or an
        identity still alive) already holds a value for ``key``."""
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:  # filled by another thread since lookup()
                entry.stamp = next(self._hit_count)
                self._used[entry] = None
                return entry.value
            if self._identities is not None:
                value = self._identities.get(key, MISSING)
                if value is not MISSING:
                    next(self._hit_count)
                    self._insert(key, value)
                    return value
            self.misses += 1
        value = compute(*arguments)
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                return entry.value
            if self._identities is not None:
                # another thread's value for this key, already evicted but still alive
                existing = self._identities.get(key, MISSING)
                if existing is not MISSING:
                    self._insert(key, existing)
                    return existing
            self._insert(key, value)
        if self._bytes_per_entry is None:
            self._bytes_per_entry = approximate_size(value)
        return value

    def _apply_recency(self) -> None:
        """Move the entries hit since the last miss to the most-recent end,
        oldest stamp first (lock held)."""
        used = self._used
        if not used:
            return
        # list() copies in one C call; an entry marked again after the copy is
        # moved again at the next miss
        marked = list(used)
        for entry in marked:
            used.pop(entry, None)
        marked.sort(key=_stamp)
        data = self._data
        for entry in marked:
            if data.get(entry.key) is entry:
                data.move_to_end(entry.key)

    def _insert(self, key: Hashable, value: Any) -> None:
        """Store ``key`` (absent; lock held), evicting the least recently used
        first, so even a reader without the lock never sees more than ``maxsize``."""
        self._apply_recency()
        while self._data and len(self._data) >= self.maxsize:
            _, evicted = self._data.popitem(last=False)
            self._used.pop(evicted, None)
            self.evictions += 1
        self._data[key] = _Entry(value, key)
        if self._identities is not None:
            try:
                self._identities[key] = value
            except TypeError:  # a value that cannot be weakly referenced keeps no identity
                pass
            while len(self._identities) > self._identity_cap:
                for oldest in self._identities:  # insertion order: the oldest first
                    break
                else:
                    break
                self._identities.pop(oldest, None)

    def forget_with(self, forget: Callable[[], None]) -> None:
        """Have :meth:`clear` call ``forget()`` too: for a side table that holds
        answers derived from this cache's (so ``cache_clear()`` forgets every
        answer, as ``functools.lru_cache``'s does).  ``forget`` runs under no
        lock of this cache and must not raise."""
        self._side_tables.append(forget)

    def clear(self, *, keep_statistics: bool = False) -> None:
        """Forget every entry, every identity, every side table registered with
        :meth:`forget_with`, and reset hits, misses and evictions to 0, as
        ``functools.lru_cache``'s ``cache_clear()`` does.  ``keep_statistics``:
        release the memory but keep the counts (``uninstall()``: what the memo
        served stays readable afterwards).  Cost: linear in the entries held."""
        with self._lock:
            self._data.clear()
            self._used.clear()
            if self._identities is not None:
                self._identities.clear()
            if not keep_statistics:
                self.hits = 0
                self.misses = 0
                self.evictions = 0
        for forget in self._side_tables:
            forget()

    def __len__(self) -> int:
        return len(self._data)

    def items(self) -> list[tuple[Hashable, Any]]:
        """Every (key, value), under the lock: a copy, for measuring."""
        with self._lock:
            return [(key, entry.value) for key, entry in self._data.items()]

    def keys_by_recency(self) -> list[Hashable]:
        """Keys from least to most recently used (applies pending recency; takes the lock)."""
        with self._lock:
            self._apply_recency()
            return list(self._data)

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


def _stamp(entry: _Entry) -> int:
    return entry.stamp


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


def footprint(caches: Iterable[BoundedCache], limit: int = 2_000_000) -> int:
    """Bytes reachable from the keys and values of all ``caches``, each object
    counted once (the builder memo and the tuning-config memo hold the same
    configs): :func:`approximate_size` over all of them together.  For the soak's
    report, after its batches; cost: one visit per reachable object (tens of
    milliseconds for a few hundred configs)."""
    return approximate_size([cache.items() for cache in caches], limit)


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
