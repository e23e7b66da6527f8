"""One MLA decode workload for the soak, the benchmarks, the audit and the tests.

DeepSeek-style MLA shapes, and the call each engine makes, written from their
published source (docs/integration/*.md cite file, line and commit; none of
their code is here):

``trtllm``
    TensorRT-LLM ``run_mla_generation``: 16 positional arguments (19 in its
    older form, backend / is_var_seq / uses_shared_paged_kv_idx positional),
    ``backend="trtllm-gen"``, separate K and V page indices: block tables
    ``[B, 2, W]``, ``uses_shared_paged_kv_idx=False``; kv cache ``[pages, page, 576]``.
``vllm``
    vLLM ``FlashInferMLAImpl.forward_mqa``: keywords only, backend left at
    ``"auto"`` (``"cute-dsl"`` under decode context parallelism, :class:`Dcp`),
    shared page indices: block tables ``[B, W]`` of a width fixed per engine
    (:func:`vllm_width`); kv cache ``[pages, 1, page, 576]``; 128 MiB int8
    workspace (256 MiB under DCP).
``sglang``
    SGLang ``TRTLLMMLABackend``: keywords only, backend omitted (``"auto"``)
    with a multi-CTA counter buffer, or ``"cute-dsl"`` in its cute-dsl
    variant; block tables ``[B, W]`` whose width follows the batch's maximum
    length (:func:`sglang_width`); target-verify passes the draft tokens as
    q_len and adds them to max_seq_len (:func:`sglang_target_verify`); 150 MiB
    int8 workspace.

Every call adapts to the callee's signature: a keyword the installed
flashinfer lacks (the counter buffer before 0.6.15) is left out, as the
engines' pinned releases would never see it.  Nothing here imports torch or
flashinfer at import time; pass ``torch`` in.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from .streams import DISTRIBUTIONS, batch_sizes, lengths, serving_lengths

HEADS = 128
KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
QK_NOPE_HEAD_DIM = 128
HEAD_DIM = KV_LORA_RANK + QK_ROPE_HEAD_DIM

LAYOUTS = ("trtllm", "vllm", "sglang")
BACKENDS = ("trtllm-gen", "cute-dsl", "auto")
DEFAULT_BACKEND = {"trtllm": "trtllm-gen", "vllm": "auto", "sglang": "auto"}

_SGLANG_ALIGN_TOKENS = 4096
_VLLM_ALIGN_TOKENS = 128
SGLANG_WORKSPACE_BYTES = 150 << 20
VLLM_WORKSPACE_BYTES = 128 << 20
VLLM_DCP_WORKSPACE_BYTES = 256 << 20


@dataclass
class Inputs:
    """Tensors of one decode batch, in one engine's layout."""

    layout: str
    query: Any
    kv_cache: Any
    workspace_buffer: Any
    block_tables: Any
    seq_lens: Any
    out: Any
    counter_buffer: Any
    page_size: int

    @property
    def batch(self) -> int:
        return int(self.query.shape[0])

    @property
    def width(self) -> int:
        return int(self.block_tables.shape[-1])

    @property
    def capacity(self) -> int:
        return self.width * self.page_size


