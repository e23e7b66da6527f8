"""The cute-dsl batch cap as the tuning-config builder computes it, for the builder memo's key.

The builder's buckets read the cute-dsl batch cap (a binary search over the
sizer); the builder memo's key holds the cap itself, computed here through the
bounded batch-cap memo, so a key costs one memo hit rather than a search.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, cast

from ..model import specs
from .sizer_keys import K_TILE, SEARCH_LOWEST_PROBE, cap_holds_at, lowest_probe, saturated_k_tiles

_MAX_BATCH = "_TRTLLM_GEN_MLA_MAX_BATCH"


_SEARCH_ORDER = (
    "workspace_bytes",
    "q_len",
    "num_heads",
    "kv_lora_rank",
    "max_active_blocks",
    "max_seq_len",
    "candidate_max",
    "cute_dsl_impl",
    "sinks",
    "enable_dcp",
)
"""``_cute_dsl_max_supported_batch``'s parameters in its own order (0.6.16 - 0.7.4;
0.6.16 lacks ``enable_dcp``): a search whose parameters are a prefix of these is
called positionally, which the memo keys without binding keywords."""


def _call(search: Callable[..., Any], resolved: list[Any], values: list[Any]) -> Any:
    """``search`` on ``values`` (in :data:`_SEARCH_ORDER`): positionally where its
    parameters are a prefix of that order, else by keyword with those it takes."""
    prefix = resolved[1]
    if prefix is not None:
        return search(*values[:prefix])
    return search(**{k: v for k, v in zip(_SEARCH_ORDER, values) if k in resolved[2]})


_MODELS = 64
"""Models (workspace, heads, rank, SM count, ...) whose saturated cap :func:`batch_cap_of`
keeps; past that it forgets them all (an engine serves one or two)."""


def _saturated_cap(
    search: Callable[..., Any], resolved: list[Any], values: list[Any], blocks: Any, candidate_max: Any
) -> tuple[Optional[int], int]:
    """The cap at the fully saturated length (through the batch-cap memo) and the
    length past which it is the cap at any length (``cap_holds_at``), or ``(None, 0)``."""
    tiles = saturated_k_tiles(blocks, SEARCH_LOWEST_PROBE)
    if tiles is None or type(candidate_max) is not int:
        return None, 0
    cap = _call(search, resolved, [*values[:5], tiles * K_TILE, *values[6:]])
    if type(cap) is not int:
        return None, 0
    probe_tiles = saturated_k_tiles(blocks, lowest_probe(cap, candidate_max))
    if probe_tiles is None or not cap_holds_at(probe_tiles * K_TILE, blocks, cap, candidate_max):
        return None, 0
    return cap, (probe_tiles - 1) * K_TILE


def batch_cap_of(builder: Callable[..., Any]) -> Optional[Callable[..., Optional[int]]]:
    """The cute-dsl batch cap as ``builder`` computes it, for its memo's key; ``None``
    where the builder's module has no batch cap (TensorRT-LLM's replacement).

    ``_compute_mla_decode_buckets`` calls ``_cute_dsl_max_supported_batch`` by
    keyword with the workspace size, the SM count of the device
    (``cute_dsl.utils.get_num_sm``) and ``_TRTLLM_GEN_MLA_MAX_BATCH`` as the
    candidate maximum; this passes the same values, through the names of the
    builder's own module at call time, so the installed batch-cap memo answers
    it; where that memo is not installed it returns ``None`` (no search per
    call).  Per model it asks once for the cap at the fully saturated length and keeps
    it with the length past which :func:`~fi_compat.adapters.sizer_keys.cap_holds_at`
    proves it is the cap at any length (every length, at a real SM count); a
    call past that length costs one tuple and one dict lookup; others ask the
    batch-cap memo for the cap at their length.  Where the installed search's parameters are a prefix of
    :data:`_SEARCH_ORDER` (every release so far) it is called positionally
    with exactly those; otherwise by keyword with the ones it takes.  Any error
    returns ``None`` (the key then holds the cap's inputs, as without this, and
    the builder raises its own error).  The saturated readings are forgotten
    by the ``cache_clear()`` of the batch-cap memo and of the builder memo (its
    ``fi_compat_forget``).  Cost of a batch-cap hit: about 1.5 us.
    """
    import importlib

    namespace = getattr(builder, "__globals__", None)
    if not isinstance(namespace, dict) or _MAX_BATCH not in namespace:
        return None
    # the search by the name the builder's module binds it under (a declared rename: any of its names)
    name = next((home.name for home in specs.CUTE_DSL_BATCH_CAP.homes() if home.name in namespace), None)
    if name is None:
        return None
    package = namespace.get("__package__") or ""
    # the installed search, the count of its parameters called positionally
    # (None: by keyword) and their names, refreshed when the search is replaced
    resolved: list[Any] = [None, None, frozenset()]
    utils: list[Any] = []
    # per model (the search's arguments but the length): the cap at the fully
    # saturated length and the length past which it is the cap (_saturated_cap)
    saturated: dict[tuple[Any, ...], tuple[Optional[int], int]] = {}

    def batch_cap(
        workspace_bytes: int,
        q_len: Any,
        num_heads: Any,
        kv_lora_rank: Any,
        device: Any,
        max_seq_len: int,
        cute_dsl_impl: Any,
        enable_dcp: Any,
    ) -> Optional[int]:
        try:
            search = namespace[name]
            if not getattr(search, "_fi_compat_memo", False):
                return None  # unbounded (the batch-cap row not installed): a 13-step search per key is no key
            if resolved[0] is not search:
                target = cast(Callable[..., Any], getattr(search, "__wrapped__", search))
                names = tuple(inspect.signature(target).parameters)
                prefix = len(names) if names == _SEARCH_ORDER[: len(names)] else None
                resolved[:] = [search, prefix, frozenset(names)]
                saturated.clear()
                # the readings are the search memo's answers: its cache_clear() forgets them too
                search.fi_compat_cache.forget_with(saturated.clear)
            if not utils:  # the function is read per call, as the builder's own import does
                utils.append(importlib.import_module("..cute_dsl.utils", package))
            blocks, candidate_max = utils[0].get_num_sm(device), namespace[_MAX_BATCH]
            model = (search, workspace_bytes, q_len, num_heads, kv_lora_rank, blocks, candidate_max, cute_dsl_impl,
                     enable_dcp)  # fmt: skip
            values = [workspace_bytes, q_len, num_heads, kv_lora_rank, blocks, max_seq_len, candidate_max,
                      cute_dsl_impl, None, enable_dcp]  # fmt: skip
            known = saturated.get(model)
            if known is None:
                known = _saturated_cap(search, resolved, values, blocks, candidate_max)
                if len(saturated) >= _MODELS:
                    saturated.clear()
                saturated[model] = known
            cap, past = known
            if cap is not None and type(max_seq_len) is int and max_seq_len > past:
                return cap
            cap = _call(search, resolved, values)
        except Exception:  # the builder itself then runs, and raises what it raises
            return None
        return cap if type(cap) is int else None

    batch_cap.fi_compat_forget = saturated.clear  # type: ignore[attr-defined]  # the builder memo's cache_clear()
    return batch_cap


__all__ = ["batch_cap_of"]
