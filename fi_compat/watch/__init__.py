"""The runtime watch: per-request growth in flashinfer's memory, whatever its name.

Every bound in :mod:`fi_compat.verdict.bounds` hangs on a name; a memo flashinfer
renames, moves or writes by hand escapes them all.  The watch looks at
behaviour instead.  After :func:`fi_compat.install` it finds the containers
flashinfer's modules hold (``functools`` caches, dicts, sets, lists,
``threading.local`` attributes, closure cells, instance and class attributes:
the links :mod:`fi_compat.counting.memo_walk` follows), reads their sizes again and
again, and when one keeps growing:

* a ``functools``-style memo with no bound (``functools.cache``,
  ``lru_cache(None)``) that no row names is bounded where it is bound (every
  attribute of a loaded flashinfer module holding it, a class attribute under
  its ``staticmethod``/``classmethod``, a decorator's closure cell or
  ``__wrapped__``): a memo of :func:`fi_compat.memo.proxies.memoized_function` with
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

How it runs, and what it costs: no thread.  Three ticks drive it, in whatever
thread is running: the builder memo's *heartbeat* (fi_compat's memo of the
tuning-config builder, which flashinfer calls once per decode wherever it builds
a config, compares one clock reading per call with
:data:`fi_compat.memo.proxies.WATCH_DUE`: about 0.1 us); a pass-through in front of
the decode function at every module attribute that holds it outside its home
module (``flashinfer.mla``, ``flashinfer.decode``, an engine's own ``from
flashinfer... import``; a plain function with the decode function's own
parameters, 0.3-0.9 us a call on the project's loaded 2-core CPU), which takes a
due step only :data:`TICK_LATE_S` late and is taken out once the heartbeat has
taken :data:`BEATS_TO_RETIRE_TICK` steps (so it stays only on a path that builds
no config: TensorRT-LLM's trtllm-gen call on 0.7.4); and the garbage collector
(:data:`gc.callbacks`), whose collections flashinfer's growing memos trigger as
they keep objects.  When something is due the tick takes one *step*:

* a *full step*: at most :data:`STEP_BUDGET_S` (2 ms) of work, scheduled so
  the watch's total stays within :data:`DUTY` (0.2 %) of the time since it
  started, after a one-time start-up allowance of :data:`STARTUP_ALLOWANCE_S`
  (100 ms, spent at most at :data:`STARTUP_DUTY` of the time) that finds the
  decode path's containers within its first few hundred calls;
* between full steps, a *reading* of the decode path's own containers only
  (a few dozen sizes: tens of microseconds), at most every
  :data:`HOT_GAP_S` and within :data:`HOT_DUTY` (0.25 %), so growth that begins
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

import gc
import sys
import time
from typing import Any, Callable, Optional

from ..adapters.base import Plan, PatchStep
from ..lookup import import_hooks
from ..lookup.modules import every_loaded, loaded
from ..memo.proxies import WATCH_DUE, WATCH_STEP, FiCompatProxy, _Switch
from ..model.specs import CORE_MODULE, DECODE
from .bounding import bounding_plan as bounding_plan
from .bounding import holders as holders
from .records import (
    BEATS_TO_RETIRE_TICK as BEATS_TO_RETIRE_TICK,
    DEFAULT_MODE as DEFAULT_MODE,
    DUTY as DUTY,
    FIRST_REWALK_S as FIRST_REWALK_S,
    HOT_DUTY as HOT_DUTY,
    HOT_GAP_S as HOT_GAP_S,
    KEYS_READ as KEYS_READ,
    MAX_REWALK_S as MAX_REWALK_S,
    MAX_SKIP as MAX_SKIP,
    MAX_TRACKED as MAX_TRACKED,
    MIN_GROWTH as MIN_GROWTH,
    MODES as MODES,
    RISES as RISES,
    STACK_DEPTH as STACK_DEPTH,
    STARTUP_ALLOWANCE_S as STARTUP_ALLOWANCE_S,
    STARTUP_DUTY as STARTUP_DUTY,
    STEP_BUDGET_S as STEP_BUDGET_S,
    TICK_LATE_S as TICK_LATE_S,
    Finding as Finding,
    Tracked as Tracked,
    _flashinfer,
    logger,
)
from .records import _functools_keys as _functools_keys
from .records import _parameter_names as _parameter_names
from .records import varying_positions as varying_positions
from .state import TICK_DUE
from .state import Watch as Watch
from .tick import _fast_tick

# The process's one watch: the state here is the live binding every tick reads
# (tests replace ``fi_compat.watch._active`` and ``fi_compat.watch._step``).

_active: Optional[Watch] = None


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    watch = _active
    if watch is None:
        return
    # the collector's own time: a collection that runs inside a step is not the step's work
    now = watch.clock()
    if phase == "start":
        watch.collection_started = now
        return
    watch.collected_s += now - watch.collection_started
    if not watch.due(now):
        return
    # The frame the collection interrupted; none where it ran with no Python
    # frame above the callback (at interpreter exit, or from a C thread).
    frame = sys._getframe(1) if sys._getframe(0).f_back is not None else None
    _step(watch, frame)


def _step(watch: Watch, frame: Any) -> None:
    """One step; a failure stops the watch (it never breaks the program it
    watches) with one WARNING, since growth then goes unseen.  A step never runs
    inside another (a collection or a heartbeat during a step, or a second thread):
    the later one is skipped, without waiting."""
    if not watch.busy.acquire(blocking=False):
        return
    try:
        watch.step(frame)
    except Exception as exc:  # noqa: BLE001
        watch.failed = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "fi_compat: the runtime watch stopped (%s); per-request growth is no longer watched", watch.failed
        )
        logger.debug("fi_compat: the watch's failure", exc_info=True)
        stop_collecting()
    finally:
        watch.busy.release()


def _nothing() -> None:
    pass


def stop_collecting() -> None:
    WATCH_DUE[0] = TICK_DUE[0] = float("inf")
    WATCH_STEP[0] = _nothing
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
            if _active is not None and time.perf_counter() >= TICK_DUE[0]:
                _due_step()
            return wrapped(*args, **kwargs)

        super().__init__(decode, call, _Switch())


def _due_step() -> None:
    """The decode tick's step (taken :data:`TICK_LATE_S` late: a heartbeat takes it first)."""
    watch = _active
    if watch is not None and watch.clock() >= TICK_DUE[0]:
        _decode_step(watch)


