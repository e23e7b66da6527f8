"""Keys of the tuning config and its builder: how a call's arguments become a key, and why each normalisation is safe.

Every key is computed from the call's arguments *by parameter name*, however
flashinfer passes them (positionally, by keyword, or mixed):
:class:`ArgumentLayout` turns ``(args, kwargs)`` into the complete tuple of the
installed function's parameters, in its own order, defaults filled.  A call
that does not bind gives ``None``; the proxies then take a bounded fallback
(``fi_compat.adapters.bounded_memo``), never flashinfer's unbounded cache.

Normalisations (each proven against the real function in the release matrix,
``tests/matrix/test_key_proofs.py``; docs/design.md has the table):

* :func:`profile_ladder`: ``profile_seq_len`` of the tuning config only fills
  the synthetic ``seq_lens`` used while autotuning;
* :func:`builder_key_of`: the builder reads shapes and scalars, never tensor data;
* :func:`closure_value`: the autotuner's bucket mapper as a value, so the
  nearest-profile memo (:mod:`fi_compat.adapters.bucket_match`) shares its
  entries across the tuning configs of one model.

The cute-dsl sizers' and batch cap's keys (the K-tile count and its saturation)
are :mod:`fi_compat.adapters.sizer_keys`'.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional

from .layout import ArgumentLayout, as_int
from .sizer_keys import k_tile_ceiling

PROFILE_LADDER_BITS = 4
"""Significant bits kept by :func:`profile_ladder`: 8 values per doubling,
never more than 12.5 % below the input.  A 1,048,576-token context needs at
most 8 * 20 + 16 = 176 distinct profile lengths."""


def profile_ladder(length: int) -> int:
    """Round ``length`` *down* to its top :data:`PROFILE_LADDER_BITS` bits.

    Down, never up: the profiling runner is built with the caller's
    ``max_seq_len``, and a profile length above it would break the kernel's
    ``max_seq_len >= max(seq_lens)`` contract while autotuning.  One a little
    below profiles a slightly shorter sequence of the same autotuner bucket
    (the tuned-result key rounds ``max_seq_len`` up to a power of two).
    """
    if length < (1 << PROFILE_LADDER_BITS):
        return length
    shift = length.bit_length() - PROFILE_LADDER_BITS
    return (length >> shift) << shift


def tuning_config_key(layout: ArgumentLayout) -> Callable[[tuple], Optional[tuple]]:
    """Key (and normalised arguments) of ``_mla_decode_tuning_config``.

    * ``profile_seq_len`` -> :func:`profile_ladder`;
    * ``sparse_top_k_width`` -> 0 when ``has_sparse_mla_top_k_lens`` is false:
      only the sparse top-k initializer reads it, and it exists only when the
      flag is true.
    """
    profile = layout.index["profile_seq_len"]
    sparse = layout.index.get("has_sparse_mla_top_k_lens")
    width = layout.index.get("sparse_top_k_width")

    def key(values: tuple) -> Optional[tuple]:
        length = as_int(values[profile])
        if length is None:
            return None
        normal = list(values)
        normal[profile] = profile_ladder(length)
        if sparse is not None and width is not None and not values[sparse]:
            normal[width] = 0
        try:
            hash(normalised := tuple(normal))
        except TypeError:
            return None
        return normalised

    return key


def closure_value(function: Any) -> Hashable:
    """A pure closure as a value: its code and what it captured.

    Two closures of one code object over equal captured values (and equal
    defaults) compute the same function: flashinfer's ``make_bucket_mapper``
    returns such a closure over ``(sorted buckets, round_map)``, a fresh one
    per tuning config before 0.6.15 (memoized, so one object, from 0.6.15 on).
    Anything else -- not a Python function, or capturing something unhashable
    (possibly mutable) -- stands for itself (identity)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return function
    try:
        captured = tuple(cell.cell_contents for cell in function.__closure__ or ())
        value = (code, captured, function.__defaults__)
        hash(value)
    except (AttributeError, TypeError, ValueError):  # ValueError: an empty cell
        return function
    return value


BUILDER_SCALARS = (
    "q_len",
    "num_heads",
    "kv_lora_rank",
    "has_sparse_mla_top_k_lens",
    "enable_dcp",
    "cp_world",
    "cp_rank",
)
"""Builder parameters that enter the key as they are (absent ones read as ``None``)."""
_CUTE_DSL, _TRTLLM_GEN = "cute-dsl", "trtllm-gen"


