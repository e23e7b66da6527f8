"""Run real flashinfer's MLA host path on a machine without a GPU.

``import flashinfer`` asks CUDA for device properties at import time, and the
MLA decode path checks the compute capability and loads the trtllm-gen kernel
module.  :func:`cpu_host` answers the first two as one of :data:`SHIM_DEVICES`
(cute-dsl's ``get_num_sm`` reads the same answer) and records launches instead
of making them, for every backend:

* trtllm-gen: the kernel-module loader returns a :class:`LaunchRecorder`;
* cute-dsl (``backend="cute-dsl"``, or ``"auto"`` with shared K/V page
  indices): ``cutlass.cute.compile`` returns a kernel that records its call
  (the CuTe-DSL JIT would take seconds per configuration, and its launch
  rejects CPU tensors); ``torch.cuda.is_current_stream_capturing`` answers
  ``False`` (a CPU build of torch raises there).

The device is ``10.0`` (default; B200-like, 148 SMs: ``"auto"`` profiles
trtllm-gen and cute-dsl) or ``9.0`` (H100/H200, 132 SMs, the GPU matrix's
devices: flashinfer resolves ``"auto"`` to XQA, which needs SM120, and refuses
cute-dsl, as on the device), chosen by ``cpu_host(capability=...)`` or else by
``$FI_COMPAT_SHIM_CAPABILITY`` (which ``fi_cpu_host`` and ``tests/matrix``
follow).  The shim empties flashinfer's cached device queries as it starts and ends.

Everything up to the launch -- argument checks, the tuning-config builder and
the cute-dsl workspace sizers, ``AutoTuner.choose_one``, the runner, the
cute-dsl kernel object and its compile-cache key -- is the real code of
whichever release is installed.

Use it in your own CI::

    from fi_compat.workload import cpu_host

    with cpu_host() as host:
        import flashinfer.mla
        flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(...)
        assert host.launches[-1].max_seq_len == 4096

or with pytest, the ``fi_cpu_host`` fixture (installed as a pytest plugin).

Limits: on a real CUDA machine the shim is not needed and should not be used
(``gpu_matrix`` runs without it).  flashinfer stays imported after the
context exits; torch's functions and flashinfer's attributes are restored.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterator, Optional

SM100_CAPABILITY = (10, 0)
SM100_SM_COUNT = 148
SM90_CAPABILITY = (9, 0)
SM90_SM_COUNT = 132

#: Chooses the shim's device where ``cpu_host`` is given none: ``9.0`` or ``10.0`` (unset or empty: ``10.0``).
CAPABILITY_ENV = "FI_COMPAT_SHIM_CAPABILITY"


@dataclass(frozen=True)
class ShimDevice:
    """What the shim answers for ``torch.cuda.get_device_properties`` and
    flashinfer's ``get_compute_capability``."""

    name: str
    capability: tuple[int, int]
    multi_processor_count: int
    total_memory: int
    l2_cache_size: int

    def properties(self) -> SimpleNamespace:
        major, minor = self.capability
        sms, memory, l2 = self.multi_processor_count, self.total_memory, self.l2_cache_size
        return SimpleNamespace(name=self.name, major=major, minor=minor, multi_processor_count=sms, total_memory=memory,
                               warp_size=32, L2_cache_size=l2, max_threads_per_multi_processor=2048)  # fmt: skip


#: The devices the shim can present, by ``"major.minor"``: the B200 class the
#: MLA kernels need, and the H100/H200 class the GPU matrix runs on.
SHIM_DEVICES = {
    "10.0": ShimDevice("fi_compat SM100 shim", SM100_CAPABILITY, SM100_SM_COUNT, 192 << 30, 126 << 20),
    "9.0": ShimDevice("fi_compat SM90 shim (H100/H200)", SM90_CAPABILITY, SM90_SM_COUNT, 80 << 30, 50 << 20),
}
DEFAULT_SHIM_CAPABILITY = "10.0"


def shim_device(capability: "str | tuple[int, int] | None" = None) -> ShimDevice:
    """The device for ``capability`` (``"9.0"``, ``(9, 0)``, ...); ``None`` reads
    :data:`CAPABILITY_ENV` (unset or empty: SM100).  Raises ``ValueError``
    naming the accepted values for any other; reads only the environment."""
    source = "capability"
    if capability is None:
        capability, source = os.environ.get(CAPABILITY_ENV, "").strip() or DEFAULT_SHIM_CAPABILITY, CAPABILITY_ENV
    key = ".".join(str(part) for part in capability) if isinstance(capability, tuple) else str(capability).strip()
    if key not in SHIM_DEVICES:
        raise ValueError(f"{source}={capability!r}: the CPU-host shim presents 10.0 (SM100) or 9.0 (SM90)")
    return SHIM_DEVICES[key]


