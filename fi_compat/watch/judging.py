"""The watch's verdicts: which tracked containers grow per request, and what it does about each.

One job: the :class:`Judging` half of :class:`fi_compat.watch.state.Watch`
(judge the readings, queue a ``functools`` memo for bounding and bound it once
its holders are found, report or keep the strict error for what cannot be bounded).
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Optional

from ..adapters.base import Installation
from ..errors import UnboundedGrowthError
from .bounding import Bounding, bounding_plan, holders
from .records import (
    DICT,
    FUNCTOOLS,
    KEYS_READ,
    MAX_FINDINGS,
    REPORTED,
    SET,
    Containers,
    Finding,
    functools_keys,
    logger,
    parameter_names,
    report,
    varying_positions,
)
from .walk import locate


class Judging:
    """The verdicts' part of a watch's state and steps (mixed into :class:`~fi_compat.watch.state.Watch`)."""

    mode: str
    strict: bool
    cache_size: int
    clock: Callable[[], float]
    on_error: Optional[Callable[[], None]]
    containers: Containers
    findings: list[Finding]
    bounding: deque[Bounding]
    installation: Installation
    error: Optional[BaseException]

    def _judge(self, rows: Iterable[int]) -> bool:
        """Act on every container among ``rows`` that grows per request; ``True`` if one did."""
        containers = self.containers
        growing = [row for row in rows if containers.growing(row)]
        if not growing:
            return False
        unbounded: list[Finding] = []
        for row in growing:
            containers.flags[row] |= REPORTED
            finding = self._finding(row)
            if containers.kind(row) == FUNCTOOLS and self.mode != "warn":
                self._bound(row, finding)
            else:
                unbounded.append(finding)
            if len(self.findings) < MAX_FINDINGS:
                self.findings.append(finding)
        if unbounded:
            self._report_unbounded(unbounded)
        return True

    def _finding(self, row: int) -> Finding:
        containers = self.containers
        obj, kind = containers.objects[row], containers.kind(row)
        path, where = locate(containers, row)
        if kind == FUNCTOOLS:
            varying = varying_positions(functools_keys(obj), parameter_names(obj))
        elif kind in (DICT, SET):
            varying = varying_positions(list(obj)[:KEYS_READ])
        else:
            varying = "n/a"
        return Finding(path, kind, where, containers.last[row], containers.gained(row), "warned", varying)

    def _bound(self, row: int, finding: Finding) -> None:
        cache = self.containers.objects[row]
        name = getattr(cache, "__qualname__", None) or finding.path
        module = getattr(cache, "__module__", "?")
        finding.action = "bounding"
        message = (
            f"{module}.{name} (at {finding.where}) is a functools memo without a bound that no fi_compat row "
            f"names, and it grew per request: {finding.entries} entries, {finding.gained} gained since the watch "
            f"first read it; key positions that vary: {finding.varying}. fi_compat bounded it at {{where}} (an "
            f"LRU of {self.cache_size} entries; uninstall() restores it)"
        )
        self.bounding.append(Bounding(finding, cache, holders(cache), message=message))

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
            plan = bounding_plan(job.cache, self.cache_size, job.finding.path, job.found)
            if not plan.steps:
                job.finding.action = "warned"
                self._report_unbounded([job.finding])
                continue
            self.installation.apply(plan)
            job.finding.action = "bounded"
            job.finding.patched = [w for step in plan.steps for w in step.where()]
            report(job.message.format(where=", ".join(job.finding.patched)))

    def _report_unbounded(self, findings: list[Finding]) -> None:
        lines = [
            f"{f.path} ({f.kind}, held at {f.where}): {f.entries} entries, {f.gained} gained; "
            f"varying key positions: {f.varying}"
            for f in findings
        ]
        what = "changed nothing (FI_COMPAT_WATCH=warn)" if self.mode == "warn" else "left it unbounded"
        message = (
            f"flashinfer memory that grows per request, which fi_compat {what}: " + "; ".join(lines) + ". "
            "Pin a release listed in docs/compatibility.md, or report it with `fi-compat doctor` output"
        )
        if self.strict:
            for finding in findings:
                finding.action = "error"
            self.error = UnboundedGrowthError([f.path for f in findings], message)
            logger.error("fi_compat: %s (FI_COMPAT_STRICT: raised at the next fi_compat call)", message)
            if self.on_error is not None:
                self.on_error()
            return
        report(message)
