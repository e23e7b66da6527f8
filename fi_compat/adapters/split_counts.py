"""The monolithic cute-dsl sizer keyed on the split count it returns.

``_get_split_kv_and_workspace_size`` (``cute_dsl/attention/monolithic/mla_decode.py``,
with ``max_seq_len`` from 0.6.16 on) turns the length into the K-tile count
``K = ceil(max_seq_len / 128)`` and returns ``p = ceil(K / ceil(K / s))``, the
nonempty splits of its candidate split count ``s``, with the workspace for
``p``: the answer depends on the length only through ``p``.  Keyed on the K-tile
count, batch sizes 1-4 alone hold about 1,000 K-tile classes each at 128K, far
more than the memo keeps, so the sizer missed on 1.8 - 7.4 % of vLLM's and
SGLang's cute-dsl decode calls (docs/benchmarks.md).  Keyed on ``p``, a model
has at most ``s`` (32) entries per batch size.

``p`` is computed from ``s``, and ``s`` is the sizer's own: the split count it
returns at a length past every candidate's saturation
(:func:`~fi_compat.adapters.sizer_keys.saturated_k_tiles`), asked once per
model and occupancy.  That is ``s`` at every length wherever it is at most
:data:`STEADY_SPLIT_CAP`: the candidate is ``min(occupancy split, cap)``, and
only a cap raised above the static one (0.7.2.post1 on, ``_reducer_split_cap``,
by ``K // 8``) varies with the length.  A call with a larger ``s`` keys on its
saturated K-tile count, as before.  The candidate reads ``occupancy_q_tiles``
where the call gives it (the decode path does, on every release with
``max_seq_len``), not the batch size, so a variable-Q launch, whose occupancy
follows its query lengths, asks once per occupancy.  The length ``128 * p``
stands for every length with that ``p`` (``p <= s``, so its own K-tile count
``p`` has ``p`` nonempty splits).  Proven on random arguments on every release
(tests/matrix/test_key_proofs.py).

The split counts read are forgotten with the memo (its ``cache_clear()``).

Cost: one dict lookup of the call's other arguments and a few integer
operations per key; one uncached sizer call per new model and occupancy; at
most :data:`MODELS_KEPT` of them kept.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .layout import ArgumentLayout
from .sizer_keys import K_TILE, monolithic_split_kv_key, saturated_k_tiles

STEADY_SPLIT_CAP = 32
"""The smallest static split cap of any release (``get_split_kv_simplified``'s
``max_split_kv`` up to 0.7.1, ``_STATIC_REDUCER_MAX_SPLITS`` = 48 from 0.7.2):
a saturated split count at most this is the split count at every length."""

MODELS_KEPT = 1024
"""Distinct (model, batch size) split counts kept before starting again: an engine's
batch sizes times its query modes, and the batch-cap search's probe sizes."""


def split_count_key(
    layout: ArgumentLayout, sizer: Callable[..., Any]
) -> Callable[[tuple[Any, ...]], Optional[tuple[Any, ...]]]:
    """Key of the monolithic sizer: ``max_seq_len`` -> ``128 * p`` where the
    sizer's saturated split count ``s`` (of ``sizer``, the uncached function) is
    at most :data:`STEADY_SPLIT_CAP`; otherwise
    :func:`~fi_compat.adapters.sizer_keys.monolithic_split_kv_key`'s."""
    at = layout.index
    position, batch, blocks = at.get("max_seq_len"), at.get("B"), at.get("max_active_blocks")
    occupancy = at.get("occupancy_q_tiles")
    saturated_key = monolithic_split_kv_key(layout)
    if position is None or batch is None or blocks is None:
        return saturated_key
    counts: dict[tuple[Any, ...], Optional[int]] = {}
    lock = threading.Lock()

    def steady_split(values: tuple[Any, ...]) -> Optional[int]:
        """``s`` for the call's model and batch size (or occupancy), or ``None`` where it may
        vary with the length."""
        rows = None if occupancy is None else values[occupancy]
        given = rows is not None
        # with the occupancy given the candidate reads it instead of the batch size, so
        # the variable-Q launch's batch sizes share it (the batch size still sizes the workspace)
        model = tuple(v for i, v in enumerate(values) if i != position and not (given and i == batch))
        try:
            return counts[model]
        except KeyError:
            pass
        tiles = saturated_k_tiles(values[blocks], rows if given else values[batch])
        split: Optional[int] = None
        if tiles is not None:
            try:
                answer = sizer(*values[:position], tiles * K_TILE, *values[position + 1 :])
                split = answer[0] if type(answer[0]) is int and 0 < answer[0] <= STEADY_SPLIT_CAP else None
            except Exception:  # the call then runs the sizer itself, and raises what it raises
                split = None
        with lock:
            if len(counts) >= MODELS_KEPT:
                counts.clear()
            counts[model] = split
        return split

    def key(values: tuple[Any, ...]) -> Optional[tuple[Any, ...]]:
        length = values[position]
        if type(length) is not int or length <= 0:
            return saturated_key(values)
        try:
            split = steady_split(values)
        except TypeError:  # an unhashable argument: the saturated key, which the memo's lookup refuses
            return saturated_key(values)
        if split is None:
            return saturated_key(values)
        k_tiles = -(-length // K_TILE)
        nonempty = -(-k_tiles // -(-k_tiles // split))
        return (*values[:position], nonempty * K_TILE, *values[position + 1 :])

    def forget() -> None:
        with lock:
            counts.clear()

    key.fi_compat_forget = forget  # type: ignore[attr-defined]  # the memo's cache_clear() calls it
    return key


__all__ = ["MODELS_KEPT", "STEADY_SPLIT_CAP", "split_count_key"]
