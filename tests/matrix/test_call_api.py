"""The call API on the installed real release: mla_decode, transparent mode, gating.

The replay follows TensorRT-LLM's call pattern (16 positional arguments,
a different max_seq_len every batch, ``FI_COMPAT_MATRIX_LENGTHS`` batches) and
compares every recorded kernel launch with the launch unpatched flashinfer
makes for the same batch.
"""

from __future__ import annotations

import inspect
import random
from array import array

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.workload.growth import traced
from fi_compat.workload.builder import builder_arguments
from fi_compat.errors import UnsupportedFeatureError
from fi_compat.calls.policy import apply_max_seq_len_policy
from fi_compat.model.specs import DECODE

from helpers.support import decode_inputs, installed_release, launch_signature, trtllm_call

torch = pytest.importorskip("torch")
DECODE_KEYWORD_ADDED_IN = DECODE.added_in_map()

PAGE, WIDTH = 32, 4096


@pytest.fixture
def decode(fi_cpu_host):
    """flashinfer's decode function as imported (unpatched while no install)."""
    import flashinfer.mla

    return flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla


def replay(function, launches, lengths, tensors, measure_memory=False, reset_nearest_profile=False):
    """Run the batches; return (launch signature, max_seq_len) per batch and,
    when asked, tracemalloc growth (tracing slows the loop about 7x, so only
    the exact-policy runs measure it)."""
    # Preallocated: the test's own bookkeeping must not count as growth.
    signatures = array("q", bytes(8 * len(lengths)))
    seq_lens = array("q", bytes(8 * len(lengths)))
    with traced(measure_memory) as memory:
        for index, length in enumerate(lengths):
            if reset_nearest_profile and index % 256 == 0:
                # Unpatched, the autotuner's nearest-profile lru_cache fills with
                # keys that hash equal and compare unequal: one fresh config per
                # call on 0.6.13 - 0.6.15, one per distinct length up to 0.6.17
                # (its DynamicTensorSpec still carries the initializers), so each
                # call is slower than the last.  Emptying that memo changes nothing
                # a launch receives and keeps the 20,000-batch reference linear.
                from flashinfer.autotuner import AutoTuner

                clear = getattr(AutoTuner._find_nearest_profile, "cache_clear", None)  # no memo from 0.6.18 on
                if clear is not None:
                    clear()
            tensors["seq_lens"].fill_(length)
            trtllm_call(function, tensors, length)
            launch = launches.launches[-1]
            signatures[index] = hash(launch_signature(launch))
            seq_lens[index] = launch.max_seq_len
            launches.clear()
        growth = memory.grown()
    return list(zip(signatures, seq_lens)), growth


@pytest.fixture(scope="module")
def unpatched_replay(fi_cpu_host, fi_matrix_lengths):
    """The batches and what unpatched flashinfer launches for them, computed once."""
    import flashinfer.mla

    fi_compat.uninstall()
    rng = random.Random(4647)
    lengths = [rng.randint(1, PAGE * WIDTH - 1) for _ in range(fi_matrix_lengths)]
    tensors = decode_inputs(torch, page_size=PAGE, width=WIDTH)
    recorded, _ = replay(flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla, fi_cpu_host.recorder, lengths, tensors,
                         reset_nearest_profile=True)
    return lengths, tensors, recorded


@pytest.mark.parametrize(
    "mode,policy",
    [("mla_decode", "exact"), ("transparent", "exact"), ("mla_decode", "bucket"), ("transparent", "capacity")],
)
def test_trtllm_replay_matches_unpatched_except_max_seq_len(unpatched_replay, fi_launches, mode, policy):
    lengths, tensors, unpatched = unpatched_replay
    count = len(lengths)
    if mode == "mla_decode":
        fi_compat.install(max_seq_len_policy=policy)
        function = fi_compat.mla_decode
    else:
        fi_compat.install(max_seq_len_policy=policy, transparent=True)
        import flashinfer.mla

        function = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
        assert getattr(function, "_fi_compat_wrapper", False)
    patched, growth = replay(function, fi_launches, lengths, tensors, measure_memory=policy == "exact")

    assert len(patched) == len(unpatched) == count
    for length, (signature, seq_len), (signature_0, seq_len_0) in zip(lengths, patched, unpatched):
        assert signature == signature_0
        assert seq_len_0 == length
        assert seq_len == apply_max_seq_len_policy(length, policy=policy, page_size=PAGE, capacity=PAGE * WIDTH)
    if growth is not None:
        assert growth < 1 << 20, f"host memory grew {growth} bytes over {count} batches"


def test_transparent_mode_covers_reexports_and_uninstalls(decode):
    import flashinfer.decode
    import flashinfer.mla

    original = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    state = fi_compat.install(transparent=True)
    assert "flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla" in state["patched"]
    assert "flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla" in state["patched"]
    for module in (flashinfer.mla, flashinfer.decode):
        proxy = module.trtllm_batch_decode_with_kv_cache_mla
        assert proxy._fi_compat_wrapper and proxy.__wrapped__ is original
    fi_compat.uninstall()
    assert flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla is original
    assert flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla is original


def installed_parameters(decode) -> dict:
    return dict(inspect.signature(decode).parameters)


