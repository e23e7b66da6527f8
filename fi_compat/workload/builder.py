"""The tuning-config builder's arguments, written once for every caller.

flashinfer's ``_build_mla_decode_tuning_config`` reads only shapes, dtypes
and the device of its tensors, so meta tensors (no memory, no device) stand
in for the decode batch's.  The keys come in the builder's positional order
(``kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads,
kv_lora_rank, max_seq_len, device``, as every release 0.6.13-0.7.4 declares
them), so ``builder(*arguments.values())`` is also a valid call.

Cost: three meta-tensor allocations (microseconds); imports torch on the
first call, never at module import.  Raises ``ImportError`` without torch.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from .engine_model import HEAD_DIM, HEADS, KV_LORA_RANK


def builder_arguments(
    *,
    pages: int = 64,
    page_size: int = 32,
    tables: Sequence[int] = (2, 64),
    workspace_bytes: int = 1 << 20,
    runner_names: Optional[Sequence[str]] = None,
    q_len: int = 1,
    num_heads: int = HEADS,
    max_seq_len: Optional[int] = 1024,
    device: Any = None,
    **more: Any,
) -> dict[str, Any]:
    """Keyword arguments for one builder call, DeepSeek-style MLA shapes.

    ``tables`` is the block table's shape (``(batch, width)``, or
    ``(batch, 2, width)`` for TensorRT-LLM's separate K/V page indices);
    ``runner_names`` defaults to a fresh ``["trtllm-gen"]``;
    ``max_seq_len=None`` leaves the length out (for callers that pass it
    per call); ``device`` defaults to ``torch.device("cpu")``.  ``more``
    (the release-dependent trailing parameters) follows in the order given;
    a real ``kv_cache`` / ``block_tables`` / ``workspace_buffer`` passed in
    ``more`` replaces its meta stand-in in place (the GPU tests build on the
    device's own tensors).
    """
    import torch

    arguments: dict[str, Any] = {
        "kv_cache": torch.empty(pages, page_size, HEAD_DIM, device="meta"),
        "block_tables": torch.empty(*tables, dtype=torch.int32, device="meta"),
        "workspace_buffer": torch.empty(workspace_bytes, dtype=torch.uint8, device="meta"),
        "runner_names": ["trtllm-gen"] if runner_names is None else runner_names,
        "q_len": q_len,
        "num_heads": num_heads,
        "kv_lora_rank": KV_LORA_RANK,
    }
    if max_seq_len is not None:
        arguments["max_seq_len"] = max_seq_len
    arguments["device"] = torch.device("cpu") if device is None else device
    arguments.update(more)
    return arguments


__all__ = ["builder_arguments"]
