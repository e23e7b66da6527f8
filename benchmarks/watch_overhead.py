"""Host time the runtime watch (fi_compat.watch) adds to the decode host path, in each of its states.

    python benchmarks/watch_overhead.py [--calls N] [--rounds R] [--layout engine:backend]

Needs torch and flashinfer (CPU shim).  One engine's call (vLLM's, backend auto, by
default) on distinct max_seq_len values, in alternating blocks of ``--calls`` calls, medians
of ``--rounds`` blocks per state, never under tracemalloc.  Each block installs afresh:

``default``   ``install()`` with the defaults on the installed release.  On a verified release
              the watch does not exist (``FI_COMPAT_WATCH=auto``): the baseline of the rows below.
``walking``   the watch forced (``FI_COMPAT_WATCH=bound``) while it walks flashinfer's modules
              (:data:`~fi_compat.watch.records.WALK_DUTY`), its start-up allowance already spent.
``reading``   the same once both walks are complete (done before the block, untimed): the
              readings of every container (:data:`~fi_compat.watch.records.READ_DUTY`).
``retired``   the same once it has retired (retired before the block): what it costs when its
              work is done (nothing of it is left in the call path).

For each state: wall and CPU time per call, the CPU ratio to ``default`` (adjacent blocks, so the
machine's drift cancels), and where the added time goes, which adds up: the watch's own steps (its
account, per call) and the rest (the decode tick's pass-through, and what the steps' reading does
to the caches), whose sum is the measured difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _bench_common import load_average, write_json

STATES = ("default", "walking", "reading", "retired")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per block (default 4000)")
    parser.add_argument("--rounds", type=int, default=5, help="blocks per state (default 5)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--layout", default="vllm:auto", help="engine:backend (default vllm:auto)")
    args = parser.parse_args()

    import torch

    import fi_compat
    from fi_compat import watch
    from fi_compat.watch import records, state
    from fi_compat.workload import cpu_host, workload

    with cpu_host() as host:
        import collections

        import flashinfer.mla

        host.recorder.launches = collections.deque(maxlen=2)
        layout, backend = args.layout.split(":")
        inputs = workload.make_inputs(torch, layout, batch=4, width=8192, page_size=64, num_pages=64)
        counter = iter(range(10**9))

        def prepare(name: str) -> None:
            os.environ["FI_COMPAT_WATCH"] = "auto" if name == "default" else "bound"
            fi_compat.uninstall()
            fi_compat.install()
            current = watch.current()
            if current is None:
                return
            current.spent = records.STARTUP_ALLOWANCE_S  # the allowance already spent: the steady pace
            if name in ("reading", "retired"):
                with current.busy:  # as a step holds it: a collection meanwhile skips its own step
                    while current.walks < 2:  # both walks, untimed
                        current._walk(current.clock() + 10.0)
                    current.phase = state.READING
            if name == "retired":
                with current.busy:
                    current.retire()

        def block(name: str) -> dict:
            prepare(name)
            before = (watch.report() or {}).get("spent_s", 0.0)
            mla = flashinfer.mla
            started, started_cpu = time.perf_counter(), time.thread_time()
            for _ in range(args.calls):
                # by the module's attribute at each call, as an engine's module-level name is read
                workload.call(layout, mla.trtllm_batch_decode_with_kv_cache_mla, inputs,
                              1 + (next(counter) * 7919) % 524287, backend)
            wall, cpu = time.perf_counter() - started, time.thread_time() - started_cpu
            account = watch.report() or {}
            return {"wall_us": wall / args.calls * 1e6, "cpu_us": cpu / args.calls * 1e6,
                    "steps_us": (account.get("spent_s", 0.0) - before) / args.calls * 1e6,
                    "tick": account.get("decode_tick", "none"), "phase": account.get("phase", "-")}

        block("default")  # warm-up: first calls compile and fill flashinfer's fixed caches
        print(f"load: {load_average()}; {args.calls} calls per block, {args.rounds} blocks per state; "
              f"flashinfer {flashinfer.__version__}, {args.layout}")
        runs: dict[str, list[dict]] = {name: [] for name in STATES}
        for _ in range(args.rounds):
            for name in STATES:
                runs[name].append(block(name))
        base = runs["default"]
        figures: dict = {"layout": args.layout, "calls": args.calls, "rounds": args.rounds, "load": load_average(),
                         "flashinfer": flashinfer.__version__}
        for name in STATES:
            blocks = runs[name]
            ratios = sorted(b["cpu_us"] / a["cpu_us"] for a, b in zip(base, blocks))
            cpu = statistics.median(b["cpu_us"] for b in blocks)
            wall = statistics.median(b["wall_us"] for b in blocks)
            added = cpu - statistics.median(a["cpu_us"] for a in base)
            steps = statistics.median(b["steps_us"] for b in blocks)
            ticks = "/".join(sorted({b["tick"] for b in blocks}))
            phases = "/".join(sorted({b["phase"] for b in blocks}))
            print(f"{name:8s} phase {phases:8s} tick {ticks:9s} wall {wall:7.1f} us/call, CPU {cpu:7.1f} us/call, "
                  f"CPU ratio to default {statistics.median(ratios):.4f} (range {ratios[0]:.4f}-{ratios[-1]:.4f}); "
                  f"added {added:+.2f} us/call = the watch's steps {steps:.2f} + the rest {added - steps:+.2f}")
            figures[name] = {"wall_us": wall, "cpu_us": cpu, "ratio_cpu": statistics.median(ratios),
                             "ratio_range": [ratios[0], ratios[-1]], "added_us": added, "steps_us": steps,
                             "rest_us": added - steps, "decode_tick": ticks, "phase": phases}
        print(f"duty cycles: walking {records.WALK_DUTY:.1%}, reading {records.READ_DUTY:.1%} "
              f"(+ readings of the decode path's containers within {records.HOT_DUTY:.2%})")
        fi_compat.uninstall()
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