def sglang_width(max_seq_len: int, page_size: int) -> int:
    """SGLang's block-table width for a batch: its pages, rounded up to 4096 tokens."""
    align = math.lcm(max(1, 128 // page_size), max(1, _SGLANG_ALIGN_TOKENS // page_size))
    pages = -(-max_seq_len // page_size)
    return -(-pages // align) * align


def sglang_target_verify(max_seq: int, draft_tokens: int, page_size: int) -> tuple[int, int]:
    """SGLang's target-verify batch: ``(max_seq_len it passes, block-table width)``; q_len is
    ``draft_tokens``.  The metadata adds the draft tokens to the batch's maximum before
    padding the table, and ``forward_extend`` adds them again (0.5.21
    ``trtllm_mla_backend.py:881-883, 1597-1611``): ``max(seq_lens) + 2 * draft_tokens``."""
    return max_seq + 2 * draft_tokens, sglang_width(max_seq + draft_tokens, page_size)


def vllm_width(max_model_len: int, page_size: int) -> int:
    """vLLM's block-table width, fixed per engine: ``max_model_len`` in blocks,
    aligned up to 128 tokens (``v1/worker/block_table.py``)."""
    align = max(1, _VLLM_ALIGN_TOKENS // page_size)
    pages = -(-max_model_len // page_size)
    return -(-pages // align) * align


def vllm_dcp_max_seq_len(max_seq_len: int, world: int, interleave: int = 1) -> int:
    """The max_seq_len vLLM passes on each rank under decode context parallelism:
    ``ceil(max_seq_len / (world * interleave)) * interleave`` (``mla_attention.py:2621-2633``)."""
    step = world * interleave
    return -(-max_seq_len // step) * interleave


@dataclass(frozen=True)
class Dcp:
    """vLLM's decode-context-parallel keywords: this rank of ``world``, and the
    global (all-rank) KV lengths, int32 ``[B]`` (flashinfer checks ``is_cuda``:
    :func:`fi_compat.workload.cuda_flagged` on the CPU shim)."""

    world: int
    rank: int
    global_seq_lens: Any


def make_inputs(
    torch: Any,
    layout: str,
    *,
    batch: int = 4,
    width: int = 64,
    page_size: int = 64,
    num_pages: int = 512,
    q_len: int = 1,
    device: Any = None,
    workspace_bytes: int = 128 << 20,
) -> Inputs:
    """Zeros of the right shapes (data is never read on the host path)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}; accepted: {', '.join(LAYOUTS)}")
    kw = {"device": device} if device is not None else {}
    bf16 = torch.bfloat16
    kv_shape = (num_pages, page_size, HEAD_DIM) if layout == "trtllm" else (num_pages, 1, page_size, HEAD_DIM)
    tables = (batch, 2, width) if layout == "trtllm" else (batch, width)
    return Inputs(
        layout=layout,
        query=torch.zeros(batch, q_len, HEADS, HEAD_DIM, dtype=bf16, **kw),
        kv_cache=torch.zeros(kv_shape, dtype=bf16, **kw),
        workspace_buffer=torch.zeros(workspace_bytes, dtype=torch.int8 if layout != "trtllm" else torch.uint8, **kw),
        block_tables=torch.zeros(tables, dtype=torch.int32, **kw),
        seq_lens=torch.ones(batch, dtype=torch.int32, **kw),
        out=torch.zeros(batch, q_len, HEADS, KV_LORA_RANK, dtype=bf16, **kw),
        # vLLM 0.34.0 and SGLang 0.5.23 hold the multi-CTA counter as uint8 bytes
        # (flashinfer_mla.py:114-116; trtllm_mla_backend.py:113-119); 256 KiB either way
        counter_buffer=torch.zeros(1 << 18, dtype=torch.uint8, **kw)
        if layout != "trtllm"
        else torch.zeros(1 << 16, dtype=torch.int32, **kw),
        page_size=page_size,
    )


def resize(torch: Any, inputs: Inputs, *, batch: Optional[int] = None, width: Optional[int] = None) -> Inputs:
    """The same inputs for another batch size or block-table width (views of
    cached tensors would hide nothing the host path reads: it reads shapes)."""
    batch = inputs.batch if batch is None else batch
    width = inputs.width if width is None else width
    device = inputs.query.device
    q_len = int(inputs.query.shape[1])
    tables = (batch, 2, width) if inputs.layout == "trtllm" else (batch, width)
    return replace(
        inputs,
        query=torch.zeros(batch, q_len, HEADS, HEAD_DIM, dtype=inputs.query.dtype, device=device),
        block_tables=torch.zeros(tables, dtype=torch.int32, device=device),
        seq_lens=torch.ones(batch, dtype=torch.int32, device=device),
        out=torch.zeros(batch, q_len, HEADS, KV_LORA_RANK, dtype=inputs.out.dtype, device=device),
    )


_ACCEPTS: dict[int, tuple[Any, frozenset[str]]] = {}
_ACCEPTS_MAX = 64  # the decode function and its wrappers: a handful per process


def accepted(function: Callable) -> frozenset[str]:
    """The keyword names ``function`` accepts (cached per function object; the
    cache keeps the function alive, so it is emptied past a few dozen: a
    workload that bounds caches must not grow one)."""
    known = _ACCEPTS.get(id(function))
    if known is None or known[0] is not function:
        known = (function, frozenset(inspect.signature(function).parameters))
        if len(_ACCEPTS) >= _ACCEPTS_MAX:
            _ACCEPTS.clear()
        _ACCEPTS[id(function)] = known
    return known[1]


def _only_accepted(function: Callable, keywords: dict[str, Any]) -> dict[str, Any]:
    names = accepted(function)
    return {k: v for k, v in keywords.items() if k in names}


def trtllm_call(decode: Callable, t: Inputs, max_seq_len: int, *, form: int = 16, enable_pdl: bool = False) -> Any:
    """TensorRT-LLM's call: 16 positional arguments and four keywords, or its
    older 19-positional form (``form=19``)."""
    head = (
        t.query,
        t.kv_cache,
        t.workspace_buffer,
        QK_NOPE_HEAD_DIM,
        KV_LORA_RANK,
        QK_ROPE_HEAD_DIM,
        t.block_tables,
        t.seq_lens,
        max_seq_len,
        0,
        t.out,
        1.0,
        1.0,
        None,
        None,
        enable_pdl,
    )
    counter = _only_accepted(decode, {"multi_ctas_kv_counter_buffer": t.counter_buffer})
    if form == 19:
        return decode(*head, "trtllm-gen", True, False, **counter)
    if form != 16:
        raise ValueError(f"form={form!r}; accepted: 16 or 19 (positional arguments)")
    return decode(*head, backend="trtllm-gen", is_var_seq=True, uses_shared_paged_kv_idx=False, **counter)


def keyword_call(decode: Callable, t: Inputs, max_seq_len: int, **extra: Any) -> Any:
    """The keywords every engine's keyword call passes (``t``'s tensors, the MLA
    head dimensions, ``max_seq_len``, ``bmm1_scale=0.1``), then ``extra``: the
    one body under :func:`vllm_call`, :func:`sglang_call` and the query modes'
    calls (:mod:`fi_compat.workload.modes`)."""
    return decode(
        query=t.query,
        kv_cache=t.kv_cache,
        workspace_buffer=t.workspace_buffer,
        qk_nope_head_dim=QK_NOPE_HEAD_DIM,
        kv_lora_rank=KV_LORA_RANK,
        qk_rope_head_dim=QK_ROPE_HEAD_DIM,
        block_tables=t.block_tables,
        seq_lens=t.seq_lens,
        max_seq_len=max_seq_len,
        bmm1_scale=0.1,
        **extra,
    )


def vllm_call(
    decode: Callable, t: Inputs, max_seq_len: int, *, backend: Optional[str] = None, dcp: Optional[Dcp] = None
) -> Any:
    """vLLM's call: keywords only; the backend keyword only when forced (cute-dsl);
    under DCP ``backend="cute-dsl"``, the DCP keywords and ``return_lse=True``."""
    extra: dict[str, Any] = {}
    if dcp is not None:
        extra.update(
            backend="cute-dsl",
            enable_dcp=True,
            cp_world=dcp.world,
            cp_rank=dcp.rank,
            causal_seqlens_kv_global=dcp.global_seq_lens,
        )
    elif backend is not None and backend != "auto":
        extra["backend"] = backend
    elif t.page_size in (32, 64):
        extra.update(_only_accepted(decode, {"multi_ctas_kv_counter_buffer": t.counter_buffer}))
    return keyword_call(decode, t, max_seq_len, bmm2_scale=1.0, return_lse=dcp is not None, **extra)


def sglang_call(
    decode: Callable, t: Inputs, max_seq_len: int, *, backend: Optional[str] = None, enable_pdl: bool = True
) -> Any:
    """SGLang's call: keywords only; backend omitted (``"auto"``) with the counter
    buffer, or ``backend="cute-dsl"`` without it; ``enable_pdl`` as SGLang 0.5.23
    passes it on SM90 and newer (``is_arch_support_pdl()``, trtllm_mla_backend.py:178-182, 1041-1044)."""
    if backend is None or backend in ("auto", "trtllm-gen"):
        extra = _only_accepted(decode, {"multi_ctas_kv_counter_buffer": t.counter_buffer})
        if backend == "trtllm-gen":
            extra["backend"] = backend
    else:
        extra = {"backend": backend}
    return keyword_call(
        decode,
        t,
        max_seq_len,
        enable_pdl=enable_pdl,
        return_lse=False,
        skip_softmax_threshold_scale_factor=None,
        **extra,
    )


CALLS: dict[str, Callable[..., Any]] = {"trtllm": trtllm_call, "vllm": vllm_call, "sglang": sglang_call}


def call(layout: str, decode: Callable, t: Inputs, max_seq_len: int, backend: Optional[str] = None) -> Any:
    """One engine's call; ``backend`` for vllm/sglang (TensorRT-LLM's is always trtllm-gen)."""
    if layout == "trtllm":
        return trtllm_call(decode, t, max_seq_len)
    return CALLS[layout](decode, t, max_seq_len, backend=backend)


__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DISTRIBUTIONS",
    "Dcp",
    "HEADS",
    "HEAD_DIM",
    "Inputs",
    "KV_LORA_RANK",
    "LAYOUTS",
    "QK_NOPE_HEAD_DIM",
    "QK_ROPE_HEAD_DIM",
    "SGLANG_WORKSPACE_BYTES",
    "VLLM_DCP_WORKSPACE_BYTES",
    "VLLM_WORKSPACE_BYTES",
    "accepted",
    "batch_sizes",
    "call",
    "keyword_call",
    "lengths",
    "make_inputs",
    "resize",
    "serving_lengths",
    "sglang_call",
    "sglang_target_verify",
    "sglang_width",
    "trtllm_call",
    "vllm_call",
    "vllm_dcp_max_seq_len",
    "vllm_width",
]
