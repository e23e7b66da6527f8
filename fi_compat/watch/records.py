"""The runtime watch's settings and records: what it tracks, what it found, and how it reads one container.

One job: the data of :mod:`fi_compat.watch` (:class:`Containers`, every
container it reads, kept compact; a :class:`Finding`) and the pure helpers over
a single object (its kind, its size, which key positions vary); nothing here
schedules or walks.
"""

from __future__ import annotations

import gc
import logging
import sys
import types
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, Optional

from .. import config
from ..counting import memo_walk
from ..errors import UnboundedGrowthWarning, warn

logger = logging.getLogger("fi_compat.watch")

MODES = config.WATCH_MODES

#: Longest single step (the most the watch holds the GIL at a time).
STEP_BUDGET_S = 0.002
#: Watch time allowed at the start, to find the decode path's own containers within its first calls ...
STARTUP_ALLOWANCE_S = 0.1
#: ... spent at most at this share of the time (a step, then four steps' time without one).
STARTUP_DUTY = 0.2
#: Share of the time the walk takes until it has reached everything flashinfer's modules hold.  A
#: complete walk of 0.7.4 (557 modules, about 6,000 containers) is 0.2-0.3 s of work: 10-15 s of decoding.
WALK_DUTY = 0.02
#: Share of the time the readings of every container take once the walk is complete (a pass over
#: 0.7.4's 13,700 containers is 3-4 ms: one every 0.2 s of decoding); it lasts until the watch retires.
READ_DUTY = 0.02
#: Readings of the decode path's own containers (every step, and between full steps) take at most this share ...
HOT_DUTY = 0.0025
#: ... and come at most this often.
HOT_GAP_S = 0.005
#: Containers read at every step: the decode path's own, and any a reading pass saw grow, up to this many.
MAX_HOT = 512
#: A container is growing when it gained this many entries since first read ...
MIN_GROWTH = 128
#: ... and grew in each of its last RISES readings.
RISES = 2
#: An unchanged container is read at most every MAX_SKIP passes.
MAX_SKIP = 8
#: The most containers tracked: the records stay under 1 MB (about 45 bytes each).
MAX_TRACKED = 16_384
#: Distinct max_seq_len values (decode calls, where the decode function has no such parameter) per window ...
WINDOW_LENGTHS = 512
#: ... and flat windows, after two complete walks, before the watch retires: 2,048 distinct lengths.
FLAT_WINDOWS = 4
#: A window is flat when no container ends it more than this many entries above where it began.
FLAT_SLACK = 8
#: Frames of the stack sampled at a collection.
STACK_DEPTH = 40
#: Keys read to tell which key positions vary.
KEYS_READ = 2_000
#: Findings and slow steps kept for status() (the oldest stay: they are what the watch acted on).
MAX_FINDINGS = 64
SLOW_STEPS_KEPT = 20

FUNCTOOLS, DICT, SET, LIST = "functools", "dict", "set", "list"
_KINDS = (FUNCTOOLS, DICT, SET, LIST)
_LOCAL = memo_walk._LOCAL

HOT, REPORTED = 1, 2  # flags of a tracked container


class Containers:
    """Every container the watch reads, as columns rather than an object each.

    A container is a ``functools`` memo without a bound, a dict, a set or a list
    that flashinfer's modules reach.  Each costs about 45 bytes here: the object
    (held, so its identity cannot be reused), the module it was reached from, its
    first, last and largest sizes and its largest at the window's start, and a few
    counters.  Its path and source line are found again only when it is reported
    (:func:`fi_compat.watch.walk.locate`), so no string is kept per container.  Identity is tested through a sorted array
    of ``id``\\ s (no dict of integers).  Cost of :meth:`add`: a binary search and
    an insertion (a memmove of at most 96 KB)."""

    __slots__ = (
        "objects",
        "kinds",
        "module",
        "module_names",
        "_module_rows",
        "first",
        "last",
        "peak",
        "window",
        "rises",
        "idle",
        "skip",
        "flags",
        "_ids",
        "_rows",
    )

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.kinds = bytearray()
        self.module = array("H")  # index into module_names
        self.module_names: list[str] = []
        self._module_rows: dict[str, int] = {}
        self.first = array("I")
        self.last = array("I")
        self.peak = array("I")
        self.window = array("I")
        self.rises = bytearray()
        self.idle = bytearray()
        self.skip = bytearray()
        self.flags = bytearray()
        self._ids = array("Q")
        self._rows = array("I")

    def __len__(self) -> int:
        return len(self.objects)

    def add(self, obj: Any, kind: str, module: str, hot: bool) -> Optional[int]:
        """Track ``obj``: its row, when it is new here or newly hot (reached from a module the
        decode path runs in); ``None`` when nothing changed (tracked already, unreadable, or full)."""
        key = id(obj)
        at = bisect_left(self._ids, key)
        if at < len(self._ids) and self._ids[at] == key:
            row = self._rows[at]
            if hot and not self.flags[row] & HOT:
                self.flags[row] |= HOT
                return row
            return None
        if len(self.objects) >= MAX_TRACKED:
            return None
        size = size_of(obj, kind)
        if size is None:
            return None
        row = len(self.objects)
        self._ids.insert(at, key)
        self._rows.insert(at, row)
        self.objects.append(obj)
        self.kinds.append(_KINDS.index(kind))
        if module not in self._module_rows:
            self._module_rows[module] = len(self.module_names)
            self.module_names.append(module)
        self.module.append(self._module_rows[module])
        for column in (self.first, self.last, self.peak, self.window):
            column.append(size)
        for column in (self.rises, self.idle, self.skip):
            column.append(0)
        self.flags.append(HOT if hot else 0)
        return row

    def kind(self, row: int) -> str:
        return _KINDS[self.kinds[row]]

    def read(self, row: int) -> None:
        """One reading of a container's size (skipped while it rests after unchanged readings)."""
        if self.skip[row]:
            self.skip[row] -= 1
            return
        size = size_of(self.objects[row], self.kind(row))
        if size is None:  # gone or unreadable: never judged
            return
        if size > self.peak[row]:
            self.peak[row] = size
        if size > self.last[row]:
            self.rises[row] = min(self.rises[row] + 1, 255)
            self.idle[row] = 0
        else:
            self.rises[row] = 0
            self.idle[row] = min(self.idle[row] + 1, 255)
            self.skip[row] = min(self.idle[row], MAX_SKIP) - 1
        self.last[row] = size

    def gained(self, row: int) -> int:
        return self.last[row] - self.first[row]

    def growing(self, row: int) -> bool:
        return not self.flags[row] & REPORTED and self.rises[row] >= RISES and self.gained(row) >= MIN_GROWTH

    def window_flat(self) -> bool:
        """Whether no container's largest size rose more than :data:`FLAT_SLACK` entries since the
        window began (a container that fills and empties per call is flat); starts the next window."""
        flat = self.peak == self.window or all(peak - start <= FLAT_SLACK for peak, start in zip(self.peak, self.window))
        self.window[:] = self.peak
        return flat

    def nbytes(self) -> int:
        """The records' own memory: the columns and lists (the containers are flashinfer's)."""
        lists = sum(sys.getsizeof(c) for c in (self.objects, self.module_names, self._module_rows))
        columns = (self.kinds, self.module, self.first, self.last, self.peak, self.window, self.rises, self.idle, self.skip, self.flags)
        return lists + sum(sys.getsizeof(c) for c in columns) + sys.getsizeof(self._ids) + sys.getsizeof(self._rows)


