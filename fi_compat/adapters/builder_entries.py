"""The tuning-config builder's memo, specialised to each release's signature.

flashinfer calls ``_build_mla_decode_tuning_config`` on every decode (up to
0.7.2.post1, and on 0.7.4 whenever the autotuner chooses), always with every
parameter as a keyword.  A generic ``(*args, **kwargs)`` memo pays, on each of
those calls, for a kwargs dict of 9-15 entries, a lookup of the call's shape
and a gather into the complete argument tuple before it can compute the key.
A function with the builder's own signature pays none of that: Python binds
the keywords straight to its locals, and the key is computed from them.

Each entry below has exactly one release family's parameters (names, order,
defaults); :func:`fast_entry` returns the one whose signature equals the
installed builder's, or ``None`` (then the generic memo serves it: slower,
equally correct).  Every entry computes its key with
:func:`fi_compat.adapters.keys.builder_key_of`, the function the generic memo
uses, so both give the same key for the same call.

Cost of a hit: the key (two shape reads, one tuple) and one lock-free cache
lookup.  A miss, or a call the key cannot take, costs what the generic memo's
does.  Calls that do not bind raise the ``TypeError`` Python raises for the
original (same function name, same parameters).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, cast

from .. import specs
from ..cache import MISSING
from .keys import builder_key_of

Entry = Callable[..., Any]


def _entry_0_6_17(
    original: Callable,
    switch: Any,
    lookup: Callable,
    fill: Callable,
    compute: Callable,
    batch_cap: Optional[Callable[..., Optional[int]]] = None,
) -> Entry:
    """0.6.17 - 0.7.4: fifteen parameters."""

    def _build_mla_decode_tuning_config(
        kv_cache,
        block_tables,
        workspace_buffer,
        runner_names,
        q_len,
        num_heads,
        kv_lora_rank,
        max_seq_len,
        device,
        has_sparse_mla_top_k_lens=False,
        cute_dsl_impl="auto",
        sinks=None,
        enable_dcp=False,
        cp_world=1,
        cp_rank=0,
    ):
        if switch.active:
            key = builder_key_of(
                kv_cache,
                block_tables,
                workspace_buffer,
                runner_names,
                max_seq_len,
                device,
                cute_dsl_impl,
                sinks,
                (q_len, num_heads, kv_lora_rank, has_sparse_mla_top_k_lens, enable_dcp, cp_world, cp_rank),
                batch_cap,
            )
            if key is not None:
                value = lookup(key)
                if value is not MISSING:
                    return value
                arguments = (
                    kv_cache,
                    block_tables,
                    workspace_buffer,
                    runner_names,
                    q_len,
                    num_heads,
                    kv_lora_rank,
                    max_seq_len,
                    device,
                    has_sparse_mla_top_k_lens,
                    cute_dsl_impl,
                    sinks,
                    enable_dcp,
                    cp_world,
                    cp_rank,
                )
                return fill(key, compute, arguments, {}, key)
        return original(
            kv_cache,
            block_tables,
            workspace_buffer,
            runner_names,
            q_len,
            num_heads,
            kv_lora_rank,
            max_seq_len,
            device,
            has_sparse_mla_top_k_lens,
            cute_dsl_impl,
            sinks,
            enable_dcp,
            cp_world,
            cp_rank,
        )

    return _build_mla_decode_tuning_config


def _entry_0_6_16(
    original: Callable,
    switch: Any,
    lookup: Callable,
    fill: Callable,
    compute: Callable,
    batch_cap: Optional[Callable[..., Optional[int]]] = None,
) -> Entry:
    """0.6.16 - 0.6.16.post4: eleven parameters (``cute_dsl_impl``, ``sinks`` added)."""

    def _build_mla_decode_tuning_config(
        kv_cache,
        block_tables,
        workspace_buffer,
        runner_names,
        q_len,
        num_heads,
        kv_lora_rank,
        max_seq_len,
        device,
        cute_dsl_impl="auto",
        sinks=None,
    ):
        if switch.active:
            key = builder_key_of(
                kv_cache,
                block_tables,
                workspace_buffer,
                runner_names,
                max_seq_len,
                device,
                cute_dsl_impl,
                sinks,
                (q_len, num_heads, kv_lora_rank, None, None, None, None),
                batch_cap,
            )
            if key is not None:
                value = lookup(key)
                if value is not MISSING:
                    return value
                arguments = (
                    kv_cache,
                    block_tables,
                    workspace_buffer,
                    runner_names,
                    q_len,
                    num_heads,
                    kv_lora_rank,
                    max_seq_len,
                    device,
                    cute_dsl_impl,
                    sinks,
                )
                return fill(key, compute, arguments, {}, key)
        return original(
            kv_cache,
            block_tables,
            workspace_buffer,
            runner_names,
            q_len,
            num_heads,
            kv_lora_rank,
            max_seq_len,
            device,
            cute_dsl_impl,
            sinks,
        )

    return _build_mla_decode_tuning_config


def _entry_0_6_13(
    original: Callable,
    switch: Any,
    lookup: Callable,
    fill: Callable,
    compute: Callable,
    batch_cap: Optional[Callable[..., Optional[int]]] = None,
) -> Entry:
    """0.6.13 - 0.6.15.post1 (and TensorRT-LLM's replacement of it): nine parameters, no defaults."""

    def _build_mla_decode_tuning_config(
        kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank, max_seq_len, device
    ):
        if switch.active:
            key = builder_key_of(
                kv_cache,
                block_tables,
                workspace_buffer,
                runner_names,
                max_seq_len,
                device,
                None,
                None,
                (q_len, num_heads, kv_lora_rank, None, None, None, None),
                batch_cap,
            )
            if key is not None:
                value = lookup(key)
                if value is not MISSING:
                    return value
                arguments = (
                    kv_cache,
                    block_tables,
                    workspace_buffer,
                    runner_names,
                    q_len,
                    num_heads,
                    kv_lora_rank,
                    max_seq_len,
                    device,
                )
                return fill(key, compute, arguments, {}, key)
        return original(
            kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank, max_seq_len, device
        )

    return _build_mla_decode_tuning_config


ENTRIES = (_entry_0_6_17, _entry_0_6_16, _entry_0_6_13)

_MAX_BATCH = "_TRTLLM_GEN_MLA_MAX_BATCH"


def batch_cap_of(builder: Callable) -> Optional[Callable[..., Optional[int]]]:
    """The cute-dsl batch cap as ``builder`` computes it, for its memo's key; ``None``
    where the builder's module has no batch cap (TensorRT-LLM's replacement).

    ``_compute_mla_decode_buckets`` calls ``_cute_dsl_max_supported_batch`` by
    keyword with the workspace size, the SM count of the device
    (``cute_dsl.utils.get_num_sm``) and ``_TRTLLM_GEN_MLA_MAX_BATCH`` as the
    candidate maximum; this does the same, through the names of the builder's
    own module at call time, so the installed batch-cap memo answers it; where
    that memo is not installed it returns ``None`` (no search per call).  Only
    the keywords the installed search takes are passed.  Any error returns
    ``None`` (the key then holds the cap's inputs, as without this, and the
    builder raises its own error).  Cost of a batch-cap hit: about 2 us.
    """
    import importlib

    namespace = getattr(builder, "__globals__", None)
    name = specs.CUTE_DSL_BATCH_CAP.name
    if not isinstance(namespace, dict) or name not in namespace or _MAX_BATCH not in namespace:
        return None
    package = namespace.get("__package__") or ""
    resolved: dict[str, Any] = {}

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
            if resolved.get("search") is not search:
                target = cast(Callable[..., Any], getattr(search, "__wrapped__", search))
                resolved["search"], resolved["names"] = search, frozenset(inspect.signature(target).parameters)
            if "utils" not in resolved:  # the function is read per call, as the builder's own import does
                resolved["utils"] = importlib.import_module("..cute_dsl.utils", package)
            keywords = {
                "workspace_bytes": workspace_bytes,
                "q_len": q_len,
                "num_heads": num_heads,
                "kv_lora_rank": kv_lora_rank,
                "max_active_blocks": resolved["utils"].get_num_sm(device),
                "max_seq_len": max_seq_len,
                "candidate_max": namespace[_MAX_BATCH],
                "cute_dsl_impl": cute_dsl_impl,
                "sinks": None,
                "enable_dcp": enable_dcp,
            }
            names = resolved["names"]
            cap = search(**{k: v for k, v in keywords.items() if k in names})
        except Exception:  # the builder itself then runs, and raises what it raises
            return None
        return cap if type(cap) is int else None

    return batch_cap


def _parameters(signature: inspect.Signature) -> list[tuple]:
    """What binding depends on: names, kinds and defaults (annotations do not matter)."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def _entry_signature(factory: Callable) -> inspect.Signature:
    return inspect.signature(factory(None, None, None, None, None))


def fast_entry(target: Callable) -> Optional[Callable[..., Entry]]:
    """The entry factory whose signature equals ``target``'s, else ``None``.

    Cost: one ``inspect.signature`` of the target and of each entry (at install)."""
    try:
        wanted = _parameters(inspect.signature(target))
    except (TypeError, ValueError):
        return None
    for factory in ENTRIES:
        if _parameters(_entry_signature(factory)) == wanted:
            return factory
    return None


__all__ = ["ENTRIES", "fast_entry"]
