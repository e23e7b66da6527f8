"""The runtime watch's records: its settings, what it tracks and finds, and how it reads and judges one container.

One job: the data of :mod:`fi_compat.watch` (a :class:`Tracked` container, a
:class:`Finding`) and the pure helpers over a single object (its kind, its size,
the links the walk follows, which key positions vary); nothing here schedules or walks.
"""

from __future__ import annotations

import _thread
import gc
import logging
import types
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from .. import config
from ..counting import memo_walk
from ..errors import UnboundedGrowthWarning, warn
from ..memo.proxies import is_fi_compat_proxy

logger = logging.getLogger("fi_compat.watch")

MODES = config.WATCH_MODES
DEFAULT_MODE = config.DEFAULT_WATCH

#: Longest single step (the most the watch holds the GIL at a time).
STEP_BUDGET_S = 0.002
#: Share of the process's time the watch may take once the start-up allowance is spent.
DUTY = 0.002
#: Watch time allowed on top of DUTY at the start, to find the decode path's containers early ...
STARTUP_ALLOWANCE_S = 0.1
#: ... spent at most at this share of the time (a step, then four steps' time without one).
STARTUP_DUTY = 0.2
#: Readings of the decode path's own containers (between full steps) take at most this share ...
HOT_DUTY = 0.0025
#: ... and come at most this often.
HOT_GAP_S = 0.005
#: The decode tick waits this long past a due step for the builder memo's heartbeat to take it ...
TICK_LATE_S = 0.002
#: ... and once the heartbeat has taken this many, the tick (a pass-through: the watch's largest
#: per-call cost) is taken out; the heartbeat and the collector drive the watch from then on.
BEATS_TO_RETIRE_TICK = 3
#: A container is growing when it gained this many entries since first read ...
MIN_GROWTH = 128
#: ... and grew in each of its last RISES readings.
RISES = 2
#: An unchanged container is read at most every MAX_SKIP passes.
MAX_SKIP = 8
#: The most containers tracked (each read costs about 0.2 us; each is kept alive by the watch).
MAX_TRACKED = 20_000
#: Frames of the stack sampled at a collection.
STACK_DEPTH = 40
#: Seconds between full re-walks, doubled each time up to MAX_REWALK_S.
FIRST_REWALK_S = 1.0
MAX_REWALK_S = 120.0
#: Keys read to tell which key positions vary.
KEYS_READ = 2_000

FUNCTOOLS, DICT, SET, LIST = "functools", "dict", "set", "list"
_LOCAL = _thread._local


@dataclass(eq=False, slots=True)
class Tracked:
    """One container the watch reads: what it is, where flashinfer holds it, its sizes."""

    obj: Any
    kind: str
    path: str
    where: str
    first: int
    last: int
    rises: int = 0
    skip: int = 0  # passes to skip before the next read
    idle: int = 0  # consecutive unchanged readings
    reported: bool = False
    hot: bool = False  # reached from a module the decode path runs in: read every step

    @property
    def gained(self) -> int:
        return self.last - self.first

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "where": self.where, "entries": self.last, "gained": self.gained}


@dataclass
class Finding:
    """A growing container and what the watch did about it (``bounded``, ``warned`` or ``error``)."""

    tracked: Tracked
    action: str
    varying: str
    patched: list[str] = field(default_factory=list)
    seen: dict[str, Any] = field(default_factory=dict)  # the container as the watch judged it

    def __post_init__(self) -> None:
        self.seen = self.tracked.as_dict()

    def as_dict(self) -> dict[str, Any]:
        return {**self.seen, "action": self.action, "varying": self.varying, "patched": self.patched}


def _size(tracked: Tracked) -> int:
    obj = tracked.obj
    if tracked.kind == FUNCTOOLS:
        return int(obj.cache_info().currsize)
    return len(obj)


def _read(tracked: Tracked) -> None:
    """One reading of a container's size (skipped while it is resting after unchanged readings)."""
    if tracked.skip:
        tracked.skip -= 1
        return
    try:
        size = _size(tracked)
    except Exception:  # noqa: BLE001  (gone or unreadable: never judged)
        return
    if size > tracked.last:
        tracked.rises += 1
        tracked.idle = 0
    else:
        tracked.rises = 0
        tracked.idle += 1
        tracked.skip = min(tracked.idle, MAX_SKIP) - 1
    tracked.last = size


def _flashinfer(name: Any) -> bool:
    return isinstance(name, str) and (name == memo_walk.PACKAGE or name.startswith(memo_walk.PACKAGE + "."))


def _unbounded_functools(value: Any) -> bool:
    try:
        return value.cache_info().maxsize is None
    except Exception:  # noqa: BLE001  (a cache_info that raises is no cache the watch can read)
        return False


def _children(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, _LOCAL):  # the running thread's attributes (the decode thread's, mostly)
        yield from vars(value).copy().items()
        return
    if isinstance(value, (set, list)):
        return
    yield from memo_walk._children(value)


def _near(value: Any) -> list[tuple[str, Any]]:
    """The containers one link inside a module attribute that a memo written by
    hand keeps: a ``threading.local``'s attributes, a function's closure cells."""
    try:
        if isinstance(value, _LOCAL):
            return list(vars(value).copy().items())
        if isinstance(value, types.FunctionType) and value.__closure__:
            names = value.__code__.co_freevars
            return [(f"<closure {n}>", c.cell_contents) for n, c in zip(names, value.__closure__) if _filled(c)]
    except Exception:  # noqa: BLE001  (read as the walk reads it, later)
        pass
    return []


def _filled(cell: Any) -> bool:
    try:
        return cell.cell_contents is not _filled  # read to learn whether the cell is empty
    except ValueError:
        return False


def _worth(value: Any) -> bool:
    if isinstance(value, (set, list, _LOCAL)) and not isinstance(value, (frozenset, tuple)):
        return True
    return memo_walk._worth_following(value)


def _kind(value: Any) -> Optional[str]:
    if is_fi_compat_proxy(value):
        return None  # fi_compat's own memo: bounded, and its contents are not flashinfer's
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


def _functools_keys(cache: Any) -> list[Any]:
    """Keys of a C ``functools`` cache, read through the garbage collector's view of it."""
    try:
        size = cache.cache_info().currsize
        for referent in gc.get_referents(cache):
            if (
                isinstance(referent, dict)
                and len(referent) == size
                and referent is not getattr(cache, "__dict__", None)
            ):
                return list(referent)[:KEYS_READ]
    except Exception:  # noqa: BLE001
        pass
    return []


def _parameter_names(function: Any) -> tuple[str, ...]:
    code = getattr(memo_walk.inspect_unwrap(function), "__code__", None)
    if isinstance(code, types.CodeType):
        return tuple(code.co_varnames[: code.co_argcount + code.co_posonlyargcount])
    return ()


def _report(message: str) -> None:
    logger.warning("fi_compat: %s", message)
    try:
        warn(message, UnboundedGrowthWarning)
    except Exception:  # noqa: BLE001  (-W error: nothing can be raised through a gc callback)
        pass
