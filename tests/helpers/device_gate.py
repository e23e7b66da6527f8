"""What the device under the tests can run: the one gate for tests that need a
backend of flashinfer's MLA decode or a compute capability.

The device is the GPU's on the GPU matrix (``FI_COMPAT_MATRIX_PLATFORM=gpu``)
and the CPU-host shim's elsewhere (``FI_COMPAT_SHIM_CAPABILITY``: SM100 by
default, ``9.0`` for the SM90 of the H100/H200 the GPU matrix runs on), so a
CPU run with the SM90 shim skips, and fails, where the GPU matrix would.

flashinfer's decode resolves backend ``"auto"`` by the compute capability
alone, the same way on every release 0.6.13-0.7.4 (``trtllm_batch_decode_with_
kv_cache_mla``: ``cc[0] == 12`` with a sparse top-k -> ``"sparse"``; any other
``cc[0] != 10`` -> ``"xqa"``; on SM10x it stays ``"auto"`` and the autotuner
picks trtllm-gen or cute-dsl), and refuses ``"cute-dsl"`` below SM100.
tests/matrix/test_device_gate.py checks both against the installed release on
whatever device the run has: if a release resolves differently, the gate's
own test fails, not the tests it gates.

Cheap: reads the environment, or torch's device query on the GPU matrix;
imports no flashinfer.  Raises ``pytest.UsageError`` for a shim capability the
shim does not present.
"""

from __future__ import annotations

import os
from typing import Optional

import pytest

from fi_compat.workload import shim_device

#: Where the MLA decode kernels exist (trtllm-gen and cute-dsl cubins): B200/B300.
MLA_KERNEL_CAPABILITIES = ((10, 0), (10, 3))
#: The backends ``"auto"`` may pick, by what it resolves to.
AUTOTUNED = "trtllm-gen or cute-dsl (autotuned)"


def on_gpu_matrix() -> bool:
    return os.environ.get("FI_COMPAT_MATRIX_PLATFORM", "cpu").strip().lower() == "gpu"


def capability() -> tuple[int, int]:
    """The compute capability flashinfer sees in this run: the GPU's on the GPU
    matrix, else the CPU-host shim's."""
    if on_gpu_matrix():
        import torch

        if torch.cuda.is_available():
            return tuple(torch.cuda.get_device_capability(0))  # type: ignore[return-value]
    try:
        return shim_device().capability
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def sm(cap: Optional[tuple[int, int]] = None) -> str:
    major, minor = capability() if cap is None else cap
    return f"SM{major}{minor}"


def describe() -> str:
    """The device in one line, for reports and skip reasons."""
    if on_gpu_matrix():
        return f"{sm()} (the GPU)"
    return f"{sm()} (CPU-host shim)"


def auto_resolves_to(cap: Optional[tuple[int, int]] = None, *, sparse: bool = False) -> str:
    """What flashinfer's decode runs for backend ``"auto"`` (or omitted) on ``cap``."""
    major, _ = capability() if cap is None else cap
    if major == 12 and sparse:
        return "sparse"
    return AUTOTUNED if major == 10 else "xqa"


def unavailable(backend: Optional[str], cap: Optional[tuple[int, int]] = None, *, sparse: bool = False) -> Optional[str]:
    """Why this device cannot run the decode host path of ``backend`` (``None``
    and ``"auto"``: the engines' omitted backend), or ``None`` where it can.
    trtllm-gen's host path runs on any device (its kernel-module loader is
    stubbed: the shim's recorder, or ``fi_compat.workload.loader_stub`` on the GPU)."""
    here = sm(cap)
    if backend in (None, "auto"):
        resolved = auto_resolves_to(cap, sparse=sparse)
        if resolved == AUTOTUNED:
            return None
        why = ("XQA MLA needs SM120/SM121" if resolved == "xqa" and not here.startswith("SM12")
               else "a kernel module the hosts do not stub, and no path fi_compat bounds")
        return (f"backend 'auto' resolves to {resolved.upper()} on {here} (flashinfer profiles trtllm-gen and "
                f"cute-dsl on SM100/SM103 only), and {why}: needs SM100/SM103")
    if backend == "cute-dsl" and (capability() if cap is None else cap)[0] < 10:
        return f"backend 'cute-dsl' needs SM100+ ({here} here)"
    return None


def require_backend(backend: Optional[str], *, sparse: bool = False) -> None:
    """Skip the calling test, with the reason, where this device cannot run ``backend``."""
    reason = unavailable(backend, sparse=sparse)
    if reason is not None:
        pytest.skip(reason)


def require_mla_kernel() -> None:
    """Skip where the MLA decode kernels do not exist (anything but SM100/SM103)."""
    if capability() not in MLA_KERNEL_CAPABILITIES:
        pytest.skip(f"needs SM100/SM103 ({sm()} here)")