def builder_key(
    layout: ArgumentLayout, batch_cap: Optional[Callable[..., Optional[int]]] = None
) -> Callable[[tuple], Optional[Hashable]]:
    """Key of ``_build_mla_decode_tuning_config`` from the complete argument
    tuple: :func:`builder_key_of` on the parameters this release has (absent
    ones read as ``None``).  The decode path's own call never comes here: it
    goes through the signature-specialised entry
    (:mod:`fi_compat.adapters.builder_entries`), which computes the same key."""
    at = layout.index
    kv_cache, tables, length = at["kv_cache"], at["block_tables"], at["max_seq_len"]
    runners, workspace, device = at["runner_names"], at["workspace_buffer"], at["device"]
    impl, sinks = at.get("cute_dsl_impl"), at.get("sinks")
    scalars = tuple(at.get(name) for name in BUILDER_SCALARS)

    def key(values: tuple) -> Optional[Hashable]:
        return builder_key_of(
            values[kv_cache],
            values[tables],
            values[workspace],
            values[runners],
            values[length],
            values[device],
            None if impl is None else values[impl],
            None if sinks is None else values[sinks],
            tuple(None if i is None else values[i] for i in scalars),
            batch_cap,
        )

    return key


def builder_key_of(
    kv_cache: Any,
    block_tables: Any,
    workspace_buffer: Any,
    runner_names: Any,
    max_seq_len: Any,
    device: Any,
    cute_dsl_impl: Any,
    sinks: Any,
    scalars: tuple,
    batch_cap: Optional[Callable[..., Optional[int]]] = None,
) -> Optional[Hashable]:
    """Key of one builder call: shapes and scalars, never tensor data.

    * ``kv_cache.shape[0]`` (pages: seeds the block-table initializer) and
      ``kv_cache.shape[-2]`` (page size);
    * ``profile_ladder(min(max_seq_len, width * page_size))``, the one place
      the block-table width enters the config, except for the sparse top-k
      width (0.6.17 on), read only when ``has_sparse_mla_top_k_lens``: the width
      itself is keyed only then (SGLang's changes every batch);
    * ``runner_names`` and ``scalars`` (:data:`BUILDER_SCALARS`, in that order);
    * only with a ``"cute-dsl"`` runner and no ``"trtllm-gen"`` one: the
      workspace size in bytes, the device (its SM count),
      ``k_tile_ceiling(max_seq_len)`` and ``cute_dsl_impl``, because the
      cute-dsl batch cap is computed from them through the sizer.  With both
      runners (backend ``auto``) the buckets are trtllm-gen's 8,192 whatever
      the cute-dsl cap (the search never goes above that candidate maximum), so
      the key holds no length of its own.  A cute-dsl-only call with ``sinks``
      is not keyed (the cap may depend on them).  With ``batch_cap``
      (:func:`fi_compat.adapters.batch_cap.batch_cap_of`: the cap as the
      builder computes it, through the bounded batch-cap memo) the key holds
      the cap itself instead, the only thing of these the buckets read: one
      entry per profile length, not per K-tile class.

    Returns ``None`` for a call it cannot key (no shapes, a non-integer length).
    Cost: runs on every decode call: two shape reads, one tuple (about 1 us).
    """
    try:
        kv_shape = kv_cache.shape
        width = block_tables.shape[-1]
        runner_names = tuple(runner_names)
        page_size, num_pages = kv_shape[-2], kv_shape[0]
    except (AttributeError, IndexError, TypeError):
        return None
    if type(max_seq_len) is not int:
        max_seq_len = as_int(max_seq_len)
        if max_seq_len is None:
            return None
    cute: Optional[tuple] = None
    if _CUTE_DSL in runner_names and _TRTLLM_GEN not in runner_names:
        if sinks is not None:
            return None
        try:
            workspace_bytes = workspace_buffer.numel() * workspace_buffer.element_size()
        except AttributeError:
            return None
        cap = (
            None
            if batch_cap is None
            else batch_cap(
                workspace_bytes,
                scalars[0],
                scalars[1],
                scalars[2],
                device,
                max_seq_len,
                cute_dsl_impl,
                scalars[4] or False,
            )
        )
        cute = (workspace_bytes, device, k_tile_ceiling(max_seq_len), cute_dsl_impl) if cap is None else (cap,)
    capacity = width * page_size
    return (
        num_pages,
        page_size,
        width if scalars[3] else None,
        profile_ladder(max_seq_len if max_seq_len < capacity else capacity),
        runner_names,
        cute,
        scalars,
    )


def fresh_builder_arguments(layout: ArgumentLayout) -> Callable[[tuple], tuple]:
    """Arguments for a builder without flashinfer's own config memo (0.6.13 - 0.6.15):
    ``max_seq_len`` moved to the key's profile length, so equal keys build
    equal configs (those releases use ``max_seq_len`` for the profile only)."""
    at = layout.index
    kv_cache, tables, length = at["kv_cache"], at["block_tables"], at["max_seq_len"]

    def arguments(values: tuple) -> tuple:
        capacity = values[tables].shape[-1] * values[kv_cache].shape[-2]
        profile = profile_ladder(min(as_int(values[length]) or 0, capacity))
        return (*values[:length], profile, *values[length + 1 :])

    return arguments


__all__ = [
    "BUILDER_SCALARS",
    "PROFILE_LADDER_BITS",
    "builder_key",
    "builder_key_of",
    "closure_value",
    "fresh_builder_arguments",
    "profile_ladder",
    "tuning_config_key",
]
