"""The census by memory: what grows per distinct length, wherever it lives.

Two eyes, independent of each other and of :mod:`fi_compat.counting.census` (which
counts ``functools`` caches where flashinfer announces them):

* :func:`fi_compat.counting.memo_walk.walk` lists every memo reachable from flashinfer's
  modules (caches under decorators, hand-written dict memos, caches held by
  instances or closures) and their sizes;
* ``tracemalloc`` snapshots, taken after a collection, give the bytes still
  allocated by each line of flashinfer's own files.

:func:`fi_compat.counting.measurement.measure` drives a workload over two halves
of distinct lengths and takes both before and after each half.  Before every snapshot it empties
fi_compat's own caches, so what their entries hold is not counted; memos
flashinfer bounds itself (``maxsize`` at most :data:`HUGE_FACTOR` times
fi_compat's bound) and the lines of their functions are not judged.
Then the second half is driven once more: what grows on lengths already
seen grows per call, not per length, and is taken off.  A **site** grows per
distinct length when it
grows in both halves by at least :data:`PER_LENGTH` entries (a memo) or
:data:`BYTES_PER_LENGTH` bytes (a line) per new length; it is reported with
its ``file:line``, what grows and the bytes per length.  Lines inside a grown
memo's function are folded into that memo's site.

:class:`fi_compat.counting.measurement.Measurement` takes these points between
stretches of a workload, with the functools census at each: the one way the soak,
the guard's census probe and ``fi-compat audit --live`` measure.

Cost: tracing slows flashinfer's host path several times over, and each
snapshot and walk takes 0.1-0.5 s; this runs in the processes of
``fi-compat guard --census`` and on the traced pass of ``fi-compat soak``;
``fi-compat doctor`` and ``status()`` use the walk alone (:func:`walk_report`:
tens of milliseconds untraced; ``status(walk=False)`` skips it).  Timings are
never taken while it traces.  Failure: an object whose attributes raise is
skipped by the walk, never reported.
"""

from __future__ import annotations

import gc
import linecache
import os
import re
import sys
import tracemalloc
from dataclasses import dataclass, field
from typing import Any, Optional

from . import memo_walk
from ..lookup.modules import loaded
from ..model.specs import PACKAGE

PER_LENGTH = 0.25
"""Entries per new distinct length, in each half, that make a memo grow per length (as the guard's census)."""
BYTES_PER_LENGTH = 128
"""Retained bytes per new distinct length, in each half, that make a flashinfer line grow per length.
Above the CPU shim's intermittent per-call residue under DCP (73-83 B at 16 lengths a half, seen on
0.6.18 and 0.7.4), below the smallest real per-length line (the 0.7.4 config's buckets, 192-208 B)."""
HUGE_FACTOR = 16
"""A flashinfer ``maxsize`` more than this many times fi_compat's bound is effectively unbounded."""


@dataclass
class Site:
    """One place in flashinfer that grows per distinct length and that nothing bounds."""

    where: str  # file:line
    what: str
    kind: str  # "functools", "dict", "memory" (per distinct length) or "per-call"
    entries_per_length: Optional[float]
    bytes_per_length: float
    lines: list[str] = field(default_factory=list)

    def describe(self) -> str:
        entries = "" if self.entries_per_length is None else f"{self.entries_per_length:.2f} entries and "
        return f"{self.where}: {self.what} grows by {entries}{self.bytes_per_length:.0f} B per distinct max_seq_len"

    def as_dict(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "what": self.what,
            "kind": self.kind,
            "entries_per_length": self.entries_per_length,
            "bytes_per_length": round(self.bytes_per_length, 1),
            "lines": self.lines,
        }


def flashinfer_roots() -> list[str]:
    roots = set()
    module = loaded(PACKAGE)
    for path in getattr(module, "__path__", None) or ():
        roots.add(os.path.abspath(path))
    return sorted(roots)


def _bounded(memo: memo_walk.Memo, cache_size: int) -> bool:
    if memo.kind != memo_walk.FUNCTOOLS:
        return False
    if memo.owner == memo_walk.FI_COMPAT:
        return True
    return memo.maxsize is not None and memo.maxsize <= HUGE_FACTOR * cache_size


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        value: Any = loaded(".".join(parts[:cut]))
        if value is None:
            continue
        for name in parts[cut:]:
            value = vars(value).get(name) if isinstance(value, type) else getattr(value, name, None)
            value = getattr(value, "__func__", value) if isinstance(value, (staticmethod, classmethod)) else value
            if value is None:
                return None
        return value
    return None


def clear_bounded(memos: dict[str, memo_walk.Memo]) -> int:
    """Empty fi_compat's own caches (what they hold is bounded by construction);
    returns how many.  flashinfer's caches are never touched: one bounded
    upstream keeps its entries, and the functools census reads them as before."""
    cleared = 0
    for memo in memos.values():
        if memo.owner == memo_walk.FI_COMPAT and memo.size:
            clear = getattr(_resolve(memo.path), "cache_clear", None)
            if callable(clear):
                clear()
                cleared += 1
    return cleared


def take_point(roots: Optional[list[str]] = None, *, clear: bool = True) -> tuple[dict[str, memo_walk.Memo], Any]:
    """The walk and a snapshot of flashinfer's lines (tracing must be on); ``clear`` empties
    fi_compat's caches first (see the module docstring).  A :class:`Measurement` point holds them."""
    memos = memo_walk.walk()  # flashinfer's memo sizes do not change when fi_compat's caches are emptied
    if clear:
        clear_bounded(memos)
    gc.collect()
    filters = [tracemalloc.Filter(True, f"{root}{os.sep}*") for root in roots or flashinfer_roots()]
    return memos, tracemalloc.take_snapshot().filter_traces(filters)


