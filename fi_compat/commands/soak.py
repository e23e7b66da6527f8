"""``fi-compat soak``: host memory and time, with and without fi_compat.

Drives the real flashinfer MLA decode host path (argument checks, tuning
config builder, ``AutoTuner.choose_one``, runner, kernel launch recorded by
the CPU shim) through a loop whose ``max_seq_len`` changes every batch the
way a serving engine's does, once unpatched and once with fi_compat, each in
its own process so neither sees the other's caches.

Cost: a few seconds of start-up per variant (importing flashinfer), then
about 0.2 ms per batch untraced, about 1.5 ms traced (``tracemalloc`` is on
by default because memory is the point; ``--no-trace-memory`` measures time
and RSS only).  The default run takes well under a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from array import array
from typing import Any, Iterator, Optional

VARIANTS = ("unpatched", "fi_compat")
DISTRIBUTIONS = ("serving", "uniform", "sweep", "repeat")
PAGE_SIZE = 64
PLOT_POINTS = 200


# --------------------------------------------------------------------------- lengths


def serving_lengths(context: int, steps: int, rng: random.Random, batch: int = 8) -> Iterator[int]:
    """Per-batch maximum KV length of a toy continuous-batching server: each
    slot holds a request (prompt + generated tokens) that grows by one token a
    step and is replaced by a new one when it finishes or reaches the context."""

    def new_request() -> list[int]:
        prompt = int(min(context - 1, max(1, rng.lognormvariate(math.log(context / 8), 1.0))))
        return [prompt, prompt + rng.randint(1, max(1, context // 16))]

    slots = [new_request() for _ in range(batch)]
    for _ in range(steps):
        yield max(min(current, context) for current, _ in slots)
        for slot in slots:
            slot[0] += 1
            if slot[0] >= slot[1] or slot[0] >= context:
                slot[:] = new_request()


def lengths_for(distribution: str, context: int, steps: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    if distribution == "serving":
        return list(serving_lengths(context, steps, rng))
    if distribution == "uniform":
        return [rng.randint(1, context) for _ in range(steps)]
    if distribution == "repeat":
        # the same length every batch: 0.6.13 - 0.6.15's autotuner pathology needs no variety
        return [max(1, context // 2)] * steps
    if distribution == "sweep":
        # ``steps`` distinct lengths spread over 1..context (all of them when steps >= context)
        if steps >= context:
            return list(range(1, context + 1))
        return sorted({1 + (i * (context - 1)) // max(1, steps - 1) for i in range(steps)})
    raise ValueError(f"--distribution {distribution!r}; accepted: {', '.join(DISTRIBUTIONS)}")


# --------------------------------------------------------------------------- worker


def _rss_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _progress(done: int, total: int, label: str, stream: Any) -> None:
    width = 30
    filled = int(width * done / total)
    stream.write(f"\r{label:>10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done == total:
        stream.write("\n")
    stream.flush()


def run_worker(variant: str, options: dict[str, Any]) -> dict[str, Any]:
    """Run one variant in this process; returns its measurements."""
    import gc
    import tracemalloc

    import torch

    import fi_compat
    from fi_compat import census
    from fi_compat.testing import cpu_host

    lengths = options["lengths"]
    trace = options["trace_memory"]
    if variant == "fi_compat":
        fi_compat.install(maxsize=options["maxsize"], max_seq_len_policy=options["policy"])
    with cpu_host() as host:
        import flashinfer
        import flashinfer.mla

        decode = fi_compat.mla_decode if variant == "fi_compat" else flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
        context = options["context"]
        width = -(-context // PAGE_SIZE)
        batch, heads, rank, rope = 4, 128, 512, 64
        query = torch.zeros(batch, 1, heads, rank + rope, dtype=torch.bfloat16)
        kv_cache = torch.zeros(64, PAGE_SIZE, rank + rope, dtype=torch.bfloat16)
        workspace = torch.zeros(1 << 20, dtype=torch.uint8)
        block_tables = torch.zeros(batch, 2, width, dtype=torch.int32)
        seq_lens = torch.ones(batch, dtype=torch.int32)
        out = torch.zeros(batch, 1, heads, rank, dtype=torch.bfloat16)

        def call(max_seq_len: int) -> None:
            # TensorRT-LLM's call: 16 positional arguments and four keywords.
            decode(query, kv_cache, workspace, 128, rank, rope, block_tables, seq_lens, max_seq_len, 0, out,
                   1.0, 1.0, None, None, False, backend="trtllm-gen", is_var_seq=True,
                   uses_shared_paged_kv_idx=False, multi_ctas_kv_counter_buffer=None)

        call(1)  # warm-up: first-call imports and allocations are not growth
        host.recorder.clear()
        # Preallocated before the start is read, so the soak's own bookkeeping
        # is not counted as growth (tracemalloc or RSS).
        every = max(1, len(lengths) // PLOT_POINTS)
        times = array("d", bytes(8 * len(lengths)))
        sample_steps = array("q", bytes(8 * (len(lengths) // every + 1)))
        sample_bytes = array("q", bytes(8 * (len(lengths) // every + 1)))
        taken = 0
        gc.collect()
        if trace:
            tracemalloc.start()
        traced_start = tracemalloc.get_traced_memory()[0] if trace else 0
        rss_start = _rss_bytes()
        show = options["progress"]
        clock = time.perf_counter
        for step, max_seq_len in enumerate(lengths, 1):
            seq_lens.fill_(max_seq_len)
            started = clock()
            call(max_seq_len)
            times[step - 1] = clock() - started
            host.recorder.launches.clear()
            if step % every == 0 or step == len(lengths):
                used = (tracemalloc.get_traced_memory()[0] - traced_start) if trace else ((_rss_bytes() or 0) - (rss_start or 0))
                sample_steps[taken], sample_bytes[taken] = step, used
                taken += 1
                if show:
                    _progress(step, len(lengths), variant, sys.stderr)
        gc.collect()
        traced_growth = tracemalloc.get_traced_memory()[0] - traced_start if trace else None
        rss_end = _rss_bytes()
        if trace:
            tracemalloc.stop()
        launches = host.recorder.total
        counted = census.take()
        flashinfer_entries = sum(c.currsize for c in counted.values() if c.owner == census.FLASHINFER and c.unbounded)
        state = fi_compat.status()
    distinct = len(set(lengths))
    times = times.tolist()
    ordered = sorted(times)
    head = times[: min(1000, len(times))]
    tail = times[-min(1000, len(times)):]
    return {
        "variant": variant,
        "flashinfer": flashinfer.__version__,
        "outcome": state["outcome"],
        "steps": len(lengths),
        "distinct_max_seq_len": distinct,
        "launches": launches,
        "trace_memory": trace,
        "tracemalloc_growth_bytes": traced_growth,
        "rss_growth_bytes": None if rss_start is None or rss_end is None else rss_end - rss_start,
        "growth_per_distinct_bytes": None if traced_growth is None else traced_growth / max(1, distinct),
        "flashinfer_cache_entries": flashinfer_entries,
        "fi_compat_caches": state["caches"],
        "time_per_call_us": {
            "median": statistics.median(times) * 1e6,
            "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e6,
            "first_1000_mean": statistics.fmean(head) * 1e6,
            "last_1000_mean": statistics.fmean(tail) * 1e6,
        },
        "samples": list(zip(sample_steps[:taken], sample_bytes[:taken])),
    }


# --------------------------------------------------------------------------- parent


def _format_bytes(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def report_text(results: list[dict[str, Any]], options: dict[str, Any]) -> str:
    lines = [
        f"fi-compat soak: flashinfer {results[0]['flashinfer']}, context {options['context']:,}, "
        f"distribution {options['distribution']}, seed {options['seed']}, policy {options['policy']}, "
        f"maxsize {options['maxsize']}",
        "",
        f"{'':28}" + "".join(f"{r['variant']:>20}" for r in results),
    ]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"{label:28}" + "".join(f"{v:>20}" for v in values))

    row("batches (distinct lengths)", [f"{r['steps']:,} ({r['distinct_max_seq_len']:,})" for r in results])
    row("tracemalloc growth", [_format_bytes(r["tracemalloc_growth_bytes"]) for r in results])
    row("RSS growth", [_format_bytes(r["rss_growth_bytes"]) for r in results])
    row("growth / distinct length", [_format_bytes(r["growth_per_distinct_bytes"]) for r in results])
    row("flashinfer unbounded cache entries", [str(r["flashinfer_cache_entries"]) for r in results])
    row("fi_compat cache entries", [
        "-" if not r["fi_compat_caches"] else "+".join(str(c["currsize"]) for c in r["fi_compat_caches"].values())
        for r in results
    ])
    row("host time/call median", [f"{r['time_per_call_us']['median']:.0f} us" for r in results])
    row("host time/call p99", [f"{r['time_per_call_us']['p99']:.0f} us" for r in results])
    row("last-1000 / first-1000", [
        f"{r['time_per_call_us']['last_1000_mean'] / r['time_per_call_us']['first_1000_mean']:.2f}" for r in results
    ])
    by_variant = {r["variant"]: r for r in results}
    if set(by_variant) == set(VARIANTS):
        base, ours = by_variant["unpatched"], by_variant["fi_compat"]
        lines.append("")
        if base["steps"] != ours["steps"]:
            lines.append(
                f"note: the unpatched side ran {base['steps']:,} batches ({base['distinct_max_seq_len']:,} distinct "
                f"lengths) to save time; compare the per-length figures, not the totals"
            )
        if base["growth_per_distinct_bytes"] is not None and ours["growth_per_distinct_bytes"] is not None:
            lines.append(
                f"growth per distinct max_seq_len: unpatched {_format_bytes(base['growth_per_distinct_bytes'])}, "
                f"fi_compat {_format_bytes(ours['growth_per_distinct_bytes'])}"
            )
        if options["trace_memory"]:
            lines.append("(host times are measured under tracemalloc; run with --no-trace-memory for plain timings)")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str, options: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit(f"--plot needs matplotlib: pip install 'fi-compat[plot]' ({exc})") from None
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for result in results:
        steps = [s for s, _ in result["samples"]]
        mib = [b / (1 << 20) for _, b in result["samples"]]
        axis.plot(steps, mib, label=f"{result['variant']} ({result['outcome'] or 'not installed'})")
    measure = "tracemalloc" if options["trace_memory"] else "RSS"
    axis.set_xlabel("decode batch (max_seq_len changes every batch)")
    axis.set_ylabel(f"host memory growth, MiB ({measure})")
    axis.set_title(f"flashinfer {results[0]['flashinfer']} MLA decode host path, context {options['context']:,}")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def _spawn(variant: str, options: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps({"variant": variant, "options": options})
    process = subprocess.run(
        [sys.executable, "-m", "fi_compat.commands.soak", "--worker"], input=payload, text=True,
        stdout=subprocess.PIPE, stderr=None, check=False,
    )
    if process.returncode != 0:
        raise SystemExit(f"soak: the {variant} worker failed (exit {process.returncode}); see its output above")
    return json.loads(process.stdout.strip().splitlines()[-1])


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "soak", help="host memory and time of the MLA decode host path, with and without fi_compat",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--context", type=_positive, default=131_072, help="context length (default 131072)")
    parser.add_argument("--steps", type=_positive, default=5_000, help="decode batches per variant (default 5000)")
    parser.add_argument("--distribution", choices=DISTRIBUTIONS, default="serving",
                        help="how max_seq_len moves: a toy serving engine (default), uniform, a sweep, "
                             "or repeat (the same length every batch)")
    parser.add_argument("--distinct", default=None,
                        help="sweep this many distinct lengths over 1..context ('all' for every one); implies --distribution sweep")
    parser.add_argument("--unpatched-steps", type=_positive, default=None,
                        help="run fewer batches on the unpatched side (the report says so)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--maxsize", type=_positive, default=None, help="fi_compat cache size (default: FI_COMPAT_CACHE_SIZE or 256)")
    parser.add_argument("--policy", choices=("exact", "bucket", "capacity"), default="exact")
    parser.add_argument("--variant", choices=VARIANTS + ("both",), default="both")
    parser.add_argument("--trace-memory", action=argparse.BooleanOptionalAction, default=True,
                        help="measure with tracemalloc (default) or RSS only")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal or the run is long)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw memory against batch for both variants")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    distribution = args.distribution
    steps = args.steps
    if args.distinct is not None:
        distribution = "sweep"
        if args.distinct == "all":
            steps = args.context
        else:
            try:
                steps = _positive(args.distinct)
            except argparse.ArgumentTypeError as exc:
                print(f"fi-compat soak: --distinct: {exc}; accepted: a positive integer or 'all'", file=sys.stderr)
                return 2
    from .. import config

    maxsize = config.resolve("cache_size", args.maxsize).value
    lengths = lengths_for(distribution, args.context, steps, args.seed)
    progress = args.progress if args.progress is not None else (sys.stderr.isatty() or len(lengths) >= 20_000)
    options = {"context": args.context, "distribution": distribution, "seed": args.seed, "maxsize": maxsize,
               "policy": args.policy, "trace_memory": args.trace_memory, "progress": progress}
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    results = []
    for variant in variants:
        chosen = lengths
        if variant == "unpatched" and args.unpatched_steps is not None and args.unpatched_steps < len(lengths):
            chosen = lengths[: args.unpatched_steps]
        results.append(_spawn(variant, {**options, "lengths": chosen}))
    if args.json:
        print(json.dumps({"options": options, "results": results}, indent=2))
    else:
        print(report_text(results, options))
    if args.plot:
        plot(results, args.plot, options)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


def _worker_main() -> int:
    request = json.loads(sys.stdin.read())
    result = run_worker(request["variant"], request["options"])
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        raise SystemExit(_worker_main())
    from ..cli import main

    raise SystemExit(main(["soak", *sys.argv[1:]]))
