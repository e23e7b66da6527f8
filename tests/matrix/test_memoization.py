"""Issue 3 on the installed real release: parity, bound, identity, cycles.

Runs under the CPU shim on whichever flashinfer release the session installed
(``nox -s matrix`` runs it on every release).  Tensors are on the ``meta``
device: the builder reads shapes only, and 4096-page caches cost nothing.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import random
import tracemalloc

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.adapters import CachedConfigAdapter, FreshConfigAdapter
from fi_compat.adapters.common import profile_ladder

from support import flashinfer_attributes, installed_release

torch = pytest.importorskip("torch")
SAMPLE_BATCHES = (1, 2, 3, 7, 33, 100, 1000, 5000, 9000)


@pytest.fixture
def core(fi_cpu_host):
    import flashinfer.mla._core as core

    return core


def family() -> type:
    return CachedConfigAdapter if CachedConfigAdapter.covers(installed_release()) else FreshConfigAdapter


def builder_parameters(core) -> set[str]:
    return set(inspect.signature(core._build_mla_decode_tuning_config).parameters)


def random_arguments(rng: random.Random, parameters: set[str], device=None) -> dict:
    page_size = rng.choice((16, 32, 64))
    width = rng.choice((1, 8, 64, 512, 4096))
    runner_names = rng.choice((["trtllm-gen"], ["trtllm-gen"], ["trtllm-gen", "cute-dsl"], ["cute-dsl"]))
    arguments = {
        "kv_cache": torch.empty(rng.choice((1, 64, 4096)), page_size, 576, device="meta"),
        "block_tables": torch.empty(rng.choice((1, 4)), width, dtype=torch.int32, device="meta"),
        "workspace_buffer": torch.empty(rng.choice((1 << 20, 128 << 20)), dtype=torch.uint8, device="meta"),
        "runner_names": runner_names,
        "q_len": rng.choice((1, 2)),
        "num_heads": rng.choice((16, 128)),
        "kv_lora_rank": 512,
        "max_seq_len": rng.choice((rng.randint(1, 300), rng.randint(1, 1 << 20), width * page_size)),
        # the cute-dsl cap reads the device's SM count: a real CUDA device on the GPU matrix
        "device": device if device is not None else torch.device("cpu"),
    }
    if "has_sparse_mla_top_k_lens" in parameters:
        sparse = rng.random() < 0.2
        dcp = not sparse and rng.random() < 0.2
        world = rng.choice((2, 4)) if dcp else 1
        arguments.update(has_sparse_mla_top_k_lens=sparse, enable_dcp=dcp, cp_world=world,
                         cp_rank=rng.randrange(world))
    return arguments


def initializers(config) -> dict:
    found = {}
    for spec in config.dynamic_tensor_specs:
        for index, function in zip(spec.input_idx, getattr(spec, "tensor_initializers", None) or ()):
            if function is not None:
                found[index] = function
    for index, function in getattr(config, "tensor_initializers", None) or ():
        found[index] = function
    return found


def fingerprint(config) -> dict:
    """Everything inference and profiling read from a TuningConfig, as values."""
    specs = []
    for spec in config.dynamic_tensor_specs:
        specs.append((tuple(spec.input_idx), tuple(spec.dim_idx), tuple(spec.gen_tuning_buckets),
                      tuple(spec.map_to_tuning_buckets(b) for b in SAMPLE_BATCHES)))
    produced = {}
    for index, function in initializers(config).items():
        torch.manual_seed(1234)
        tensor = function((6,), torch.int32, "cpu")
        produced[index] = (tuple(tensor.shape), str(tensor.dtype), tensor.tolist())
    flags = {
        field.name: repr(getattr(config, field.name))
        for field in dataclasses.fields(config)
        if field.name not in ("dynamic_tensor_specs", "tensor_initializers")
    }
    return {"specs": specs, "initializers": produced, "flags": flags}


def expected_after_normalisation(unpatched: dict, arguments: dict) -> dict:
    """The unpatched fingerprint with fi_compat's one documented change: the
    profile length (seq_lens fill, and the DCP bound derived from it) moves
    down the profile ladder."""
    expected = {**unpatched, "initializers": dict(unpatched["initializers"])}
    shape, dtype, values = unpatched["initializers"][2]
    profile = values[0]
    laddered = profile_ladder(profile)
    assert 0.875 * profile <= laddered <= profile
    expected["initializers"][2] = (shape, dtype, [laddered] * len(values))
    if arguments.get("enable_dcp") and 4 in expected["initializers"]:
        shape, dtype, values = unpatched["initializers"][4]
        world, rank = arguments["cp_world"], arguments["cp_rank"]
        assert values[0] == profile * world + rank  # what flashinfer fills, read back
        expected["initializers"][4] = (shape, dtype, [laddered * world + rank] * len(values))
    return expected


def test_parity_with_unpatched_flashinfer_on_random_arguments(core, fi_device):
    rng = random.Random(20261202)
    parameters = builder_parameters(core)
    argument_sets = [random_arguments(rng, parameters, fi_device) for _ in range(2000)]
    unpatched = [fingerprint(core._build_mla_decode_tuning_config(**a)) for a in argument_sets]
    state = fi_compat.install(maxsize=64)
    assert state["outcome"] == "verified", state["reason"]
    for arguments, before in zip(argument_sets, unpatched):
        after = fingerprint(core._build_mla_decode_tuning_config(**arguments))
        assert after == expected_after_normalisation(before, arguments), arguments
    caches = fi_compat.status()["caches"]
    assert caches["builder"]["hits"] > 0 and caches["builder"]["currsize"] <= 64


def test_equal_keys_return_the_same_object(core):
    fi_compat.install()
    arguments = random_arguments(random.Random(7), builder_parameters(core))
    arguments["runner_names"] = ["trtllm-gen"]
    first = core._build_mla_decode_tuning_config(**arguments)
    # Another max_seq_len on the same ladder step, fresh tensors of equal shape.
    profile = min(arguments["max_seq_len"], arguments["block_tables"].shape[-1] * arguments["kv_cache"].shape[-2])
    again = {**arguments, "kv_cache": torch.empty(arguments["kv_cache"].shape, device="meta"),
             "max_seq_len": profile_ladder(profile)}
    assert core._build_mla_decode_tuning_config(**again) is first


def growth_per_length(core, lengths: range) -> float:
    """tracemalloc growth per distinct max_seq_len through the real builder."""
    kv_cache = torch.empty(2048, 64, 576, device="meta")
    block_tables = torch.empty(4, 8192, dtype=torch.int32, device="meta")  # capacity 524,288
    workspace = torch.empty(1 << 20, dtype=torch.uint8, device="meta")
    arguments = dict(kv_cache=kv_cache, block_tables=block_tables, workspace_buffer=workspace,
                     runner_names=["trtllm-gen"], q_len=1, num_heads=128, kv_lora_rank=512,
                     device=torch.device("cpu"))
    build = core._build_mla_decode_tuning_config
    build(max_seq_len=1, **arguments)
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for length in lengths:
            build(max_seq_len=length, **arguments)
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - start) / len(lengths)
    finally:
        tracemalloc.stop()


def test_unpatched_growth_matches_the_notes(core):
    release = installed_release()
    cached = getattr(core, "_mla_decode_tuning_config", None)
    if cached is not None:
        cached.cache_clear()
    per_length = growth_per_length(core, range(10_000, 13_000))
    if CachedConfigAdapter.covers(release):
        # notes: 1,550 B (0.6.15.post1) to 1,854 B (0.7.4) per distinct length
        assert 1_200 < per_length < 2_500, per_length
    else:
        # notes: 0 B on 0.6.13 - 0.6.15 (no memo; their pathology is the autotuner's)
        assert per_length < 100, per_length
    if cached is not None:
        cached.cache_clear()


def test_bounded_growth_over_100k_distinct_lengths(core):
    state = fi_compat.install(maxsize=256)
    assert state["outcome"] == "verified"
    per_length = growth_per_length(core, range(1_000, 101_000))
    total = per_length * 100_000
    assert total < 1 << 20, f"{total:.0f} bytes for 100,000 distinct max_seq_len"
    for name, stats in fi_compat.status()["caches"].items():
        assert stats["currsize"] <= stats["maxsize"] == 256, (name, stats)
    inner = getattr(core, "_mla_decode_tuning_config", None)
    if inner is not None:
        assert inner.__wrapped__.cache_info().currsize == 0  # flashinfer's own cache stays empty


def test_install_uninstall_cycles_restore_every_attribute(core):
    before = flashinfer_attributes()
    for _ in range(2):
        fi_compat.install()
        assert fi_compat.status()["patched"]
        fi_compat.uninstall()
    assert flashinfer_attributes() == before


def test_cache_info_is_fi_compats_own(core):
    if not hasattr(core, "_mla_decode_tuning_config"):
        pytest.skip("no functools.cache before 0.6.15.post1")
    fi_compat.install(maxsize=8)
    proxy = core._mla_decode_tuning_config
    flashinfers = proxy.__wrapped__
    for length in range(100, 2000, 7):
        proxy((1, 2), 8, length)
    assert proxy.cache_info().maxsize == 8
    assert flashinfers.cache_info().maxsize is None and flashinfers.cache_info().currsize == 0
