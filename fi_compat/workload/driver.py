"""One engine's decode calls, batch after batch: the one driver the soak, the guard's census,
``audit --live``, the benchmarks and the release suite run.

A :class:`Driver` takes an :class:`~fi_compat.workload.engines.Engine` record (or its name), the
backend to send and a query mode (:mod:`fi_compat.workload.modes`), allocates every tensor a run
needs once, up front -- the engine's inputs at the largest batch for each query length, one flat
block-table buffer for the widest table the run sends, the mode's sparse tables, ragged query and
DCP lengths -- and makes each batch out of views of them (the host path reads shapes, never data),
so the driver's own tensors are never counted as growth.  Per batch it applies the engine's rules:
the block-table width that follows (or ignores) the batch's maximum, the ``max_seq_len`` a dense
multi-token query or a DCP rank passes, then makes the engine's call with the mode's keywords.

    driver = Driver(torch, decode, "sglang", "auto", "mtp", context=131072)
    driver.call(8, 4000)                  # one batch: 8 requests, the longest 4,000 tokens
    batch = driver.batch(8, 4001)         # or build it first (outside a timed stretch) ...
    driver.send(batch)                    # ... and make the call alone

Cost: the allocation up front (the engine's workspace, 128-256 MiB of zeros, and the KV pool); per
batch a few tensor views and one ``fill_`` of the sequence lengths, then flashinfer's host path.
Failure: a mode whose parameter the release lacks raises ``TypeError`` naming it before flashinfer
runs; what flashinfer raises propagates; bad arguments raise ``ValueError``.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, MutableMapping, Optional, Sequence, Union

from . import cuda_flagged
from .engine_model import Engine, Inputs, accepted
from .engines import resolve
from .modes import DCP_WORLD, MTP_Q_LEN, SPARSE_TOP_K, mode as mode_named


@dataclass
class Batch:
    """One decode batch as the engine sends it: its tensors, the ``max_seq_len`` it passes and
    the keywords its query mode adds."""

    inputs: Inputs
    max_seq_len: int
    keywords: dict[str, Any]


class Driver:
    """One (engine, backend, query mode) on the installed flashinfer.

    ``context`` is the longest length a run sends (it sizes the block tables); ``q_lens`` the
    query lengths a dense multi-token query cycles through (default ``(2,)`` under ``mtp``, ``(1,)``
    otherwise; every one gets its inputs up front) or, under ``varq``, the lengths each request's
    query is drawn from (default ``(1, 2)``, request ``i`` taking ``q_lens[i % len]``; with ``seed``,
    drawn at random).  ``pools`` is a dict shared by drivers that should share their buffers (as
    one engine keeps one workspace: flashinfer keeps references to the buffers it is handed)."""

    def __init__(
        self,
        torch: Any,
        decode: Callable[..., Any],
        engine: Union[str, Engine],
        backend: Optional[str] = None,
        mode: str = "q1",
        *,
        context: int,
        page_size: int = 64,
        num_pages: int = 1024,
        max_batch: int = 64,
        q_lens: Optional[Sequence[int]] = None,
        seed: Optional[int] = None,
        device: Any = None,
        workspace_bytes: Optional[int] = None,
        pools: Optional[MutableMapping[tuple[Any, ...], Any]] = None,
    ) -> None:
        self.engine = resolve(engine)
        self.mode = mode_named(mode)
        if context < 1 or max_batch < 1 or page_size < 1:
            raise ValueError(f"context {context}, max_batch {max_batch}, page_size {page_size}: each must be >= 1")
        self.torch, self.decode = torch, decode
        self.backend = backend if backend is not None else self.engine.default_backend
        self.context, self.page_size, self.max_batch = context, page_size, max_batch
        default_q = {"mtp": (MTP_Q_LEN,), "varq": (1, MTP_Q_LEN)}.get(self.mode.name, (1,))
        self.q_lens = tuple(q_lens) if q_lens else default_q
        if min(self.q_lens) < 1:
            raise ValueError(f"q_lens {self.q_lens}: each must be >= 1")
        self.rng = random.Random(seed) if seed is not None else None
        self._dense = itertools.cycle(self.q_lens if self.mode.name == "mtp" else (1,))
        if workspace_bytes is None and self.mode.name == "dcp":
            workspace_bytes = self.engine.dcp_workspace_bytes
        pools = {} if pools is None else pools
        dense = self.q_lens if self.mode.name == "mtp" else (1,)
        widest = max(self.engine.widest(page_size, context, q) for q in (*dense, 1))
        shape = (self.engine.name, num_pages, page_size, max_batch, workspace_bytes, str(device))

        def pooled(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
            value = pools.get(shape + key)
            if value is None:
                value = pools[shape + key] = make()
            return value

        shared = pooled(("inputs", 1), lambda: self._make_inputs(1, num_pages, device, workspace_bytes))
        self._pools: dict[int, Inputs] = {}
        for q_len in sorted({*dense, 1}):
            made = pooled(
                ("inputs", q_len), functools.partial(self._make_inputs, q_len, num_pages, device, workspace_bytes)
            )
            # one KV pool, workspace, counter buffer and sequence lengths, as in an engine
            self._pools[q_len] = replace(
                made,
                kv_cache=shared.kv_cache,
                workspace_buffer=shared.workspace_buffer,
                counter_buffer=shared.counter_buffer,
                seq_lens=shared.seq_lens,
            )
        rows = 2 if self.engine.separate_kv_indices else 1
        self._tables = pooled(
            ("tables", widest), lambda: torch.zeros(max_batch * rows * widest, dtype=torch.int32, device=device)
        )
        self._sparse: Any = None
        self._ragged: Any = None
        self._global_lengths: dict[int, Any] = {}
        if self.mode.name == "sparse":
            self._sparse = pooled(
                ("sparse",), lambda: torch.zeros((max_batch, 1, SPARSE_TOP_K), dtype=torch.int32, device=device)
            )
        elif self.mode.name == "varq":
            tokens = max_batch * max(self.q_lens)
            base = shared
            self._ragged = (
                torch.zeros(tokens, base.query.shape[2], base.query.shape[3], dtype=base.query.dtype, device=device),
                torch.zeros(tokens, base.out.shape[2], base.out.shape[3], dtype=base.out.dtype, device=device),
            )
        elif self.mode.name == "dcp":
            # one tensor per batch size, made up front: a tensor subclass instance per call churns a
            # bounded cache inside torch that tracemalloc would count (the data is never read here)
            self._global_lengths = {
                b: self._flagged(torch.full((b,), 2, dtype=torch.int32, device=device)) for b in range(1, max_batch + 1)
            }

    def _make_inputs(self, q_len: int, num_pages: int, device: Any, workspace_bytes: Optional[int]) -> Inputs:
        return self.engine.inputs(
            self.torch,
            batch=self.max_batch,
            width=1,
            page_size=self.page_size,
            num_pages=num_pages,
            q_len=q_len,
            device=device,
            workspace_bytes=workspace_bytes,
        )

    @staticmethod
    def _flagged(tensor: Any) -> Any:
        """flashinfer checks the DCP lengths with ``is_cuda``: a CPU tensor is flagged (the CPU shim)."""
        return tensor if tensor.is_cuda else cuda_flagged(tensor)

    def missing_parameter(self, decode: Optional[Callable[..., Any]] = None) -> Optional[str]:
        """The parameter this mode needs that the release's decode function lacks, if any."""
        needed = self.mode.needs
        return needed if needed is not None and needed not in accepted(decode or self.decode) else None

    def batch(self, batch: int, max_seq_len: int, q_len: Optional[int] = None) -> Batch:
        """One batch of ``batch`` requests whose longest holds ``max_seq_len`` tokens (a dense
        query of ``q_len`` tokens each: default, the next of the driver's ``q_lens`` under
        ``mtp``, else one)."""
        if not 1 <= batch <= self.max_batch:
            raise ValueError(f"batch {batch}: this driver holds 1 to {self.max_batch} requests")
        q_len = next(self._dense) if q_len is None else q_len
        pool = self._pools.get(q_len)
        if pool is None:
            raise ValueError(f"q_len {q_len}: this driver's inputs hold {', '.join(map(str, sorted(self._pools)))}")
        engine = self.engine
        passed, width = engine.lengths(max_seq_len, q_len, self.page_size, self.context)
        shape = engine.table_shape(batch, width)
        count = batch * width * (2 if engine.separate_kv_indices else 1)
        if count > self._tables.numel():
            raise ValueError(f"max_seq_len {max_seq_len} needs a table wider than context {self.context} allows")
        seq_lens = pool.seq_lens[:batch]
        seq_lens.fill_(max_seq_len)
        inputs = replace(
            pool,
            query=pool.query[:batch],
            out=pool.out[:batch],
            seq_lens=seq_lens,
            block_tables=self._tables[:count].view(shape),
        )
        keywords: dict[str, Any] = {}
        name = self.mode.name
        if name == "varq":
            per_request = (
                [self.rng.choice(self.q_lens) for _ in range(batch)]
                if self.rng is not None
                else [self.q_lens[i % len(self.q_lens)] for i in range(batch)]
            )
            total = sum(per_request)
            query, out = self._ragged
            inputs = replace(inputs, query=query[:total], out=out[:total])
            keywords["cum_seq_lens_q"] = self.torch.tensor(
                [0, *itertools.accumulate(per_request)], dtype=self.torch.int32, device=query.device
            )
            keywords["max_q_len"] = max(per_request)
        elif name == "sparse":
            inputs = replace(inputs, block_tables=self._sparse[:batch])
            keywords["sparse_mla_top_k"] = SPARSE_TOP_K
        elif name == "dcp":
            passed = engine.rank_max_seq_len(passed, DCP_WORLD)
            keywords.update(
                enable_dcp=True,
                cp_world=DCP_WORLD,
                cp_rank=0,
                causal_seqlens_kv_global=self._global_lengths[batch],
                return_lse=True,
            )
        elif name == "modular":
            keywords["cute_dsl_impl"] = "modular"
        return Batch(inputs, passed, keywords)

    def send(self, batch: Batch, decode: Optional[Callable[..., Any]] = None) -> Any:
        """The engine's call of ``batch`` (to ``decode``, default the driver's)."""
        decode = self.decode if decode is None else decode
        missing = self.missing_parameter(decode)
        if missing is not None:
            raise TypeError(f"this release's decode function has no {missing}")
        return self.engine.call(decode, batch.inputs, batch.max_seq_len, self.backend, **batch.keywords)

    def call(self, batch: int, max_seq_len: int, q_len: Optional[int] = None) -> Any:
        """One batch made and sent: :meth:`batch`, then :meth:`send`."""
        return self.send(self.batch(batch, max_seq_len, q_len))

    def run(self, lengths: Iterable[int], batches: Iterable[int]) -> None:
        """One call per ``(max_seq_len, batch size)`` pair."""
        for max_seq_len, batch in zip(lengths, batches):
            self.call(batch, max_seq_len)


__all__ = ["Batch", "Driver"]
