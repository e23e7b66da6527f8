"""support.flashinfer_refusal: which errors count as flashinfer refusing a call.

The release suite skips what the device refuses, whatever type flashinfer
raises, and must still fail on an error of fi_compat's or of the test's own.
Functions are compiled under module names (``flashinfer.*``, ``fi_compat.*``)
so the traceback looks as it does on a device; no flashinfer is imported.
Milliseconds.
"""

from __future__ import annotations

import sys
import types

import pytest

from helpers.support import flashinfer_refusal, raised_by_flashinfer


def function_in(module: str, body: str, **names):
    """A function whose frame belongs to ``module`` (its globals' ``__name__``)."""
    namespace = {"__name__": module, **names}
    exec(compile(f"def f(*args):\n    {body}\n", f"<{module}>", "exec"), namespace)
    return namespace["f"]


def test_any_error_raised_inside_flashinfer_is_its_refusal():
    tuner = function_in("flashinfer.autotuner", "return args[0].dynamic_tensor_specs")
    refusal = flashinfer_refusal(lambda: tuner(8))
    assert isinstance(refusal, AttributeError) and "dynamic_tensor_specs" in str(refusal)


def test_an_error_of_a_library_below_flashinfer_is_flashinfers_refusal():
    torch_like = function_in("torch.cuda", "raise RuntimeError('no kernel image for sm_90')")
    shim = function_in("fi_compat.workload.cpu_host", "return g()", g=torch_like)  # the host stand-in
    caller = function_in("flashinfer.mla._core", "return g()", g=shim)
    assert isinstance(flashinfer_refusal(caller), RuntimeError)


def test_an_error_of_fi_compat_fails_even_when_flashinfer_called_it():
    bug = function_in("fi_compat.memo.cache", "raise ValueError('fi_compat bug')")
    caller = function_in("flashinfer.mla._core", "return g()", g=bug)
    with pytest.raises(ValueError, match="fi_compat bug"):
        flashinfer_refusal(caller)
    wrapper = function_in("fi_compat.calls.call_api", "return args[0].shape")  # before flashinfer is reached
    with pytest.raises(AttributeError):
        flashinfer_refusal(lambda: wrapper(1))


def test_an_error_of_the_tests_own_code_fails():
    with pytest.raises(KeyError):
        flashinfer_refusal(lambda: {}["query"])
    try:
        {}["query"]
    except KeyError as error:
        assert not raised_by_flashinfer(error)


def test_a_call_that_returns_is_no_refusal_and_skips_pass_through():
    assert flashinfer_refusal(function_in("flashinfer.mla", "return 1")) is None
    skipping = function_in("flashinfer.mla", "skip('not here')", skip=pytest.skip)
    with pytest.raises(pytest.skip.Exception):
        flashinfer_refusal(skipping)


@pytest.fixture
def flashinfer_module(monkeypatch):
    """A loaded ``flashinfer.*`` module defining ``decode(query)``, as an older
    release's decode function without a newer keyword."""
    module = types.ModuleType("flashinfer._refusal_fake")
    decode = function_in(module.__name__, "return args")
    decode.__name__ = decode.__qualname__ = "decode_without_dcp"
    module.decode_without_dcp = decode
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_a_keyword_the_releases_signature_lacks_is_its_refusal(flashinfer_module):
    decode = flashinfer_module.decode_without_dcp
    refusal = flashinfer_refusal(lambda: decode(1, enable_dcp=True))  # raised in the caller's frame
    assert isinstance(refusal, TypeError) and "unexpected keyword argument 'enable_dcp'" in str(refusal)


def test_the_same_keyword_passed_on_by_fi_compat_fails(flashinfer_module):
    passes_on = function_in("fi_compat.calls.call_api", "return g(1, enable_dcp=True)", g=flashinfer_module.decode_without_dcp)
    with pytest.raises(TypeError, match="enable_dcp"):
        flashinfer_refusal(passes_on)


def test_a_signature_refusal_of_the_tests_own_function_fails(flashinfer_module):
    def helper(query):
        return query

    with pytest.raises(TypeError, match="unexpected keyword"):
        flashinfer_refusal(lambda: helper(1, enable_dcp=True))
