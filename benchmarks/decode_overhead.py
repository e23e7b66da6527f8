"""Host time fi_compat.mla_decode adds to a decode call.

    python benchmarks/decode_overhead.py        # needs torch + flashinfer; CPU shim

Two measurements, each side by side in one run (alternating, medians of 7):

1. isolated: ``mla_decode`` with flashinfer's function swapped for a no-op of
   the same signature, against calling that no-op directly; the difference is
   what the wrapper itself costs (argument mapping, gating, max_seq_len
   validation and policy).  Target: about 1 us or less.
2. end to end: TensorRT-LLM's call through ``mla_decode`` against calling
   flashinfer directly, on the real host path with a recorded launch.
"""

from __future__ import annotations

import argparse

from _bench_common import interleaved, per_call_us


def main() -> int:
    # no options: parsed so that --help prints the description instead of running
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    import torch

    import fi_compat
    from fi_compat.calls import call_api as decode_module
    from fi_compat.workload import cpu_host

    with cpu_host() as host:
        import flashinfer
        import flashinfer.mla

        batch, heads, rank, rope, page, width = 4, 128, 512, 64, 64, 2048
        q = torch.zeros(batch, 1, heads, rank + rope, dtype=torch.bfloat16)
        kv = torch.zeros(64, page, rank + rope, dtype=torch.bfloat16)
        ws = torch.zeros(1 << 20, dtype=torch.uint8)
        bt = torch.zeros(batch, 2, width, dtype=torch.int32)
        sl = torch.full((batch,), 1000, dtype=torch.int32)
        out = torch.zeros(batch, 1, heads, rank, dtype=torch.bfloat16)

        def trtllm(function):
            return lambda: function(q, kv, ws, 128, rank, rope, bt, sl, 1000, 0, out, 1.0, 1.0, None, None, False,
                                    backend="trtllm-gen", is_var_seq=True, uses_shared_paged_kv_idx=False,
                                    multi_ctas_kv_counter_buffer=None)

        fi_compat.install()
        direct = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
        trtllm(fi_compat.mla_decode)()  # builds the mapping

        # 1. isolated wrapper cost
        mapping = decode_module._mappings["decode"]
        real_function = mapping.function

        def noop(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim,
                 block_tables, seq_lens, max_seq_len, *args, **kwargs):
            return None

        mapping.function = noop
        try:
            calls = 200_000
            base, ours = interleaved(lambda: per_call_us(trtllm(noop), calls),
                                     lambda: per_call_us(trtllm(fi_compat.mla_decode), calls))
        finally:
            mapping.function = real_function
        print(f"flashinfer {flashinfer.__version__}; medians of 7 alternating rounds")
        print(f"isolated:   direct no-op {base:.3f} us, through mla_decode {ours:.3f} us, "
              f"added {ours - base:.3f} us per call")

        # 2. end to end
        calls = 2_000

        def end_to_end(function):
            def run() -> float:
                value = per_call_us(trtllm(function), calls)
                host.recorder.launches.clear()
                return value
            return run

        base, ours = interleaved(end_to_end(direct), end_to_end(fi_compat.mla_decode))
        print(f"end to end: flashinfer {base:.1f} us, mla_decode {ours:.1f} us, ratio {ours / base:.3f}")
        fi_compat.uninstall()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