#: flashinfer functions the shim replaces, in every flashinfer module that
#: bound them (``from ..utils import get_compute_capability`` makes a copy of
#: the name per module, so replacing only the defining module is not enough).
CAPABILITY_FUNCTION = "get_compute_capability"
LOADER_FUNCTION = "get_trtllm_gen_fmha_module"
CUTE_MODULE = "cutlass.cute"
#: flashinfer's device queries kept per device by ``functools.cache``.
DEVICE_QUERIES = (
    ("flashinfer.utils", "get_device_properties"),
    ("flashinfer.utils", "get_compute_capability"),
    ("flashinfer.utils", "get_device_sm_count"),
    ("flashinfer.cute_dsl.utils", "get_num_sm"),
)


@dataclass
class Launch:
    """One recorded kernel launch: the loader attribute called and its arguments."""

    function: str
    args: tuple
    kwargs: dict

    @property
    def max_seq_len(self) -> Optional[int]:
        """``max_seq_len`` as passed to ``trtllm_paged_attention_decode``.

        Every release 0.6.13-0.7.4 passes ``(..., block_tables, seq_lens,
        max_q_len, max_seq_len, bmm1_scale, ...)``: the second plain ``int``
        among the positional arguments (tensors and ``None`` come before it)."""
        ints = [a for a in self.args if type(a) is int]
        return ints[1] if len(ints) > 1 else None

    @property
    def max_q_len(self) -> Optional[int]:
        ints = [a for a in self.args if type(a) is int]
        return ints[0] if ints else None


class LaunchRecorder:
    """Stands in for the compiled trtllm-gen module: any attribute is a function
    that records its call and returns ``None``.

    Keeps the last ``keep`` launches (their arguments hold tensors, so an
    unbounded list would itself be a leak in a long soak) and counts them all
    in ``total``.
    """

    def __init__(self, keep: int = 4096) -> None:
        self.launches: deque[Launch] = deque(maxlen=keep)
        self.total = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self.launches.append(Launch(name, args, kwargs))
            self.total += 1

        record.__name__ = name
        return record

    def clear(self) -> None:
        self.launches.clear()


class RecordedKernel:
    """Stands in for a compiled CuTe-DSL kernel: each call is a :class:`Launch`
    named ``cute_dsl:<kernel class>``."""

    def __init__(self, recorder: LaunchRecorder, name: str) -> None:
        self.recorder = recorder
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.recorder.launches.append(Launch(self.name, args, kwargs))
        self.recorder.total += 1


