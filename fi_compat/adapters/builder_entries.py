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

Each entry is also the runtime watch's heartbeat: one clock reading compared
with :data:`fi_compat.memo.proxies.WATCH_DUE` per call (about 0.1 us), and the
watch's step when one is due, so a decode path that builds a tuning config
needs no pass-through in front of the decode function.

Cost of a hit: the heartbeat, the key (two shape reads, one tuple) and one lock-free cache
lookup.  A miss, or a call the key cannot take, costs what the generic memo's
does.  Calls that do not bind raise the ``TypeError`` Python raises for the
original (same function name, same parameters).
"""

from __future__ import annotations

import inspect
from time import perf_counter as _clock
from typing import Any, Callable, Optional

from ..memo.cache import MISSING
from ..memo.proxies import WATCH_DUE as _watch_due
from ..memo.proxies import WATCH_STEP as _watch_step
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
        if _clock() >= _watch_due[0]:  # the runtime watch's heartbeat (fi_compat.memo.proxies.WATCH_DUE)
            _watch_step[0]()
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
        if _clock() >= _watch_due[0]:  # the runtime watch's heartbeat (fi_compat.memo.proxies.WATCH_DUE)
            _watch_step[0]()
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
        if _clock() >= _watch_due[0]:  # the runtime watch's heartbeat (fi_compat.memo.proxies.WATCH_DUE)
            _watch_step[0]()
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
