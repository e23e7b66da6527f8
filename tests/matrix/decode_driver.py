"""Drive the real MLA decode host path the way each engine calls it, for the census tests.

Used by ``test_census_bounds.py``, ``test_autotuner.py`` and the subprocess of
``test_moved_and_reexported.py`` (so it is a plain module, not a fixture).
Shapes and the engines' calls come from :mod:`fi_compat.workload.workload`;
this adds what varies per batch and the query-length modes:

``q1``       one query token per request;
``mtp``      2-4 query tokens per request (speculative decoding: MTP,
             target-verify), dense ``[B, q, H, D]``: the shape carries q_len
             (0.7.4 rejects ``max_q_len`` without ``cum_seq_lens_q``); the
             draft length rotates per batch;
``varq``     ragged query ``[total_q, H, D]`` with ``cum_seq_lens_q`` and
             ``max_q_len`` (1-4 tokens per request);
``sparse``   DeepSeek sparse MLA: ``sparse_mla_top_k`` with ``[B, 1, top_k]``
             token-index tables;
``dcp``      decode context parallelism (``enable_dcp``, ``cp_world=2``,
             ``return_lse``, ``causal_seqlens_kv_global`` flagged as CUDA for
             the inline ``is_cuda`` check);
``modular``  ``cute_dsl_impl="modular"`` (the cute-dsl modular wrapper).

Per batch: the batch size (1-64), the max_seq_len and, for SGLang, the
block-table width that follows it.  Input pools are allocated once at the
largest batch; a batch is a view of them (the host path reads shapes only),
except SGLang's per-batch table, allocated per call as SGLang pads it.
"""

from __future__ import annotations

import functools
import itertools
import random
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional

from fi_compat.workload import cuda_flagged, workload

MODES = ("q1", "mtp", "varq", "sparse", "dcp", "modular")
PAGE_SIZE = 64
MAX_BATCH = 64
SPARSE_TOP_K = 2048
MTP_Q_LENS = (2, 3, 4)

#: The decode parameter a mode needs; a release without it cannot run the mode.
NEEDS = {"varq": "cum_seq_lens_q", "dcp": "enable_dcp", "sparse": "sparse_mla_top_k", "modular": "cute_dsl_impl"}


def combinations() -> list[tuple[str, str, str]]:
    """(layout, backend, mode) worth running: ``modular`` only selects a
    cute-dsl implementation, so it is paired with the backends and the layouts
    that can run cute-dsl (every release's cute-dsl rejects TensorRT-LLM's
    separate K/V page indices; ``cute-dsl`` with that layout stays in, to show it)."""
    return [(layout, backend, mode)
            for layout in workload.LAYOUTS for backend in workload.BACKENDS for mode in MODES
            if not (mode == "modular" and (backend == "trtllm-gen" or layout == "trtllm"))]


CONTEXT = 131072
"""The census's context: 128K tokens (1,024 K-tiles), a context engines serve.
The cute-dsl sizer's key is batch size x K-tile class up to a saturation set
by the SM count (fi_compat.adapters.sizer_keys): a 32K census saw a quarter
of those classes, and none past 32K."""
TWO_POINTS_UP_TO = 32768
"""Up to here the sweep visits each K-tile class at two lengths; past it, at one."""


def context_for(lengths: int) -> int:
    """The largest max_seq_len used: :data:`CONTEXT`, or twice the number of
    distinct lengths asked for, rounded up to a power of two."""
    return max(CONTEXT, 1 << (2 * lengths - 1).bit_length())


def sweep(context: int) -> list[int]:
    """Lengths that reach every normalised key: every length up to 128, every
    64th up to :data:`TWO_POINTS_UP_TO` (every K-tile class ``ceil(m / 128)`` at
    two points), every 128th past it (each class once, so a 128K sweep leaves
    room for the steady state in CI's 2,000 lengths), and every step of the
    profile ladder (:func:`fi_compat.adapters.keys.profile_ladder`)."""
    from fi_compat.adapters.keys import PROFILE_LADDER_BITS

    steps = {top << shift for shift in range(context.bit_length())
             for top in range(1 << (PROFILE_LADDER_BITS - 1), 1 << PROFILE_LADDER_BITS)}
    values = (set(range(1, 129)) | set(range(64, min(context, TWO_POINTS_UP_TO) + 1, 64))
              | set(range(64, context + 1, 128)) | steps)
    return sorted(m for m in values if m <= context)


