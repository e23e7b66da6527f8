"""Drive the real MLA decode host path the way each engine calls it, for the census tests.

Used by ``test_census_bounds.py``, ``test_autotuner.py``, ``test_call_styles.py`` and the
subprocess of ``test_moved_and_reexported.py`` (so it is a plain module, not a fixture).
Every call is :class:`fi_compat.workload.driver.Driver`'s, over the engines' records
(:mod:`fi_compat.workload.engines`); this adds what the release suite varies beyond the
engines' own paths:

* every backend on every layout (:func:`combinations`), so a backend an engine never sends
  is shown to be bounded too, or refused by flashinfer;
* ``mtp`` rotates 2-4 query tokens per request (a dense ``[B, q, H, D]``: the shape carries
  q_len); ``varq`` draws 1-4 tokens per request at random (a ragged query with
  ``cum_seq_lens_q`` and ``max_q_len``);
* the lengths and batch sizes (:func:`schedule`): a sweep of every normalised key, then
  random distinct lengths, batch sizes 1-64.

Input pools are allocated once per process at the largest batch and shared by every driver
(flashinfer keeps references to the buffers it was handed: 0.7.4 under the shim holds about
0.4 GB per combination with fresh 128 MiB workspaces each); a batch is a view of them.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Optional

from fi_compat.workload import driver as workload_driver
from fi_compat.workload.engine_model import BACKENDS
from fi_compat.workload.engines import ENGINES, resolve
from fi_compat.workload.modes import MODES, NEEDS
from fi_compat.workload.streams import batch_sizes

PAGE_SIZE = 64
MAX_BATCH = 64
MTP_Q_LENS = (2, 3, 4)
VARQ_Q_LENS = (1, 2, 3, 4)


def combinations() -> list[tuple[str, str, str]]:
    """(layout, backend, mode) worth running: ``modular`` only selects a
    cute-dsl implementation, so it is paired with the backends and the layouts
    that can run cute-dsl (every release's cute-dsl rejects separate K/V page
    indices; ``cute-dsl`` with such a layout stays in, to show it)."""
    return [(engine.name, backend, mode)
            for engine in ENGINES.values() for backend in BACKENDS for mode in MODES
            if not (mode == "modular" and (backend == "trtllm-gen" or engine.separate_kv_indices))]


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
    return lengths, cycled + batch_sizes(count - len(cycled), low=1, high=MAX_BATCH, seed=seed)


def flashinfer_caches() -> list[Any]:
    """Every ``functools`` cache object of flashinfer's loaded modules, flashinfer's own even
    where a fi_compat proxy stands in front of it (:func:`fi_compat.counting.census.caches`)."""
    from fi_compat.counting import census

    return census.caches()


def clear_flashinfer_caches() -> int:
    """Empty every flashinfer cache (each has ``cache_clear``): a fresh process's state."""
    caches = flashinfer_caches()
    for cache in caches:
        cache.cache_clear()
    return len(caches)


#: Input pools shared by every Driver of the process, as an engine keeps its buffers.
_POOLS: dict[tuple, Any] = {}


class Driver(workload_driver.Driver):
    """One (layout, backend, mode) on the installed release: ``call(batch, max_seq_len)``;
    ``layout`` a name or an :class:`~fi_compat.workload.engines.Engine` record."""

    def __init__(self, torch: Any, decode: Callable, layout: Any, backend: str, mode: str, *,
                 context: int, seed: int = 0) -> None:
        width = resolve(layout).widest(PAGE_SIZE, context, max(MTP_Q_LENS))
        q_lens: Optional[tuple[int, ...]] = {"mtp": MTP_Q_LENS, "varq": VARQ_Q_LENS}.get(mode)
        super().__init__(torch, decode, layout, backend, mode, context=context, page_size=PAGE_SIZE,
                         num_pages=width, max_batch=MAX_BATCH, q_lens=q_lens, seed=seed, pools=_POOLS)


__all__ = ["Driver", "clear_flashinfer_caches", "flashinfer_caches", "MODES", "NEEDS", "PAGE_SIZE", "combinations",
           "context_for", "schedule", "sweep"]
