"""Shared by the benchmark scripts: interleaved A/B timing."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def per_call_us(function: Callable[[], object], calls: int) -> float:
    clock = time.perf_counter
    started = clock()
    for _ in range(calls):
        function()
    return (clock() - started) / calls * 1e6


def interleaved(a: Callable[[], float], b: Callable[[], float], rounds: int = 7) -> tuple[float, float]:
    """Median of ``rounds`` alternating measurements of a and b (each returns us/call)."""
    xs, ys = [], []
    for _ in range(rounds):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)
