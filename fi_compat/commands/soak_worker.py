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
with one engine's call from :mod:`fi_compat.workload.workload`, and takes the
census of flashinfer's and fi_compat's caches (:mod:`fi_compat.counting.census`)
before and after.

Cost: a few seconds to import flashinfer, then about 0.1-0.3 ms per batch
timed, about 1.5 ms traced.
"""

from __future__ import annotations

import dataclasses
import gc
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
#: Query tokens per request in ``--mode mtp`` (one draft token: DeepSeek's MTP, SGLang's target-verify).
MTP_Q_LEN = 2
#: Decode-context-parallel ranks in ``--mode dcp`` (vLLM's; this process plays rank 0).
DCP_WORLD = 2


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


class Batches:
    """The inputs of each batch as views of buffers allocated once, up front, so
    the soak's own tensors are never counted as growth.  Every view is
    contiguous: dimension-0 slices, and block tables viewed out of one flat
    buffer (SGLang's width changes with the batch)."""

    def __init__(self, torch: Any, layout: str, context: int, high: int, lengths: list[int], mode: str = "q1") -> None:
        from ..workload import cuda_flagged, workload

        self.torch, self.layout, self.mode = torch, layout, mode
        # DCP's global KV lengths, flagged as CUDA for flashinfer's check, one
        # tensor per batch size made up front (a fresh subclass instance per
        # call would churn a cache inside torch that tracemalloc counts)
        self.global_lengths = (
            {b: cuda_flagged(torch.full((b,), 2, dtype=torch.int32)) for b in range(1, high + 1)}
            if mode == "dcp"
            else {}
        )
        self.full_width = -(-context // PAGE_SIZE)
        widths = [self.full_width, workload.sglang_width(1, PAGE_SIZE)]
        if layout == "sglang":
            widths += [workload.sglang_width(n, PAGE_SIZE) for n in set(lengths)]
        widest = max(widths)
        # each engine's workspace: the cute-dsl batch cap is searched against its size
        workspace = workload.SGLANG_WORKSPACE_BYTES if layout == "sglang" else workload.VLLM_WORKSPACE_BYTES
        if mode == "dcp":
            workspace = workload.VLLM_DCP_WORKSPACE_BYTES
        self.base = workload.make_inputs(
            torch,
            layout,
            batch=high,
            width=self.full_width,
            page_size=PAGE_SIZE,
            num_pages=NUM_PAGES,
            workspace_bytes=workspace,
            q_len=MTP_Q_LEN if mode == "mtp" else 1,
        )
        per_row = 2 * widest if layout == "trtllm" else widest
        self.tables = torch.zeros(high * per_row, dtype=torch.int32)

    def inputs(self, batch: int, max_seq_len: int) -> Any:
        from ..workload import workload

        width = workload.sglang_width(max_seq_len, PAGE_SIZE) if self.layout == "sglang" else self.full_width
        shape = (batch, 2, width) if self.layout == "trtllm" else (batch, width)
        count = batch * width * (2 if self.layout == "trtllm" else 1)
        base = self.base
        return dataclasses.replace(
            base,
            query=base.query[:batch],
            out=base.out[:batch],
            seq_lens=base.seq_lens[:batch],
            block_tables=self.tables[:count].view(shape),
        )

    def call(self, decode: Any, inputs: Any, max_seq_len: int, backend: Optional[str]) -> Any:
        """One engine's call for this batch; under DCP, vLLM's: backend cute-dsl,
        the rank's ``ceil(max_seq_len / world)`` and the DCP keywords."""
        from ..workload import workload

        if self.mode == "dcp":
            dcp = workload.Dcp(DCP_WORLD, 0, self.global_lengths[inputs.batch])
            return workload.vllm_call(decode, inputs, workload.vllm_dcp_max_seq_len(max_seq_len, DCP_WORLD), dcp=dcp)
        return workload.call(self.layout, decode, inputs, max_seq_len, backend)


def _census_counts(counted: dict) -> dict[str, dict]:
    return {name: count.as_dict() for name, count in counted.items()}


def run_pass(variant: str, traced: bool, options: dict[str, Any]) -> dict[str, Any]:
    """Run one pass in this process; returns its measurements."""
    import tracemalloc
    import warnings

    # the shim's recorded cute-dsl kernel has no compiled artifacts to query;
    # flashinfer then falls back to the SM count, as it says
    warnings.filterwarnings("ignore", message="cutlass.get_max_active_clusters failed")

    import torch

    from .. import public  # the public functions, as fi_compat's facade gives them
    from ..counting import census, memory_census
    from ..workload import cpu_host, workload

    lengths, sizes = options["lengths"], options["batch_sizes"]
    layout, backend = options["layout"], options["backend"]
    if variant == "fi_compat":
        public.install(cache_size=options["cache_size"], max_seq_len_policy=options["policy"])
    with cpu_host() as host:
        import flashinfer
        import flashinfer.mla

        decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
        if variant == "fi_compat" and options["call_api"]:
            decode = public.mla_decode
        if options.get("mode") == "dcp" and "enable_dcp" not in workload.accepted(decode):
            raise SystemExit(
                f"soak: flashinfer {flashinfer.__version__} has no decode context parallelism "
                "(enable_dcp arrived in 0.6.17); --mode dcp needs 0.6.17 or newer"
            )
        batches = Batches(torch, layout, options["context"], max(sizes), lengths, options.get("mode", "q1"))
        seq_lens = batches.base.seq_lens

        def call(batch: int, max_seq_len: int) -> None:
            batches.call(decode, batches.inputs(batch, max_seq_len), max_seq_len, backend)

        call(sizes[0], 1)  # warm-up: first-call imports and allocations are not growth
        host.recorder.clear()
        total = len(lengths)
        every = max(1, total // PLOT_POINTS)
        times = array("d", bytes(8 * total))
        cpu_times = array("d", bytes(8 * total))
        sample_steps = array("q", bytes(8 * (total // every + 1)))
        sample_bytes = array("q", bytes(8 * (total // every + 1)))
        taken = 0
        before = census.take()
        gc.collect()
        if traced:
            tracemalloc.start()
            # the census by memory (fi_compat.counting.memory_census): fi_compat's caches are left as they are,
            # the halves being long enough for its bounds to fill before the second
            points = [memory_census.take_point(clear=False)]
        # what the census points taken inside the traced stretch hold (a snapshot of
        # flashinfer's traces, hundreds of KiB) is the soak's, not the workload's growth
        own = 0
        traced_start = tracemalloc.get_traced_memory()[0] if traced else 0
        rss_start = _rss_bytes() or 0
        clock, cpu_clock = time.perf_counter, time.thread_time
        label = f"{variant} ({'traced' if traced else 'timed'})"
        # the second half is the steady state a bound is judged on: what it
        # still grows, and each memo's misses, are read from here to the end
        half, half_used, half_caches = total // 2, None, None
        for step in range(total):
            max_seq_len, batch = lengths[step], sizes[step]
            inputs = batches.inputs(batch, max_seq_len)
            seq_lens.fill_(max_seq_len)
            # the wall clock reads nest inside the CPU clock's (a syscall on some VMs)
            cpu_started = cpu_clock()
            started = clock()
            batches.call(decode, inputs, max_seq_len, backend)
            times[step] = clock() - started
            cpu_times[step] = cpu_clock() - cpu_started
            del inputs
            host.recorder.launches.clear()
            if step + 1 == half:
                half_used = None
                if traced:
                    # collected first, as at the start and the end: the cyclic garbage the host
                    # path leaves between collections (hundreds of KiB) is not growth, and a
                    # collection inside the census point would otherwise be counted against it
                    gc.collect()
                    held = tracemalloc.get_traced_memory()[0]
                    half_used = held - traced_start - own
                    points.append(memory_census.take_point(clear=False))
                    own += tracemalloc.get_traced_memory()[0] - held
                half_caches = public.status(walk=False)["caches"] if variant == "fi_compat" else None
            if (step + 1) % every == 0 or step + 1 == total:
                used = (
                    (tracemalloc.get_traced_memory()[0] - traced_start - own)
                    if traced
                    else (_rss_bytes() or 0) - rss_start
                )
                sample_steps[taken], sample_bytes[taken] = step + 1, used
                taken += 1
                if options["progress"]:
                    _progress(step + 1, total, label)
        gc.collect()
        traced_growth = tracemalloc.get_traced_memory()[0] - traced_start - own if traced else None
        rss_end = _rss_bytes()
        memory_sites = None
        if traced:
            points.append(memory_census.take_point(clear=False))
            new = [len(set(lengths[:half])), len(set(lengths[half:]) - set(lengths[:half]))]
            memory_sites = [
                site.as_dict() for site in memory_census.sites_between(points, new, options["cache_size"] or 256)
            ]
            tracemalloc.stop()
        after = census.take()
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