@pytest.mark.parametrize("keyword", sorted(DECODE_KEYWORD_ADDED_IN))
def test_keyword_table_matches_the_real_signature(decode, keyword):
    release = installed_release()
    present = keyword in installed_parameters(decode)
    assert present == (release >= Version(DECODE_KEYWORD_ADDED_IN[keyword])), (keyword, str(release))


GATING_VALUES = {
    "kv_scale_format": "fp8", "cum_seq_lens_q": "tensor", "max_q_len": 4, "multi_ctas_kv_counter_buffer": "tensor",
    "sparse_mla_top_k_lens": "tensor", "enable_dcp": True, "cp_world": 2, "cp_rank": 1,
    "causal_seqlens_kv_global": "tensor", "use_fp16_softmax": True, "return_lse_base": "base2",
}


@pytest.mark.parametrize("keyword", sorted(DECODE_KEYWORD_ADDED_IN))
def test_gating_on_releases_older_than_the_keyword(decode, fi_launches, keyword):
    release = installed_release()
    added_in = DECODE_KEYWORD_ADDED_IN[keyword]
    if release >= Version(added_in):
        pytest.skip(f"{keyword} exists in {release}; gating is tested on older releases")
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    value = GATING_VALUES[keyword]
    if value == "tensor":
        value = torch.zeros(4, dtype=torch.int32)
    with pytest.raises(UnsupportedFeatureError) as info:
        trtllm_call(fi_compat.mla_decode, tensors, 100, **{keyword: value}) if keyword != "multi_ctas_kv_counter_buffer" \
            else fi_compat.mla_decode(*_positional(tensors), backend="trtllm-gen", is_var_seq=True,
                                      uses_shared_paged_kv_idx=False, multi_ctas_kv_counter_buffer=value)
    message = str(info.value)
    assert keyword in message and added_in in message and str(release) in message
    assert fi_launches.launches == type(fi_launches.launches)(maxlen=fi_launches.launches.maxlen)
    # at its default the keyword is dropped and the call goes through
    from fi_compat.calls.call_api import DECODE_DEFAULTS

    fi_compat.mla_decode(*_positional(tensors), backend="trtllm-gen", is_var_seq=True,
                         uses_shared_paged_kv_idx=False, **{keyword: DECODE_DEFAULTS[keyword]})
    assert fi_launches.launches[-1].max_seq_len == 100


def _positional(tensors):
    return (tensors["query"], tensors["kv_cache"], tensors["workspace_buffer"], 128, 512, 64,
            tensors["block_tables"], tensors["seq_lens"], 100, 0, tensors["out"], 1.0, 1.0, None, None, False)


@pytest.mark.parametrize("bad", [0, -5, 2**31, True, 12.0, "4096", None])
def test_invalid_max_seq_len_stops_before_flashinfer(decode, fi_launches, bad):
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    with pytest.raises(ValueError, match="max_seq_len"):
        trtllm_call(fi_compat.mla_decode, tensors, bad)
    assert len(fi_launches.launches) == 0


def test_unknown_policy_and_keyword(decode):
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    with pytest.raises(ValueError, match="accepted: exact, bucket, capacity"):
        trtllm_call(fi_compat.mla_decode, tensors, 100, max_seq_len_policy="round")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        trtllm_call(fi_compat.mla_decode, tensors, 100, bogus=1)


def test_stable_builder_api_matches_flashinfer(fi_cpu_host):
    import flashinfer.mla._core as core

    arguments = builder_arguments(max_seq_len=1024)
    expected = core._build_mla_decode_tuning_config(**arguments)
    config = fi_compat.build_mla_decode_tuning_config(**arguments, cp_world=1, enable_dcp=False)
    assert config.dynamic_tensor_specs[0].gen_tuning_buckets == expected.dynamic_tensor_specs[0].gen_tuning_buckets
    assert fi_compat.build_mla_decode_tuning_config(**arguments) is config
    if installed_release() < Version("0.6.17"):
        with pytest.raises(UnsupportedFeatureError, match="0.6.17"):
            fi_compat.build_mla_decode_tuning_config(**arguments, enable_dcp=True)



def test_a_builder_renamed_in_a_later_release_is_found_by_its_name_here(fi_cpu_host, monkeypatch):
    """The spec line for a rename upstream makes in the next release (``renamed_to(new,
    in_release=next)``): on the release installed here, which still has the old name, the call
    API finds the builder at the home the spec gives this release, and answers as flashinfer does."""
    import dataclasses

    import flashinfer.mla._core as core

    from fi_compat.installing import installer
    from fi_compat.model import specs

    spec = specs.TUNING_CONFIG_BUILDER
    later = f"{Version(installed_release().base_version).major}.{Version(installed_release().base_version).minor + 1}.0"
    renamed = spec.renamed_to("_build_mla_decode_tuning_config_next", in_release=later)
    for field in dataclasses.fields(renamed):  # the one spec object every caller holds, as an edit of specs.py
        if getattr(renamed, field.name) != getattr(spec, field.name):
            monkeypatch.setitem(spec.__dict__, field.name, getattr(renamed, field.name))
    installer.reset()
    arguments = builder_arguments(max_seq_len=2048)
    expected = core._build_mla_decode_tuning_config(**arguments)
    config = fi_compat.build_mla_decode_tuning_config(**arguments)
    assert config.dynamic_tensor_specs[0].gen_tuning_buckets == expected.dynamic_tensor_specs[0].gen_tuning_buckets
