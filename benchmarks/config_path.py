"""Host cost of getting the MLA decode tuning config, per decode call.

    python benchmarks/config_path.py                     # CPU shim; needs torch + flashinfer
    python benchmarks/config_path.py --host cuda         # a CUDA machine (launches recorded)
    python benchmarks/config_path.py --breakdown         # where fi_compat's hit time goes

Calls flashinfer's ``_build_mla_decode_tuning_config`` exactly as the decode
path does (every parameter the installed release accepts, by keyword, real
tensors), unpatched and with fi_compat installed, alternating the two over
``--rounds`` rounds in one process, and prints per workload the medians over
rounds and the fi_compat/flashinfer ratio with its range over rounds.
Workloads: the same max_seq_len every call (flashinfer's best case), a
max_seq_len that changes every call (the case fi_compat exists for), and the
same with a cute-dsl runner (backend ``auto`` on the vLLM/SGLang layout, where
flashinfer also sizes the cute-dsl batch cap).  Target: ratio <= 0.25.

``--breakdown`` times the parts of one fi_compat hit: the Python call itself
(an empty function with the builder's signature, called the same way), the
key, the lock-free lookup.
"""

from __future__ import annotations

import argparse
import inspect
import itertools

from _bench_common import CLOCKS, HOSTS, flashinfer_host, load_average, per_call_us_both, spread, write_json

WORKLOADS = (
    ("same max_seq_len every call", ("trtllm-gen",), True),
    ("max_seq_len changes every call", ("trtllm-gen",), False),
    ("cute-dsl runner, max_seq_len changes", ("trtllm-gen", "cute-dsl"), False),
)


def builder_arguments(torch, builder, device, runner_names) -> dict:
    """Every parameter ``builder`` accepts, as the decode path passes them (keywords)."""
    from fi_compat.workload import workload

    t = workload.make_inputs(torch, "vllm", batch=4, width=2048, num_pages=1024, device=device)
    everything = dict(
        kv_cache=t.kv_cache, block_tables=t.block_tables, workspace_buffer=t.workspace_buffer,
        runner_names=list(runner_names), q_len=1, num_heads=workload.HEADS, kv_lora_rank=workload.KV_LORA_RANK,
        max_seq_len=4096, device=t.query.device, has_sparse_mla_top_k_lens=False, cute_dsl_impl="auto",
        sinks=None, enable_dcp=False, cp_world=1, cp_rank=0,
    )
    accepted = inspect.signature(builder).parameters
    return {name: value for name, value in everything.items() if name in accepted}


def measure(core, arguments: dict, repeat: bool, calls: int) -> dict[str, float]:
    build = core._build_mla_decode_tuning_config
    if repeat:
        return per_call_us_both(lambda: build(**arguments), calls)
    lengths = itertools.cycle(range(60_000, 61_000))  # a window of a growing batch maximum
    rest = {k: v for k, v in arguments.items() if k != "max_seq_len"}
    return per_call_us_both(lambda: build(max_seq_len=next(lengths), **rest), calls)


def breakdown(core, arguments: dict, calls: int) -> dict[str, float]:
    """Per-part cost of one fi_compat hit (cpu clock, us)."""
    import fi_compat
    from fi_compat.installing import installer
    from fi_compat.adapters.keys import BUILDER_SCALARS, builder_key_of

    fi_compat.install()
    build = core._build_mla_decode_tuning_config
    build(**arguments)
    cache = installer._state.installation.caches["builder"]
    parameters = inspect.signature(build).parameters
    defaults = {n: p.default for n, p in parameters.items() if p.default is not inspect.Parameter.empty}
    values = {**defaults, **arguments}
    scalars = tuple(values.get(name) for name in BUILDER_SCALARS)
    key = builder_key_of(values["kv_cache"], values["block_tables"], values["workspace_buffer"],
                         values["runner_names"], values["max_seq_len"], values["device"],
                         values.get("cute_dsl_impl"), values.get("sinks"), scalars)
    lookup = cache.lookup
    namespace: dict = {}
    # an empty function with the builder's parameter names: what the call alone costs
    exec(f"def empty({', '.join(f'{n}=None' for n in parameters)}):\n    return None", namespace)  # noqa: S102
    empty = namespace["empty"]
    parts = {
        "call with the builder's keywords, empty body": per_call_us_both(lambda: empty(**arguments), calls)["cpu"],
        "key (builder_key_of)": per_call_us_both(
            lambda: builder_key_of(values["kv_cache"], values["block_tables"], values["workspace_buffer"],
                                   values["runner_names"], values["max_seq_len"], values["device"],
                                   values.get("cute_dsl_impl"), values.get("sinks"), scalars), calls)["cpu"],
        "lock-free lookup (hit)": per_call_us_both(lambda: lookup(key), calls)["cpu"],
        "whole hit through the installed builder": per_call_us_both(lambda: build(**arguments), calls)["cpu"],
    }
    fi_compat.uninstall()
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", choices=HOSTS, default="cpu")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=CLOCKS, default=None,
                        help="clock of the headline ratio (default: cpu with --host cpu, wall with --host cuda)")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    clock = args.clock or ("cpu" if args.host == "cpu" else "wall")

    import torch

    import fi_compat

    with flashinfer_host(args.host):
        import flashinfer
        import flashinfer.mla._core as core

        device = torch.device("cuda") if args.host == "cuda" else None
        fi_compat.uninstall()
        results = {"flashinfer": flashinfer.__version__, "torch": torch.__version__, "host": args.host,
                   "clock": clock, "calls": args.calls, "rounds": args.rounds, "load": load_average(),
                   "workloads": {}}
        print(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, --host {args.host}, "
              f"{args.calls:,} calls x {args.rounds} rounds; {results['load']}")
        print(f"{'workload (' + clock + ' clock, us per call)':42}{'flashinfer':>12}{'fi_compat':>12}"
              f"{'ratio':>8}{'ratio range':>16}")
        for label, runners, repeat in WORKLOADS:
            arguments = builder_arguments(torch, core._build_mla_decode_tuning_config, device, runners)
            if "cute-dsl" in runners and "cute_dsl_impl" not in arguments:
                continue  # releases before 0.6.16 have no cute-dsl runner
            base, ours = [], []
            for _ in range(args.rounds):
                fi_compat.uninstall()
                base.append(measure(core, arguments, repeat, args.calls))
                fi_compat.install()
                ours.append(measure(core, arguments, repeat, args.calls))
            fi_compat.uninstall()
            row = {c: {"flashinfer": spread([b[c] for b in base]), "fi_compat": spread([o[c] for o in ours]),
                       "ratio": spread([o[c] / b[c] for b, o in zip(base, ours)])} for c in CLOCKS}
            results["workloads"][label] = row
            shown = row[clock]
            ratio = shown["fi_compat"]["median"] / shown["flashinfer"]["median"]
            print(f"{label:42}{shown['flashinfer']['median']:12.2f}{shown['fi_compat']['median']:12.2f}"
                  f"{ratio:8.2f}{shown['ratio']['min']:8.2f}-{shown['ratio']['max']:.2f}")
        if args.breakdown:
            arguments = builder_arguments(torch, core._build_mla_decode_tuning_config, device, ("trtllm-gen",))
            parts = breakdown(core, arguments, args.calls)
            results["breakdown_cpu_us"] = parts
            print("\nwhere one fi_compat hit goes (cpu clock, us per call):")
            for label, value in parts.items():
                print(f"  {label:48}{value:8.3f}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
