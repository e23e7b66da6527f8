"""The runtime watch: per-request growth in flashinfer's memory, whatever its name.

Every bound in :mod:`fi_compat.bounds` hangs on a name; a memo flashinfer
renames, moves or writes by hand escapes them all.  The watch looks at
behaviour instead.  After :func:`fi_compat.install` it finds the containers
flashinfer's modules hold (``functools`` caches, dicts, sets, lists,
``threading.local`` attributes, closure cells, instance and class attributes:
the links :mod:`fi_compat.memo_walk` follows), reads their sizes again and
again, and when one keeps growing:

* a ``functools``-style memo with no bound (``functools.cache``,
  ``lru_cache(None)``) that no row names is bounded where it is bound (every
  attribute of a loaded flashinfer module holding it, a class attribute under
  its ``staticmethod``/``classmethod``, a decorator's closure cell or
  ``__wrapped__``): a memo of :func:`fi_compat.proxies.memoized_function` with
  the same name, signature and ``functools`` API, an LRU of ``cache_size``
  entries keyed on the call's arguments as they are;
  ``uninstall()`` restores the original.  One WARNING says so: module,
  function, entries, growth, and which key positions vary;
* any other growing container (a dict, set or list on a module, class or
  instance, a ``threading.local`` attribute, a dict in a closure cell) cannot
  be bounded safely (what evicting an entry does to flashinfer is unknown):
  one WARNING names every such container with its holder and flashinfer
  source line; under strict, :class:`~fi_compat.errors.UnboundedGrowthError`,
  raised at the next fi_compat call (nothing can be raised through the
  garbage collector's callback the watch runs in).

Setting: ``FI_COMPAT_WATCH`` = ``bound`` (default), ``warn`` (report, change
nothing) or ``off`` (no callback is registered).

How it runs, and what it costs: no thread.  Two ticks drive it, in whatever
thread is running: a pass-through in front of the decode function at every
module attribute that holds it outside its home module (``flashinfer.mla``,
``flashinfer.decode``, an engine's own ``from flashinfer... import``; a plain
function with the decode function's own parameters that compares one float per
call, about 0.3-0.9 us on the project's loaded 2-core CPU), and the garbage
collector (:data:`gc.callbacks`), whose collections flashinfer's growing
memos trigger as they keep objects.  When something is due the tick takes one
*step*:

* a *full step*: at most :data:`STEP_BUDGET_S` (2 ms) of work, scheduled so
  the watch's total stays within :data:`DUTY` (0.2 %) of the time since it
  started, after a one-time start-up allowance of :data:`STARTUP_ALLOWANCE_S`
  (100 ms, spent at most at :data:`STARTUP_DUTY` of the time) that finds the
  decode path's containers within its first few hundred calls;
* between full steps, a *reading* of the decode path's own containers only
  (a few dozen sizes: tens of microseconds), at most every
  :data:`HOT_GAP_S` and within :data:`HOT_DUTY` (0.4 %), so growth that begins
  late, past a 128K context, is seen within a few hundred lengths of its start.

``benchmarks/watch_overhead.py`` prints the decode host path's time with and
without the watch, side by side; ``benchmarks/watch_detection.py`` when it
reports each memo of the issue-38 releases.

What a full step does, in this order:

1. *samples the stack* (from a collection): the flashinfer modules whose code
   is running are walked first, and their containers read at every step;
2. *walks* the queued roots a bounded slice at a time: the decode function's
   module, the modules whose code runs, the flashinfer modules they hold
   (re-exports, ``from . import``), then every other loaded flashinfer module; a
   module's own containers, and those in its thread-locals and its functions'
   closures, are read from the step that reaches the module; a full pass is
   repeated at growing intervals so containers created later (a singleton's
   dicts) are found;
3. *reads sizes*: one slice of the pass over every other tracked container
   (one ``len`` or ``cache_info``); a container unchanged for a while is read
   less often (at most every :data:`MAX_SKIP` passes);
4. *scans* for the holders of a memo being bounded (a few modules a step);
5. *judges*: a container whose size grew in each of its last :data:`RISES`
   readings, by at least :data:`MIN_GROWTH` entries since it was first read, is
   growing per request.  A bounded ``functools`` cache
   (``lru_cache(maxsize=N)``) is never judged: it is bounded already.

The watch imports nothing and takes no lock but the ones ``logging`` and
``warnings`` take to report; flashinfer's answers do not change (a bounded
memo returns what the function returns; an evicted entry is recomputed).
Failure behaviour: anything a step raises stops the watch with one WARNING
(the traceback at DEBUG); flashinfer is left as it is.
"""

