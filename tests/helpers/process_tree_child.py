"""The child of tests/test_run_command.py's process-tree test.

Run as ``fi-compat run -- python process_tree_child.py OUT_DIR``.  It reports
fi_compat's state (without importing torch or flashinfer), then starts a
grandchild with multiprocessing's *spawn* start method, the way SGLang, vLLM
and TensorRT-LLM start their tensor-parallel ranks.  The grandchild reports
the state before and after importing flashinfer under the CPU-host shim, then
runs TensorRT-LLM's decode call over distinct ``max_seq_len`` values and
measures flashinfer's own unbounded tuning-config memo; as a control it then
uninstalls fi_compat and runs more distinct lengths, which must grow that memo
by one entry each (so the measurement is live).

Each process writes OUT_DIR/<role>.json; the test asserts on those.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

# Run by path (sys.path[0] is tests/helpers), and so is its spawned grandchild:
# tests/ on the path makes the package `helpers` importable in both.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BOUNDED_LENGTHS = [4096 + 97 * i for i in range(24)]
CONTROL_LENGTHS = [20_000 + 131 * i for i in range(8)]


def report(out_dir: str, role: str, **facts: Any) -> None:
    existing = sys.modules.get("sitecustomize")
    facts.update(
        pid=os.getpid(),
        # set by the test's pre-existing sitecustomize, in this very process
        existing_sitecustomize_ran=getattr(existing, "RAN_IN_PID", None) == os.getpid(),
    )
    with open(os.path.join(out_dir, f"{role}.json"), "w", encoding="utf-8") as handle:
        json.dump(facts, handle)


def flashinfer_memo(core: Any) -> Any:
    """flashinfer's own ``functools.cache`` on the tuning config (``maxsize``
    None), under fi_compat's proxy or not; ``None`` on releases without it."""
    from fi_compat.model import specs

    function = getattr(core, specs.TUNING_CONFIG.name, None)
    while function is not None:
        cache_info = getattr(function, "cache_info", None)
        if cache_info is not None and cache_info().maxsize is None:
            return function
        function = getattr(function, "__wrapped__", None)
    return None


def grandchild(out_dir: str) -> None:
    import fi_compat
    from fi_compat.model import specs
    from fi_compat.workload import cpu_host

    from helpers.support import decode_inputs, trtllm_call

    state_before = fi_compat.status()["state"]
    with cpu_host() as host:
        import torch
        import flashinfer.mla

        state_after = fi_compat.status()["state"]
        core = sys.modules[specs.TUNING_CONFIG.module]
        decode = getattr(flashinfer.mla, specs.DECODE.name)
        tensors = decode_inputs(torch)
        memo = flashinfer_memo(core)

        def growth(lengths: list[int]) -> Any:
            start = None if memo is None else memo.cache_info().currsize
            launched = []
            for length in lengths:
                trtllm_call(decode, tensors, length)
                launched.append(host.launches[-1].max_seq_len)
            end = None if memo is None else memo.cache_info().currsize
            return (None if memo is None else end - start), launched

        bounded_growth, bounded_launched = growth(BOUNDED_LENGTHS)
        fi_compat.uninstall()
        control_growth, control_launched = growth(CONTROL_LENGTHS)
    report(out_dir, "grandchild", state_before=state_before, state_after=state_after,
           lengths=BOUNDED_LENGTHS, launched=bounded_launched, memo_growth=bounded_growth,
           control_lengths=CONTROL_LENGTHS, control_launched=control_launched, control_memo_growth=control_growth)


def main() -> None:
    out_dir = sys.argv[1]
    import fi_compat

    state = fi_compat.status()["state"]
    worker = multiprocessing.get_context("spawn").Process(target=grandchild, args=(out_dir,))
    worker.start()
    worker.join()
    report(out_dir, "child", state=state, heavy_modules=sorted(m for m in ("torch", "flashinfer") if m in sys.modules),
           grandchild_exitcode=worker.exitcode)


if __name__ == "__main__":
    main()
