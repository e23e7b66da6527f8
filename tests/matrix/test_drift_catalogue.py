"""The drift catalogue: synthetic releases built from the installed real
release, one source edit each (tests/helpers/drift.py), run through ``mla_decode``
and ``build_mla_decode_tuning_config`` with TensorRT-LLM's positional call,
vLLM's and SGLang's keyword calls and mixed calls, under the CPU shim.

Every call either reaches flashinfer with each value on the parameter of its
name (what flashinfer's function received on entry, and the recorded launch:
max_seq_len and both scales) or raises before flashinfer runs (function never
entered, nothing launched).  Zero silent mis-bindings, in three installer
states: the call API's implicit install, after ``uninstall()``, and after a
refused ``install(strict=True)`` (which must not be undone behind the
caller's back: there every call raises the refusal's typed error, issue 39).

Each release runs in a child forked from one server that has torch loaded
(tests/helpers/drift_runner.py; the run's ``fork_server`` fixture, shared with
test_moved_and_reexported.py); the whole catalogue takes about 30-60 s on one core.
"""

from __future__ import annotations

import os
import zipfile

import pytest

from helpers import drift
from helpers.drift import EDITS, CORE_FILE
from helpers.drift_runner import ForkServer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHECKS = "drift_call_api_checks"

# edit -> (decode outcome per form, builder outcome per form): "ok" or the
# error class and a fragment of its message.  Forms not listed: "ok".
SIGNATURE = "SignatureMismatchError"
EXPECTED: dict[str, tuple[dict, dict]] = {
    "decode-insert-required": ({"*": (SIGNATURE, "gained required parameter 'kv_block_stride'")}, {}),
    "decode-rename-bmm2": ({form: ("UnsupportedFeatureError", "keyword 'bmm2_scale' is not a parameter of")
                            for form in ("trtllm-16-positional", "vllm-keywords", "mixed")}, {}),
    "builder-insert-required": ({}, {"*": (SIGNATURE, "gained required parameter 'page_size'")}),
    "builder-remove-device": ({}, {"*": (SIGNATURE, "has no parameter 'device'")}),
    "builder-rename-max-seq-len": ({}, {"*": (SIGNATURE, "'max_seq_len', which the call API requires")}),
    "builder-renamed": ({}, {"*": (SIGNATURE, "_build_mla_decode_tuning_config is missing")}),
}
# The installer accepts these releases, and a transparent-mode caller's positional
# order (written for the installed signature) differs from the newest one past
# some point: the patched attribute must re-key it by the installed names.
TRANSPARENT_EXERCISED = ("decode-remove-sinks",)
DEFAULT_CHANGED = {"decode-new-default": "'bmm2_scale' defaults to 2.0", "builder-new-default": "'cute_dsl_impl' defaults"}


@pytest.fixture(scope="module")
def server(fork_server):
    """The run's one fork server (tests/matrix/conftest.py), shared with the moved-release tests."""
    return fork_server


@pytest.fixture(scope="module")
def core_text() -> str:
    return (drift.real_package_dir().parent / CORE_FILE).read_text(encoding="utf-8")


_built: dict[str, drift.SyntheticRelease] = {}


def release(edit: drift.Edit, core_text: str, tmp_path_factory) -> drift.SyntheticRelease:
    if not edit.applies(core_text):
        pytest.skip(f"this flashinfer release lacks what {edit.name} edits")
    if edit.name not in _built:  # once per session: building is about 0.3 s a release
        _built[edit.name] = drift.build_site(edit, tmp_path_factory.mktemp(edit.name))
    return _built[edit.name]


_reports: dict[str, dict] = {}


def report_for(edit: drift.Edit, server: ForkServer, core_text: str, tmp_path_factory) -> tuple:
    """The release and its checks' report (one child per release per session)."""
    synthetic = release(edit, core_text, tmp_path_factory)
    if edit.name not in _reports:
        _reports[edit.name] = server.run(synthetic.site, f"{CHECKS}:check_release")
    return synthetic, _reports[edit.name]


def _expected(table: dict, form: str):
    return table.get(form, table.get("*", "ok"))


def _check_round(kind: str, state: str, outcomes: dict, table: dict) -> list[str]:
    problems = []
    for form, outcome in outcomes.items():
        where = f"{kind} {state} {form}"
        if "raised" in outcome:
            if outcome["entered"] or outcome["launched"]:
                problems.append(f"{where}: raised after flashinfer ran: {outcome['raised']}")
        else:
            problems += [f"{where}: {v}" for v in outcome["violations"]]
        expected = _expected(table, form)
        if expected == "ok" and "raised" in outcome:
            problems.append(f"{where}: expected a call, got {outcome['raised']}")
        elif expected != "ok":
            error, fragment = expected
            if not outcome.get("raised", "").startswith(f"{error}: ") or fragment not in outcome["raised"]:
                problems.append(f"{where}: expected {error} ({fragment!r}), got {outcome}")
    return problems