@dataclass
class Finding:
    """A growing container and what the watch did about it (``bounding``, ``bounded``, ``warned`` or ``error``)."""

    path: str
    kind: str
    where: str
    entries: int
    gained: int
    action: str
    varying: str
    patched: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "where": self.where,
            "entries": self.entries,
            "gained": self.gained,
            "action": self.action,
            "varying": self.varying,
            "patched": self.patched,
        }


def size_of(obj: Any, kind: str) -> Optional[int]:
    try:
        if kind == FUNCTOOLS:
            return int(obj.cache_info().currsize)
        return len(obj)
    except Exception:  # noqa: BLE001  (gone or unreadable)
        return None


def _unbounded_functools(value: Any) -> bool:
    try:
        return value.cache_info().maxsize is None
    except Exception:  # noqa: BLE001  (a cache_info that raises is no cache the watch can read)
        return False


def container_kind(value: Any) -> Optional[str]:
    """What the watch reads ``value`` as, or ``None`` for what it never judges: fi_compat's
    own memos (bounded) and ``functools`` caches with a bound."""
    if memo_walk._is_fi_compat(value):
        return None
    if memo_walk._is_cache(value):
        return FUNCTOOLS if _unbounded_functools(value) else None
    if isinstance(value, memo_walk.DICT_TYPES):
        return DICT
    if isinstance(value, set):
        return SET
    if isinstance(value, list):
        return LIST
    return None


def varying_positions(keys: list[Any], names: tuple[str, ...] = ()) -> str:
    """Which positions of a memo's keys take more than one value, as text
    (``"2 (profile_seq_len)"``); ``"the whole key"`` for scalar keys."""
    if not keys:
        return "unknown"
    tuples = [k for k in keys if isinstance(k, tuple)]
    if len(tuples) < len(keys) or not tuples:
        return f"the whole key ({names[0]})" if len(names) == 1 else "the whole key"
    width = min(len(k) for k in tuples)
    varying = []
    for position in range(width):
        try:
            values = {k[position] for k in tuples}
        except TypeError:
            values = {id(k[position]) for k in tuples}
        if len(values) > 1:
            varying.append(position)
    if not varying:
        return "keyword arguments or key length"
    return ", ".join(f"{p} ({names[p]})" if p < len(names) else str(p) for p in varying)


def functools_keys(cache: Any) -> list[Any]:
    """Keys of a C ``functools`` cache, read through the garbage collector's view of it."""
    try:
        size = cache.cache_info().currsize
        for referent in gc.get_referents(cache):
            if isinstance(referent, dict) and len(referent) == size and referent is not getattr(cache, "__dict__", None):
                return list(referent)[:KEYS_READ]
    except Exception:  # noqa: BLE001
        pass
    return []


def parameter_names(function: Any) -> tuple[str, ...]:
    code = getattr(memo_walk.inspect_unwrap(function), "__code__", None)
    if isinstance(code, types.CodeType):
        return tuple(code.co_varnames[: code.co_argcount + code.co_posonlyargcount])
    return ()


def report(message: str) -> None:
    logger.warning("fi_compat: %s", message)
    try:
        warn(message, UnboundedGrowthWarning)
    except Exception:  # noqa: BLE001  (-W error: nothing can be raised through a gc callback)
        pass
