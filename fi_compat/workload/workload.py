"""The MLA decode workload under the names its callers import: the engines' records and calls
(:mod:`fi_compat.workload.engines`) and what changes from batch to batch
(:mod:`fi_compat.workload.streams`), in one namespace for the soak, the benchmarks, the audit
and the tests, and the helpers that take a layout by name (:func:`make_inputs`,
:func:`resize`, :func:`call`).  An engine's call is written in its
:class:`~fi_compat.workload.engines.Engine` record only.  Imports neither torch nor flashinfer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional, Union

from .engines import (
    BACKENDS,
    DEFAULT_BACKEND,
    ENGINES,
    HEAD_DIM,
    HEADS,
    KV_LORA_RANK,
    LAYOUTS,
    QK_NOPE_HEAD_DIM,
    QK_ROPE_HEAD_DIM,
    SGLANG_WORKSPACE_BYTES,
    TRTLLM_WORKSPACE_BYTES,
    VLLM_DCP_WORKSPACE_BYTES,
    VLLM_WORKSPACE_BYTES,
    Dcp,
    Engine,
    Inputs,
    accepted,
    keyword_call,
    resolve,
    sglang_call,
    sglang_target_verify,
    sglang_width,
    trtllm_call,
    vllm_call,
    vllm_dcp_max_seq_len,
    vllm_width,
)
from .streams import DISTRIBUTIONS, batch_sizes, lengths, serving_lengths


def make_inputs(
    torch: Any,
    layout: Union[str, Engine],
    *,
    batch: int = 4,
    width: int = 64,
    page_size: int = 64,
    num_pages: int = 512,
    q_len: int = 1,
    device: Any = None,
    workspace_bytes: Optional[int] = None,
) -> Inputs:
    """Zeros of ``layout``'s shapes (:meth:`Engine.inputs`; the engine's workspace by default)."""
    return resolve(layout).inputs(
        torch,
        batch=batch,
        width=width,
        page_size=page_size,
        num_pages=num_pages,
        q_len=q_len,
        device=device,
        workspace_bytes=workspace_bytes,
    )


def resize(torch: Any, inputs: Inputs, *, batch: Optional[int] = None, width: Optional[int] = None) -> Inputs:
    """The same inputs for another batch size or block-table width (views of
    cached tensors would hide nothing the host path reads: it reads shapes)."""
    engine = resolve(inputs.layout)
    batch = inputs.batch if batch is None else batch
    width = inputs.width if width is None else width
    device = inputs.query.device
    q_len = int(inputs.query.shape[1])
    return replace(
        inputs,
        query=torch.zeros(batch, q_len, HEADS, HEAD_DIM, dtype=inputs.query.dtype, device=device),
        block_tables=torch.zeros(engine.table_shape(batch, width), dtype=torch.int32, device=device),
        seq_lens=torch.ones(batch, dtype=torch.int32, device=device),
        out=torch.zeros(batch, q_len, HEADS, KV_LORA_RANK, dtype=inputs.out.dtype, device=device),
    )


def call(
    layout: Union[str, Engine], decode: Callable[..., Any], t: Inputs, max_seq_len: int, backend: Optional[str] = None
) -> Any:
    """One engine's call (``backend``: ``None`` for the engine's own)."""
    return resolve(layout).call(decode, t, max_seq_len, backend)


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DISTRIBUTIONS",
    "Dcp",
    "ENGINES",
    "Engine",
    "HEADS",
    "HEAD_DIM",
    "Inputs",
    "KV_LORA_RANK",
    "LAYOUTS",
    "QK_NOPE_HEAD_DIM",
    "QK_ROPE_HEAD_DIM",
    "SGLANG_WORKSPACE_BYTES",
    "TRTLLM_WORKSPACE_BYTES",
    "VLLM_DCP_WORKSPACE_BYTES",
    "VLLM_WORKSPACE_BYTES",
    "accepted",
    "batch_sizes",
    "call",
    "keyword_call",
    "lengths",
    "make_inputs",
    "resize",
    "resolve",
    "serving_lengths",
    "sglang_call",
    "sglang_target_verify",
    "sglang_width",
    "trtllm_call",
    "vllm_call",
    "vllm_dcp_max_seq_len",
    "vllm_width",
]
