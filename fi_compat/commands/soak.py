"""``fi-compat soak``: host time and host memory, with and without fi_compat.

Drives the real flashinfer MLA decode host path through a loop whose
``max_seq_len`` changes every batch the way a serving engine's does, with one
engine's call (``--layout``: TensorRT-LLM's by default, or vLLM's or SGLang's;
SGLang's block-table width follows the batch), unpatched and with fi_compat
installed.  Each variant runs twice over the same batches, each run in its own
process: a timed pass (host time per call, RSS) and a traced pass
(``tracemalloc``), because tracing allocations makes the code it traces
several times slower and its times would say nothing about host time.  The
report gives both, and the census of flashinfer's and fi_compat's caches.
Host time is read on two clocks: wall (what a user waits for on a quiet
machine) and the thread's CPU time (which leaves out the time other processes
held the core: the steadier figure on a shared machine).

Cost: four processes of a few seconds each (importing flashinfer), then about
0.1-0.3 ms per batch timed and 1.5 ms traced: the default run takes about a
minute on 2 CPU cores.  ``--no-trace-memory`` skips the traced passes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any, Optional

from .soak_report import VARIANTS, plot, report_text

MODES = ("q1", "mtp", "dcp")
FIXED_BATCH = 4


def _spawn(variant: str, traced: bool, options: dict[str, Any]) -> dict[str, Any]:
    payload = json.dumps({"variant": variant, "traced": traced, "options": options})
    process = subprocess.run(
        [sys.executable, "-m", "fi_compat.commands.soak_worker"],
        input=payload,
        text=True,
        stdout=subprocess.PIPE,
        stderr=None,
        check=False,
    )
    if process.returncode != 0:
        kind = "traced" if traced else "timed"
        raise SystemExit(f"soak: the {variant} {kind} pass failed (exit {process.returncode}); see its output above")
    result: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])  # the worker's last line
    return result


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def _batch_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}; accepted: LOW:HIGH (e.g. 8:64) or one size") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= LOW <= HIGH")
    return bounds


def register(subparsers: Any) -> None:
    from ..workload.engine_model import BACKENDS
    from ..workload.engines import ENGINES, LAYOUTS
    from ..workload.streams import DISTRIBUTIONS

    labels = [f"{engine.label}'s" for engine in ENGINES.values()]
    labels[0] += " (default)"
    whose = " or ".join(filter(None, [", ".join(labels[:-1]), labels[-1]]))

    parser = subparsers.add_parser(
        "soak",
        help="host time and memory of the MLA decode host path, with and without fi_compat",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--layout", choices=LAYOUTS, default=LAYOUTS[0], help=f"whose call: {whose}")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="backend of the vllm/sglang call (default: the engine's, auto); "
        "TensorRT-LLM's call always passes trtllm-gen",
    )
    parser.add_argument(
        "--batch-sizes",
        type=_batch_range,
        default=(FIXED_BATCH, FIXED_BATCH),
        metavar="LOW:HIGH",
        help=f"a batch size drawn from LOW..HIGH every batch (TensorRT-LLM serves 8:64); default {FIXED_BATCH}, fixed",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="q1",
        help="query mode: q1 (one token per request, default), mtp (two: one draft token, "
        "dense query) or dcp (vLLM's decode context parallelism, 2 ranks; --layout vllm, "
        "flashinfer 0.6.17 on)",
    )
    parser.add_argument("--context", type=_positive, default=131_072, help="context length (default 131072)")
    parser.add_argument("--steps", type=_positive, default=5_000, help="decode batches per variant (default 5000)")
    parser.add_argument(
        "--distribution",
        choices=DISTRIBUTIONS,
        default="serving",
        help="how max_seq_len moves: a toy serving engine (default), uniform, a sweep, "
        "or repeat (the same length every batch)",
    )
    parser.add_argument(
        "--distinct",
        default=None,
        help="sweep this many distinct lengths over 1..context ('all' for every one); implies --distribution sweep",
    )
    parser.add_argument(
        "--unpatched-steps",
        type=_positive,
        default=None,
        help="run fewer batches on the unpatched side (the report says so)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cache-size",
        type=_positive,
        default=None,
        metavar="N",
        help="fi_compat cache size (default: FI_COMPAT_CACHE_SIZE or 256)",
    )
    parser.add_argument(
        "--call-api",
        action="store_true",
        help="the fi_compat side calls fi_compat.mla_decode (with --policy) instead of flashinfer's function",
    )
    parser.add_argument(
        "--policy",
        choices=("exact", "bucket", "capacity"),
        default="exact",
        help="max_seq_len policy of --call-api (default exact)",
    )
    parser.add_argument("--variant", choices=VARIANTS + ("both",), default="both")
    parser.add_argument(
        "--trace-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a traced pass per variant for tracemalloc growth (default), or RSS only",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal or the run is long)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw memory against batch for both variants")
    parser.set_defaults(func=run)


def _backend(engine: Any, mode: str, backend: Optional[str]) -> tuple[Optional[str], str]:
    """``(the backend the passes send, "")``, or ``(None, why)`` where the engine's record makes
    no such call: separate K/V page tables take only the engine's own backend, and DCP is sent
    only where a record lists it."""
    from ..workload.engines import ENGINES

    if engine.separate_kv_indices and backend not in (None, *engine.backends):
        shared = " or ".join(e.name for e in ENGINES.values() if not e.separate_kv_indices)
        return None, (
            f"--backend {backend} with --layout {engine.name}: {engine.label}'s call passes "
            f"{'/'.join(engine.backends)} (separate K/V page tables, which cute-dsl does not take); "
            f"use --layout {shared}"
        )
    if mode != "dcp":
        return backend or engine.default_backend, ""
    senders = [(e, b) for e in ENGINES.values() for b in e.backends if "dcp" in e.modes.get(b, ())]
    fits = [b for e, b in senders if e is engine and backend in (None, b)]
    if fits:
        return fits[0], ""
    whose = " or ".join(f"{e.label}'s" for e, _ in senders)
    return None, (
        f"--mode dcp replays {whose} decode-context-parallel call (backend {' or '.join(b for _, b in senders)}); "
        f"got --layout {engine.name} --backend {backend or 'default'}: "
        f"use --layout {' or '.join(e.name for e, _ in senders)}"
    )


def run(args: argparse.Namespace) -> int:
    from .. import config
    from ..workload import engines, streams

    distribution, steps = args.distribution, args.steps
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
    backend, why = _backend(engines.resolve(args.layout), args.mode, args.backend)
    if backend is None:
        print(f"fi-compat soak: {why}", file=sys.stderr)
        return 2
    cache_size = config.resolve("cache_size", args.cache_size).value
    lengths = streams.lengths(distribution, args.context, steps, args.seed)
    low, high = args.batch_sizes
    sizes = streams.batch_sizes(len(lengths), low, high, args.seed) if low != high else [low] * len(lengths)
    progress = args.progress if args.progress is not None else (sys.stderr.isatty() or len(lengths) >= 20_000)
    options = {
        "context": args.context,
        "distribution": distribution,
        "seed": args.seed,
        "cache_size": cache_size,
        "policy": args.policy,
        "call_api": args.call_api,
        "layout": args.layout,
        "backend": backend,
        "batch_range": [low, high],
        "progress": progress,
        "mode": args.mode,
    }
    variants = VARIANTS if args.variant == "both" else (args.variant,)
    timed: dict[str, dict[str, Any]] = {}
    traced: dict[str, dict[str, Any]] = {}
    for variant in variants:
        count = len(lengths)
        if variant == "unpatched" and args.unpatched_steps is not None:
            count = min(count, args.unpatched_steps)
        pass_options = {**options, "lengths": lengths[:count], "batch_sizes": sizes[:count]}
        timed[variant] = _spawn(variant, False, pass_options)
        if args.trace_memory:
            traced[variant] = _spawn(variant, True, pass_options)
    if args.json:
        print(json.dumps({"options": options, "timed": timed, "traced": traced}, indent=2))
    else:
        print(report_text(timed, traced, options))
    if args.plot:
        plot(timed, traced, args.plot, options)
        print(f"plot written to {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from ..cli import main

    raise SystemExit(main(["soak", *sys.argv[1:]]))