def _beat() -> None:
    """The heartbeat's step (the builder's memo, inside a decode call: WATCH_STEP).  Once
    it has taken :data:`BEATS_TO_RETIRE_TICK` steps the decode tick is taken out: this
    decode path beats on its own, and the tick's pass-through is the watch's largest
    per-call cost."""
    watch = _active
    if watch is None or not watch.due(watch.clock()):
        return
    _decode_step(watch)
    watch.beats += 1
    if watch.beats == BEATS_TO_RETIRE_TICK and watch.ticking.patched():
        left = watch.ticking.remove()
        logger.debug(
            "fi_compat: the builder's memo beats on this decode path: the decode tick retired%s",
            f" ({'; '.join(left)})" if left else "",
        )


def _decode_step(watch: Watch) -> None:
    # An import caught in the microseconds before its module entered sys.modules
    # (1 race round in 1,000 on 0.7.4) reports its end here at the latest: a
    # decode call is outside any import, so its hooks may run (nothing when none waits).
    import_hooks.settle()
    _on_decode(None)  # the frames above a decode call are the engine's: nothing to sample


def _tick_plan() -> Plan:
    """The decode function (engines call it once per batch) behind a :class:`_Tick`
    at every module attribute that holds it outside its home module (the
    re-exports engines call, an engine's own ``from flashinfer... import``):
    the per-batch tick of the watch.  The home module keeps the function, so it
    pickles by reference as before and fi_compat's call API calls it directly.
    Empty when the release has no such function, or when transparent mode
    stands there instead (its proxy is not the function; the collector's tick remains)."""
    core = loaded(CORE_MODULE)
    decode = getattr(core, DECODE.name, None) if core is not None else None
    if not callable(decode):
        return Plan()
    # every module: an engine that imported the name at start-up calls it through its own attribute
    targets = tuple(
        (module, attribute)
        for module in every_loaded()
        if isinstance(getattr(module, "__dict__", None), dict) and module is not core
        for attribute, value in vars(module).copy().items()
        if value is decode
    )
    if not targets:
        return Plan()
    # the first flashinfer holder names the fast tick (flashinfer.mla: what engines import)
    named = sorted(targets, key=lambda t: (not _flashinfer(getattr(t[0], "__name__", "")), t[0].__name__, t[1]))
    fast = _fast_tick(decode, named[0][0].__name__, named[0][1], _due_step)
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
    WATCH_DUE[0] = TICK_DUE[0] = 0.0
    WATCH_STEP[0] = _beat
    watch._queue_module(CORE_MODULE, 2)  # the decode path's own module first; every other one follows
    try:
        watch.ticking.apply(_tick_plan())
    except Exception as exc:  # noqa: BLE001  (no tick from decode: the collector's still comes)
        logger.debug("fi_compat: the watch has no decode tick: %s", exc)
    gc.callbacks.append(_on_collection)
    return _active


def stop() -> list[str]:
    """Stop the watch and restore every memo it bounded; returns what could not be restored."""
    global _active
    stop_collecting()
    watch, _active = _active, None
    return [] if watch is None else watch.ticking.remove() + watch.installation.remove()


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
