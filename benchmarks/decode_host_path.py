"""The whole MLA decode host path: flashinfer alone against flashinfer with fi_compat installed.

    python benchmarks/decode_host_path.py                      # CPU shim; needs torch + flashinfer
    python benchmarks/decode_host_path.py --host cuda          # a CUDA machine (launches recorded)
    python benchmarks/decode_host_path.py --combos trtllm:trtllm-gen --rounds 9

Each engine's real call (its record in ``fi_compat.workload.engines``, driven by
``fi_compat.workload.driver.Driver``: TensorRT-LLM's positional call with separate K/V page
tables, vLLM's and SGLang's keyword calls on shared page tables) of flashinfer's own
``trtllm_batch_decode_with_kv_cache_mla``, as an engine makes it: with a per-batch
max_seq_len (a toy serving engine's batch maximum), a batch size drawn from
``--batch-sizes`` every batch, and for SGLang a block-table width that follows the batch's
maximum.  Everything up to the kernel launch is flashinfer's real code; the launch is recorded.

flashinfer's caches and its lazily imported modules are process-global, so every measurement
runs in a fresh process: one per combination (layout:backend), variant and round, the two
variants of a combination run back to back, alternated (AB, BA, ...) round by round, so each
round's ratio is measured side by side; every worker has the same hash seed and, on a machine
of 4 cores or more, runs on the same core.  No worker inherits what another combination
imported or cached, so the start-up walk is paid by each and reported apart (the first table):
``fi_compat.install()``, importing flashinfer (with fi_compat installed, its import hooks bound
the caches then), the first call, the mean of the next ``--warmup`` - 1 calls, and how many
calls on new lengths it took to reach ``--settle-seconds`` after the first (fi_compat's runtime
watch spends its one-time start-up allowance in that first second or so).  Then ``--steps``
calls are timed: the steady state.  Reported per combination: the mean host time
per call over rounds (median, min and max), the fi_compat/flashinfer ratio of each round
(median and range), whether flashinfer builds a tuning config on that path, the time spent
inside the builder per call on each side (the part of the path a builder memo can remove),
and how many fi_compat cache lookups a call makes (0: fi_compat does nothing on that path);
all three probed after timing, on batches of their own.  Then, on batches of their own again,
where each call's time goes step by step (``StepClock``): flashinfer's cute-dsl compatibility
checks, the construction of its tunable runners, the tuning-config builder,
``AutoTuner.choose_one``, the runner's call (its launch preparation up to the recorded
launch), and the rest of the decode function's own body; exclusive wall time per call,
printed as a third table.  Each timed step adds a Python call and two clock reads (a few
tenths of a µs), so the instrumented total is printed beside the untimed one.

Cost: one process per combination, variant and round (the defaults: 5 x 2 x 6 = 60), each
importing torch and flashinfer (3-10 s) before its calls.

Targets: ratio <= 0.8 where flashinfer builds a tuning config; <= 1.02 where
it skips the builder (0.7.4 with an explicit ``backend="trtllm-gen"``).
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time

from _bench_common import CLOCKS, HOSTS, flashinfer_host, load_average, spread

VARIANTS = ("flashinfer", "fi_compat")
COMBOS = ("trtllm:trtllm-gen", "vllm:auto", "vllm:trtllm-gen", "vllm:cute-dsl", "sglang:auto")
PAGE_SIZE = 64
TARGET_WITH_BUILDER = 0.8
TARGET_WITHOUT_BUILDER = 1.02


# --------------------------------------------------------------------------- worker


def planner(torch, decode, layout: str, backend: str, options: dict, device):
    """A driver whose decode function returns the call it was given (``plan_calls`` makes the
    batches with it, before any timing)."""
    from fi_compat.workload.driver import Driver

    def capture(*args, **kwargs):
        return args, kwargs

    capture.__signature__ = inspect.signature(decode)  # the calls pass only the keywords the release accepts
    return Driver(torch, capture, layout, backend, context=options["context"], page_size=PAGE_SIZE,
                  num_pages=1024, max_batch=options["batch_sizes"][1], device=device)


def serving_maxima(options: dict, length_offset: int = 0) -> list[int]:
    """The per-batch maxima of the warm-up and timed batches (a toy server's), ``length_offset`` longer."""
    from fi_compat.workload.streams import lengths

    context = options["context"]
    steps = options["warmup"] + options["steps"]
    return [min(context, n + length_offset) for n in lengths("serving", context, steps, options["seed"])]


def plan_calls(torch, plan, options: dict, device, length_offset: int = 0, maxima=None) -> list[tuple[tuple, dict]]:
    """``(args, kwargs)`` of every batch (the serving maxima, or ``maxima``), built before any timing."""
    from fi_compat.workload.streams import batch_sizes

    maxima = serving_maxima(options, length_offset) if maxima is None else maxima
    steps, (low, high) = len(maxima), options["batch_sizes"]
    sizes = batch_sizes(steps, low, high, options["seed"]) if low != high else [low] * steps
    calls = []
    for max_seq_len, batch in zip(maxima, sizes):
        planned = plan.batch(batch, max_seq_len)
        # every request of the batch at the batch's maximum (max_seq_len >= max(seq_lens), as the
        # kernel requires), in a tensor of its own: the calls are made after all are planned
        planned.inputs.seq_lens = torch.full((batch,), max_seq_len, dtype=torch.int32, device=device)
        calls.append(plan.send(planned))
    return calls


def builder_time(core, decode, calls: list[tuple[tuple, dict]]) -> dict:
    """How often and how long ``_build_mla_decode_tuning_config`` runs inside
    ``calls`` (wall time inside it per decode call, less the cost of reading
    the clock).  Run after the timed calls, on batches of their own (one
    token longer), so its clock reads never touch the timed figures."""
    installed = core._build_mla_decode_tuning_config
    clock, spent, made = time.perf_counter, [0.0], [0]
    started = clock()
    for _ in range(1000):
        clock()
    read_cost = (clock() - started) / 1000

    def timed_builder(*args, **kwargs):
        started = clock()
        try:
            return installed(*args, **kwargs)
        finally:
            spent[0] += clock() - started - read_cost
            made[0] += 1

    core._build_mla_decode_tuning_config = timed_builder
    try:
        for args, kwargs in calls:
            decode(*args, **kwargs)
    finally:
        core._build_mla_decode_tuning_config = installed
    return {"builds_config": made[0] > 0, "builder_us_per_call": max(0.0, spent[0]) / len(calls) * 1e6}


class StepClock:
    """Exclusive wall time per labelled step: a step's time less that of the timed
    steps it calls (so nested steps are never counted twice), and the number of
    calls.  Used only for the breakdown, never for the timed figures."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._nested: list[float] = []
        self._restore: list[tuple[object, str, object]] = []

    def _timed(self, label: str, function):
        import functools

        clock = time.perf_counter

        @functools.wraps(function)  # __wrapped__: inspect.signature still sees flashinfer's parameters
        def timed(*args, **kwargs):
            self._nested.append(0.0)
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = clock() - started
                nested = self._nested.pop()
                self.spent[label] = self.spent.get(label, 0.0) + elapsed - nested
                if self._nested:
                    self._nested[-1] += elapsed

        return timed

    def time_attribute(self, owner, name: str, label: str) -> bool:
        """Replace ``owner.name`` (a module function, or a function, classmethod or
        staticmethod in a class's own ``__dict__``) by a timed one; False where absent."""
        raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if raw is None:
            return False
        if isinstance(raw, (classmethod, staticmethod)):
            replacement = type(raw)(self._timed(label, raw.__func__))
        elif callable(raw):
            replacement = self._timed(label, raw)
        else:
            return False
        self._restore.append((owner, name, raw))
        setattr(owner, name, replacement)
        return True

    def restore(self) -> None:
        for owner, name, raw in reversed(self._restore):
            setattr(owner, name, raw)
        self._restore.clear()


#: The steps of ``trtllm_batch_decode_with_kv_cache_mla`` timed in the breakdown,
#: in the order a call meets them (``other``: the rest of the function's own body,
#: its argument and shape checks and tensor views).
STEP_LABELS = ("cute-dsl checks", "runner construction", "tuning-config builder", "AutoTuner.choose_one",
               "runner call (launch preparation)", "other")


def _mla_runner_classes():
    """Every ``TunableRunner`` subclass defined in flashinfer.mla (0.6.x names them
    ``*MlaDecodeRunner``; 0.7.x moved them to ``flashinfer.mla._batch_mla``)."""
    from flashinfer.autotuner import TunableRunner

    found, pending = [], list(TunableRunner.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("flashinfer.mla") and cls not in found:
            found.append(cls)
    return found


def step_times(core, decode, calls: list[tuple[tuple, dict]]) -> dict:
    """Exclusive wall time per call of each of :data:`STEP_LABELS` over ``calls``,
    and the instrumented total.  Restores every attribute it replaced."""
    from flashinfer.autotuner import AutoTuner, TunableRunner

    steps = StepClock()
    try:
        steps.time_attribute(core, "_cute_dsl_incompatibility_reason", "cute-dsl checks")
        steps.time_attribute(core, "_build_mla_decode_tuning_config", "tuning-config builder")
        steps.time_attribute(AutoTuner, "choose_one", "AutoTuner.choose_one")
        steps.time_attribute(TunableRunner, "__call__", "runner call (launch preparation)")
        for cls in _mla_runner_classes():
            for name in ("__init__", "from_functional"):
                steps.time_attribute(cls, name, "runner construction")
            steps.time_attribute(cls, "forward", "runner call (launch preparation)")
        started = time.perf_counter()
        for args, kwargs in calls:
            decode(*args, **kwargs)
        total = time.perf_counter() - started
    finally:
        steps.restore()
    per_call = {label: steps.spent.get(label, 0.0) / len(calls) * 1e6 for label in STEP_LABELS[:-1]}
    per_call["other"] = total / len(calls) * 1e6 - sum(per_call.values())
    return {"steps_us_per_call": per_call, "instrumented_us_per_call": total / len(calls) * 1e6}


def fi_compat_lookups() -> int:
    """Hits and misses of every fi_compat cache so far (0 when not installed)."""
    import fi_compat

    return sum(c["hits"] + c["misses"] for c in fi_compat.status(walk=False)["caches"].values())


def time_calls(decode, calls: list[tuple[tuple, dict]]) -> dict[str, float]:
    """Mean us per call over ``calls``, on both clocks."""
    wall, cpu = time.perf_counter, time.thread_time
    started_wall, started_cpu = wall(), cpu()
    for args, kwargs in calls:
        decode(*args, **kwargs)
    return {"wall": (wall() - started_wall) / len(calls) * 1e6, "cpu": (cpu() - started_cpu) / len(calls) * 1e6}


def run_worker(variant: str, combo: str, options: dict) -> dict:
    """One combination in this (fresh) process: start-up, then the steady state."""
    import gc
    import warnings

    if options.get("cpu") is not None:
        os.sched_setaffinity(0, {options["cpu"]})
    # the recorded cute-dsl kernel has no compiled artifacts to query; flashinfer falls back to the SM count
    warnings.filterwarnings("ignore", message="cutlass.get_max_active_clusters failed")
    clock = time.perf_counter
    import torch

    import fi_compat

    started = clock()
    if variant == "fi_compat":
        fi_compat.install()
    startup = {"install_ms": (clock() - started) * 1e3 if variant == "fi_compat" else None}
    out: dict = {"variant": variant, "combo": combo}
    started = clock()
    with flashinfer_host(options["host"]) as host:
        import flashinfer
        import flashinfer.mla
        import flashinfer.mla._core as core

        startup["import_ms"] = (clock() - started) * 1e3
        out["flashinfer"] = flashinfer.__version__
        device = torch.device("cuda") if options["host"] == "cuda" else None
        decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
        layout, backend = combo.split(":")
        try:
            plan = planner(torch, decode, layout, backend, options, device)
            calls = plan_calls(torch, plan, options, device)
            warmup = calls[: options["warmup"]]
            first = clock()
            decode(*warmup[0][0], **warmup[0][1])
            startup["first_call_ms"] = (clock() - first) * 1e3
            if len(warmup) > 1:
                started = clock()
                for args, kwargs in warmup[1:]:
                    decode(*args, **kwargs)
                startup["warmup_us_per_call"] = (clock() - started) / (len(warmup) - 1) * 1e6
            startup["settle_calls"] = settle(torch, plan, decode, options, device, first)
            startup["settle_s"] = clock() - first
            timed = calls[options["warmup"]:]
            before = host.recorder.total
            # Both sides start from a collected heap; collections during the timed
            # calls stay in: what flashinfer's growing caches cost the collector is
            # part of its host time.
            gc.collect()
            per_call = time_calls(decode, timed)
            launches = host.recorder.total - before
            host.recorder.clear()
            # the timed batches' lengths plus one: new lengths for flashinfer's own
            # cache (as every batch of a server is), the same profile rungs for fi_compat's
            probes = slice(options["warmup"], options["warmup"] + min(300, options["steps"]))
            other_batches = plan_calls(torch, plan, options, device, length_offset=1)[probes]
            looked_up = fi_compat_lookups()
            builder = builder_time(core, decode, other_batches)
            lookups = (fi_compat_lookups() - looked_up) / len(other_batches)
            # two tokens longer: new lengths for flashinfer again, as the builder probe's were
            steps = step_times(core, decode, plan_calls(torch, plan, options, device, length_offset=2)[probes])
            out["result"] = {"us_per_call": per_call, "launches_per_call": launches / len(timed),
                             "fi_compat_lookups_per_call": lookups, "startup": startup, **builder, **steps}
        except Exception as exc:  # noqa: BLE001  (a combination this release or device does not run)
            out["result"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    if variant == "fi_compat":
        out["outcome"] = fi_compat.status(walk=False)["outcome"]
    return out


def settle(torch, plan, decode, options: dict, device, first_call: float) -> int:
    """Decode new lengths until ``--settle-seconds`` have passed since the first call, on both
    sides alike: fi_compat's runtime watch spends a one-time start-up allowance (100 ms, at most
    20 % of the time) in its first half second or so, and that is start-up, not the steady
    state.  The lengths are none of the timed or probed batches' (those stay new to flashinfer's
    caches).  Returns how many calls it made."""
    import random

    clock, rng = time.perf_counter, random.Random(options["seed"] + 1)
    taken = {n + k for n in serving_maxima(options) for k in range(3)}  # timed, then the two probes
    made = 0
    while clock() - first_call < options["settle_seconds"]:
        maxima = []
        while len(maxima) < 100:
            n = rng.randint(1, options["context"])
            if n not in taken:
                taken.add(n)
                maxima.append(n)
        for args, kwargs in plan_calls(torch, plan, options, device, maxima=maxima):
            decode(*args, **kwargs)
        made += len(maxima)
    return made


# --------------------------------------------------------------------------- parent


def spawn(variant: str, combo: str, options: dict) -> dict:
    # One hash seed for every worker: string and dict layouts then differ only by what the variant changes.
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    process = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker"],
                             input=json.dumps({"variant": variant, "combo": combo, "options": options}), text=True,
                             stdout=subprocess.PIPE, stderr=None, check=False, env=environment)
    if process.returncode != 0:
        raise SystemExit(f"decode_host_path: the {variant} worker of {combo} failed (exit {process.returncode})")
    return json.loads(process.stdout.strip().splitlines()[-1])


STARTUP = (("install_ms", "install ms"), ("import_ms", "import ms"), ("first_call_ms", "first call ms"),
           ("warmup_us_per_call", "warm-up us/call"), ("settle_calls", "settle calls"))


def summarise(runs: dict[str, dict[str, list[dict]]], combos: list[str], clock: str) -> tuple[list[dict], bool]:
    """``runs[variant][combo]``: one result per round."""
    rows, all_met = [], True
    for combo in combos:
        per = {v: runs[v][combo] for v in VARIANTS}
        errors = [c["error"] for v in VARIANTS for c in per[v] if "error" in c]
        if errors:
            rows.append({"combo": combo, "error": errors[0]})
            continue
        base = [c["us_per_call"] for c in per["flashinfer"]]
        ours = [c["us_per_call"] for c in per["fi_compat"]]
        builds = any(c["builds_config"] for c in per["flashinfer"])
        row = {"combo": combo, "builds_config": builds,
               "launches_per_call": per["flashinfer"][0]["launches_per_call"],
               "builder_us": {v: spread([c["builder_us_per_call"] for c in per[v]]) for v in VARIANTS},
               "fi_compat_lookups_per_call": per["fi_compat"][0]["fi_compat_lookups_per_call"],
               "steps_us": {v: {label: spread([c["steps_us_per_call"][label] for c in per[v]]) for label in STEP_LABELS}
                            for v in VARIANTS},
               "instrumented_us": {v: spread([c["instrumented_us_per_call"] for c in per[v]]) for v in VARIANTS},
               "startup": {v: {key: spread([c["startup"][key] for c in per[v]])
                               for key, _ in STARTUP if all(c["startup"].get(key) is not None for c in per[v])}
                           for v in VARIANTS}}
        for name in CLOCKS:
            row[name] = {"flashinfer": spread([b[name] for b in base]), "fi_compat": spread([o[name] for o in ours]),
                         "ratio": spread([o[name] / b[name] for b, o in zip(base, ours)])}
        target = TARGET_WITH_BUILDER if builds else TARGET_WITHOUT_BUILDER
        row["target"] = target
        row["met"] = row[clock]["ratio"]["median"] <= target
        all_met &= row["met"]
        rows.append(row)
    return rows, all_met


def report(rows: list[dict], clock: str) -> str:
    lines = [f"{'layout:backend':20}{'builder':>8}{'flashinfer us':>22}{'fi_compat us':>22}{'ratio':>7}"
             f"{'range':>13}{'target':>8}{'':9}{'builder us':>14}{'lookups':>9}  ({clock} clock; median [min-max] "
             "over rounds; builder us: time inside the builder per call, flashinfer / fi_compat; lookups: "
             "fi_compat cache lookups per call)"]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['combo']:20}  not run: {row['error']}")
            continue
        c = row[clock]

        def cell(s: dict) -> str:
            return f"{s['median']:.1f} [{s['min']:.0f}-{s['max']:.0f}]"

        verdict = "met" if row["met"] else "MISSED"
        lines.append(f"{row['combo']:20}{'yes' if row['builds_config'] else 'skips':>8}{cell(c['flashinfer']):>22}"
                     f"{cell(c['fi_compat']):>22}{c['ratio']['median']:7.3f}"
                     f"{c['ratio']['min']:7.3f}-{c['ratio']['max']:.3f}{'<=' + str(row['target']):>8}  {verdict:7}"
                     f"{row['builder_us']['flashinfer']['median']:7.1f} /{row['builder_us']['fi_compat']['median']:5.1f}"
                     f"{row['fi_compat_lookups_per_call']:9.1f}")
    return "\n".join(lines)


def report_startup(rows: list[dict]) -> str:
    """What each fresh process paid before its steady state (wall clock, median [min-max] over rounds)."""
    lines = [f"{'layout:backend':20}{'variant':12}" + "".join(f"{label:>22}" for _, label in STARTUP)
             + "  (start-up, a fresh process per combination and variant; wall clock, median [min-max] over rounds)"]
    for row in rows:
        if "error" in row:
            continue
        for variant in VARIANTS:
            figures = row["startup"][variant]
            cells = [f"{figures[key]['median']:.{0 if key == 'settle_calls' else 1}f} "
                     f"[{figures[key]['min']:.0f}-{figures[key]['max']:.0f}]" if key in figures else "-"
                     for key, _ in STARTUP]
            lines.append(f"{row['combo']:20}{variant:12}" + "".join(f"{cell:>22}" for cell in cells))
    return "\n".join(lines)


def report_steps(rows: list[dict]) -> str:
    """Where a call's time goes, step by step (wall clock, median over rounds)."""
    lines = [f"{'layout:backend':20}{'step':34}{'flashinfer us':>14}{'fi_compat us':>14}  (wall clock, exclusive "
             "time per call, median over rounds; instrumented: the steps' sum with their clock reads)"]
    for row in rows:
        if "error" in row:
            continue
        for label in STEP_LABELS:
            mine = row["steps_us"]["fi_compat"][label]["median"]
            lines.append(f"{row['combo']:20}{label:34}{row['steps_us']['flashinfer'][label]['median']:14.1f}{mine:14.1f}")
        lines.append(f"{row['combo']:20}{'instrumented total':34}{row['instrumented_us']['flashinfer']['median']:14.1f}"
                     f"{row['instrumented_us']['fi_compat']['median']:14.1f}")
    return "\n".join(lines)


def _batch_sizes(text: str) -> list[int]:
    try:
        low, high = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}; accepted: LOW:HIGH, e.g. 8:64") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: need 1 <= LOW <= HIGH")
    return [low, high]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", choices=HOSTS, default="cpu")
    parser.add_argument("--combos", default=",".join(COMBOS), help=f"layout:backend,... (default {','.join(COMBOS)})")
    parser.add_argument("--rounds", type=int, default=6,
                        help="rounds of one process per combination and variant (AB, BA, ...)")
    parser.add_argument("--steps", type=int, default=1000, help="timed calls per combination and process")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls after the first (start-up figures)")
    parser.add_argument("--settle-seconds", type=float, default=1.0,
                        help="then new lengths decoded until this long after the first call, before timing "
                             "(fi_compat's runtime watch spends its start-up allowance there; default 1.0)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None,
                        help="run every worker on one fixed core (default: when 4 or more cores are available)")
    parser.add_argument("--batch-sizes", type=_batch_sizes, default=[8, 64], metavar="LOW:HIGH")
    parser.add_argument("--context", type=int, default=131_072)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=CLOCKS, default=None,
                        help="clock of the ratio and targets (default: cpu with --host cpu, wall with --host cuda)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1 or args.rounds < 1:
        parser.error("--warmup, --steps and --rounds must each be at least 1")
    combos = [c.strip() for c in args.combos.split(",") if c.strip()]
    from fi_compat.workload.engine_model import BACKENDS
    from fi_compat.workload.engines import LAYOUTS

    for combo in combos:
        layout, _, backend = combo.partition(":")
        if layout not in LAYOUTS or backend not in BACKENDS:
            parser.error(f"--combos: {combo!r}; accepted: LAYOUT:BACKEND with LAYOUT in {', '.join(LAYOUTS)} "
                         f"and BACKEND in {', '.join(BACKENDS)}")
    clock = args.clock or ("cpu" if args.host == "cpu" else "wall")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = args.pin if args.pin is not None else len(cores) >= 4
    options = {"host": args.host, "combos": combos, "steps": args.steps, "warmup": args.warmup,
               "settle_seconds": args.settle_seconds,
               "batch_sizes": args.batch_sizes, "context": args.context, "seed": args.seed,
               "cpu": cores[-1] if pin and cores else None}
    load_before = load_average()
    runs: dict[str, dict[str, list[dict]]] = {v: {combo: [] for combo in combos} for v in VARIANTS}
    release, outcome = None, None
    for round_index in range(args.rounds):
        for combo in combos:  # the two variants of a combination back to back: its ratio, side by side
            for variant in (VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]):
                done = spawn(variant, combo, options)
                runs[variant][combo].append(done["result"])
                release, outcome = done["flashinfer"], done.get("outcome", outcome)
    rows, all_met = summarise(runs, combos, clock)
    print(f"flashinfer {release}, --host {args.host}, {args.rounds} rounds x {args.steps} timed calls per "
          f"combination, batch sizes {args.batch_sizes[0]}-{args.batch_sizes[1]}, per-batch max_seq_len up to "
          f"{args.context:,}, fi_compat {outcome}; {load_before} before, {load_average()} after")
    print(report_startup(rows))
    print()
    print(report(rows, clock))
    print()
    print(report_steps(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"flashinfer": release, "options": options, "clock": clock, "load_before": load_before,
                       "load_after": load_average(), "rows": rows, "runs": runs}, handle, indent=2)
    return 0 if all_met else 1


if __name__ == "__main__":
    if "--worker" in sys.argv:
        request = json.loads(sys.stdin.read())
        sys.stdout.write(json.dumps(run_worker(request["variant"], request["combo"], request["options"])) + "\n")
        raise SystemExit(0)
    raise SystemExit(main())