from __future__ import annotations

import _thread
import gc
import logging
import sys
import time
import types
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Optional

from . import config, memo_walk
from .adapters.base import Installation, Plan, PatchStep
from .cache import BoundedCache
from .errors import UnboundedGrowthError, UnboundedGrowthWarning, warn
from .proxies import FiCompatProxy, _Switch, is_fi_compat_proxy, memoized_function
from .specs import CORE_MODULE, DECODE

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
HOT_DUTY = 0.004
#: ... and come at most this often.
HOT_GAP_S = 0.005
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


class _Resume:
    """Where the walk stopped inside one object's links (a step ends on time, not on an object)."""

    __slots__ = ("children", "here")

    def __init__(self, children: Iterator[tuple[str, Any]], here: str) -> None:
        self.children, self.here = children, here


class Watch:
    """The state of one watch (one install).  Driven by :func:`_on_collection`."""

    def __init__(
        self,
        mode: str,
        strict: bool,
        cache_size: int,
        clock: Callable[[], float] = time.perf_counter,
        on_error: Optional[Callable[[], None]] = None,
    ):
        self.mode, self.strict, self.cache_size, self.clock = mode, strict, cache_size, clock
        self.on_error = on_error
        self.started = clock()
        self.spent = 0.0
        self.steps = 0
        self.longest = 0.0
        self.longest_cpu = 0.0  # the same step's CPU time: on a loaded host, wall time counts being descheduled
        self.next_at = 0.0  # the next full step
        self.next_hot = 0.0  # the next reading of the decode path's own containers
        self.next_due = 0.0  # the earlier of the two: all a decode call compares
        self.hot_spent = 0.0
        self.roots: deque[tuple[str, Any, int]] = deque()  # level 2: running code's module, 1: its neighbour
        self.rooted: set[int] = set()  # modules (by id) queued or walked this pass
        self.seen: set[int] = set()
        self.stack: list[tuple[str, Any, int, str, bool]] = []
        self.tracked: dict[int, Tracked] = {}
        self.order: list[Tracked] = []
        self.hot: list[Tracked] = []
        self.cursor = 0
        self.passes = 0
        self.all_queued = False
        self.rewalk_at = self.started + FIRST_REWALK_S
        self.rewalk_gap = FIRST_REWALK_S
        self.findings: list[Finding] = []
        self.bounding: deque[_Bounding] = deque()
        self.installation = Installation()
        self.error: Optional[BaseException] = None
        self.failed: Optional[str] = None
        self.slow_steps: list[tuple[float, int, int, int]] = []

    # ------------------------------------------------------------------ the step

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def step(self, frame: Any) -> None:
        """The work that is due: a full step (walk, every container, bounding) when
        its time has come, else a reading of the decode path's own containers only
        (a few dozen reads: tens of microseconds).  Schedules the next of each so
        both duty cycles hold."""
        start, start_cpu = self.clock(), time.thread_time()
        full = start >= self.next_at
        self._sample_stack(frame)
        if full:
            if start >= self.rewalk_at and not self.stack and not self.roots:
                self._rewalk(start)
            self._continue_bounding(start + STEP_BUDGET_S)
        hot_start = self.clock()
        for tracked in self.hot:
            tracked.skip = 0  # the decode path's own containers: every step (a few dozen reads)
            _read(tracked)
        self._judge(self.hot)
        hot_took = self.clock() - hot_start
        if full:
            self._walk(self.clock() + STEP_BUDGET_S / 2)
            if self._read_sizes(self.clock() + STEP_BUDGET_S / 2):
                self._judge(self.order)
        end = self.clock()
        took = end - start
        self.spent += took
        self.steps += 1
        self.longest = max(self.longest, took)
        self.longest_cpu = max(self.longest_cpu, time.thread_time() - start_cpu)
        if took > STEP_BUDGET_S * 2:
            self.slow_steps.append((round(took * 1e3, 2), self.passes, len(self.order), len(self.roots)))
        if full:
            allowed = STARTUP_ALLOWANCE_S + DUTY * (end - self.started)
            if self.bounding:  # a memo being bounded: its holders' scan (a one-time 25-30 ms), a slice a call
                self.next_at = end
            elif self.spent < allowed:
                self.next_at = end + took / STARTUP_DUTY - took
            else:  # wait until the time spent is within DUTY of the time since the start again
                self.next_at = end + (self.spent - allowed) / DUTY
        else:
            self.hot_spent += took
        # a full step's own reading of these is part of its DUTY; a reading alone pays for itself
        self.next_hot = end + max(HOT_GAP_S, (hot_took if full else took) / HOT_DUTY)
        self.next_due = _NEXT_DUE[0] = min(self.next_at, self.next_hot)

    def _sample_stack(self, frame: Any) -> None:
        modules = sys.modules
        for _ in range(STACK_DEPTH):
            if frame is None:
                break
            name = frame.f_globals.get("__name__")
            if _flashinfer(name):
                module = modules.get(name)
                if module is not None and id(module) not in self.rooted:
                    self.rooted.add(id(module))
                    self.roots.appendleft((name, module, 2))
            frame = frame.f_back

    def _queue_module(self, name: str, level: int = 0) -> None:
        """Queue a module to walk: ``level`` 2 for a module the decode path runs in,
        1 for one such a module holds names of (walked next, its containers read every step), else 0."""
        module = sys.modules.get(name)
        if module is not None and id(module) not in self.rooted:
            self.rooted.add(id(module))
            if level:
                self.roots.appendleft((name, module, level))
            else:
                self.roots.append((name, module, level))

    def _rewalk(self, now: float) -> None:
        self.rooted.clear()
        self.seen.clear()
        self.all_queued = False
        self.rewalk_gap = min(self.rewalk_gap * 2, MAX_REWALK_S)
        self.rewalk_at = now + self.rewalk_gap

    def _walk(self, deadline: float) -> None:
        clock, seen, stack = self.clock, self.seen, self.stack
        while True:
            if not stack:
                # a module walked: forget what it visited (the walk's own memory stays the size of one
                # module's; an object another module holds too is visited again there, and tracked once)
                seen.clear()
                if not self.roots:
                    if self.all_queued:
                        return
                    for name in sorted(n for n in list(sys.modules) if _flashinfer(n)):
                        self._queue_module(name)
                    self.all_queued = True
                    if not self.roots:
                        return
                name, module, level = self.roots.popleft()
                level = 2 if name == CORE_MODULE else level
                hot = level == 2
                where = memo_walk._module_where(module)
                for attribute, item in reversed(getattr(module, "__dict__", {}).copy().items()):
                    if attribute.startswith("__") and attribute.endswith("__"):
                        continue
                    if isinstance(item, types.ModuleType):
                        if _flashinfer(getattr(item, "__name__", None)):
                            self._queue_module(item.__name__, level - 1)
                        continue
                    owner = getattr(item, "__module__", None)
                    if _flashinfer(owner) and owner != name and isinstance(owner, str):
                        # a re-export: its home module holds its memo's neighbours
                        self._queue_module(owner, level - 1)
                    if id(item) not in seen:
                        seen.add(id(item))
                        if _worth(item):
                            # a module's own containers, and those in its thread-locals and its functions'
                            # closures, are read from this step on; what lies deeper, as the walk gets there
                            self._record(f"{name}.{attribute}", item, where, hot)
                            near_where = memo_walk._code_where(item) if isinstance(item, types.FunctionType) else where
                            for link, inner in _near(item):
                                self._record(f"{name}.{attribute}.{link}", inner, near_where or where, hot)
                            stack.append((f"{name}.{attribute}", item, 1, where, hot))
                if clock() >= deadline:
                    return
                continue
            path, value, depth, context, hot = stack.pop()
            if type(value) is _Resume:  # the rest of a large object's links, left by an earlier step
                children, here, depth = value.children, value.here, depth
            else:
                here = self._record(path, value, context, hot)
                if depth >= memo_walk.MAX_DEPTH:
                    continue
                children = _children(value)
            visited = 0
            try:
                for link, child in children:
                    visited += 1
                    if id(child) not in seen:
                        seen.add(id(child))
                        if _worth(child):
                            joined = f"{path}.{link}" if link and not link.startswith("[") else f"{path}{link}"
                            stack.append((joined, child, depth + 1, here, hot))
                    if visited % 16 == 0 and clock() >= deadline:
                        stack.append((path, _Resume(children, here), depth, context, hot))
                        return
            except Exception:  # noqa: BLE001  (an object whose attributes raise: the rest is not walked)
                pass
            if clock() >= deadline:
                return

    def _record(self, path: str, value: Any, context: str, hot: bool) -> str:
        kind = _kind(value)
        if kind is not None and id(value) not in self.tracked and len(self.tracked) < MAX_TRACKED:
            where = memo_walk._code_where(value) if kind == FUNCTOOLS else context
            tracked = Tracked(value, kind, path, where or context, 0, 0, hot=hot)
            try:
                tracked.first = tracked.last = _size(tracked)
            except Exception:  # noqa: BLE001
                return context
            self.tracked[id(value)] = tracked
            (self.hot if hot else self.order).append(tracked)
        if isinstance(value, type):
            return memo_walk._class_where(value)
        if isinstance(value, types.FunctionType):
            return memo_walk._code_where(value) or context
        return context

    def _read_sizes(self, deadline: float) -> bool:
        """Continue the pass over the tracked containers; True when a pass ended."""
        order, clock = self.order, self.clock
        count = len(order)
        while self.cursor < count:
            tracked = order[self.cursor]
            self.cursor += 1
            _read(tracked)
            if self.cursor % 16 == 0 and clock() >= deadline:
                return False
        self.cursor = 0
        self.passes += 1
        return True

    # ------------------------------------------------------------------ verdicts

    def _judge(self, candidates: list[Tracked]) -> None:
        growing = [t for t in candidates if not t.reported and t.rises >= RISES and t.gained >= MIN_GROWTH]
        if not growing:
            return
        unbounded: list[Finding] = []
        for tracked in growing:
            tracked.reported = True
            if tracked.kind == FUNCTOOLS:
                finding = self._functools(tracked)
                if finding.action == "warned":
                    unbounded.append(finding)
            else:
                keys = list(tracked.obj)[:KEYS_READ] if tracked.kind in (DICT, SET) else []
                finding = Finding(tracked, "warned", varying_positions(keys) if keys else "n/a")
                unbounded.append(finding)
            self.findings.append(finding)
        if unbounded:
            self._report_unbounded(unbounded)

    def _functools(self, tracked: Tracked) -> Finding:
        cache = tracked.obj
        varying = varying_positions(_functools_keys(cache), _parameter_names(cache))
        finding = Finding(tracked, "warned", varying)
        name = getattr(cache, "__qualname__", None) or tracked.path
        module = getattr(cache, "__module__", "?")
        growth = f"{tracked.last} entries, {tracked.gained} gained since the watch first read it"
        if self.mode != "bound":
            return finding
        finding.action = "bounding"
        message = (
            f"{module}.{name} (at {tracked.where}) is a functools memo without a bound that no fi_compat row "
            f"names, and it grew per request: {growth}; key positions that vary: {varying}. fi_compat bounded "
            f"it at {{where}} (an LRU of {self.cache_size} entries; uninstall() restores it)"
        )
        self.bounding.append(_Bounding(finding, holders(cache), message=message))
        return finding

    def _continue_bounding(self, deadline: float) -> None:
        """Scan on for the holders of the memos being bounded; bound each whose scan ended."""
        while self.bounding:
            job = self.bounding[0]
            for place in job.scan:
                if place is not None:
                    job.found.append(place)
                elif self.clock() >= deadline:
                    return
            self.bounding.popleft()
            tracked = job.finding.tracked
            plan = bounding_plan(tracked.obj, self.cache_size, tracked.path, job.found)
            if not plan.steps:
                job.finding.action = "warned"
                self._report_unbounded([job.finding])
                continue
            self.installation.apply(plan)
            job.finding.action = "bounded"
            job.finding.patched = [w for step in plan.steps for w in step.where()]
            _report(job.message.format(where=", ".join(job.finding.patched)))

    def _report_unbounded(self, findings: list[Finding]) -> None:
        lines = [
            f"{f.tracked.path} ({f.tracked.kind}, held at {f.tracked.where}): {f.tracked.last} entries, "
            f"{f.tracked.gained} gained; varying key positions: {f.varying}"
            for f in findings
        ]
        what = "left it unbounded" if self.mode == "bound" else "changed nothing (FI_COMPAT_WATCH=warn)"
        message = (
            f"flashinfer memory that grows per request, which fi_compat {what}: " + "; ".join(lines) + ". "
            "Pin a release listed in docs/compatibility.md, or report it with `fi-compat doctor` output"
        )
        if self.strict:
            for finding in findings:
                finding.action = "error"
            self.error = UnboundedGrowthError([f.tracked.path for f in findings], message)
            logger.error("fi_compat: %s (FI_COMPAT_STRICT: raised at the next fi_compat call)", message)
            if self.on_error is not None:
                self.on_error()
            return
        _report(message)

    # ------------------------------------------------------------------ reading it

    def report(self) -> dict[str, Any]:
        elapsed = max(self.clock() - self.started, 1e-9)
        return {
            "mode": self.mode,
            "tracked": len(self.order) + len(self.hot),
            "hot": len(self.hot),
            "passes": self.passes,
            "steps": self.steps,
            "spent_s": round(self.spent, 4),
            "share": round(self.spent / elapsed, 5),
            "longest_step_ms": round(self.longest * 1e3, 3),
            "longest_step_cpu_ms": round(self.longest_cpu * 1e3, 3),
            "findings": [f.as_dict() for f in self.findings],
            "patched": self.installation.patched(),  # the decode tick's places, and every memo it bounded
            "failed": self.failed,
            "slow_steps": self.slow_steps[:20],
            "error": None if self.error is None else str(self.error),
        }


