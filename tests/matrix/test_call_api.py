"""Issue 4 on the installed real release: mla_decode, transparent mode, gating.

The replay follows TensorRT-LLM's call pattern (16 positional arguments,
a different max_seq_len every batch) and compares every recorded kernel launch
with the launch unpatched flashinfer makes for the same batch.
"""

from __future__ import annotations

import gc
from array import array
import inspect
import os
import random
import tracemalloc

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.specs import DECODE

DECODE_KEYWORD_ADDED_IN = DECODE.added_in_map()
from fi_compat.errors import UnsupportedFeatureError
from fi_compat.policy import apply_max_seq_len_policy

from support import decode_inputs, installed_release, launch_signature, trtllm_call

torch = pytest.importorskip("torch")

#: The issue asks for 20,000 batches on these releases; the rest of the matrix
#: replays 2,000 to keep the CPU matrix inside its time budget.
FULL_REPLAY = {"0.6.15", "0.6.17", "0.6.18", "0.7.4"}
PAGE, WIDTH = 32, 4096


def batches() -> int:
    override = os.environ.get("FI_COMPAT_REPLAY_BATCHES")
    if override:
        return int(override)
    return 20_000 if installed_release().public in FULL_REPLAY else 2_000


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
    gc.collect()
    if measure_memory:
        tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0] if measure_memory else 0
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
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - start if measure_memory else None
    finally:
        if measure_memory:
            tracemalloc.stop()
    return list(zip(signatures, seq_lens)), growth


@pytest.fixture(scope="module")
def unpatched_replay(fi_cpu_host):
    """The batches and what unpatched flashinfer launches for them, computed once."""
    import flashinfer.mla

    fi_compat.uninstall()
    rng = random.Random(4647)
    lengths = [rng.randint(1, PAGE * WIDTH - 1) for _ in range(batches())]
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
    from fi_compat.call_api import DECODE_DEFAULTS

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

    arguments = dict(
        kv_cache=torch.empty(64, 32, 576, device="meta"),
        block_tables=torch.empty(2, 64, dtype=torch.int32, device="meta"),
        workspace_buffer=torch.empty(1 << 20, dtype=torch.uint8, device="meta"),
        runner_names=["trtllm-gen"], q_len=1, num_heads=128, kv_lora_rank=512, max_seq_len=1024,
        device=torch.device("cpu"),
    )
    expected = core._build_mla_decode_tuning_config(**arguments)
    config = fi_compat.build_mla_decode_tuning_config(**arguments, cp_world=1, enable_dcp=False)
    assert config.dynamic_tensor_specs[0].gen_tuning_buckets == expected.dynamic_tensor_specs[0].gen_tuning_buckets
    assert fi_compat.build_mla_decode_tuning_config(**arguments) is config
    if installed_release() < Version("0.6.17"):
        with pytest.raises(UnsupportedFeatureError, match="0.6.17"):
            fi_compat.build_mla_decode_tuning_config(**arguments, enable_dcp=True)


# --------------------------------------------------------------------------- binding by name

from support import entry_arguments, launch_scales, sglang_call, vllm_call  # noqa: E402

BMM1, BMM2 = 0.125, 0.5  # distinct from each other and from the defaults, so a swap shows


def _received_by_name(received: dict, given: dict) -> list[str]:
    """Names whose value did not arrive on the parameter of that name."""
    wrong = []
    for name, value in given.items():
        if name not in received:
            continue  # gated (dropped at its default): checked by the caller
        got = received[name]
        if got is not value and not (type(value) in (int, float, str, bool) and got == value):
            wrong.append(f"{name}: sent {value!r}, received {got!r}")
    return wrong


def _counter_buffer(decode) -> dict:
    # SGLang and vLLM pass a persistent counter buffer on releases that have the parameter
    if "multi_ctas_kv_counter_buffer" in installed_parameters(decode):
        return {"multi_ctas_kv_counter_buffer": torch.zeros(1 << 14, dtype=torch.int32)}
    return {}