def line_growth(before: Any, after: Any) -> dict[str, int]:
    return {
        f"{stat.traceback[0].filename}:{stat.traceback[0].lineno}": stat.size_diff
        for stat in after.compare_to(before, "lineno")
        if stat.size_diff > 0
    }


def _function_span(memo: memo_walk.Memo) -> Optional[tuple[str, int, int]]:
    """``(file, first, last)`` of the function a memo caches or belongs to."""
    value = memo_walk.inspect_unwrap(_resolve(memo.path)) if memo.kind == memo_walk.FUNCTOOLS else None
    code = getattr(value, "__code__", None)
    if code is None:
        file, _, line = memo.where.rpartition(":")
        return (file, int(line), int(line)) if file and line.isdigit() else None
    lines = [line for *_, line in code.co_lines() if line is not None] or [code.co_firstlineno]
    return code.co_filename, code.co_firstlineno, max(lines)


def judge(
    memo_growth: list[dict[str, memo_walk.MemoGrowth]],
    line_growth: list[dict[str, int]],
    counts: list[int],
    cache_size: int,
) -> list[Site]:
    """The sites that grow per distinct length in both halves (see the module docstring)."""
    sites: list[Site] = []
    spans = []
    bounded_spans = []
    for path, second in memo_growth[1].items():
        first = memo_growth[0].get(path)
        memo = second.after
        if _bounded(memo, cache_size):
            bounded_spans.append(_function_span(memo))
            continue
        if first is None:
            continue
        if min(first.gained / counts[0], second.gained / counts[1]) < PER_LENGTH:
            continue
        kind = "functools cache" if memo.kind == memo_walk.FUNCTOOLS else "dict"
        bound = (
            ""
            if memo.kind != memo_walk.FUNCTOOLS
            else (", unbounded" if memo.maxsize is None else f", maxsize {memo.maxsize}")
        )
        site = Site(memo.where, f"{kind} {path}{bound}", memo.kind, second.gained / counts[1], 0.0)
        sites.append(site)
        spans.append((site, _function_span(memo)))
    for line, size in sorted(line_growth[1].items()):
        if min(line_growth[0].get(line, 0) / counts[0], size / counts[1]) < BYTES_PER_LENGTH:
            continue
        file, _, number = line.rpartition(":")
        if any(span and span[0] == file and span[1] <= int(number) <= span[2] for span in bounded_spans):
            continue  # what a cache bounded upstream holds
        if calls_bounded_cache(file, int(number), cache_size) is not None:
            continue  # the call into a bounded cache: the entries a C lru_cache keeps are charged to its caller
        owner = next((s for s, span in spans if span and span[0] == file and span[1] <= int(number) <= span[2]), None)
        if owner is None:
            # memory a caller keeps: the memo it lands in is folded in when the line calls into one
            owner = next((s for s, span in spans if span and span[0] == file), None)
        if owner is not None:
            owner.bytes_per_length += size / counts[1]
            owner.lines.append(line)
        else:
            sites.append(Site(line, "memory allocated here and still held", "memory", None, size / counts[1], [line]))
    return sorted(sites, key=lambda s: -s.bytes_per_length)


_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def calls_bounded_cache(file: str, number: int, cache_size: int) -> Optional[str]:
    """The name of a bounded functools cache that line ``number`` of ``file`` calls, if any.

    ``functools.lru_cache`` is written in C: what its entries hold (the key tuple,
    the link) is charged by tracemalloc to the Python line that called it, outside
    the cached function.  A line that calls a cache bounded at most
    :data:`HUGE_FACTOR` times fi_compat's bound (flashinfer's own, or fi_compat's)
    grows only until that cache is full, so it is not judged.  Reads the line with
    :mod:`linecache` and the names it calls from the module loaded from ``file``."""
    module = next(
        (m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == file),
        None,
    )
    if module is None:
        return None
    for name in _CALLED.findall(linecache.getline(file, number)):
        name = str(name)
        value = vars(module).get(name)
        parameters = getattr(value, "cache_parameters", None)
        if not callable(parameters):
            continue
        try:
            maxsize = parameters().get("maxsize")
        except Exception:  # noqa: BLE001  (a foreign object that only looks like a cache)
            continue
        if getattr(value, "_fi_compat_original", None) is not None or (
            maxsize is not None and maxsize <= HUGE_FACTOR * cache_size
        ):
            return name
    return None


def walk_report(baseline: Optional[dict[str, memo_walk.Memo]] = None, cache_size: int = 256) -> dict[str, Any]:
    """``status()``-time view: the walk alone (no tracing), every flashinfer memo
    nothing bounds that holds entries, and, given an earlier walk, those grown
    since.  Cost: one walk (see :mod:`fi_compat.counting.memo_walk`)."""
    import time

    clock = time.perf_counter()
    memos = memo_walk.walk()
    unbounded = [
        m
        for m in memos.values()
        if m.owner == memo_walk.FLASHINFER and not _bounded(m, cache_size) and m.kind == memo_walk.FUNCTOOLS and m.size
    ]
    grown = (
        []
        if baseline is None
        else [g.as_dict() for g in memo_walk.grown(baseline, memos) if not _bounded(g.after, cache_size)]
    )
    return {
        "memos": len(memos),
        "unbounded_caches": [m.as_dict() for m in unbounded],
        "grown": grown,
        "walk_s": round(time.perf_counter() - clock, 3),
    }


__all__ = [
    "BYTES_PER_LENGTH",
    "HUGE_FACTOR",
    "PER_LENGTH",
    "Site",
    "clear_bounded",
    "flashinfer_roots",
    "judge",
    "line_growth",
    "take_point",
    "walk_report",
]
