"""The runtime watch: per-request growth in flashinfer's memory, measured where fi_compat's knowledge is missing.

Every bound in :mod:`fi_compat.verdict.bounds` hangs on a name.  On a release
fi_compat verified (every row found by name, the release in the matrix) those
names are the whole story, and the watch does not run: nothing of fi_compat
stands in flashinfer's call path but its memos.  Where knowledge is missing (a
release outside the verified list: the next one, a nightly, a source build; a
row missing or mismatched) the installer starts it (``FI_COMPAT_WATCH=auto``,
the default), and it looks at behaviour instead: it walks everything
flashinfer's modules hold (:func:`fi_compat.counting.memo_walk.module_nodes`:
module, class and instance attributes, closures, decorator stacks,
``threading.local`` attributes), reads the size of every container it finds
(``functools`` memos without a bound, dicts, sets, lists) again and again, and
when one keeps growing:

* a ``functools``-style memo with no bound is bounded where flashinfer holds it
  (a memo of :func:`fi_compat.memo.proxies.memoized_function` with the same
  name, signature and ``functools`` API, an LRU of ``cache_size`` entries keyed
  on the call's arguments as they are; ``uninstall()`` restores it), with one
  WARNING: module, function, entries, growth, the key positions that vary;
* any other growing container cannot be bounded safely (what evicting an entry
  does to flashinfer is unknown): one WARNING names it with its holder and
  source line; strict: :class:`~fi_compat.errors.UnboundedGrowthError` at the
  next fi_compat call.

Then it **retires**: after two complete walks and
:data:`~fi_compat.watch.records.FLAT_WINDOWS` windows of
:data:`~fi_compat.watch.records.WINDOW_LENGTHS` distinct lengths in which no
container grew, every tick it set is taken out, its collector callback removed
and its records dropped (the memos it bounded stay); ``status()["watch"]`` says
what it found and when it retired.  A flashinfer module imported after that
re-arms it.  What retiring can miss: growth that begins only after it (a memo
first reached at a context the engine had not served yet).
``FI_COMPAT_WATCH=bound`` runs it on any release and ``warn`` reports without
bounding (both never retire early on a verified release's account: they are
asked for); ``off`` never runs it.

How it runs: no thread.  Two ticks drive it, in whatever thread is running: a
pass-through in front of the decode function at every module attribute that
holds it (:mod:`.tick`; it also counts the distinct lengths) and the garbage
collector (:data:`gc.callbacks`), whose collections a growing memo's kept
objects trigger.  A step is at most :data:`~.records.STEP_BUDGET_S` of work,
paced to :data:`~.records.WALK_DUTY` of the time until the walk is complete
(after a start-up allowance that finds the decode path's own containers within
its first calls), then :data:`~.records.READ_DUTY`; between full steps a
reading of the decode path's own containers (tens of microseconds) sees growth
there within a few hundred lengths.  Its records stay under 1 MB
(:class:`~.records.Containers`); it creates no attribute on flashinfer's objects.

The watch imports nothing and takes no lock but the ones ``logging`` and
``warnings`` take to report (and a step's own, never waited for).  Failure
behaviour: anything a step raises stops the watch with one WARNING (the
traceback at DEBUG); flashinfer is left as it is.
"""

from __future__ import annotations

import gc
import logging
import sys
from typing import Any, Callable, Optional

from ..lookup import import_hooks
from ..model.specs import CORE_MODULE, PACKAGE
from .records import WINDOW_LENGTHS
from .state import RETIRED, Watch
from .tick import DUE, tick_plan

logger = logging.getLogger("fi_compat.watch")

# The process's one watch: the live binding every tick reads (tests replace ``_active`` and ``_step``).
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
    inside another (a collection during a step, or a second thread): the later
    one is skipped, without waiting."""
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
        _silence(watch)
    finally:
        watch.busy.release()


def _due_step() -> None:
    """The decode tick's step.  A decode call is outside any import, so an import caught in
    the microseconds before its module entered sys.modules reports its end here at the latest."""
    watch = _active
    if watch is None:
        DUE[0] = float("inf")
        return
    import_hooks.settle()
    if watch.due(watch.clock()):
        _step(watch, None)  # the frames above a decode call are the engine's: nothing to sample


def _silence(watch: Watch) -> list[str]:
    """Nothing of the watch runs any more: no step due, the ticks and the collector's callback
    gone; returns the ticks that could not be taken out (a third party replaced them)."""
    DUE[0] = float("inf")
    left = watch.ticking.remove()
    try:
        gc.callbacks.remove(_on_collection)
    except ValueError:
        pass
    return left


def _arm(watch: Watch) -> None:
    DUE[0] = 0.0
    try:
        watch.ticking.apply(tick_plan(watch.lengths, WINDOW_LENGTHS, _due_step))
    except Exception as exc:  # noqa: BLE001  (no tick from decode: the collector's still comes)
        logger.debug("fi_compat: the watch has no decode tick: %s", exc)
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def _retired(watch: Watch, left: list[str]) -> None:
    """The watch retired (in a step): its callback goes, and a new flashinfer module re-arms it."""
    _silence(watch)
    import_hooks.on_new_module(PACKAGE, _on_new_module)
    logger.info(
        "fi_compat: the runtime watch retired after %.1f s and %d windows of %d distinct lengths: "
        "nothing of flashinfer's grows per request%s",
        (watch.retired_at or 0.0) - watch.started,
        watch.windows,
        WINDOW_LENGTHS,
        f" ({'; '.join(left)})" if left else "",
    )


def _on_new_module(module: Any) -> None:
    """A flashinfer module imported after the watch retired (in the importing thread, inside
    that import: it imports nothing and waits on nothing)."""
    watch = _active
    import_hooks.forget_new_module(PACKAGE, _on_new_module)
    if watch is not None and watch.phase == RETIRED:
        watch.rearm()
        _arm(watch)
        logger.info("fi_compat: %s was imported after the runtime watch retired: it watches again", module.__name__)


def start(
    mode: str,
    strict: bool,
    cache_size: int,
    on_error: Optional[Callable[[], None]] = None,
    reason: str = "",
) -> Optional[Watch]:
    """Start the watch (mode ``bound``, ``warn``, or ``auto``, which the installer starts only
    where knowledge is missing; ``off`` starts nothing); ``reason`` says why, for
    ``status()``.  ``on_error()`` runs (in a watch step: it must take no lock) when a strict
    error is kept, so the next fi_compat call can raise it (:func:`take_error`).
    Cost: one scan of the modules' attributes for the decode function (about a millisecond);
    the work is done in later steps."""
    global _active
    stop()
    if mode == "off":
        return None
    watch = _active = Watch(mode, strict, cache_size, on_error=on_error, reason=reason, on_retire=_retired)
    watch._queue_module(CORE_MODULE, 2)  # the decode path's own module first; every other one follows
    _arm(watch)
    return watch


def stop() -> list[str]:
    """Stop the watch and restore every memo it bounded; returns what could not be restored."""
    global _active
    watch, _active = _active, None
    import_hooks.forget_new_module(PACKAGE, _on_new_module)
    if watch is None:
        DUE[0] = float("inf")
        return []
    return _silence(watch) + watch.installation.remove()


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


__all__ = ["Watch", "current", "report", "start", "stop", "take_error"]
