"""The query modes of the MLA decode workload: what a decode batch holds beyond one token per request.

Written from the engines' published calls (docs/integration/*.md): MTP (TensorRT-LLM's draft
tokens in the query, SGLang's target-verify, vLLM's speculative batches under DCP), vLLM's ragged
speculative batches (``cum_seq_lens_q`` and ``max_q_len``), DeepSeek's sparse MLA
(``sparse_mla_top_k`` over token-index tables), decode context parallelism, and flashinfer's
modular cute-dsl implementation.  Which engine sends which mode on which backend is its
:class:`~fi_compat.workload.engines.Engine` record's ``modes``; what each mode adds to a batch is
built by :class:`fi_compat.workload.driver.Driver`.  Plain data: no torch, no flashinfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Mode:
    """One query mode: its name, the decode parameter it passes (a release without it refuses
    the mode with ``TypeError`` before flashinfer runs), and what it is."""

    name: str
    needs: Optional[str]
    summary: str


#: Query tokens per request of a dense multi-token query (one draft token: the smallest q_len > 1).
MTP_Q_LEN = 2
#: DeepSeek V3.2's index top-k: the sparse table is ``[batch, 1, top_k]``.
SPARSE_TOP_K = 2048
#: Decode-context-parallel ranks (vLLM's; the driver plays rank 0).
DCP_WORLD = 2

ALL = (
    Mode("q1", None, "one query token per request"),
    Mode("mtp", None, "a dense query of q_len > 1 tokens per request ([B, q, H, D]): MTP, target-verify"),
    Mode("varq", "cum_seq_lens_q", "a ragged query ([total_q, H, D]) with cum_seq_lens_q and max_q_len"),
    Mode("sparse", "sparse_mla_top_k", "sparse MLA: sparse_mla_top_k over [B, 1, top_k] token-index tables"),
    Mode("dcp", "enable_dcp", "decode context parallelism: enable_dcp, cp_world, cp_rank, the global lengths"),
    Mode("modular", "cute_dsl_impl", "the cute-dsl modular implementation: cute_dsl_impl='modular'"),
)
BY_NAME = {mode.name: mode for mode in ALL}
#: Every query mode, in the order the guard's census and the tests drive them.
MODES = tuple(BY_NAME)
#: The decode parameter each mode needs, where it needs one.
NEEDS = {mode.name: mode.needs for mode in ALL if mode.needs is not None}


def mode(name: str) -> Mode:
    """The :class:`Mode` called ``name``; ``ValueError`` naming the modes accepted."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"mode {name!r}; accepted: {', '.join(MODES)}") from None


__all__ = ["ALL", "DCP_WORLD", "MODES", "MTP_Q_LEN", "Mode", "NEEDS", "SPARSE_TOP_K", "mode"]
