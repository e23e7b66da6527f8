"""Shared by the benchmark scripts: interleaved A/B timing, both clocks, the host shim.

Named apart from scripts/_matrix_common.py: benchmarks/device_figures.py loads
scripts/run_gpu_matrix.py into its own process, and a shared helper name would
shadow one folder's helper with the other's (tests/test_entry_points.py checks).

Two clocks, read around the same stretch of calls:

* ``wall``: ``time.perf_counter``; what a user waits for on a quiet machine;
* ``cpu``: ``time.thread_time``, the CPU time of the calling thread only; it
  leaves out the time other processes held the core, so on a shared machine
  it is the steadier measure of host work.  The host path measured here never
  blocks on the device (launches are recorded), so on a quiet machine the two
  agree.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable, Iterator, Optional

CLOCKS = ("cpu", "wall")
HOSTS = ("cpu", "cuda")


def per_call_us(function: Callable[[], object], calls: int) -> float:
    clock = time.perf_counter
    started = clock()
    for _ in range(calls):
        function()
    return (clock() - started) / calls * 1e6


def per_call_us_both(function: Callable[[], object], calls: int) -> dict[str, float]:
    """``{"wall": us, "cpu": us}`` per call over ``calls`` calls of ``function``."""
    wall, cpu = time.perf_counter, time.thread_time
    started_wall, started_cpu = wall(), cpu()
    for _ in range(calls):
        function()
    return {"wall": (wall() - started_wall) / calls * 1e6, "cpu": (cpu() - started_cpu) / calls * 1e6}


def interleaved(a: Callable[[], float], b: Callable[[], float], rounds: int = 7) -> tuple[float, float]:
    """Median of ``rounds`` alternating measurements of a and b (each returns us/call)."""
    xs, ys = [], []
    for _ in range(rounds):
        xs.append(a())
        ys.append(b())
    return statistics.median(xs), statistics.median(ys)


def spread(values: list[float]) -> dict[str, float]:
    """min / median / max of ``values``."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write_json(path: Optional[str], figures: object) -> None:
    """The figures as JSON at ``path`` (a benchmark's ``--json``); nothing when it is ``None``."""
    if path:
        import json

        with open(path, "w") as handle:
            json.dump(figures, handle, indent=1)


def load_average() -> str:
    """The 1/5/15-minute load average and the core count, for the report."""
    import os

    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} on {os.cpu_count()} cores"


@contextlib.contextmanager
def flashinfer_host(kind: str) -> Iterator[Any]:
    """Import flashinfer for a host-path measurement, launches recorded.

    ``cpu``: fi_compat's CPU-host shim; ``cuda``: the machine's real torch,
    device and CUDA tensors with flashinfer answered as an SM100 (the
    ``cuda-as-sm100`` host of :mod:`fi_compat.workload.hosts`, where both are
    defined).  Yields the host (``.recorder``); exits when ``cuda`` finds no
    CUDA device."""
    from fi_compat.workload.hosts import flashinfer_host as host_of

    if kind not in HOSTS:
        raise ValueError(f"host {kind!r}; accepted: {', '.join(HOSTS)}")
    try:
        manager = host_of("cpu" if kind == "cpu" else "cuda-as-sm100")
        host = manager.__enter__()
    except RuntimeError as exc:
        raise SystemExit(f"--host cuda needs a CUDA device ({exc})") from exc
    try:
        yield host
    finally:
        manager.__exit__(None, None, None)
