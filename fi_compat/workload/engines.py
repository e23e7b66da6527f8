"""Every engine's MLA decode layout, one :class:`Engine` record each: the one place an engine's call is written.

A record holds what one engine's decode batch looks like and how it calls flashinfer's
``trtllm_batch_decode_with_kv_cache_mla``: the backends it sends and the query modes it sends on
each, the shapes of its tensors (separate or shared K/V page indices), its block-table width rule,
its workspace and multi-CTA counter buffer, what it passes as ``max_seq_len`` for a multi-token
query and under decode context parallelism, and the call itself.  Written from the engines'
published source (docs/integration/*.md cite file, line and commit; none of their code is here):

:data:`TRTLLM`
    TensorRT-LLM ``run_mla_generation``: 16 positional arguments (19 in its older form, backend /
    is_var_seq / uses_shared_paged_kv_idx positional), ``backend="trtllm-gen"``, separate K and V
    page indices: block tables ``[B, 2, W]`` of a width fixed per engine,
    ``uses_shared_paged_kv_idx=False``; kv cache ``[pages, page, 576]``.
:data:`VLLM`
    vLLM 0.34.0 ``FlashInferMLAImpl.forward_mqa`` (``v1/attention/backends/mla/flashinfer_mla.py:396-457``):
    keywords only, backend left at ``"auto"`` with a persistent uint8 counter buffer when the page
    holds 32 or 64 tokens, ``"cute-dsl"`` under decode context parallelism (``return_lse=True``, the
    rank's ``ceil(max / world)``: :func:`vllm_dcp_max_seq_len`); shared page indices: block tables
    ``[B, W]`` of a width fixed by ``max_model_len`` (:func:`vllm_width`); kv cache
    ``[pages, 1, page, 576]``; 128 MiB int8 workspace (256 MiB when it returns the LSE).  Its
    speculative batches keep the query ragged (``cum_seq_lens_q``, ``max_q_len``: query mode
    ``varq``); under DCP they are dense (``mtp``).
:data:`SGLANG`
    SGLang 0.5.23 ``TRTLLMMLABackend._run_decode_kernel`` (``srt/layers/attention/trtllm_mla_backend.py:1036-1056``):
    keywords only, backend omitted (``"auto"``) with the counter buffer, or ``"cute-dsl"`` without it
    in its cute-dsl variant (``cutedsl_mla_backend.py``); ``enable_pdl`` as it passes it on SM90 and
    newer, ``return_lse=False``; block tables ``[B, W]`` whose width follows the batch's maximum
    (:func:`sglang_width`); target-verify passes the draft tokens as q_len, adds them to the
    maximum before padding the table and again to ``max_seq_len`` (the record's ``verify``);
    150 MiB int8 workspace.

Every call adapts to the callee's signature: a keyword the installed flashinfer lacks (the counter
buffer before 0.6.15) is left out, as the engines' pinned releases would never see it.  A call
takes the backend to send (``None``: the engine's own) and the keywords a query mode adds
(:mod:`fi_compat.workload.modes`); :class:`fi_compat.workload.driver.Driver` drives a record batch
after batch for the soak, the guard's census, ``audit --live``, the benchmarks and the release
suite.  Adding an engine layout is one record (registered in :data:`ENGINES`, or built anywhere and
passed in: every consumer takes a record as well as a name) and its test.

Nothing here imports torch or flashinfer at import time; pass ``torch`` in.  Bad input (an unknown
layout, a call form) raises ``ValueError`` naming what is accepted.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from .engine_model import (
    KV_LORA_RANK,
    QK_NOPE_HEAD_DIM,
    QK_ROPE_HEAD_DIM,
    Engine,
    Inputs,
    accepted,
    keyword_call,
)

_SGLANG_ALIGN_TOKENS = 4096
_VLLM_ALIGN_TOKENS = 128
SGLANG_WORKSPACE_BYTES = 150 << 20
VLLM_WORKSPACE_BYTES = 128 << 20
VLLM_DCP_WORKSPACE_BYTES = 256 << 20
#: TensorRT-LLM's workspace as the workload has always sized it (its own is sized per model at start-up).
TRTLLM_WORKSPACE_BYTES = 128 << 20


# --------------------------------------------------------------------------- width rules


def sglang_width(max_seq_len: int, page_size: int) -> int:
    """SGLang's block-table width for a batch: its pages, rounded up to 4096 tokens
    (``_calc_padded_blocks``: the LCM of 128 tokens and FlashMLA's 4096-token block)."""
    align = math.lcm(max(1, 128 // page_size), max(1, _SGLANG_ALIGN_TOKENS // page_size))
    pages = -(-max_seq_len // page_size)
    return -(-pages // align) * align


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


# --------------------------------------------------------------------------- the calls


def _counter(decode: Callable[..., Any], t: Inputs, keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The multi-CTA counter buffer, where the release takes it, except under DCP (flashinfer runs
    it on cute-dsl only, which the buffer does not serve) and sparse MLA (vLLM's sparse call,
    ``flashinfer_mla_sparse.py``, passes none)."""
    if (
        keywords.get("enable_dcp")
        or keywords.get("sparse_mla_top_k")
        or "multi_ctas_kv_counter_buffer" not in accepted(decode)
    ):
        return {}
    return {"multi_ctas_kv_counter_buffer": t.counter_buffer}


def trtllm_call(
    decode: Callable[..., Any],
    t: Inputs,
    max_seq_len: int,
    backend: Optional[str] = None,
    *,
    form: int = 16,
    enable_pdl: bool = False,
    sparse_mla_top_k: int = 0,
    **keywords: Any,
) -> Any:
    """TensorRT-LLM's call: 16 positional arguments and four keywords, or its older
    19-positional form (``form=19``); ``backend`` as it passes it (``trtllm-gen``,
    or another where a test forces one); ``keywords`` a query mode's."""
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
        sparse_mla_top_k,
        t.out,
        1.0,
        1.0,
        None,
        None,
        enable_pdl,
    )
    backend = backend or "trtllm-gen"
    extra = {**_counter(decode, t, {**keywords, "sparse_mla_top_k": sparse_mla_top_k}), **keywords}
    if form == 19:
        return decode(*head, backend, True, False, **extra)
    if form != 16:
        raise ValueError(f"form={form!r}; accepted: 16 or 19 (positional arguments)")
    return decode(*head, backend=backend, is_var_seq=True, uses_shared_paged_kv_idx=False, **extra)


@dataclass(frozen=True)
class Dcp:
    """vLLM's decode-context-parallel keywords: this rank of ``world``, and the
    global (all-rank) KV lengths, int32 ``[B]`` (flashinfer checks ``is_cuda``:
    :func:`fi_compat.workload.cuda_flagged` on the CPU shim)."""

    world: int
    rank: int
    global_seq_lens: Any

    def keywords(self) -> dict[str, Any]:
        return {
            "enable_dcp": True,
            "cp_world": self.world,
            "cp_rank": self.rank,
            "causal_seqlens_kv_global": self.global_seq_lens,
        }


def vllm_call(
    decode: Callable[..., Any],
    t: Inputs,
    max_seq_len: int,
    backend: Optional[str] = None,
    *,
    dcp: Optional[Dcp] = None,
    **keywords: Any,
) -> Any:
    """vLLM's call: keywords only; the backend keyword only when forced (cute-dsl),
    else the counter buffer at 32- and 64-token pages; under DCP (``dcp``, or a mode's
    ``enable_dcp``) ``backend="cute-dsl"`` with ``dcp``, the DCP keywords and ``return_lse=True``."""
    if dcp is not None:
        keywords = {**dcp.keywords(), **keywords}
        backend = "cute-dsl"
    extra: dict[str, Any] = {}
    if backend is not None and backend != "auto":
        extra["backend"] = backend
    elif t.page_size in (32, 64):
        extra.update(_counter(decode, t, keywords))
    extra["return_lse"] = bool(keywords.get("enable_dcp"))
    return keyword_call(decode, t, max_seq_len, bmm2_scale=1.0, **{**extra, **keywords})


def sglang_call(
    decode: Callable[..., Any],
    t: Inputs,
    max_seq_len: int,
    backend: Optional[str] = None,
    *,
    enable_pdl: bool = True,
    **keywords: Any,
) -> Any:
    """SGLang's call: keywords only; backend omitted (``"auto"``) with the counter
    buffer, or ``backend="cute-dsl"`` without it; ``enable_pdl`` as SGLang 0.5.23
    passes it on SM90 and newer (``is_arch_support_pdl()``, trtllm_mla_backend.py:178-182, 1041-1044)."""
    extra: dict[str, Any] = {}
    if backend is None or backend in ("auto", "trtllm-gen"):
        extra.update(_counter(decode, t, keywords))
    if backend is not None and backend != "auto":
        extra["backend"] = backend
    return keyword_call(
        decode,
        t,
        max_seq_len,
        **{
            "enable_pdl": enable_pdl,
            "return_lse": False,
            "skip_softmax_threshold_scale_factor": None,
            **extra,
            **keywords,
        },
    )


# --------------------------------------------------------------------------- the records


TRTLLM = Engine(
    name="trtllm",
    label="TensorRT-LLM",
    call=trtllm_call,
    backends=("trtllm-gen",),
    modes={"trtllm-gen": ("mtp",)},
    separate_kv_indices=True,
    workspace_bytes=TRTLLM_WORKSPACE_BYTES,
    workspace_dtype="uint8",
    counter_buffer=("int32", 1 << 16),
)
VLLM = Engine(
    name="vllm",
    label="vLLM",
    call=vllm_call,
    backends=("auto", "cute-dsl"),
    modes={"auto": ("mtp", "varq", "sparse"), "cute-dsl": ("mtp", "varq", "dcp", "modular")},
    width=lambda max_seq_len, page_size, context: vllm_width(context, page_size),
    dcp_max_seq_len=vllm_dcp_max_seq_len,
    workspace_bytes=VLLM_WORKSPACE_BYTES,
    dcp_workspace_bytes=VLLM_DCP_WORKSPACE_BYTES,
)
SGLANG = Engine(
    name="sglang",
    label="SGLang",
    call=sglang_call,
    backends=("auto", "cute-dsl"),
    modes={"auto": ("mtp", "sparse"), "cute-dsl": ("mtp", "modular")},
    width=lambda max_seq_len, page_size, context: sglang_width(max_seq_len, page_size),
    # target-verify: the metadata adds the draft tokens to the batch's maximum before padding the
    # table, and forward_extend adds them again (0.5.21 trtllm_mla_backend.py:881-883, 1597-1611;
    # 0.5.23 :841, 1546-1547): max_seq_len = max(seq_lens) + 2 * drafts
    verify=(2, 1),
    workspace_bytes=SGLANG_WORKSPACE_BYTES,
)

#: Every engine layout fi_compat drives, by name, in the order the soak, the guard and the tests list them.
ENGINES: dict[str, Engine] = {engine.name: engine for engine in (TRTLLM, VLLM, SGLANG)}
LAYOUTS = tuple(ENGINES)
DEFAULT_BACKEND = {name: engine.default_backend for name, engine in ENGINES.items()}


def resolve(layout: Union[str, Engine]) -> Engine:
    """An :class:`Engine`: a record itself, a name in :data:`ENGINES`, or ``package.module:NAME``
    (a record defined outside fi_compat: the soak's worker process imports it by that path).
    Raises ``ValueError`` naming the layouts accepted."""
    if isinstance(layout, Engine):
        return layout
    engine = ENGINES.get(layout)
    if engine is not None:
        return engine
    module, sep, attribute = str(layout).partition(":")
    if sep and module and attribute:
        found = getattr(importlib.import_module(module), attribute, None)
        if isinstance(found, Engine):
            return found
    raise ValueError(f"layout {layout!r}; accepted: {', '.join(LAYOUTS)}, or package.module:NAME of an Engine record")


__all__ = [
    "DEFAULT_BACKEND",
    "Dcp",
    "ENGINES",
    "LAYOUTS",
    "SGLANG",
    "SGLANG_WORKSPACE_BYTES",
    "TRTLLM",
    "TRTLLM_WORKSPACE_BYTES",
    "VLLM",
    "VLLM_DCP_WORKSPACE_BYTES",
    "VLLM_WORKSPACE_BYTES",
    "resolve",
    "sglang_call",
    "sglang_width",
    "trtllm_call",
    "vllm_call",
    "vllm_dcp_max_seq_len",
    "vllm_width",
]
