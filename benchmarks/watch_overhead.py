"""Host time the runtime watch (fi_compat.watch) adds to the decode host path.

    python benchmarks/watch_overhead.py [--calls N] [--rounds R]   # needs torch + flashinfer; CPU shim

vLLM's call (backend auto; ``--layout`` another) on distinct max_seq_len values, fi_compat
installed, with ``FI_COMPAT_WATCH=off`` against ``bound``, side by side in one
run (alternating blocks, medians of R), never under tracemalloc:

1. steady state: the watch with its start-up allowance already spent (what a
   serving process pays for as long as it runs): per call, off and on, and the ratio;
2. from install: a fresh install each block, so each "on" block pays the
   start-up allowance (the early, faster search that finds growth within the
   first distinct lengths): the amortised ratio over ``--calls`` calls, and
   the run length from which the total stays within 1 %.

Also prints the watch's own account of its steps (count, time, longest step:
the most it held the GIL at once).
"""

from __future__ import annotations

import argparse
import os
import statistics

from _bench_common import load_average, write_json


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per block (default 4000)")
    parser.add_argument("--rounds", type=int, default=5, help="blocks per side (default 5)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--layout", default="vllm:auto",
                        help="engine:backend (default vllm:auto; trtllm:trtllm-gen skips the builder on 0.7.4)")
    args = parser.parse_args()
    import time

    import torch

    import fi_compat
    from fi_compat import watch
    from fi_compat.workload import cpu_host, workload

    with cpu_host() as host:
        import collections

        import flashinfer.mla

        host.recorder.launches = collections.deque(maxlen=2)
        layout, backend = args.layout.split(":")
        inputs = workload.make_inputs(torch, layout, batch=4, width=8192, page_size=64, num_pages=64)
        counter = iter(range(10**9))

        def block(mode: str, steady: bool) -> tuple[float, dict]:
            os.environ["FI_COMPAT_WATCH"] = mode
            fi_compat.uninstall()
            fi_compat.install()
            if steady and watch.current() is not None:
                watch.current().spent = watch.STARTUP_ALLOWANCE_S  # the allowance already spent
            mla = flashinfer.mla
            started, started_cpu = time.perf_counter(), time.thread_time()
            for _ in range(args.calls):
                # by the module's attribute at each call, as an engine's module-level name is read
                workload.call(layout, mla.trtllm_batch_decode_with_kv_cache_mla, inputs,
                              1 + (next(counter) * 7919) % 524287, backend)
            account = watch.report() or {}
            own = account.get("spent_s", 0.0) - (watch.STARTUP_ALLOWANCE_S if steady else 0.0)
            account["own_share"] = own / (time.perf_counter() - started) if account else 0.0
            account["cpu_us"] = (time.thread_time() - started_cpu) / args.calls * 1e6
            return (time.perf_counter() - started) / args.calls * 1e6, account

        block("off", True)  # warm-up: first calls compile and fill flashinfer's fixed caches
        print(f"load: {load_average()}; {args.calls} calls per block, {args.rounds} blocks per side")
        figures: dict = {"layout": args.layout, "calls": args.calls, "rounds": args.rounds, "load": load_average()}
        for steady, title in ((True, "steady state (start-up allowance spent)"), (False, "from install")):
            off, on, off_cpu, on_cpu, accounts = [], [], [], [], []
            for _ in range(args.rounds):
                per_call, account = block("off", steady)
                off.append(per_call)
                off_cpu.append(account["cpu_us"])
                per_call, account = block("bound", steady)
                on.append(per_call)
                on_cpu.append(account["cpu_us"])
                accounts.append(account)
            pairs = sorted(y / x for x, y in zip(off_cpu, on_cpu))  # adjacent blocks: the machine's drift cancels
            quartiles = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
            a, b = statistics.median(off), statistics.median(on)
            ca, cb = statistics.median(off_cpu), statistics.median(on_cpu)
            spent = statistics.median(x["spent_s"] for x in accounts)
            longest = max(x["longest_step_ms"] for x in accounts)
            longest_cpu = max(x["longest_step_cpu_ms"] for x in accounts)
            steps = statistics.median(x["steps"] for x in accounts)
            own = statistics.median(x["own_share"] for x in accounts)
            ticks = sorted({x.get("decode_tick", "?") for x in accounts})
            beats = statistics.median(x.get("heartbeats", 0) for x in accounts)
            print(f"{args.layout} {title}: decode tick {'/'.join(ticks)}, {beats:.0f} heartbeat steps per block; "
                  f"wall: off {a:.1f} us/call, watch on {b:.1f} us/call, ratio {b / a:.4f} "
                  f"({(b / a - 1) * 100:+.2f} %); CPU (thread_time): off {ca:.1f}, on {cb:.1f} us/call, "
                  f"ratio {cb / ca:.4f} ({(cb / ca - 1) * 100:+.2f} %); watch per block: {steps:.0f} steps, "
                  f"{spent * 1e3:.1f} ms ({own:.2%} of the block's time), "
                  f"longest step {longest:.2f} ms wall, {longest_cpu:.2f} ms CPU; CPU ratio of adjacent blocks: "
                  f"median {statistics.median(pairs):.4f}, quartiles {quartiles[0]:.4f}-{quartiles[2]:.4f}")
            figures["steady" if steady else "from_install"] = {
                "off_us": a, "on_us": b, "off_cpu_us": ca, "on_cpu_us": cb, "ratio_cpu": cb / ca,
                "adjacent_median": statistics.median(pairs), "adjacent_quartiles": [quartiles[0], quartiles[2]],
                "decode_tick": ticks, "heartbeat_steps": beats, "steps": steps, "own_share": own,
                "longest_step_ms": longest, "longest_step_cpu_ms": longest_cpu}
            if not steady:
                run = args.calls * a / 1e6
                within = watch.STARTUP_ALLOWANCE_S / (0.01 - watch.DUTY)
                print(f"  amortised over {args.calls} calls ({run:.2f} s of host path); the start-up allowance "
                      f"({watch.STARTUP_ALLOWANCE_S * 1e3:.0f} ms at most) plus {watch.DUTY:.1%} stays within 1 % "
                      f"from {within:.0f} s of decoding on")
        fi_compat.uninstall()
    write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