@pytest.mark.parametrize("edit", EDITS, ids=[edit.name for edit in EDITS])
def test_synthetic_release_binds_by_name_or_raises_before_flashinfer(edit, server, core_text, tmp_path_factory):
    synthetic, report = report_for(edit, server, core_text, tmp_path_factory)
    assert report["version"] == synthetic.version  # the synthetic release is what got imported
    decode_table, builder_table = EXPECTED.get(edit.name, ({}, {}))
    problems = []
    for state, outcomes in report["decode"].items():
        # after a refused strict install every decode through fi_compat raises the refusal (issue 39): the
        # signature error, or, where every row fits, the release's being outside the verified ones (issue 46)
        refusal = report.get("strict_install", "").split(":")[0]
        assert state != "refused" or refusal in ("SignatureMismatchError", "UnverifiedReleaseError"), refusal
        table = {"*": (refusal, "")} if state == "refused" else decode_table
        problems += _check_round("decode", state, outcomes, table)
    problems += _check_round("builder", "uninstalled", report["builder"]["uninstalled"], builder_table)
    for form, outcome in report["builder"]["implicit"].items():  # through fi_compat's memo when installed
        if ("raised" in outcome) != (_expected(builder_table, form) != "ok"):
            problems.append(f"builder implicit {form}: {outcome}")
    transparent = report["transparent"]
    refused = _expected(decode_table, "*") != "ok"  # the call API cannot bind this release's decode function
    if transparent["state"] == "installed":
        # routing flashinfer's callers into a call API that refuses them would break
        # their working calls: transparent mode stays out, with a warning saying why
        assert transparent["routed"] is not refused, transparent
        refusals = [w for w in report["warnings"] if "transparent mode not installed" in w["message"]]
        assert len(refusals) == refused and all(_expected(decode_table, "*")[1] in w["message"] for w in refusals), \
            report["warnings"]
    if "outcome" in transparent:
        problems += _check_round("transparent", "installed-order", {"trtllm-positional": transparent["outcome"]}, {})
    if edit.name in TRANSPARENT_EXERCISED:
        assert transparent["state"] == "installed", transparent
    assert problems == [], "\n".join(problems)
    # an explicit uninstall or a refused strict install is never undone by the call API (the refusal: each
    # decode raises it, checked above)
    assert report["state_uninstalled"] == "not-installed"
    if "state_refused" in report:
        assert report["state_refused"] == "not-installed", report["strict_install"]
    # a changed default: one WARNING per binding built, naming release, function and
    # difference, pointing at the line that called the API
    changed = [w for w in report["warnings"] if w["category"] == "DefaultMismatchWarning"]
    if edit.name in DEFAULT_CHANGED:
        assert changed, report["warnings"]
        for warning in changed:
            assert DEFAULT_CHANGED[edit.name] in warning["message"] and synthetic.version in warning["message"]
            assert warning["filename"] == report["checks_file"], warning
    else:
        assert changed == []


def test_a_changed_row_is_left_alone_and_a_strict_install_refuses(server, core_text, tmp_path_factory):
    """A parameter swap in a function fi_compat memoizes (the tuning-config
    builder) is a signature mismatch for the installer: the implicit install
    leaves that row untouched and bounds the rest, a strict install raises
    with nothing installed (and the decode checks above ran in both states).
    The decode function is not patched by the installer; its drift is the
    call API's (the EXPECTED table)."""
    _, report = report_for(drift.EDITS_BY_NAME["builder-swap"], server, core_text, tmp_path_factory)
    assert report["strict_install"].startswith("SignatureMismatchError: ")
    assert set(report["decode"]) == {"implicit", "uninstalled", "refused"}
    assert report["state_implicit"] == "installed"
    assert report["verdicts_implicit"]["builder"] == "mismatch", report["verdicts_implicit"]
    assert any(w["category"] == "UnsupportedReleaseWarning" and "_build_mla_decode_tuning_config" in w["message"]
               for w in report["warnings"]), report["warnings"]


def test_install_warnings_point_at_the_import_and_install_lines(server, core_text, tmp_path_factory):
    synthetic = release(drift.EDITS_BY_NAME["builder-swap"], core_text, tmp_path_factory)
    found = server.run(synthetic.site, f"{CHECKS}:install_warnings")
    assert found["hook_verdicts"]["builder"] == "mismatch", found
    # the mismatch, and the synthetic release being unverified for the rest
    for where, line in (("hook", found["import_line"]), ("install", found["install_line"])):
        assert sorted(category for category, _, _ in found[where]) == ["UnsupportedReleaseWarning",
                                                                       "UnverifiedReleaseWarning"], found[where]
        assert {(f, at) for _, f, at in found[where]} == {(found["file"], line)}, found[where]


def test_wheel_of_a_synthetic_release(core_text, tmp_path_factory):
    """What the guard reads: METADATA with the synthetic version and the edited
    core module, found by the guard's own wheel reader."""
    from fi_compat.commands.guard.wheel import WheelSources, lookup_for
    from fi_compat.model.specs import DECODE

    synthetic = release(drift.EDITS_BY_NAME["decode-swap-scales"], core_text, tmp_path_factory)
    path = drift.build_wheel(synthetic, tmp_path_factory.mktemp("wheel"))
    with zipfile.ZipFile(path) as archive:
        assert archive.read(CORE_FILE).decode() == synthetic.files[CORE_FILE]
        assert f"{drift.DISTRIBUTION}-{synthetic.version}.dist-info/RECORD" in archive.namelist()
    with WheelSources.open(path) as wheel:
        assert wheel.metadata_version == synthetic.version
        found = lookup_for(wheel)(DECODE)
    names = [p.name for p in found.function.params]
    assert names.index("bmm2_scale") < names.index("bmm1_scale")
