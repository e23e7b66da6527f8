"""Which host flashinfer's MLA decode path runs on, chosen in one place.

``cpu``
    :func:`fi_compat.workload.cpu_host`: torch's device queries answered as an
    SM100, or as the SM90 the GPU matrix runs on (``capability="9.0"``, or
    ``$FI_COMPAT_SHIM_CAPABILITY`` where ``capability`` is ``None``), launches
    recorded (any machine, no GPU).
``cuda``
    The real CUDA device and tensors; only the trtllm-gen kernel-module loader
    is stubbed (:mod:`fi_compat.workload.loader_stub`), so flashinfer sees the
    device's own compute capability (the GPU matrix).
``cuda-as-sm100``
    The real CUDA device and tensors, flashinfer's compute-capability helper
    answering SM100 and ``cute.compile`` recording, so the cute-dsl and auto
    paths a B200 takes run on any CUDA device (the benchmarks' ``--host cuda``).

Every host yields an object with ``recorder`` (a :class:`LaunchRecorder`
keeping the last ``keep`` launches) and ``launches``.  Cost: the first use
imports torch and flashinfer (seconds).  Raises ``ImportError`` without them,
``ValueError`` for an unknown kind or capability, and for a ``capability``
given with a CUDA kind (the device's own answers it), ``RuntimeError`` for a
CUDA kind with no CUDA device.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from . import SHIM_DEVICES, CpuHost, LaunchRecorder, cpu_host

HOSTS = ("cpu", "cuda", "cuda-as-sm100")


class LoaderHost:
    """What the ``cuda`` host yields: the same ``recorder`` / ``launches``
    interface as :class:`fi_compat.workload.CpuHost`, no shim."""

    def __init__(self, recorder: LaunchRecorder) -> None:
        self.recorder = recorder

    @property
    def launches(self) -> Any:
        return self.recorder.launches


def _require_cuda(kind: str) -> None:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"host {kind!r} needs a CUDA device")


@contextlib.contextmanager
def flashinfer_host(kind: str = "cpu", *, keep: int = 4096, capability: Optional[str] = None) -> Iterator[Any]:
    """Import flashinfer on host ``kind`` (one of :data:`HOSTS`) and record its
    launches; everything patched is restored on exit (flashinfer stays imported).
    ``capability`` picks the ``cpu`` host's device (see :func:`cpu_host`)."""
    if kind not in HOSTS:
        raise ValueError(f"host {kind!r}; accepted: {', '.join(HOSTS)}")
    if kind == "cpu":
        with cpu_host(keep=keep, capability=capability) as host:
            yield host
        return
    if capability is not None:
        raise ValueError(
            f"host {kind!r} answers its device's own capability (or SM100); capability={capability!r} "
            "is for the 'cpu' host"
        )
    _require_cuda(kind)
    if kind == "cuda":
        from .loader_stub import stub_trtllm_gen_loader

        with stub_trtllm_gen_loader(LaunchRecorder(keep=keep)) as recorder:
            yield LoaderHost(recorder)
        return
    shim = CpuHost(keep=keep, device=SHIM_DEVICES["10.0"])
    try:
        shim.patch_cute_compile()
        shim.patch_flashinfer()
        yield shim
    finally:
        shim.restore()


__all__ = ["HOSTS", "LoaderHost", "flashinfer_host"]