FORMS = {
    # TensorRT-LLM's 16 positional arguments (support.trtllm_call), with distinct scales
    "trtllm-16-positional": lambda f, t, n, extra: f(
        t["query"], t["kv_cache"], t["workspace_buffer"], 128, 512, 64, t["block_tables"], t["seq_lens"], n, 0,
        t["out"], BMM1, BMM2, None, None, False, backend="trtllm-gen", is_var_seq=True, uses_shared_paged_kv_idx=False,
        **extra),
    "vllm-keywords": lambda f, t, n, extra: vllm_call(f, t, n, bmm1_scale=BMM1, bmm2_scale=BMM2, **extra),
    "sglang-keywords": lambda f, t, n, extra: sglang_call(f, t, n, bmm1_scale=BMM1, **extra),
    "mixed": lambda f, t, n, extra: f(
        t["query"], t["kv_cache"], t["workspace_buffer"], 128, 512, 64, t["block_tables"], t["seq_lens"], n,
        bmm2_scale=BMM2, bmm1_scale=BMM1, uses_shared_paged_kv_idx=False, backend="trtllm-gen", **extra),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_value_reaches_the_parameter_of_its_name(decode, fi_launches, form):
    """TensorRT-LLM's positional call, vLLM's and SGLang's keyword calls and a
    mixed one: the real decode function receives each value under its own
    name, and the launch carries max_seq_len and the two scales where they belong."""
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    extra = _counter_buffer(decode)
    sent: dict = {}

    def spy(*args, **kwargs):  # what the caller gave, by the newest order's names
        sent.update(zip(DECODE.names, args))
        sent.update(kwargs)
        return fi_compat.mla_decode(*args, **kwargs)

    with entry_arguments(decode) as received:
        FORMS[form](spy, tensors, 321, extra)
    assert len(received) == 1
    assert _received_by_name(received[0], sent) == []
    assert launch_scales(fi_launches.launches[-1]) == (321, BMM1, BMM2 if "bmm2_scale" in sent else 1.0)


def test_duplicate_argument_is_fi_compats_type_error_on_every_release(decode, fi_launches):
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    with pytest.raises(TypeError) as info:
        trtllm_call(fi_compat.mla_decode, tensors, 100, bmm2_scale=0.5)
    assert str(info.value) == ("fi_compat.mla_decode() got multiple values for argument 'bmm2_scale': "
                               "positional argument 13 and the keyword bmm2_scale=")
    # past 0.6.13's 22 parameters the keyword used to win silently there
    positional = _positional(tensors) + ("trtllm-gen", True, False, None, False, "auto", "auto")
    assert len(positional) == DECODE.names.index("kv_scale_format") + 1
    with pytest.raises(TypeError, match="got multiple values for argument 'kv_scale_format'"):
        fi_compat.mla_decode(*positional, kv_scale_format="auto")
    assert len(fi_launches.launches) == 0


def test_builder_positional_call_reaches_each_parameter_by_name(fi_cpu_host):
    """All fifteen of 0.7.4's builder parameters positionally.  0.6.16 has
    cute_dsl_impl where 0.7.4 has has_sparse_mla_top_k_lens: the value must
    not land there."""
    import flashinfer.mla._core as core

    fi_compat.uninstall()  # the builder itself, not fi_compat's memo (which normalises max_seq_len)
    values = dict(
        kv_cache=torch.empty(64, 32, 576, device="meta"),
        block_tables=torch.empty(2, 64, dtype=torch.int32, device="meta"),
        workspace_buffer=torch.empty(1 << 20, dtype=torch.uint8, device="meta"), runner_names=["trtllm-gen"],
        q_len=1, num_heads=128, kv_lora_rank=512, max_seq_len=1000, device=torch.device("cpu"),
        has_sparse_mla_top_k_lens=False, cute_dsl_impl="auto", sinks=None, enable_dcp=False, cp_world=1, cp_rank=0,
    )
    assert tuple(values) == BUILDER_NAMES
    with entry_arguments(core._build_mla_decode_tuning_config) as received:
        fi_compat.build_mla_decode_tuning_config(*values.values())
    assert len(received) == 1
    assert _received_by_name(received[0], values) == []
    assert set(received[0]) == set(installed_parameters(core._build_mla_decode_tuning_config))


from fi_compat.specs import TUNING_CONFIG_BUILDER  # noqa: E402

BUILDER_NAMES = TUNING_CONFIG_BUILDER.names


def test_after_uninstall_mla_decode_calls_flashinfer_unpatched_and_never_reinstalls(decode, fi_launches):
    import flashinfer.mla._core as core

    original_builder = core._build_mla_decode_tuning_config
    fi_compat.install()
    fi_compat.uninstall()
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    for length in (100, 200):
        trtllm_call(fi_compat.mla_decode, tensors, length)
        assert fi_launches.launches[-1].max_seq_len == length
    state = fi_compat.status()
    assert state["state"] == "not-installed" and state["patched"] == []
    assert not getattr(core._build_mla_decode_tuning_config, "_fi_compat_wrapper", False)
    assert core._build_mla_decode_tuning_config is original_builder
    # still bound by name and gated
    with pytest.raises(TypeError, match="multiple values for argument 'bmm1_scale'"):
        trtllm_call(fi_compat.mla_decode, tensors, 100, bmm1_scale=2.0)
    if installed_release() < Version("0.6.15"):
        with pytest.raises(UnsupportedFeatureError, match="multi_ctas_kv_counter_buffer"):
            trtllm_call(fi_compat.mla_decode, tensors, 100, multi_ctas_kv_counter_buffer=torch.zeros(8))
    assert fi_compat.status()["state"] == "not-installed"


# --------------------------------------------------------------------------- max_seq_len range

OUT_OF_RANGE = [0, -1, -2**31, 2**31, 2**63, True, False]


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=repr)
def test_flashinfer_launches_max_seq_len_that_fi_compat_refuses(decode, fi_launches, value):
    """The documented difference (docs/design.md, "max_seq_len validation"):
    flashinfer's host code takes any int, bools included, and launches with
    it; fi_compat refuses it before flashinfer runs.  If a release starts
    checking, this fails and the docs need updating."""
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    trtllm_call(decode, tensors, value)
    assert launch_scales_any(fi_launches.launches[-1])[0] == value
    fi_launches.clear()
    with pytest.raises(ValueError, match="max_seq_len"):
        trtllm_call(fi_compat.mla_decode, tensors, value)
    assert len(fi_launches.launches) == 0


def launch_scales_any(launch) -> tuple:
    """Like support.launch_scales, for a max_seq_len that may be a bool: the
    value right before bmm1_scale (the launch's first float)."""
    at = next(i for i, a in enumerate(launch.args) if type(a) is float)
    return launch.args[at - 1], launch.args[at], launch.args[at + 1]


def test_integer_types_are_passed_on_as_int(decode, fi_launches):
    """numpy integers make every release's own host path raise
    (AttributeError: no bit_length) on the auto backend; fi_compat passes the int."""
    np = pytest.importorskip("numpy")
    tensors = decode_inputs(torch, page_size=PAGE, width=64)
    for value in (np.int64(300), np.int32(301)):
        vllm_call(fi_compat.mla_decode, tensors, value, **_counter_buffer(decode))
        launched = launch_scales(fi_launches.launches[-1])[0]
        assert type(launched) is int and launched == int(value)
    with pytest.raises(ValueError, match=r"max_seq_len=tensor\(300\) \(Tensor\) is not an int.*pass .item\(\)"):
        trtllm_call(fi_compat.mla_decode, tensors, torch.tensor(300))
