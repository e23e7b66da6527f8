"""The query modes of the MLA decode workload (:mod:`fi_compat.workload.workload`)
beyond one token per request, for ``fi-compat guard --census`` and the tests.

Written from the engines' published calls (docs/integration/*.md): MTP
(TensorRT-LLM's draft tokens in the query), vLLM's speculative batches (a
ragged query with ``cum_seq_lens_q`` and ``max_q_len``), SGLang's
target-verify, DeepSeek's sparse MLA (``sparse_mla_top_k`` over token-index
tables), vLLM's decode context parallelism, and flashinfer's modular cute-dsl
implementation.  Nothing here imports torch or flashinfer at import
time; pass ``torch`` in.  Cost: what the decode call costs.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Callable, Optional

from .workload import (
    Dcp,
    Inputs,
    accepted,
    call,
    keyword_call,
    make_inputs,
    sglang_target_verify,
    trtllm_call,
    vllm_call,
    vllm_dcp_max_seq_len,
)

#: The query modes ``fi-compat guard --census`` drives: one token per request;
#: MTP / SGLang's target-verify (a dense query of ``q_len`` > 1); ``varq``, a
#: ragged query of 1 to :data:`MTP_Q_LEN` tokens per request with
#: ``cum_seq_lens_q`` and ``max_q_len`` (vLLM's speculative batches); sparse
#: MLA; vLLM's decode context parallelism; the modular cute-dsl implementation.
#: A release that lacks a mode's keyword (or refuses it) raises, and the caller
#: records it.
MODES = ("q1", "mtp", "varq", "sparse", "dcp", "modular")
MTP_Q_LEN = 2  # one draft token: the smallest q_len > 1
SPARSE_TOP_K = 2048  # DeepSeek V3.2's index top-k: the sparse table is [batch, 1, top_k]


def mode_inputs(torch: Any, layout: str, mode: str, **shape: Any) -> Inputs:
    """:func:`make_inputs` for ``mode`` (``q_len`` :data:`MTP_Q_LEN` under MTP)."""
    return make_inputs(torch, layout, q_len=MTP_Q_LEN if mode == "mtp" else 1, **shape)


def mode_call(
    torch: Any,
    mode: str,
    layout: str,
    decode: Callable[..., Any],
    t: Inputs,
    max_seq_len: int,
    backend: Optional[str] = None,
) -> Any:
    """One engine's call in ``mode``: ``q1`` is :func:`call`; ``mtp`` decodes a
    dense query of ``q_len`` tokens (SGLang: with its target-verify ``max_seq_len``);
    ``varq`` is vLLM's keyword call with a ragged query (request ``i`` holds
    ``1 + i % MTP_Q_LEN`` tokens), ``cum_seq_lens_q`` and ``max_q_len``;
    ``sparse`` passes ``sparse_mla_top_k`` with a ``[batch, 1, top_k]`` table;
    ``dcp`` is vLLM's call under DCP (world 2, rank 0); ``modular`` asks the
    cute-dsl backend for ``cute_dsl_impl="modular"``.  The tensors a mode adds
    are made once per ``t`` and kept on it (as engines keep their metadata
    buffers).  Raises ``ValueError`` for
    a mode the layout has no form of; flashinfer raises for one it refuses."""
    if mode == "q1":
        return call(layout, decode, t, max_seq_len, backend)
    if mode == "mtp":
        q_len = int(t.query.shape[1])
        if layout == "sglang":
            max_seq_len, _ = sglang_target_verify(max_seq_len, q_len, t.page_size)
        if layout == "trtllm":  # TensorRT-LLM's MTP: the draft tokens in the query's second dimension
            return trtllm_call(decode, t, max_seq_len)
        # a dense query carries q_len in its shape; flashinfer takes max_q_len only with cum_seq_lens_q
        keywords = {} if backend in (None, "auto") else {"backend": backend}
        return _keyword_call(decode, t, max_seq_len, **keywords)
    keywords = {} if backend in (None, "auto") else {"backend": backend}
    if mode == "varq":
        if layout == "trtllm":
            raise ValueError("TensorRT-LLM's MTP is a dense query (mode mtp)")
        ragged = _kept(t, "_varq", lambda: _ragged(torch, t))
        return _keyword_call(decode, ragged[0], max_seq_len, cum_seq_lens_q=ragged[1], max_q_len=ragged[2], **keywords)
    if mode == "sparse":
        if layout == "trtllm":
            raise ValueError("sparse MLA is vLLM's and SGLang's call (DeepSeek V3.2)")
        tables = _kept(
            t,
            "_sparse_tables",
            lambda: torch.zeros((t.batch, 1, SPARSE_TOP_K), dtype=torch.int32, device=t.query.device),
        )
        return _keyword_call(
            decode, replace(t, block_tables=tables), max_seq_len, sparse_mla_top_k=SPARSE_TOP_K, **keywords
        )
    if mode == "dcp":
        if layout != "vllm":
            raise ValueError("decode context parallelism is vLLM's call")
        world = 2
        rank_len = vllm_dcp_max_seq_len(max_seq_len, world)
        from . import cuda_flagged  # imported here: fi_compat.workload imports this module's neighbours

        # one tensor per batch's inputs, refilled (as vLLM's metadata buffers are): a fresh
        # tensor per call would measure the shim's per-tensor bookkeeping, not flashinfer
        global_lens = vars(t).get("_dcp_global_seq_lens")
        if global_lens is None:
            global_lens = vars(t)["_dcp_global_seq_lens"] = cuda_flagged(torch.zeros((t.batch,), dtype=torch.int32))
        global_lens.fill_(max_seq_len)
        return vllm_call(decode, t, rank_len, dcp=Dcp(world, 0, global_lens))
    if mode == "modular":
        if layout == "trtllm":
            raise ValueError("TensorRT-LLM always passes backend='trtllm-gen'")
        return _keyword_call(decode, t, max_seq_len, backend="cute-dsl", cute_dsl_impl="modular")
    raise ValueError(f"mode {mode!r}; accepted: {', '.join(MODES)}")


def _kept(t: Inputs, name: str, make: Callable[[], Any]) -> Any:
    """``make()`` once per inputs object (kept in its ``vars``)."""
    value = vars(t).get(name)
    if value is None:
        value = vars(t)[name] = make()
    return value


def _ragged(torch: Any, t: Inputs) -> tuple[Inputs, Any, int]:
    """``t`` with a ragged query (request ``i``: ``1 + i % MTP_Q_LEN`` tokens), its ``cum_seq_lens_q``, ``max_q_len``."""
    per_request = [1 + i % MTP_Q_LEN for i in range(t.batch)]
    total = sum(per_request)
    device = t.query.device
    query = torch.zeros(total, t.query.shape[2], t.query.shape[3], dtype=t.query.dtype, device=device)
    out = torch.zeros(total, t.out.shape[2], t.out.shape[3], dtype=t.out.dtype, device=device)
    cumulative = torch.tensor([0, *itertools.accumulate(per_request)], dtype=torch.int32, device=device)
    return replace(t, query=query, out=out), cumulative, max(per_request)


def _keyword_call(decode: Callable[..., Any], t: Inputs, max_seq_len: int, **extra: Any) -> Any:
    """vLLM's keyword call with ``extra``; ``TypeError`` before flashinfer runs for a keyword it lacks."""
    missing = [name for name in extra if name not in accepted(decode)]
    if missing:
        raise TypeError(f"this release's decode function has no {', '.join(missing)}")
    return keyword_call(decode, t, max_seq_len, bmm2_scale=1.0, **extra)


__all__ = ["MODES", "MTP_Q_LEN", "SPARSE_TOP_K", "mode_call", "mode_inputs"]
