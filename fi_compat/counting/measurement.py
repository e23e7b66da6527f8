"""The one measuring loop: a workload measured between census points.

``fi-compat soak``, the guard's census probe and ``fi-compat audit --live`` each drive a workload
(:class:`fi_compat.workload.driver.Driver`) and measure it here.  A point is the functools census
(:func:`fi_compat.counting.census.take`) and, traced, the memo walk and the bytes each flashinfer
line holds (:func:`fi_compat.counting.memory_census.take_point`); what the points allocate is kept
apart from the workload's growth.  :func:`measure` is the probe's shape: two halves of distinct
lengths and the second half repeated, judged by :mod:`fi_compat.counting.memory_census`.

Cost: an untraced point is one functools census (tens of milliseconds); a traced one adds the walk
and a snapshot (0.1-0.5 s), and tracing slows the workload several times over, so no timing is read
from a traced stretch.  Failure: what the workload raises propagates, after the trace this started
is stopped.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from . import census, memo_walk
from .memory_census import (
    BYTES_PER_LENGTH,
    Site,
    flashinfer_roots,
    judge,
    line_growth,
    take_point,
)


@dataclass
class Point:
    """One census point: flashinfer's functools caches (:func:`fi_compat.counting.census.take`);
    traced, also every memo the walk finds and the bytes each flashinfer line holds, and the
    traced bytes the workload held just before the point."""

    caches: dict[str, census.CacheCount]
    memos: dict[str, memo_walk.Memo] = field(default_factory=dict)  # empty untraced
    lines: Any = None
    held: Optional[int] = None


class Measurement:
    """A workload measured between census points: the one measuring loop of the soak, the
    guard's census probe and ``audit --live``.

    Untraced, a point is the functools census alone (tens of milliseconds).  Traced
    (``tracemalloc`` started by :meth:`start` unless already on, and stopped by :meth:`stop`
    only then), a point also walks the memos and snapshots flashinfer's lines, after emptying
    fi_compat's caches when ``clear``; what the points allocate (the snapshots they keep) is
    theirs, not the workload's: :meth:`held` leaves it out.  Use as a context manager::

        with Measurement(traced=True) as measured:
            measured.point()
            drive(first_half)
            measured.point()
    """

    def __init__(self, *, traced: bool = False, clear: bool = True, nframes: int = 1) -> None:
        self.traced, self.clear, self.nframes = traced, clear, nframes
        self.points: list[Point] = []
        self.census_s = 0.0
        self._started_here = False
        self._start = 0
        self._own = 0
        self.roots: list[str] = []

    def start(self) -> "Measurement":
        """Collect garbage and, traced, start tracing (when not on already) and find flashinfer's files."""
        gc.collect()
        if self.traced:
            self._started_here = not tracemalloc.is_tracing()
            if self._started_here:
                tracemalloc.start(self.nframes)
            self.roots = flashinfer_roots()
            self._start = tracemalloc.get_traced_memory()[0]
        return self

    def stop(self) -> None:
        if self._started_here:
            tracemalloc.stop()
            self._started_here = False

    def __enter__(self) -> "Measurement":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def held(self, collect: bool = True) -> Optional[int]:
        """Traced bytes the workload holds now, since :meth:`start`, less what the points hold
        (after a collection when ``collect``, traced or not); ``None`` untraced."""
        if collect:
            gc.collect()
        if not self.traced:
            return None
        return tracemalloc.get_traced_memory()[0] - self._start - self._own

    def point(self) -> Point:
        """Take one point (see the class docstring) and keep it in :attr:`points`."""
        held = self.held()
        started = tracemalloc.get_traced_memory()[0] if self.traced else 0
        clock = time.perf_counter()
        point = Point(census.take(), held=held)
        if self.traced:
            point.memos, point.lines = take_point(self.roots, clear=self.clear)
            self._own += tracemalloc.get_traced_memory()[0] - started
        self.census_s += time.perf_counter() - clock
        self.points.append(point)
        return point

    def caches_grown(self, first: int = 0, last: int = -1) -> list[census.Growth]:
        """functools caches that grew between two points (the first and the last by default)."""
        return census.grown(self.points[first].caches, self.points[last].caches)

    def sites(self, counts: list[int], cache_size: int, first: int = 0) -> list[Site]:
        """The sites that grew per new distinct length over the two halves between points
        ``first``, ``first + 1`` and ``first + 2`` (``counts``: the new lengths of each half)."""
        return sites_between(self.points[first : first + 3], counts, cache_size)


