#!/usr/bin/env python3
"""Host-memory growth per distinct ``max_seq_len``, without and with fi_compat.

Runs the installed flashinfer release's real MLA decode host path and prints
(or writes) one JSON object.  Two call sites are measured, each in two phases:

``decode``
    ``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` called the way
    TensorRT-LLM calls it (``backend="trtllm-gen"``, ``is_var_seq=True``,
    ``uses_shared_paged_kv_idx=False``), kernel launch stubbed;
``builder``
    ``flashinfer.mla._core._build_mla_decode_tuning_config`` called directly
    (what every autotuned path, ``backend="auto"`` included, goes through).

Phase ``without`` runs on flashinfer as installed; phase ``with`` runs after
``fi_compat.install()`` in a fresh interpreter.  Each measurement makes ``warmup``
calls with distinct ``max_seq_len`` values (so one-time allocations and a
bounded cache filling up are not counted), then ``distinct`` more calls with
new distinct values, and reports the growth of Python-heap memory
(``tracemalloc``, after ``gc.collect()``) over the second stretch divided by
``distinct``: the steady-state bytes each new ``max_seq_len`` costs.  An
unbounded cache shows up as a constant positive number; a bounded one as ~0.

``--device cpu`` runs under fi_compat's CPU shim (``fi_compat.workload.cpu_host``,
an SM100 description); ``--device cuda`` uses real CUDA tensors and the real
device, with only the trtllm-gen kernel-module loader stubbed
(``fi_compat.workload.loader_stub``), so it works on any CUDA device.

    python scripts/measure_growth.py --device cpu --json growth.json
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import subprocess
import sys
import tracemalloc
from typing import Any, Callable

PAGE_SIZE = 32
PAGES_PER_SEQ = 512  # block-table capacity 16384 tokens: every measured value stays below it
NUM_HEADS = 128
KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
QK_NOPE_HEAD_DIM = 128
SEQ_LEN = 64


def host(device: str) -> Any:
    # The recorder keeps one launch (tensors and ints): more would show up as growth.
    from fi_compat.workload.hosts import flashinfer_host

    return flashinfer_host(device, keep=1)


def make_inputs(torch: Any, device: str) -> dict[str, Any]:
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    num_pages = PAGES_PER_SEQ
    return dict(
        query=torch.zeros(1, 1, NUM_HEADS, KV_LORA_RANK + QK_ROPE_HEAD_DIM, dtype=torch.bfloat16, device=dev),
        kv_cache=torch.zeros(num_pages, PAGE_SIZE, KV_LORA_RANK + QK_ROPE_HEAD_DIM, dtype=torch.bfloat16, device=dev),
        workspace_buffer=torch.zeros(16 << 20, dtype=torch.uint8, device=dev),
        # TensorRT-LLM layout (uses_shared_paged_kv_idx=False): [batch, 2, pages]
        block_tables=torch.arange(PAGES_PER_SEQ, dtype=torch.int32, device=dev).repeat(1, 2, 1),
        seq_lens=torch.full((1,), SEQ_LEN, dtype=torch.int32, device=dev),
        device=dev,
    )


def decode_call(flashinfer: Any, t: dict[str, Any]) -> Callable[[int], Any]:
    fn = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla

    def call(max_seq_len: int) -> Any:
        return fn(
            t["query"], t["kv_cache"], t["workspace_buffer"], QK_NOPE_HEAD_DIM, KV_LORA_RANK,
            QK_ROPE_HEAD_DIM, t["block_tables"], t["seq_lens"], max_seq_len,
            backend="trtllm-gen", is_var_seq=True, uses_shared_paged_kv_idx=False,
        )

    return call


def builder_call(core: Any, t: dict[str, Any]) -> Callable[[int], Any]:
    from fi_compat.workload.builder import builder_arguments

    def call(max_seq_len: int) -> Any:
        # Looked up per call: fi_compat.install() replaces the module attribute.
        fn = core._build_mla_decode_tuning_config
        accepted = inspect.signature(fn).parameters
        kwargs = builder_arguments(kv_cache=t["kv_cache"], block_tables=t["block_tables"],
                                   workspace_buffer=t["workspace_buffer"], max_seq_len=max_seq_len, device=t["device"])
        return fn(**{k: v for k, v in kwargs.items() if k in accepted or "kwargs" in accepted})

    return call


def measure(call: Callable[[int], Any], start: int, warmup: int, distinct: int) -> dict[str, Any]:
    values = iter(range(start, start + warmup + distinct))
    for _ in range(warmup):
        call(next(values))
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(distinct):
        call(next(values))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    # memory only: a time taken while tracemalloc traces would measure the tracing
    # (host time is fi-compat soak's timed pass and benchmarks/, never traced)
    return {"bytes_per_distinct": round((after - before) / distinct, 1), "calls": warmup + distinct}


def run_phase(device: str, phase: str, warmup: int, distinct: int) -> dict[str, Any]:
    """One phase in this process: ``without`` (flashinfer as installed) or
    ``with`` (after ``fi_compat.install()``)."""
    import torch

    result: dict[str, Any] = {"errors": {}}
    with host(device):
        import flashinfer
        import flashinfer.mla  # noqa: F401
        from flashinfer.mla import _core

        import fi_compat

        result["flashinfer"] = getattr(flashinfer, "__version__", None)
        if phase == "with":
            status = fi_compat.install()
            result["fi_compat"] = {"state": status.get("state"), "outcome": status.get("outcome"),
                                   "patched": status.get("patched")}
        t = make_inputs(torch, device)
        sites = {"decode": decode_call(flashinfer, t), "builder": builder_call(_core, t)}
        tracemalloc.start()
        offset = SEQ_LEN  # each site gets its own range of distinct values
        for site, call in sites.items():
            key = f"{site}_{phase}"
            try:
                result[key] = measure(call, offset, warmup, distinct)
            except Exception as exc:  # recorded; the exit status says so
                result[key] = None
                result["errors"][key] = f"{type(exc).__name__}: {exc}"[:500]
            offset += warmup + distinct
        tracemalloc.stop()
        fi_compat.uninstall()
    return result


def run(device: str, warmup: int, distinct: int) -> dict[str, Any]:
    """Both phases, each in a fresh interpreter (flashinfer's caches from one
    phase would otherwise slow or inflate the other)."""
    result: dict[str, Any] = {"device": device, "warmup": warmup, "distinct": distinct, "errors": {}}
    for phase in ("without", "with"):
        proc = subprocess.run(
            [sys.executable, __file__, "--device", device, "--warmup", str(warmup),
             "--distinct", str(distinct), "--phase", phase],
            capture_output=True, text=True,
        )
        try:
            part = json.loads(proc.stdout)
        except ValueError:
            tail = (proc.stderr or proc.stdout)[-800:]
            result["errors"][phase] = f"phase {phase} exited {proc.returncode}: {tail}"
            continue
        result["errors"].update(part.pop("errors"))
        result.update(part)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--warmup", type=int, default=400,
                        help="distinct values before measuring (more than the ladder's keys at this range)")
    parser.add_argument("--distinct", type=int, default=800, help="distinct values measured")
    parser.add_argument("--json", help="write the result here (default: stdout)")
    parser.add_argument("--phase", choices=("without", "with"), help="run one phase in this process")
    args = parser.parse_args(argv)
    if (args.warmup + args.distinct) * 2 + SEQ_LEN > PAGES_PER_SEQ * PAGE_SIZE:
        parser.error("warmup + distinct too large for the block-table capacity")
    if args.phase:
        result = run_phase(args.device, args.phase, args.warmup, args.distinct)
    else:
        result = run(args.device, args.warmup, args.distinct)
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