def _report(message: str) -> None:
    logger.warning("fi_compat: %s", message)
    try:
        warn(message, UnboundedGrowthWarning)
    except Exception:  # noqa: BLE001  (-W error: nothing can be raised through a gc callback)
        pass


# ---------------------------------------------------------------------- bounding a functools memo


def _raw_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[Hashable]:
    return (args, tuple(sorted(kwargs.items()))) if kwargs else args


def holders(cache: Any) -> Iterator[Optional[tuple[Any, str, Any]]]:
    """Where loaded flashinfer modules hold ``cache``: ``(owner, attribute, raw)``
    for module attributes, class attributes (``raw`` the ``staticmethod`` /
    ``classmethod`` around it, else ``cache``), closure cells
    (``"cell_contents"``) and ``__wrapped__`` of the functions each module
    defines; ``None`` after each module, so a caller can stop on time and
    resume.  An engine module that imported the name itself is not scanned
    (that would read every module); it keeps the original.  Cost: one identity
    test per attribute of each loaded flashinfer module (25-30 ms in all on 0.7.4's
    557 modules)."""
    for module_name in sorted(n for n in list(sys.modules) if _flashinfer(n)):
        module = sys.modules.get(module_name)
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            for attribute, value in namespace.copy().items():
                if value is cache:
                    yield module, attribute, cache
                elif isinstance(value, type) and getattr(value, "__module__", None) == module_name:
                    for member, raw in vars(value).copy().items():
                        if raw is cache or (isinstance(raw, (staticmethod, classmethod)) and raw.__func__ is cache):
                            yield value, member, raw
                elif isinstance(value, types.FunctionType) and value is not cache and value.__module__ == module_name:
                    for cell in value.__closure__ or ():
                        try:
                            if cell.cell_contents is cache:
                                yield cell, "cell_contents", cache
                        except ValueError:
                            continue
                    if vars(value).get("__wrapped__") is cache:
                        yield value, "__wrapped__", cache
        yield None