class CpuHost:
    """The running shim: ``launches`` and ``recorder`` for assertions."""

    def __init__(self, keep: int = 4096, device: Optional[ShimDevice] = None) -> None:
        self.device = device if device is not None else SHIM_DEVICES[DEFAULT_SHIM_CAPABILITY]
        self.recorder = LaunchRecorder(keep=keep)
        self.active = True
        self._torch_saved: list[tuple[Any, str, Any]] = []
        self._flashinfer_saved: list[tuple[Any, str, Any]] = []
        self._cute_saved: list[tuple[Any, str, Any]] = []

    @property
    def launches(self) -> "deque[Launch]":
        return self.recorder.launches

    # -- torch side (before flashinfer is imported)
    def patch_torch(self) -> None:
        import torch

        properties, capability = self.device.properties(), self.device.capability
        for name, value in (
            ("get_device_properties", lambda device=None: properties),
            ("get_device_capability", lambda device=None: capability),
            ("is_current_stream_capturing", lambda: False),
        ):
            self._torch_saved.append((torch.cuda, name, getattr(torch.cuda, name)))
            setattr(torch.cuda, name, value)

    # -- CuTe DSL (imported lazily by flashinfer's cute-dsl path)
    def patch_cute_compile(self) -> None:
        """Record cute-dsl launches: ``cutlass.cute.compile`` is replaced when
        (and if) flashinfer first imports it, so the shim imports nothing heavy.
        The hook is fi_compat's own (:mod:`fi_compat.lookup.import_hooks`), not
        wrapt's, whose finder can hang an import racing another thread's."""
        from ..lookup import import_hooks
        from ..lookup.modules import loaded

        host = self

        def on_import(cute: Any) -> None:
            if not host.active or any(owner is cute for owner, _, _ in host._cute_saved):
                return

            def compile_recorder(kernel: Any, *args: Any, **kwargs: Any) -> RecordedKernel:
                return RecordedKernel(host.recorder, f"cute_dsl:{type(kernel).__name__}")

            host._cute_saved.append((cute, "compile", cute.compile))
            cute.compile = compile_recorder

        import_hooks.on_import(CUTE_MODULE, on_import)
        cute = loaded(CUTE_MODULE)
        if cute is not None:
            on_import(cute)

    # -- flashinfer side (after it is imported)
    def patch_flashinfer(self) -> None:
        import flashinfer  # noqa: F401  (import under the torch shim)
        import flashinfer.mla  # noqa: F401

        recorder = self.recorder
        answer = self.device.capability
        _forget_device_queries()

        def capability(device: Any = None) -> tuple[int, int]:
            return answer

        def loader(*args: Any, **kwargs: Any) -> LaunchRecorder:
            return recorder

        replacements = {CAPABILITY_FUNCTION: capability, LOADER_FUNCTION: loader}
        for module_name, module in sys.modules.copy().items():
            if module is None or not (module_name == "flashinfer" or module_name.startswith("flashinfer.")):
                continue
            namespace = getattr(module, "__dict__", {})
            for attribute, replacement in replacements.items():
                original = namespace.get(attribute)
                if original is None or not callable(original):
                    continue
                self._flashinfer_saved.append((module, attribute, original))
                setattr(module, attribute, replacement)

    def restore(self) -> None:
        self.active = False
        for owner, name, original in reversed(self._cute_saved + self._flashinfer_saved + self._torch_saved):
            setattr(owner, name, original)
        self._cute_saved.clear()
        self._flashinfer_saved.clear()
        self._torch_saved.clear()
        _forget_device_queries()


def _forget_device_queries() -> None:
    """Empty flashinfer's cached device queries (``functools.cache`` on
    ``flashinfer.utils.get_device_properties`` and friends, keyed by device), so
    they answer for the device presented now, not the one first asked."""
    for module, name in DEVICE_QUERIES:
        cache_clear = getattr(getattr(sys.modules.get(module), name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()


@contextlib.contextmanager
def cpu_host(keep: int = 4096, capability: "str | tuple[int, int] | None" = None) -> Iterator[CpuHost]:
    """Context manager: import flashinfer as on the device of ``capability``
    (:func:`shim_device`: ``"10.0"`` by default, ``"9.0"`` for an H100/H200, or
    ``$FI_COMPAT_SHIM_CAPABILITY`` when ``None``) and record launches (the last
    ``keep`` of them: a long measurement keeps 1, or the recorder's tensors
    would count as growth).

    Cost: the first use imports torch and flashinfer (seconds); later uses
    only swap attributes.  Raises ``ImportError`` when torch or flashinfer is
    missing, ``ValueError`` for a capability the shim does not present (before
    anything is patched).
    """
    host = CpuHost(keep=keep, device=shim_device(capability))
    host.patch_torch()
    try:
        host.patch_cute_compile()
        host.patch_flashinfer()
        yield host
    finally:
        host.restore()


def cuda_flagged(tensor: Any) -> Any:
    """A view of a CPU ``tensor`` whose ``is_cuda`` is ``True`` (its device stays
    ``cpu``): for arguments flashinfer checks inline with ``tensor.is_cuda``
    (the DCP ``causal_seqlens_kv_global``), where no function can be shimmed."""
    return tensor.as_subclass(_cuda_flagged_class())


_CUDA_FLAGGED: list[type] = []


def _cuda_flagged_class() -> type:
    if not _CUDA_FLAGGED:
        import torch

        class CudaFlagged(torch.Tensor):
            @property
            def is_cuda(self) -> bool:  # type: ignore[override]
                return True

        _CUDA_FLAGGED.append(CudaFlagged)
    return _CUDA_FLAGGED[0]


__all__ = [
    "CAPABILITY_ENV",
    "CpuHost",
    "Launch",
    "LaunchRecorder",
    "RecordedKernel",
    "cpu_host",
    "cuda_flagged",
    "SHIM_DEVICES",
    "SM100_CAPABILITY",
    "SM100_SM_COUNT",
    "SM90_CAPABILITY",
    "SM90_SM_COUNT",
    "ShimDevice",
    "shim_device",
]