def schedule(count: int, context: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """``count`` distinct max_seq_len values in ``[1, context]`` and a batch size
    for each.  First the :func:`sweep`, with batch sizes cycling 1-64 (so every
    batch size meets every block-table width early), then random distinct
    lengths with random batch sizes.  The sweep puts every normalised key in
    the caches early, so what follows measures the steady state."""
    first = sweep(context)
    rng = random.Random(seed)
    if count <= len(first):
        lengths = sorted(rng.sample(first, count))
    else:
        seen = set(first)
        rest = [m for m in range(1, context + 1) if m not in seen]
        rng.shuffle(rest)
        lengths = first + rest[:count - len(first)]
    cycled = [1 + i % MAX_BATCH for i in range(min(count, len(first)))]
    return lengths, cycled + workload.batch_sizes(count - len(cycled), low=1, high=MAX_BATCH, seed=seed)


def flashinfer_caches() -> list[Any]:
    """Every ``functools`` cache object of flashinfer's loaded modules (module
    attributes and class members), flashinfer's own even where a fi_compat
    proxy stands in front of it."""
    import sys

    from fi_compat.memo.proxies import is_fi_compat_proxy

    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "flashinfer" or name.startswith("flashinfer.")):
            continue
        for value in list(getattr(module, "__dict__", {}).values()):
            candidates = [value]
            if isinstance(value, type) and value.__module__ == name:
                candidates += [getattr(item, "__func__", item) for item in vars(value).values()]
            for item in candidates:
                if is_fi_compat_proxy(item):
                    item = item.__wrapped__
                if callable(getattr(item, "cache_clear", None)) and callable(getattr(item, "cache_info", None)):
                    found[id(item)] = item
    return list(found.values())


def clear_flashinfer_caches() -> int:
    """Empty every flashinfer cache (each has ``cache_clear``): a fresh process's state."""
    caches = flashinfer_caches()
    for cache in caches:
        cache.cache_clear()
    return len(caches)


#: Input pools by (layout, width, pages, q_len), shared by every Driver of the
#: process as an engine keeps its buffers: flashinfer keeps references to the
#: buffers it was handed (0.7.4 under the shim: about 0.4 GB per combination
#: with fresh 128 MiB workspaces each), which would otherwise add up across
#: the census's combinations to gigabytes.
_POOLS: dict[tuple, workload.Inputs] = {}


def _pool(torch: Any, layout: str, width: int, num_pages: int, q_len: int) -> workload.Inputs:
    key = (layout, width, num_pages, q_len)
    inputs = _POOLS.get(key)
    if inputs is None:
        inputs = _POOLS[key] = workload.make_inputs(torch, layout, batch=MAX_BATCH, width=width, page_size=PAGE_SIZE,
                                                    num_pages=num_pages, q_len=q_len)
    return inputs