def measure(
    drive: Callable[[Sequence[int]], None],
    halves: tuple[Sequence[int], Sequence[int]],
    *,
    cache_size: int = 256,
    nframes: int = 1,
) -> dict[str, Any]:
    """Drive ``halves`` (two lists of distinct lengths) through ``drive``, then the second half
    once more, a :class:`Measurement` point (fi_compat's caches cleared) before and after each,
    and return the census by memory: ``sites`` (each :meth:`Site.as_dict`), every grown memo and
    line per half, the seconds the census itself took, and ``caches``, the functools census at
    each of the four points."""
    with Measurement(traced=True, clear=True, nframes=nframes) as measured:
        measured.point()
        # the second half once more, no new length: what grows now grows per call (the CPU
        # shim's tensors, a per-call leak), and is taken off the growth per distinct length
        for half in (*halves, halves[1]):
            drive(half)
            measured.point()
    points = measured.points
    memo_growth = [{g.after.path: g for g in memo_walk.grown(points[i].memos, points[i + 1].memos)} for i in (0, 1)]
    lines_grown = [line_growth(points[i].lines, points[i + 1].lines) for i in (0, 1)]
    per_call = line_growth(points[2].lines, points[3].lines)
    counts = [max(1, len(half)) for half in halves]
    # a line that grows on every call, repeated calls included: a per-call leak, when it grows in
    # all three passes by BYTES_PER_LENGTH per call on average and half that in each (a list's
    # buffer grows in steps)
    passes = [(lines_grown[0], counts[0]), (lines_grown[1], counts[1]), (per_call, counts[1])]
    per_call_sites = [
        Site(
            line,
            "memory allocated here on every call, repeated ones too, and still held",
            "per-call",
            None,
            size / counts[1],
            [line],
        )
        for line, size in sorted(per_call.items())
        if sum(grown.get(line, 0) for grown, _ in passes) / sum(count for _, count in passes) >= BYTES_PER_LENGTH
        and all(grown.get(line, 0) / count >= BYTES_PER_LENGTH / 2 for grown, count in passes)
    ]
    for grown_lines in lines_grown:
        for line, size in per_call.items():
            if line in grown_lines:
                grown_lines[line] -= size
    sites = judge(memo_growth, lines_grown, counts, cache_size) + per_call_sites
    return {
        "per_call_lines": dict(sorted(per_call.items(), key=lambda kv: -kv[1])[:10]),
        "sites": [site.as_dict() for site in sites],
        "memos": [[g.as_dict() for g in half.values()] for half in memo_growth],
        "lines": [dict(sorted(half.items(), key=lambda kv: -kv[1])[:20]) for half in lines_grown],
        "lengths": counts,
        "census_s": round(measured.census_s, 3),
        "roots": measured.roots,
        "caches": [point.caches for point in points],
    }


def sites_between(points: Sequence[Point], counts: list[int], cache_size: int) -> list[Site]:
    """The sites that grew per new distinct length between three traced points (two halves)."""
    memo_growth = [{g.after.path: g for g in memo_walk.grown(points[i].memos, points[i + 1].memos)} for i in (0, 1)]
    lines_grown = [line_growth(points[i].lines, points[i + 1].lines) for i in (0, 1)]
    return judge(memo_growth, lines_grown, [max(1, n) for n in counts], cache_size)


__all__ = ["Measurement", "Point", "measure", "sites_between"]