def bounding_plan(cache: Any, cache_size: int, name: str, found: Optional[list[tuple[Any, str, Any]]] = None) -> Plan:
    """The plan that puts ``cache`` (a ``functools`` cache without a bound) behind a
    bounded memo at every place :func:`holders` finds (or at ``found``, what it
    found): a :func:`fi_compat.proxies.memoized_function` with the original's
    name and signature, an LRU of ``cache_size`` entries keyed on the call's
    arguments as they are; a class attribute gets the same descriptor back.
    Applying it releases what ``cache`` holds.  Empty when nothing holds it."""
    inner = getattr(cache, "__wrapped__", None)
    if not callable(inner):
        return Plan()
    places = [h for h in holders(cache) if h is not None] if found is None else found

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

    plain = tuple(dict.fromkeys((owner, attribute) for owner, attribute, raw in places if raw is cache))
    steps = [PatchStep(name, cache, proxy, plain, before)] if plain else []
    steps += [
        PatchStep(name, raw, proxy, ((owner, attribute),), before, type(raw)(proxy))
        for owner, attribute, raw in places
        if raw is not cache
    ]
    return Plan(steps, {bounded.name: bounded} if steps else {}, [])


@dataclass(eq=False)
class _Bounding:
    """A functools memo being bounded: the scan for its holders, resumed step by step."""

    finding: Finding
    scan: Iterator[Optional[tuple[Any, str, Any]]]
    found: list[tuple[Any, str, Any]] = field(default_factory=list)
    message: str = ""


