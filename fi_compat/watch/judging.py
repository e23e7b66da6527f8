"""The watch's verdicts: which tracked containers grow per request, and what it does about each.

One job: the :class:`Judging` half of :class:`fi_compat.watch.state.Watch`
(judge the readings, queue a ``functools`` memo for bounding and bound it once
its holders are found, report or keep the strict error for what cannot be bounded).
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from ..adapters.base import Installation
from ..errors import UnboundedGrowthError
from .bounding import _Bounding, bounding_plan, holders
from .records import (
    DICT,
    FUNCTOOLS,
    KEYS_READ,
    MIN_GROWTH,
    RISES,
    SET,
    Finding,
    Tracked,
    _functools_keys,
    _parameter_names,
    _report,
    logger,
    varying_positions,
)


class Judging:
    """The verdicts' part of a watch's state and steps (mixed into :class:`~fi_compat.watch.state.Watch`)."""

    mode: str
    strict: bool
    cache_size: int
    clock: Callable[[], float]
    on_error: Optional[Callable[[], None]]
    findings: list[Finding]
    bounding: deque[_Bounding]
    installation: Installation
    error: Optional[BaseException]

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
