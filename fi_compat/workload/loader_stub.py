"""Stub only flashinfer's trtllm-gen kernel-module loader, on a real CUDA host.

On a CUDA machine that cannot run the trtllm-gen MLA kernels (anything but
SM100/SM103; the loader would try to download cubins), this runs everything
up to the launch -- argument checks, tuning-config builder,
``AutoTuner.choose_one``, the runner -- as real code on real CUDA tensors and
the real device properties, and records the launch instead of making it.
Unlike :func:`fi_compat.workload.cpu_host` it touches neither torch nor the
compute-capability helpers.

    from fi_compat.workload.loader_stub import stub_trtllm_gen_loader

    with stub_trtllm_gen_loader() as recorder:
        flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(..., backend="trtllm-gen")
        assert recorder.launches[-1].max_seq_len == 4096
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

from . import LOADER_FUNCTION, LaunchRecorder


@contextlib.contextmanager
def stub_trtllm_gen_loader(recorder: LaunchRecorder | None = None) -> Iterator[LaunchRecorder]:
    """Replace ``get_trtllm_gen_fmha_module`` in every imported flashinfer
    module (each ``from .. import`` made its own binding) with a function that
    returns ``recorder``; restore them on exit.  Imports flashinfer.mla."""
    import flashinfer  # noqa: F401
    import flashinfer.mla  # noqa: F401

    recorder = recorder if recorder is not None else LaunchRecorder()

    def loader(*args: Any, **kwargs: Any) -> LaunchRecorder:
        return recorder

    saved: list[tuple[Any, Any]] = []
    for name, module in sys.modules.copy().items():
        if module is None or not (name == "flashinfer" or name.startswith("flashinfer.")):
            continue
        original = getattr(module, "__dict__", {}).get(LOADER_FUNCTION)
        if original is None or not callable(original):
            continue
        saved.append((module, original))
        setattr(module, LOADER_FUNCTION, loader)
    if not saved:
        raise RuntimeError(f"no flashinfer module defines {LOADER_FUNCTION}; nothing to stub")
    try:
        yield recorder
    finally:
        for module, original in reversed(saved):
            setattr(module, LOADER_FUNCTION, original)


__all__ = ["stub_trtllm_gen_loader"]
