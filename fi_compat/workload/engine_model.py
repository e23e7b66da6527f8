"""The vocabulary of the engines' records (:mod:`fi_compat.workload.engines`): the :class:`Engine`
record type, the tensors of one decode batch (:class:`Inputs`), DeepSeek-style MLA shapes, and
the keywords every engine's keyword call passes (:func:`keyword_call`).

Nothing here imports torch or flashinfer at import time; pass ``torch`` in.  Cost: an
:class:`Engine`'s :meth:`~Engine.inputs` allocates its workspace (128-256 MiB of zeros) and KV pool.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from .modes import MODES

HEADS = 128
KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
QK_NOPE_HEAD_DIM = 128
HEAD_DIM = KV_LORA_RANK + QK_ROPE_HEAD_DIM

#: The backends flashinfer's decode function takes (any of them can be forced on a keyword call).
BACKENDS = ("trtllm-gen", "cute-dsl", "auto")


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


# --------------------------------------------------------------------------- the record


def fixed_width(max_seq_len: int, page_size: int, context: int) -> int:
    """A block-table width fixed per engine: the context in pages (TensorRT-LLM's
    ``max_blocks_per_sequence``); ``max_seq_len`` is not read."""
    return -(-context // page_size)


Call = Callable[..., Any]
"""``call(decode, inputs, max_seq_len, backend=None, **keywords)``: one decode call as the engine makes it."""


@dataclass(frozen=True)
class Engine:
    """One engine's MLA decode layout: everything the workload needs to make its calls.

    ``backends`` are the backends the engine sends, its default first; ``modes`` the query modes
    beyond one token per request it sends on each backend (:data:`fi_compat.workload.modes.MODES`);
    ``width(max_seq_len, page_size, context)`` its block-table width; ``verify`` how many times a
    dense multi-token query's tokens are added to ``max_seq_len`` and to the length the table is
    padded from; ``dcp_max_seq_len(max_seq_len, world)`` what a rank passes under decode context
    parallelism (``None``: the batch's maximum, unchanged)."""

    name: str
    label: str
    call: Call
    backends: tuple[str, ...]
    modes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    separate_kv_indices: bool = False
    width: Callable[[int, int, int], int] = fixed_width
    verify: tuple[int, int] = (0, 0)
    dcp_max_seq_len: Optional[Callable[[int, int], int]] = None
    workspace_bytes: int = 128 << 20
    dcp_workspace_bytes: Optional[int] = None
    workspace_dtype: str = "int8"
    counter_buffer: tuple[str, int] = ("uint8", 1 << 18)

    def __post_init__(self) -> None:
        unknown = [b for b in (*self.backends, *self.modes) if b not in BACKENDS]
        if not self.backends or unknown:
            raise ValueError(f"engine {self.name!r}: backends {list(self.backends)}; accepted: {', '.join(BACKENDS)}")
        strange = [m for sent in self.modes.values() for m in sent if m not in MODES]
        if strange:
            raise ValueError(f"engine {self.name!r}: query modes {strange}; accepted: {', '.join(MODES)}")

    @property
    def default_backend(self) -> str:
        return self.backends[0]

    def paths(self) -> list[tuple[str, str]]:
        """``(backend, mode)`` of every call the engine makes: ``q1`` on each backend, then its modes."""
        return [(backend, mode) for backend in self.backends for mode in ("q1", *self.modes.get(backend, ()))]

    def lengths(self, max_seq: int, q_len: int, page_size: int, context: int) -> tuple[int, int]:
        """``(max_seq_len passed, block-table width)`` of a batch whose longest request holds
        ``max_seq`` tokens and whose query holds ``q_len`` tokens per request (dense)."""
        drafts = q_len if q_len > 1 else 0
        passed_extra, width_extra = self.verify
        return max_seq + passed_extra * drafts, self.width(max_seq + width_extra * drafts, page_size, context)

    def widest(self, page_size: int, context: int, q_len: int = 1) -> int:
        """The widest table a run up to ``context`` sends (every width rule grows with the length)."""
        return self.lengths(context, q_len, page_size, context)[1]

    def rank_max_seq_len(self, max_seq_len: int, world: int) -> int:
        return max_seq_len if self.dcp_max_seq_len is None else self.dcp_max_seq_len(max_seq_len, world)

    def table_shape(self, batch: int, width: int) -> tuple[int, ...]:
        return (batch, 2, width) if self.separate_kv_indices else (batch, width)

    def inputs(
        self,
        torch: Any,
        *,
        batch: int = 4,
        width: int = 64,
        page_size: int = 64,
        num_pages: int = 512,
        q_len: int = 1,
        device: Any = None,
        workspace_bytes: Optional[int] = None,
    ) -> Inputs:
        """Zeros of this engine's shapes (data is never read on the host path)."""
        kw = {"device": device} if device is not None else {}
        bf16 = torch.bfloat16
        kv_shape = (num_pages, page_size, HEAD_DIM) if self.separate_kv_indices else (num_pages, 1, page_size, HEAD_DIM)
        counter_dtype, counter_count = self.counter_buffer
        return Inputs(
            layout=self.name,
            query=torch.zeros(batch, q_len, HEADS, HEAD_DIM, dtype=bf16, **kw),
            kv_cache=torch.zeros(kv_shape, dtype=bf16, **kw),
            workspace_buffer=torch.zeros(
                self.workspace_bytes if workspace_bytes is None else workspace_bytes,
                dtype=getattr(torch, self.workspace_dtype),
                **kw,
            ),
            block_tables=torch.zeros(self.table_shape(batch, width), dtype=torch.int32, **kw),
            seq_lens=torch.ones(batch, dtype=torch.int32, **kw),
            out=torch.zeros(batch, q_len, HEADS, KV_LORA_RANK, dtype=bf16, **kw),
            counter_buffer=torch.zeros(counter_count, dtype=getattr(torch, counter_dtype), **kw),
            page_size=page_size,
        )


# --------------------------------------------------------------------------- every keyword call


_ACCEPTS: dict[int, tuple[Any, frozenset[str]]] = {}
_ACCEPTS_MAX = 64  # the decode function and its wrappers: a handful per process


def accepted(function: Callable[..., Any]) -> frozenset[str]:
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


def keyword_call(decode: Callable[..., Any], t: Inputs, max_seq_len: int, **extra: Any) -> Any:
    """The keywords every engine's keyword call passes (``t``'s tensors, the MLA
    head dimensions, ``max_seq_len``, ``bmm1_scale=0.1``), then ``extra``: the
    one body under the engines' keyword calls (:mod:`fi_compat.workload.engines`)."""
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


__all__ = [
    "BACKENDS",
    "Call",
    "Engine",
    "HEADS",
    "HEAD_DIM",
    "Inputs",
    "KV_LORA_RANK",
    "QK_NOPE_HEAD_DIM",
    "QK_ROPE_HEAD_DIM",
    "accepted",
    "fixed_width",
    "keyword_call",
]
