"""The state of one watch and its step: when the next step is due, what a step does, what it has spent.

One job: :class:`Watch` (one install's watch: its schedule within the duty
cycles, the step that runs the walk, the readings and the verdicts, and its
report); the walk and the verdicts are its mixins, :mod:`.walk` and :mod:`.judging`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Optional

from ..adapters.base import Installation
from ..memo.proxies import WATCH_DUE
from .bounding import _Bounding
from .judging import Judging
from .records import (
    DUTY,
    FIRST_REWALK_S,
    HOT_DUTY,
    HOT_GAP_S,
    STARTUP_ALLOWANCE_S,
    STARTUP_DUTY,
    STEP_BUDGET_S,
    TICK_LATE_S,
    Finding,
    Tracked,
    _read,
)
from .walk import Walking

#: When the decode tick takes a step (``inf``: none running): :data:`TICK_LATE_S` after the
#: heartbeat's time (:data:`fi_compat.memo.proxies.WATCH_DUE`), so wherever the builder's memo beats
#: (inside the decode call) it takes the step first, and the watch can retire the tick.
TICK_DUE = [float("inf")]


class Watch(Walking, Judging):
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
        self.next_due = 0.0  # the earlier of the two: all the heartbeat compares
        self.beats = 0  # steps the builder memo's heartbeat took
        self.collected_s = 0.0  # time the garbage collector spent (a collection during a step is not the step's)
        self.collection_started = 0.0
        self.busy = threading.Lock()  # held by the running step; a nested one skips (never waits)
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
        self.installation = Installation()  # the memos the watch bounded
        self.ticking = Installation()  # the decode tick, until the heartbeat makes it needless
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
        start, start_cpu, collected = self.clock(), time.thread_time(), self.collected_s
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
        in_collector = self.collected_s - collected  # an allocation of the step's ran the collector
        took = end - start - in_collector
        self.spent += took
        self.steps += 1
        self.longest = max(self.longest, took)
        self.longest_cpu = max(self.longest_cpu, time.thread_time() - start_cpu - in_collector)
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
        self.next_due = WATCH_DUE[0] = min(self.next_at, self.next_hot)
        TICK_DUE[0] = self.next_due + TICK_LATE_S

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
            "patched": self.installation.patched() + self.ticking.patched(),  # memos it bounded, the decode tick
            "heartbeats": self.beats,
            "decode_tick": "in place" if self.ticking.patched() else ("retired" if self.beats else "none"),
            "failed": self.failed,
            "slow_steps": self.slow_steps[:20],
            "error": None if self.error is None else str(self.error),
        }
