"""One watch: its schedule, its step, its windows of distinct lengths, its retirement.

One job: :class:`Watch` (one install's watch: the step that walks, reads and
judges within its duty cycles, the windows that decide when nothing grows, and
its report); the walk and the verdicts are its mixins, :mod:`.walk` and
:mod:`.judging`.

Phases: ``walking`` (until the walk has reached everything flashinfer's modules
hold, at :data:`~.records.WALK_DUTY` after a start-up allowance), ``reading``
(every container read in turn at :data:`~.records.READ_DUTY`, while a second
walk finds containers created since the first), ``retired`` (two complete walks
and :data:`~.records.FLAT_WINDOWS` windows of :data:`~.records.WINDOW_LENGTHS`
distinct lengths in which nothing grew: the ticks are taken out and nothing of
the watch runs).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Optional

from ..adapters.base import Installation
from .bounding import Bounding
from .judging import Judging
from .records import (
    FLAT_WINDOWS,
    HOT,
    MAX_HOT,
    HOT_DUTY,
    HOT_GAP_S,
    READ_DUTY,
    SLOW_STEPS_KEPT,
    STARTUP_ALLOWANCE_S,
    STARTUP_DUTY,
    STEP_BUDGET_S,
    WALK_DUTY,
    WINDOW_LENGTHS,
    Containers,
    Finding,
)
from .tick import DUE
from .walk import Walking

WALKING, READING, RETIRED = "walking", "reading", "retired"


class Watch(Walking, Judging):
    """The state of one watch (one install).  Driven by the decode tick and the
    garbage collector's callback (:mod:`fi_compat.watch`)."""

    def __init__(
        self,
        mode: str,
        strict: bool,
        cache_size: int,
        clock: Callable[[], float] = time.perf_counter,
        on_error: Optional[Callable[[], None]] = None,
        reason: str = "",
        on_retire: Optional[Callable[["Watch", list[str]], None]] = None,
    ):
        self.mode, self.strict, self.cache_size, self.clock = mode, strict, cache_size, clock
        self.on_error, self.reason, self.on_retire = on_error, reason, on_retire
        self.started = clock()
        self.spent = 0.0  # full steps' time
        self.hot_spent = 0.0  # readings of the decode path's containers between full steps
        self.steps = 0
        self.longest = 0.0
        self.longest_cpu = 0.0  # the same step's CPU time: on a loaded host, wall time counts being descheduled
        self.next_at = 0.0  # the next full step
        self.next_hot = 0.0  # the next reading of the decode path's own containers
        self.collected_s = 0.0  # time the garbage collector spent (a collection during a step is not the step's)
        self.collection_started = 0.0
        self.busy = threading.Lock()  # held by the running step; a nested one skips (never waits)
        self.containers = Containers()
        self.hot: list[int] = []
        self.cursor = 0  # the reading pass's position
        self.passes = 0
        self.lengths: set[Any] = set()  # the window of distinct lengths the decode tick fills
        self.windows = 0  # windows seen, and how many of them flat since the second walk
        self.flat_windows = 0
        self.window_passes = 0  # reading passes in the current window
        self.phase = WALKING
        self.retired_at: Optional[float] = None
        self.rearmed = 0
        self.findings: list[Finding] = []
        self.bounding: deque[Bounding] = deque()
        self.installation = Installation()  # the memos the watch bounded (kept when it retires)
        self.ticking = Installation()  # the decode tick, until the watch retires
        self.error: Optional[BaseException] = None
        self.failed: Optional[str] = None
        self.slow_steps: deque[tuple[float, int, int]] = deque(maxlen=SLOW_STEPS_KEPT)
        self._init_walk()

    # ------------------------------------------------------------------ the step

    def due(self, now: float) -> bool:
        return now >= DUE[0]

    def step(self, frame: Any) -> None:
        """The work that is due: a full step (bounding, the walk, a slice of the reading pass)
        when its time has come, else a reading of the decode path's own containers; a full
        window of distinct lengths is judged first.  Schedules the next of each so both duty
        cycles hold, each counted on its own time."""
        start, start_cpu, collected = self.clock(), time.thread_time(), self.collected_s
        if len(self.lengths) >= WINDOW_LENGTHS:
            self._close_window()
            if self.phase == RETIRED:
                return
        full = start >= self.next_at
        self._sample_stack(frame)
        hot_start = self.clock()
        for row in self.hot:
            self.containers.skip[row] = 0  # the decode path's own containers: every step (a few dozen reads)
            self.containers.read(row)
        self._judge(self.hot)
        hot_took = self.clock() - hot_start
        if full:
            self._continue_bounding(start + STEP_BUDGET_S)
            if self.phase == WALKING or self.walks < 2:
                if self._walk(self.clock() + STEP_BUDGET_S / 2) and self.phase == WALKING:
                    self.phase = READING
            if self.phase == READING and self._read_slice(self.clock() + STEP_BUDGET_S / 2):
                self._judge(range(len(self.containers)))
        end = self.clock()
        in_collector = self.collected_s - collected  # an allocation of the step's ran the collector
        took = end - start - in_collector
        self.steps += 1
        self.longest = max(self.longest, took)
        self.longest_cpu = max(self.longest_cpu, time.thread_time() - start_cpu - in_collector)
        if took > STEP_BUDGET_S * 2:
            self.slow_steps.append((round(took * 1e3, 2), self.passes, len(self.containers)))
        if full:
            self.spent += took - hot_took
            self.hot_spent += hot_took
            self.next_at = end + self._pause(took - hot_took)
        else:
            self.hot_spent += took
        self.next_hot = end + max(HOT_GAP_S, hot_took / HOT_DUTY)
        DUE[0] = min(self.next_at, self.next_hot)

    def _pause(self, took: float) -> float:
        """How long until the next full step, so that its share of the time stays within the phase's duty."""
        if self.bounding:  # a memo being bounded: its holders' scan (a one-time 25-30 ms), a slice a step
            return 0.0
        duty = WALK_DUTY if self.phase == WALKING else READ_DUTY
        if self.spent < STARTUP_ALLOWANCE_S:
            duty = STARTUP_DUTY
        return took / duty - took

    def _read_slice(self, deadline: float) -> bool:
        """Continue the pass over every tracked container; ``True`` when a pass ended."""
        containers, clock, hot = self.containers, self.clock, self.hot
        count = len(containers)
        while self.cursor < count:
            row = self.cursor
            containers.read(row)
            if containers.rises[row] and not containers.flags[row] & HOT and len(hot) < MAX_HOT:
                containers.flags[row] |= HOT  # it grew: read at every step from now on
                hot.append(row)
            self.cursor += 1
            if self.cursor % 32 == 0 and clock() >= deadline:
                return False
        self.cursor = 0
        self.passes += 1
        self.window_passes += 1
        return True

    def _close_window(self) -> None:
        """A window of distinct lengths is full: it is flat when every container was read in it
        and none rose; after two complete walks, :data:`FLAT_WINDOWS` flat ones in a row retire the watch."""
        self.lengths.clear()
        self.windows += 1
        flat = self.containers.window_flat() and self.window_passes > 0 and not self.bounding
        self.window_passes = 0
        if self.phase != READING or self.walks < 2:
            self.flat_windows = 0
            return
        self.flat_windows = self.flat_windows + 1 if flat else 0
        if self.flat_windows >= FLAT_WINDOWS:
            self.retire()

    # ------------------------------------------------------------------ retiring

    def retire(self) -> None:
        """Nothing grows: take out every tick, stop being called (``on_retire`` removes the
        collector's callback and hooks re-arming), and drop the records; the memos it bounded stay."""
        self.phase = RETIRED
        self.retired_at = self.clock()
        DUE[0] = float("inf")
        left = self.ticking.remove()
        self._forget()
        if self.on_retire is not None:
            self.on_retire(self, left)

    def rearm(self) -> None:
        """A flashinfer module imported after the watch retired: walk and read again from the start."""
        self.phase = WALKING
        self.retired_at = None
        self.rearmed += 1
        self.flat_windows = self.window_passes = 0
        self._forget()
        DUE[0] = 0.0

    def _forget(self) -> None:
        self.containers = Containers()
        self.hot, self.cursor = [], 0
        self.lengths.clear()
        self._init_walk()

    # ------------------------------------------------------------------ reading it

    def report(self) -> dict[str, Any]:
        elapsed = max(self.clock() - self.started, 1e-9)
        return {
            "mode": self.mode,
            "why": self.reason,
            "phase": self.phase,
            "walks": self.walks,
            "tracked": len(self.containers),
            "hot": len(self.hot),
            "passes": self.passes,
            "windows": self.windows,
            "flat_windows": self.flat_windows,
            "steps": self.steps,
            "spent_s": round(self.spent + self.hot_spent, 4),
            "share": round((self.spent + self.hot_spent) / elapsed, 5),
            "longest_step_ms": round(self.longest * 1e3, 3),
            "longest_step_cpu_ms": round(self.longest_cpu * 1e3, 3),
            "records_bytes": self.containers.nbytes(),
            "findings": [f.as_dict() for f in self.findings],
            "patched": self.installation.patched() + self.ticking.patched(),  # memos it bounded, the decode tick
            "decode_tick": "in place" if self.ticking.patched() else ("retired" if self.retired_at else "none"),
            "retired_after_s": None if self.retired_at is None else round(self.retired_at - self.started, 3),
            "rearmed": self.rearmed,
            "failed": self.failed,
            "slow_steps": list(self.slow_steps),
            "error": None if self.error is None else str(self.error),
        }
