"""The call API binds by name, on the installed real release: what flashinfer's
decode function and builder receive, parameter by parameter, for the engines'
call forms; duplicate arguments; no reinstall after ``uninstall()``; the
max_seq_len range fi_compat accepts against flashinfer's own.

Synthetic releases with drifted signatures: tests/matrix/test_drift_catalogue.py.
"""

from __future__ import annotations

import inspect

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.workload.builder import builder_arguments
from fi_compat.errors import UnsupportedFeatureError
from fi_compat.model.specs import DECODE, TUNING_CONFIG_BUILDER

from helpers import device_gate
from helpers.support import (decode_inputs, describe_error, entry_arguments, flashinfer_refusal, installed_release,
                     launch_scales, sglang_call, trtllm_call, vllm_call)

torch = pytest.importorskip("torch")

PAGE = 32
BUILDER_NAMES = TUNING_CONFIG_BUILDER.names


@pytest.fixture
def decode(fi_cpu_host):
    """flashinfer's decode function as imported (unpatched while no install)."""
    import flashinfer.mla

    return getattr(flashinfer.mla, DECODE.name)


def installed_parameters(function) -> dict:
    return dict(inspect.signature(function).parameters)


def _positional(tensors):
    """TensorRT-LLM's 16 positional arguments (support.trtllm_call), max_seq_len 100."""
    return (tensors["query"], tensors["kv_cache"], tensors["workspace_buffer"], 128, 512, 64,
            tensors["block_tables"], tensors["seq_lens"], 100, 0, tensors["out"], 1.0, 1.0, None, None, False)



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
#: The backend each form sends (None: omitted, flashinfer's "auto").
FORM_BACKENDS = {"trtllm-16-positional": "trtllm-gen", "vllm-keywords": None, "sglang-keywords": None,
                 "mixed": "trtllm-gen"}


def accepted_or_skip(call, what: str, backend) -> None:
    """Skip where this device cannot run ``backend`` (tests/helpers/device_gate.py:
    on an SM90 device the auto backend picks XQA, which needs SM120); then run
    ``call`` through flashinfer alone and skip, naming flashinfer's error, where
    the release refuses it, whatever the error's type; an error that is not
    flashinfer's fails the test."""
    device_gate.require_backend(backend)
    refusal = flashinfer_refusal(call)
    if refusal is not None:
        pytest.skip(f"flashinfer {installed_release()} rejects {what} on this host: {describe_error(refusal)}")


@pytest.mark.parametrize("form", list(FORMS))
def test_every_value_reaches_the_parameter_of_its_name(decode, fi_launches, fi_device, form):
    """TensorRT-LLM's positional call, vLLM's and SGLang's keyword calls and a
    mixed one: the real decode function receives each value under its own
    name, and the launch carries max_seq_len and the two scales where they belong."""
    with torch.device(fi_device):
        tensors = decode_inputs(torch, page_size=PAGE, width=64)
        extra = _counter_buffer(decode)
    accepted_or_skip(lambda: FORMS[form](decode, tensors, 321, extra), f"the {form} call", FORM_BACKENDS[form])
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
    values = builder_arguments(
        max_seq_len=1000,
        has_sparse_mla_top_k_lens=False, cute_dsl_impl="auto", sinks=None, enable_dcp=False, cp_world=1, cp_rank=0,
    )
    assert tuple(values) == BUILDER_NAMES
    with entry_arguments(core._build_mla_decode_tuning_config) as received:
        fi_compat.build_mla_decode_tuning_config(*values.values())
    assert len(received) == 1
    assert _received_by_name(received[0], values) == []
    assert set(received[0]) == set(installed_parameters(core._build_mla_decode_tuning_config))




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


def test_integer_types_are_passed_on_as_int(decode, fi_launches, fi_device):
    """numpy integers make every release's own host path raise
    (AttributeError: no bit_length) on the auto backend; fi_compat passes the int."""
    np = pytest.importorskip("numpy")
    with torch.device(fi_device):
        tensors = decode_inputs(torch, page_size=PAGE, width=64)
        extra = _counter_buffer(decode)
    accepted_or_skip(lambda: vllm_call(decode, tensors, 300, **extra), "vLLM's call", None)
    for value in (np.int64(300), np.int32(301)):
        vllm_call(fi_compat.mla_decode, tensors, value, **extra)
        launched = launch_scales(fi_launches.launches[-1])[0]
        assert type(launched) is int and launched == int(value)
    with pytest.raises(ValueError, match=r"max_seq_len=tensor\(300\) \(Tensor\) is not an int.*pass .item\(\)"):
        trtllm_call(fi_compat.mla_decode, tensors, torch.tensor(300))