# ---------------------------------------------------------------------- the process's one watch

_active: Optional[Watch] = None
#: When the running watch wants its next step (``inf``: none running): all a decode call's tick reads.
_NEXT_DUE = [float("inf")]


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    watch = _active
    if watch is None or phase != "stop" or not watch.due(watch.clock()):
        return
    # The frame the collection interrupted; none where it ran with no Python
    # frame above the callback (at interpreter exit, or from a C thread).
    frame = sys._getframe(1) if sys._getframe(0).f_back is not None else None
    _step(watch, frame)


def _step(watch: Watch, frame: Any) -> None:
    """One step; a failure stops the watch (it never breaks the program it
    watches) with one WARNING, since growth then goes unseen."""
    try:
        watch.step(frame)
    except Exception as exc:  # noqa: BLE001
        watch.failed = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "fi_compat: the runtime watch stopped (%s); per-request growth is no longer watched", watch.failed
        )
        logger.debug("fi_compat: the watch's failure", exc_info=True)
        stop_collecting()


def stop_collecting() -> None:
    _NEXT_DUE[0] = float("inf")
    try:
        gc.callbacks.remove(_on_collection)
    except ValueError:
        pass


def _on_decode(frame: Any) -> None:
    """A step taken from a decode call (frame: the tick's own; flashinfer's frames lie below)."""
    watch = _active
    if watch is None or not watch.due(watch.clock()):
        return
    _step(watch, frame)


