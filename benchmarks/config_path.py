"""Host cost of getting the MLA decode tuning config, per decode call.

    python benchmarks/config_path.py            # needs torch + flashinfer; CPU shim

Calls flashinfer's ``_build_mla_decode_tuning_config`` exactly as the decode
path does (keywords, real tensors' shapes), unpatched and with fi_compat,
alternating the two several times in one process, and prints the medians and
the fi_compat/flashinfer ratio.  Two workloads: the same max_seq_len every
call (flashinfer's best case), and a serving-like max_seq_len that changes
every call (the case fi_compat exists for).  Target: ratio <= 0.25.
"""

from __future__ import annotations

import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from _common import interleaved, per_call_us  # noqa: E402


def main() -> int:
    import torch

    import fi_compat
    from fi_compat.testing import cpu_host

    with cpu_host():
        import flashinfer
        import flashinfer.mla._core as core

        arguments = dict(
            kv_cache=torch.zeros(64, 64, 576, dtype=torch.bfloat16),
            block_tables=torch.zeros(4, 2, 2048, dtype=torch.int32),
            workspace_buffer=torch.zeros(1 << 20, dtype=torch.uint8),
            runner_names=["trtllm-gen"], q_len=1, num_heads=128, kv_lora_rank=512,
            device=torch.device("cpu"),
        )
        lengths = itertools.cycle(range(60_000, 61_000))  # a window of a growing batch maximum
        calls = 20_000

        def measure(repeat: bool) -> float:
            build = core._build_mla_decode_tuning_config
            if repeat:
                return per_call_us(lambda: build(max_seq_len=4096, **arguments), calls)
            return per_call_us(lambda: build(max_seq_len=next(lengths), **arguments), calls)

        def unpatched(repeat: bool):
            def run() -> float:
                fi_compat.uninstall()
                return measure(repeat)
            return run

        def patched(repeat: bool):
            def run() -> float:
                fi_compat.install()
                return measure(repeat)
            return run

        print(f"flashinfer {flashinfer.__version__}, torch {torch.__version__}, {calls:,} calls x 7 rounds, medians")
        print(f"{'workload':34}{'flashinfer us':>15}{'fi_compat us':>15}{'ratio':>8}")
        for label, repeat in (("same max_seq_len every call", True), ("max_seq_len changes every call", False)):
            base, ours = interleaved(unpatched(repeat), patched(repeat))
            print(f"{label:34}{base:15.2f}{ours:15.2f}{ours / base:8.2f}")
        fi_compat.uninstall()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