class Driver:
    """One (layout, backend, mode) on the installed release: ``call(batch, max_seq_len)``."""

    def __init__(self, torch: Any, decode: Callable, layout: str, backend: str, mode: str, *,
                 context: int, seed: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}; accepted: {', '.join(MODES)}")
        self.torch, self.decode, self.layout, self.backend, self.mode = torch, decode, layout, backend, mode
        self.accepts = workload.accepted(decode)
        self.rng = random.Random(seed)
        self._extra: dict[str, Any] = {}
        self._flagged: dict[int, Any] = {}
        self._engine_decode = self._engine_callable(decode)
        width = -(-context // PAGE_SIZE)
        num_pages = width
        q_lens = MTP_Q_LENS if mode == "mtp" else (1,)
        self.pools = {q: _pool(torch, layout, width, num_pages, q) for q in q_lens}
        self.q_lens = itertools.cycle(q_lens)
        base = self.pools[q_lens[0]]
        if mode == "varq":
            heads = base.query.shape[2]
            self.ragged_query = torch.zeros(MAX_BATCH * 4, heads, base.query.shape[3], dtype=base.query.dtype)
            self.ragged_out = torch.zeros(MAX_BATCH * 4, heads, base.out.shape[3], dtype=base.out.dtype)
        if mode == "sparse":
            shape = (MAX_BATCH, 1, SPARSE_TOP_K)
            self.sparse_tables = torch.zeros(shape, dtype=torch.int32)

    def _global_lengths(self, batch: int) -> Any:
        """DCP's global KV lengths, flagged as CUDA, one tensor per batch size:
        a torch subclass instance per call churns a bounded cache inside torch
        that tracemalloc would count as growth (the data is never read here)."""
        flagged = self._flagged.get(batch)
        if flagged is None:
            flagged = self._flagged[batch] = cuda_flagged(self.torch.full((batch,), 2, dtype=self.torch.int32))
        return flagged

    def missing_parameter(self) -> Optional[str]:
        """The parameter this mode needs that the release lacks, if any."""
        needed = NEEDS.get(self.mode)
        return needed if needed is not None and needed not in self.accepts else None

    def batch(self, batch: int, max_seq_len: int) -> tuple[workload.Inputs, dict[str, Any]]:
        """The inputs of one batch, and the keywords the mode adds."""
        torch = self.torch
        q_len = next(self.q_lens)
        pool = self.pools[q_len]
        tables = pool.block_tables[:batch]
        if self.layout == "sglang":
            tables = torch.zeros(batch, workload.sglang_width(max_seq_len, PAGE_SIZE), dtype=torch.int32)
        inputs = replace(pool, query=pool.query[:batch], block_tables=tables, seq_lens=pool.seq_lens[:batch],
                         out=pool.out[:batch])
        extra: dict[str, Any] = {}
        if self.mode == "varq":
            per_request = [self.rng.randint(1, 4) for _ in range(batch)]
            total = sum(per_request)
            cumulative = torch.tensor([0, *itertools.accumulate(per_request)], dtype=torch.int32)
            inputs = replace(inputs, query=self.ragged_query[:total], out=self.ragged_out[:total])
            extra.update(cum_seq_lens_q=cumulative, max_q_len=max(per_request))
        elif self.mode == "dcp":
            extra.update(enable_dcp=True, cp_world=2, cp_rank=0, return_lse=True,
                         causal_seqlens_kv_global=self._global_lengths(batch))
        elif self.mode == "modular":
            extra["cute_dsl_impl"] = "modular"
        return inputs, extra

    def call(self, batch: int, max_seq_len: int) -> Any:
        inputs, self._extra = self.batch(batch, max_seq_len)
        if self.mode in ("sparse", "dcp"):
            return self._keyword_call(inputs, max_seq_len, self._extra)
        return workload.call(self.layout, self._engine_decode, inputs, max_seq_len, self.backend)

    def _engine_callable(self, decode: Callable) -> Callable:
        """The decode function as the engine's call sees it, plus this batch's
        mode keywords and, for TensorRT-LLM's call, the backend under test (its
        newest form leaves it at ``"auto"``).  One object per driver: the
        workload caches what each callee accepts by identity."""
        forced = self.backend if self.layout == "trtllm" and self.backend != "trtllm-gen" else None

        @functools.wraps(decode)
        def engine_decode(*args: Any, **kwargs: Any) -> Any:
            kwargs.update(self._extra)
            if forced is not None:
                kwargs["backend"] = forced
            return decode(*args, **kwargs)

        return engine_decode

    def _keyword_call(self, t: workload.Inputs, max_seq_len: int, extra: dict[str, Any]) -> Any:
        """Sparse MLA and DCP, by keyword: no engine's positional form carries them."""
        batch = t.batch
        tables = self.sparse_tables[:batch] if self.mode == "sparse" else t.block_tables
        keywords = dict(extra, backend=self.backend)
        if self.mode == "sparse":
            keywords["sparse_mla_top_k"] = SPARSE_TOP_K
        if self.layout == "trtllm":
            keywords["uses_shared_paged_kv_idx"] = False
        return workload.keyword_call(self.decode, replace(t, block_tables=tables), max_seq_len, **keywords)

    def run(self, lengths: list[int], batches: Iterator[int]) -> None:
        for max_seq_len, batch in zip(lengths, batches):
            self.call(batch, max_seq_len)


__all__ = ["Driver", "clear_flashinfer_caches", "flashinfer_caches", "MODES", "NEEDS", "PAGE_SIZE", "combinations",
           "context_for", "schedule", "sweep"]