class _Tick(FiCompatProxy):
    """The decode function behind a pass-through that lets a due watch take its
    step first: one global read and one clock read per call when none is due.
    A wrapt proxy, so it pickles as the function it stands for (which its home
    module keeps) and shows its name and signature."""

    def __init__(self, decode: Callable[..., Any]) -> None:
        def call(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            watch = _active
            if watch is not None and watch.clock() >= watch.next_due:
                _on_decode(None)  # the frames above a decode call are the engine's: nothing to sample
            return wrapped(*args, **kwargs)

        super().__init__(decode, call, _Switch())


_VARIADIC = 0x04 | 0x08  # CO_VARARGS | CO_VARKEYWORDS


def _fast_tick(decode: Any, module_name: str, attribute: str) -> Optional[Callable[..., Any]]:
    """The tick as a plain function with ``decode``'s own parameters and defaults
    (the same default objects), which passes every value on positionally (keyword-only
    ones by keyword): Python binds the caller's keywords straight to its locals, so a
    call costs a fraction of a ``(*args, **kwargs)`` pass-through's repacking.  Named
    ``module_name.attribute`` (where it stands), so it pickles by reference to the same
    name, which resolves to the original where fi_compat is not installed.  ``None``
    for a function with ``*args``/``**kwargs`` or one that is not a plain function."""
    code = getattr(decode, "__code__", None)
    if not isinstance(decode, types.FunctionType) or not isinstance(code, types.CodeType) or code.co_flags & _VARIADIC:
        return None
    positional = code.co_varnames[: code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    defaults = decode.__defaults__ or ()
    first_default = len(positional) - len(defaults)
    kwdefaults = decode.__kwdefaults__ or {}
    namespace: dict[str, Any] = {"_decode": decode, "_due": _due_step, "_clock": time.perf_counter, "_next": _NEXT_DUE}
    header = []
    for index, name in enumerate(positional):
        if index >= first_default:
            namespace[f"_d{index}"] = defaults[index - first_default]
            header.append(f"{name}=_d{index}")
        else:
            header.append(name)
        if index + 1 == code.co_posonlyargcount:
            header.append("/")
    if keyword_only:
        header.append("*")
        for index, name in enumerate(keyword_only):
            if name in kwdefaults:
                namespace[f"_k{index}"] = kwdefaults[name]
                header.append(f"{name}=_k{index}")
            else:
                header.append(name)
    passed = list(positional) + [f"{name}={name}" for name in keyword_only]
    # the comparison inline: one clock read and one list read per call, no further call while nothing is due
    source = (
        f"def {attribute}({', '.join(header)}):\n"
        f"    if _clock() >= _next[0]:\n        _due()\n"
        f"    return _decode({', '.join(passed)})\n"
    )
    exec(compile(source, f"<fi_compat.watch tick for {module_name}.{attribute}>", "exec"), namespace)  # noqa: S102
    tick: Any = namespace[attribute]
    tick.__module__, tick.__qualname__, tick.__doc__ = module_name, attribute, decode.__doc__
    tick.__wrapped__ = decode  # inspect.signature shows flashinfer's, annotations included
    tick._fi_compat_wrapper = True
    tick._fi_compat_original = decode
    tick.fi_compat_deactivate = lambda: None  # a pass-through already
    return tick  # type: ignore[no-any-return]


def _due_step() -> None:
    watch = _active
    if watch is not None and watch.clock() >= watch.next_due:
        _on_decode(None)  # the frames above a decode call are the engine's: nothing to sample


def _tick_plan() -> Plan:
    """The decode function (engines call it once per batch) behind a :class:`_Tick`
    at every module attribute that holds it outside its home module (the
    re-exports engines call, an engine's own ``from flashinfer... import``):
    the per-batch tick of the watch.  The home module keeps the function, so it
    pickles by reference as before and fi_compat's call API calls it directly.
    Empty when the release has no such function, or when transparent mode
    stands there instead (its proxy is not the function; the collector's tick remains)."""
    core = sys.modules.get(CORE_MODULE)
    decode = getattr(core, DECODE.name, None) if core is not None else None
    if not callable(decode):
        return Plan()
    # every module: an engine that imported the name at start-up calls it through its own attribute
    targets = tuple(
        (module, attribute)
        for module in list(sys.modules.values())
        if isinstance(getattr(module, "__dict__", None), dict) and module is not core
        for attribute, value in vars(module).copy().items()
        if value is decode
    )
    if not targets:
        return Plan()
    # the first flashinfer holder names the fast tick (flashinfer.mla: what engines import)
    named = sorted(targets, key=lambda t: (not _flashinfer(getattr(t[0], "__name__", "")), t[0].__name__, t[1]))
    fast = _fast_tick(decode, named[0][0].__name__, named[0][1])
    tick = fast if fast is not None else _Tick(decode)
    return Plan([PatchStep(f"watch tick: {DECODE.qualname}", decode, tick, targets)], {}, [])


def start(mode: str, strict: bool, cache_size: int, on_error: Optional[Callable[[], None]] = None) -> Optional[Watch]:
    """Start the watch (mode ``bound`` or ``warn``; ``off`` starts nothing).  Called by
    the installer once flashinfer is imported and the rows are installed;
    ``on_error()`` runs (in a watch step: it must take no lock) when a strict
    error is kept, so the next fi_compat call can raise it (:func:`take_error`).
    Cost: one scan of flashinfer's module attributes for the decode function
    (about a millisecond); the work is done in later steps."""
    global _active
    stop()
    if mode == "off":
        return None
    watch = _active = Watch(mode, strict, cache_size, on_error=on_error)
    _NEXT_DUE[0] = 0.0
    watch._queue_module(CORE_MODULE, 2)  # the decode path's own module first; every other one follows
    try:
        watch.installation.apply(_tick_plan())
    except Exception as exc:  # noqa: BLE001  (no tick from decode: the collector's still comes)
        logger.debug("fi_compat: the watch has no decode tick: %s", exc)
    gc.callbacks.append(_on_collection)
    return _active


def stop() -> list[str]:
    """Stop the watch and restore every memo it bounded; returns what could not be restored."""
    global _active
    stop_collecting()
    watch, _active = _active, None
    return [] if watch is None else watch.installation.remove()


def current() -> Optional[Watch]:
    return _active


def report() -> Optional[dict[str, Any]]:
    """What ``status()["watch"]`` shows (``None`` when the watch is off or not started)."""
    watch = _active
    return None if watch is None else watch.report()


def take_error() -> None:
    """Raise (once) the strict error the watch kept."""
    watch = _active
    if watch is not None and watch.error is not None:
        error, watch.error = watch.error, None
        raise error


__all__ = ["DEFAULT_MODE", "MODES", "Watch", "bounding_plan", "current", "report", "start", "stop", "take_error"]
