"""Stands for TensorRT-LLM's attention backend module
(``tensorrt_llm/_torch/attention/backends/fmha/flashinfer_trtllm_gen.py``) at
import: its body installs the builder-memo workaround when flashinfer imports.
Imported by :func:`trtllm_fake.import_tensorrt_llm`, never at collection."""

from helpers.trtllm_fake import install_workaround

try:  # TensorRT-LLM's IS_FLASHINFER_AVAILABLE (tensorrt_llm._torch.flashinfer_utils imports it)
    import flashinfer  # noqa: F401

    IS_FLASHINFER_AVAILABLE = True
except ImportError:
    IS_FLASHINFER_AVAILABLE = False

if IS_FLASHINFER_AVAILABLE:
    install_workaround()
