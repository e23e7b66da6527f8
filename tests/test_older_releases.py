"""Releases older than the matrix that engines ship (issue #25): 0.6.4 (TensorRT-LLM 1.2.1's pin)
and 0.6.12, on their real wheels.

The guard judges each wheel from its source; the runtime and the call API run in
a child process over the guard's own throwaway overlay (``census_env``: the
wheel ``pip install --target``-ed into a temporary directory, first on
``PYTHONPATH``) under the CPU-host shim, with fi_compat's warnings and WARNING
log lines recorded.  What is asserted is what real flashinfer does there: the
functions it lacks, the launch it reaches, the keyword it refuses."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fi_compat.commands.guard.census_env import install_overlay, probe_environment
from fi_compat.commands.guard.check import GUARD_NOTHING, check_wheel
from fi_compat.model.release_list import MATRIX_RELEASES, OLDER_CHECKED_RELEASES

CHILD = textwrap.dedent("""
    import json, logging, warnings

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(f"{record.name} {record.levelname} {record.getMessage()}")

    root = logging.getLogger()
    root.setLevel(logging.WARNING)  # as TensorRT-LLM's logger leaves it
    root.addHandler(Keep())
    import fi_compat
    from fi_compat.errors import FiCompatWarning
    from fi_compat.workload import cpu_host
    from fi_compat.workload.workload import make_inputs, trtllm_call

    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with cpu_host() as host:
            import torch, flashinfer
            out["flashinfer"] = flashinfer.__version__
            state = fi_compat.install()
            out["state"], out["outcome"] = state["state"], state["outcome"]
            out["rows"] = {row["name"]: row["verdict"] for row in state["bounds"]}
            out["patched"] = state["patched"]

            def attempt(name, function):
                try:
                    function()
                    out[name] = ["ok", [(l.function, l.max_seq_len) for l in host.recorder.launches][-1:]]
                except Exception as exc:
                    out[name] = [type(exc).__name__, str(exc)]
                host.recorder.clear()

            t = make_inputs(torch, "trtllm")
            attempt("trtllm_call", lambda: trtllm_call(fi_compat.mla_decode, t, 1000))
            attempt("trtllm_call_19", lambda: trtllm_call(fi_compat.mla_decode, t, 1000, form=19))
            s = make_inputs(torch, "vllm")
            attempt("shared_layout_call", lambda: fi_compat.mla_decode(
                s.query, s.kv_cache, s.workspace_buffer, 128, 512, 64, s.block_tables, s.seq_lens, 1000,
                backend="trtllm-gen"))
            attempt("builder", lambda: fi_compat.build_mla_decode_tuning_config(
                s.kv_cache, s.block_tables, s.workspace_buffer, ["trtllm-gen"], 1, 128, 512, 1000, "cpu"))
    out["fi_compat_warnings"] = [str(w.message) for w in caught if issubclass(w.category, FiCompatWarning)]
    out["fi_compat_log"] = [r for r in records if r.startswith("fi_compat")]
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module", params=OLDER_CHECKED_RELEASES)
def older(request, real_wheel, tmp_path_factory):
    """(release, wheel, what the child saw) for one older release."""
    release = request.param
    wheel = real_wheel(release)
    scratch = tmp_path_factory.mktemp(f"older-{release}")
    overlay = scratch / "site"
    install_overlay(wheel, overlay)
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600,
                          env=probe_environment(overlay, scratch), stdin=subprocess.DEVNULL)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}): {done.stderr[-3000:]}"
    return release, wheel, json.loads(lines[-1][len("RESULT "):])


def test_the_older_releases_are_not_matrix_releases():
    assert not set(OLDER_CHECKED_RELEASES) & set(MATRIX_RELEASES)


def test_the_child_ran_the_real_wheel(older):
    release, _, seen = older
    assert seen["flashinfer"] == release


def test_guard_says_nothing_to_bound_with_no_mismatch(older):
    release, wheel, _ = older
    result = check_wheel(wheel, f"--pin flashinfer-python=={release}", release)
    assert result.verdict == GUARD_NOTHING
    assert result.mismatches == []
    assert {row["verdict"] for row in result.bounds} == {"not-in-release"}
    assert f"flashinfer {release} predates every cache fi_compat bounds" in result.reason
    assert "missing" not in result.reason
    assert not [note for note in result.notes if "not in the wheel" in note]  # 0.6.4's decode is in flashinfer.mla


def test_install_is_plain_and_quiet_at_warning_level(older):
    _, _, seen = older
    assert (seen["state"], seen["outcome"]) == ("installed", "predates")
    assert set(seen["rows"].values()) == {"not-in-release"}
    assert seen["patched"] == []
    assert seen["fi_compat_warnings"] == []
    assert seen["fi_compat_log"] == []


def test_tensorrt_llms_call_is_refused_naming_release_and_parameter(older):
    """TensorRT-LLM's call passes uses_shared_paged_kv_idx=False (0.6.7 on) and
    the counter buffer (0.6.15 on): refused before flashinfer runs, with the
    first parameter the release lacks."""
    release, _, seen = older
    lacking = {"0.6.4": ("uses_shared_paged_kv_idx", "0.6.7"), "0.6.12": ("multi_ctas_kv_counter_buffer", "0.6.15")}
    keyword, added = lacking[release]
    for form in ("trtllm_call", "trtllm_call_19"):
        kind, message = seen[form]
        assert kind == "UnsupportedFeatureError", (form, kind, message)
        assert f"keyword {keyword!r} was added in flashinfer-python {added}" in message
        assert f"the installed release is {release}" in message


def test_a_call_the_release_has_reaches_the_real_launch(older):
    """Shared K/V page indices, no newer keyword: the decode runs through the
    release's own host code (``flashinfer.mla`` on 0.6.4, which has no
    ``_core``) to the recorded trtllm-gen launch, with max_seq_len as given."""
    _, _, seen = older
    assert seen["shared_layout_call"] == ["ok", [["trtllm_paged_attention_decode", 1000]]]


def test_the_builder_is_refused_as_predating(older):
    release, _, seen = older
    kind, message = seen["builder"]
    assert kind == "UnsupportedFeatureError"
    assert "flashinfer-python added in 0.6.13" in message and f"release {release} predates it" in message
    assert "missing" not in message
