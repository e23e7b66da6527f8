"""Keys of the cute-dsl split-KV / workspace sizers and of the batch-cap search.

One concern: how the cute-dsl MLA decode reads ``max_seq_len``.  The sizers
read it only as a K-tile count, and past a count set by the SM count and the
batch size not at all; the batch-cap search reads it only to pass it to the
sizer, along a path set by the cap it returns.  The keys follow, and so do the
builder's key (:func:`fi_compat.adapters.keys.builder_key_of`), the batch cap
(:mod:`fi_compat.adapters.batch_cap`) and the split counts
(:mod:`fi_compat.adapters.split_counts`), which import them from here.  Each
normalisation is proven against the real function on random arguments in
``tests/matrix/test_key_proofs.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .layout import ArgumentLayout


K_TILE = 128
"""``mma_qk_tile_n`` of the cute-dsl MLA decode kernel: the K-tile length the sizer divides by."""


def k_tile_ceiling(max_seq_len: Any) -> Any:
    """The smallest multiple of :data:`K_TILE` that is ``>= max_seq_len``: the
    representative of every length with the same K-tile count.  Anything but a
    positive ``int`` is returned unchanged (flashinfer then behaves, and
    raises, exactly as for the caller's value)."""
    if type(max_seq_len) is int and max_seq_len > 0:
        return -(-max_seq_len // K_TILE) * K_TILE
    return max_seq_len


def split_kv_key(layout: ArgumentLayout) -> Callable[[tuple[Any, ...]], Optional[tuple[Any, ...]]]:
    """Key (and normalised arguments) of a cute-dsl split-KV / workspace sizer:
    ``max_seq_len`` -> :func:`k_tile_ceiling`.  Releases whose sizer has no
    ``max_seq_len`` key on the arguments as they are (still bounded)."""
    position = layout.index.get("max_seq_len")

    def key(values: tuple[Any, ...]) -> Optional[tuple[Any, ...]]:
        if position is not None:
            values = (*values[:position], k_tile_ceiling(values[position]), *values[position + 1 :])
        return values  # hashed once, by the memo's lookup

    return key


def saturated_k_tiles(max_active_blocks: Any, rows: Any) -> Optional[int]:
    """The K-tile count past which the monolithic cute-dsl sizer's output no
    longer depends on it, for ``rows`` (a lower bound on the q-tile rows it
    splits over: the batch size, or ``occupancy_q_tiles``), or ``None``.

    Why: the sizer's candidate split is at most ``u = max(1, max_active_blocks
    // (2 * rows))`` (``blocks_per_batch`` of ``get_split_kv_simplified``; the
    reducer cap of 0.7.2.post1 on only lowers it), and it then takes
    ``ceil(T / ceil(T / s))`` of the K-tile count ``T``, which is ``s`` for
    every ``T > s * (s - 1)``; 0.7.2.post1's ``T // 8`` limit on a raised cap
    no longer binds there (``s * (s - 1) >= 8 * s`` once ``s > 48``).  So
    ``u * (u - 1) + 1`` K tiles stand for every longer length.  Proven on
    random arguments (tests/matrix/test_key_proofs.py).  Cost: a few integer
    operations."""
    if type(max_active_blocks) is not int or type(rows) is not int or rows < 1 or max_active_blocks < 0:
        return None
    split = max(1, max_active_blocks // (2 * rows))
    return split * (split - 1) + 1


def saturated_length(max_seq_len: Any, max_active_blocks: Any, rows: Any) -> Any:
    """:func:`k_tile_ceiling`, lowered to :func:`saturated_k_tiles` K tiles
    where it is longer (a length that needs no more splits than that)."""
    ceiling = k_tile_ceiling(max_seq_len)
    tiles = saturated_k_tiles(max_active_blocks, rows)
    if tiles is None or type(ceiling) is not int or ceiling <= tiles * K_TILE:
        return ceiling
    return tiles * K_TILE


SEARCH_LOWEST_PROBE = 2
"""The smallest batch size the cute-dsl batch-cap search asks the sizer about:
its probe ``(lo + hi + 1) // 2`` with ``1 <= lo < hi`` is at least 2."""


def lowest_probe(cap: int, candidate_max: int) -> int:
    """The smallest batch size the batch-cap search asks the sizer about on its
    way to ``cap``: the search is a binary search over ``1..candidate_max`` whose
    answer at each probe is "fits" exactly when the probe is at most the cap
    it returns, so its path is a function of that cap alone.  Cost: about 13
    integer steps."""
    lo, hi, lowest = 1, max(1, candidate_max), max(1, candidate_max)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lowest = min(lowest, mid)
        if mid <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lowest


def cap_holds_at(max_seq_len: Any, max_active_blocks: Any, cap: int, candidate_max: int) -> bool:
    """Whether the batch cap found at the fully saturated length (:func:`saturated_length`
    for :data:`SEARCH_LOWEST_PROBE` rows) is the cap at ``max_seq_len`` too: true when
    the length is past the saturation of every probe on the search's path to that cap
    (:func:`lowest_probe`), so every probe has the same answer and the path is the
    same.  With a real SM count the probes are thousands of requests, one split
    each, and every length qualifies."""
    ceiling = k_tile_ceiling(max_seq_len)
    tiles = saturated_k_tiles(max_active_blocks, lowest_probe(cap, candidate_max))
    return tiles is not None and type(ceiling) is int and ceiling >= tiles * K_TILE


def monolithic_split_kv_key(layout: ArgumentLayout) -> Callable[[tuple[Any, ...]], Optional[tuple[Any, ...]]]:
    """Key of the monolithic cute-dsl sizer (``cute_dsl.mla_decode`` /
    ``attention.monolithic.mla_decode``): ``max_seq_len`` -> :func:`saturated_length`
    for the call's batch size (or ``occupancy_q_tiles`` where given, which may be
    smaller) and SM count.  Without those parameters, :func:`split_kv_key`'s key."""
    at = layout.index
    position, batch, blocks = at.get("max_seq_len"), at.get("B"), at.get("max_active_blocks")
    occupancy = at.get("occupancy_q_tiles")
    if position is None or batch is None or blocks is None:
        return split_kv_key(layout)

    def key(values: tuple[Any, ...]) -> Optional[tuple[Any, ...]]:
        rows = values[batch] if occupancy is None or values[occupancy] is None else values[occupancy]
        length = saturated_length(values[position], values[blocks], rows)
        return (*values[:position], length, *values[position + 1 :])

    return key


def batch_cap_key(layout: ArgumentLayout) -> Callable[[tuple[Any, ...]], Optional[tuple[Any, ...]]]:
    """Key of the cute-dsl batch cap (``_cute_dsl_max_supported_batch``).
    The search reads ``max_seq_len`` only to hand it to the sizer at each step,
    with batch sizes of at least :data:`SEARCH_LOWEST_PROBE`: keyed on
    :func:`saturated_length` for that many rows and the call's SM count (at
    most a few thousand K-tile classes at any context).  A call with ``sinks``
    (tensors that choose the sizer) is not keyed: it goes to flashinfer's
    function, which caches nothing."""
    at = layout.index
    position, blocks, sinks = at.get("max_seq_len"), at.get("max_active_blocks"), at.get("sinks")
    if position is None or blocks is None:
        by_k_tile = split_kv_key(layout)
    else:

        def by_k_tile(values: tuple[Any, ...]) -> Optional[tuple[Any, ...]]:
            length = saturated_length(values[position], values[blocks], SEARCH_LOWEST_PROBE)
            return (*values[:position], length, *values[position + 1 :])

    def key(values: tuple[Any, ...]) -> Optional[tuple[Any, ...]]:
        return None if sinks is not None and values[sinks] is not None else by_k_tile(values)

    return key


__all__ = [
    "K_TILE",
    "SEARCH_LOWEST_PROBE",
    "batch_cap_key",
    "cap_holds_at",
    "k_tile_ceiling",
    "lowest_probe",
    "monolithic_split_kv_key",
    "saturated_k_tiles",
    "saturated_length",
    "split_kv_key",
]
