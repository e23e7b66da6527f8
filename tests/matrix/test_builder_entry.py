"""The builder memo specialised to the installed release's signature
(fi_compat/adapters/builder_entries.py), against the real builder.

On every release the decode path's call must reach the specialised function
(not the generic ``(*args, **kwargs)`` memo), bind exactly as the original
does, and key each call exactly as the generic memo would.
"""

from __future__ import annotations

import inspect

import pytest

import fi_compat
from fi_compat.installing import installer
from fi_compat.adapters import keys
from fi_compat.adapters.builder_entries import fast_entry
from fi_compat.workload import workload

torch = pytest.importorskip("torch")


@pytest.fixture
def core(fi_cpu_host):
    import flashinfer.mla._core as core

    return core


def builder_keywords(function, t, runner_names, max_seq_len):
    """Every parameter the builder accepts, as flashinfer's decode passes them (keywords)."""
    everything = dict(
        kv_cache=t.kv_cache, block_tables=t.block_tables, workspace_buffer=t.workspace_buffer,
        runner_names=list(runner_names), q_len=1, num_heads=workload.HEADS, kv_lora_rank=workload.KV_LORA_RANK,
        max_seq_len=max_seq_len, device=t.query.device, has_sparse_mla_top_k_lens=False, cute_dsl_impl="auto",
        sinks=None, enable_dcp=False, cp_world=1, cp_rank=0,
    )
    accepted = inspect.signature(function).parameters
    return {name: value for name, value in everything.items() if name in accepted}


def test_every_release_builder_has_a_specialised_entry(core):
    assert fast_entry(core._build_mla_decode_tuning_config) is not None


def test_the_installed_builder_binds_like_the_original_and_keys_like_the_generic_memo(core):
    original = core._build_mla_decode_tuning_config
    layout = keys.ArgumentLayout.of(original)
    generic_key = keys.builder_key(layout)
    state = fi_compat.install()
    assert state["state"] == "installed", state
    builder = core._build_mla_decode_tuning_config
    assert builder is not original and builder.__wrapped__ is original
    # its own parameters (not just what __wrapped__ reports) are the original's
    own = inspect.signature(builder, follow_wrapped=False).parameters.values()
    assert [(p.name, p.kind, p.default) for p in own] == \
        [(p.name, p.kind, p.default) for p in inspect.signature(original).parameters.values()]

    cache = installer._state.installation.caches["builder"]
    t = workload.make_inputs(torch, "vllm", batch=4, width=64, num_pages=256, workspace_bytes=1 << 20)
    runner_sets = [("trtllm-gen",)]
    if "cute_dsl_impl" in layout.index:
        runner_sets.append(("trtllm-gen", "cute-dsl"))
    for runners in runner_sets:
        for length in (1, 127, 128, 129, 1000, 4095, 4096):
            arguments = builder_keywords(original, t, runners, length)
            config = builder(**arguments)
            # the key the specialised entry stored is the generic memo's key for the same call
            expected = generic_key(layout.complete((), arguments))
            assert cache.keys_by_recency()[-1] == expected
            # positional and keyword calls of one key are one object
            positional = tuple(arguments[name] for name in layout.names if name in arguments)
            assert builder(*positional) is config
    stats = cache.stats()
    assert stats.hits >= stats.misses > 0


def test_calls_that_do_not_bind_fail_as_the_original_does(core):
    original = core._build_mla_decode_tuning_config
    fi_compat.install()
    builder = core._build_mla_decode_tuning_config
    for bad_args, bad_kwargs in (((1, 2), {}), ((), {"no_such_parameter": 1})):
        with pytest.raises(TypeError) as ours:
            builder(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError) as theirs:
            original(*bad_args, **bad_kwargs)
        assert str(ours.value) == str(theirs.value)


def test_a_decode_call_hits_the_specialised_entry(core, fi_launches):
    """flashinfer's own decode reaches the builder through the entry, and hits it."""
    import flashinfer.mla

    fi_compat.install()
    cache = installer._state.installation.caches["builder"]
    t = workload.make_inputs(torch, "trtllm", batch=4, width=64, num_pages=256, workspace_bytes=1 << 20)
    decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    before = cache.stats()
    for length in (1000, 1001, 1002):
        workload.trtllm_call(decode, t, length)
    after = cache.stats()
    lookups = (after.hits + after.misses) - (before.hits + before.misses)
    # 0.7.4 skips the builder for an explicit backend="trtllm-gen"; every other release looks it up once
    assert lookups in (0, 3)
    if lookups:
        assert after.hits - before.hits >= 2  # 1000-1002 share one profile length
