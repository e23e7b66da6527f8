"""One pass of ``fi-compat soak`` in its own process: one variant, timed or traced.

The soak runs every variant twice over the same batches, each pass in a fresh
process (flashinfer's caches are process-global, so a second pass in the same
process would find them filled):

* the **timed** pass measures host time per call (and RSS), with nothing
  tracing allocations;
* the **traced** pass measures host memory with ``tracemalloc``; its times
  are never reported (tracing makes every allocation several times slower).

Each pass drives the real MLA decode host path (argument checks, tuning-config
builder, ``AutoTuner.choose_one``, runner, launch recorded by the CPU shim)
with one engine's call (:class:`fi_compat.workload.driver.Driver` over its
:mod:`~fi_compat.workload.engines` record), and measures through the census
(:class:`fi_compat.counting.measurement.Measurement`): flashinfer's and
fi_compat's caches before, half-way (traced) and after.

Cost: a few seconds to import flashinfer, then about 0.1-0.3 ms per batch
timed, about 1.5 ms traced.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from array import array
from typing import Any, Optional

PAGE_SIZE = 64
PLOT_POINTS = 200
NUM_PAGES = 1024


def _rss_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _progress(done: int, total: int, label: str) -> None:
    width = 30
    filled = int(width * done / total)
    sys.stderr.write(f"\r{label:>20} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _census_counts(counted: dict) -> dict[str, dict]:
    return {name: count.as_dict() for name, count in counted.items()}


def run_pass(variant: str, traced: bool, options: dict[str, Any]) -> dict[str, Any]:
    """Run one pass in this process; returns its measurements.  ``options["layout"]`` names an
    engine layout (:func:`fi_compat.workload.engines.resolve`: a registered name or
    ``package.module:NAME``)."""
    import warnings

    # the shim's recorded cute-dsl kernel has no compiled artifacts to query;
    # flashinfer then falls back to the SM count, as it says
    warnings.filterwarnings("ignore", message="cutlass.get_max_active_clusters failed")

    import torch

    from .. import public  # the public functions, as fi_compat's facade gives them
    from ..counting.measurement import Measurement
    from ..workload import cpu_host
    from ..workload.driver import Driver
    from ..workload.engine_model import accepted

    lengths, sizes = options["lengths"], options["batch_sizes"]
    mode = options.get("mode", "q1")
    if variant == "fi_compat":
        public.install(cache_size=options["cache_size"], max_seq_len_policy=options["policy"])
    with cpu_host() as host:
        import flashinfer
        import flashinfer.mla

        decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
        if variant == "fi_compat" and options["call_api"]:
            decode = public.mla_decode
        if mode == "dcp" and "enable_dcp" not in accepted(decode):
            raise SystemExit(
                f"soak: flashinfer {flashinfer.__version__} has no decode context parallelism "
                "(enable_dcp arrived in 0.6.17); --mode dcp needs 0.6.17 or newer"
            )
        # every buffer allocated once, up front, each batch a view of them: the soak's own
        # tensors are never counted as growth
        driver = Driver(
            torch,
            decode,
            options["layout"],
            options["backend"],
            mode,
            context=options["context"],
            page_size=PAGE_SIZE,
            num_pages=NUM_PAGES,
            max_batch=max(sizes),
        )
        driver.call(sizes[0], 1)  # warm-up: first-call imports and allocations are not growth
        host.recorder.clear()
        total = len(lengths)
        every = max(1, total // PLOT_POINTS)
        times = array("d", bytes(8 * total))
        cpu_times = array("d", bytes(8 * total))
        sample_steps = array("q", bytes(8 * (total // every + 1)))
        sample_bytes = array("q", bytes(8 * (total // every + 1)))
        taken = 0
        # the census (fi_compat.counting.measurement.Measurement): traced, its points also walk
        # flashinfer's memos and lines, fi_compat's caches left as they are (the halves are long
        # enough for its bounds to fill before the second); what the points hold is the soak's own
        measured = Measurement(traced=traced, clear=False).start()
        try:
            measured.point()
            rss_start = _rss_bytes() or 0
            clock, cpu_clock = time.perf_counter, time.thread_time
            label = f"{variant} ({'traced' if traced else 'timed'})"
            # the second half is the steady state a bound is judged on: what it
            # still grows, and each memo's misses, are read from here to the end
            half, half_used, half_caches = total // 2, None, None
            for step in range(total):
                batch = driver.batch(sizes[step], lengths[step])
                # the wall clock reads nest inside the CPU clock's (a syscall on some VMs)
                cpu_started = cpu_clock()
                started = clock()
                driver.send(batch)
                times[step] = clock() - started
                cpu_times[step] = cpu_clock() - cpu_started
                del batch
                host.recorder.launches.clear()
                if step + 1 == half:
                    # collected first, as at the start and the end: the cyclic garbage the host
                    # path leaves between collections (hundreds of KiB) is not growth
                    half_used = measured.point().held if traced else None
                    half_caches = public.status(walk=False)["caches"] if variant == "fi_compat" else None
                if (step + 1) % every == 0 or step + 1 == total:
                    held = measured.held(collect=False)
                    used = held if held is not None else (_rss_bytes() or 0) - rss_start
                    sample_steps[taken], sample_bytes[taken] = step + 1, used
                    taken += 1
                    if options["progress"]:
                        _progress(step + 1, total, label)
            traced_growth = measured.held()
            rss_end = _rss_bytes()
            measured.point()
        finally:
            measured.stop()
        memory_sites = None
        if traced:
            new = [len(set(lengths[:half])), len(set(lengths[half:]) - set(lengths[:half]))]
            memory_sites = [site.as_dict() for site in measured.sites(new, options["cache_size"] or 256)]
        before, after = measured.points[0].caches, measured.points[-1].caches
        launches = host.recorder.total
        state = public.status(walk=False)
        memo_bytes = None
        if variant == "fi_compat" and not traced:  # measured untraced, after the batches
            from ..memo.cache import footprint
            from ..installing.installer import snapshot

            installation = snapshot().installation
            memo_bytes = None if installation is None else footprint(installation.caches.values())
    distinct = len(set(lengths))
    result: dict[str, Any] = {
        "variant": variant,
        "traced": traced,
        "flashinfer": flashinfer.__version__,
        "outcome": state["outcome"],
        "steps": total,
        "distinct_max_seq_len": distinct,
        "launches": launches,
        "tracemalloc_growth_bytes": traced_growth,
        "rss_growth_bytes": None if rss_end is None else rss_end - rss_start,
        "census_before": _census_counts(before),
        "census_after": _census_counts(after),
        "fi_compat_caches": state["caches"],
        "fi_compat_memo_bytes": memo_bytes,
        "half": half,
        "half_tracemalloc_bytes": half_used,
        "half_fi_compat_caches": half_caches,
        "second_half_new_lengths": len(set(lengths[half:]) - set(lengths[:half])),
        "samples": list(zip(sample_steps[:taken], sample_bytes[:taken])),
        "memory_sites": memory_sites,
    }
    if not traced:
        seconds, cpu_seconds = times.tolist(), cpu_times.tolist()
        ordered = sorted(seconds)
        window = min(1000, total)
        result["time_per_call_us"] = {
            "median": statistics.median(seconds) * 1e6,
            "mean": statistics.fmean(seconds) * 1e6,
            "p99": ordered[min(total - 1, int(0.99 * total))] * 1e6,
            "cpu_median": statistics.median(cpu_seconds) * 1e6,
            "cpu_mean": statistics.fmean(cpu_seconds) * 1e6,
            "first_cpu_mean": statistics.fmean(cpu_seconds[:window]) * 1e6,
            "last_cpu_mean": statistics.fmean(cpu_seconds[-window:]) * 1e6,
            "window": window,
        }
    return result


def main() -> int:
    request = json.loads(sys.stdin.read())
    result = run_pass(request["variant"], request["traced"], request["options"])
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
