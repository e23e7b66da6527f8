"""A rename or removal of a decode parameter is one line in fi_compat/model/specs.py.

Two synthetic releases of the drift catalogue (tests/helpers/drift.py: the real wheel
with one source edit): ``decode-rename-bmm2`` (``bmm2_scale`` becomes
``output_scale``) and ``decode-remove-sinks``.  Without a declaration the
catalogue's behaviour stays (the rename: UnsupportedFeatureError for a passed
scale and a decode mismatch; tests/matrix/test_drift_catalogue.py).  With the
one line (``DECODE.renamed("bmm2_scale", "output_scale", <release>)`` /
``DECODE.removed("sinks", <release>)``) applied to the spec in the child:
``mla_decode`` binds the value to the installed parameter of its name (what
flashinfer received on entry, and the recorded launch), the runtime verdict
and the doctor say the decode signature fits, and the guard's wheel verdict
(same spec monkeypatched here) is clean.  Each release runs in a child of
the run's fork server (about 2 s each).
"""

from __future__ import annotations

import os

import pytest
from packaging.version import Version

from helpers import drift
from helpers.drift import CORE_FILE

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHECKS = "drift_declared_checks:check_declared"
BMM1, BMM2 = 0.125, 0.5


@pytest.fixture(scope="module")
def core_text() -> str:
    return (drift.real_package_dir().parent / CORE_FILE).read_text(encoding="utf-8")


_built: dict[str, drift.SyntheticRelease] = {}


def synthetic(name: str, core_text: str, tmp_path_factory) -> drift.SyntheticRelease:
    edit = drift.EDITS_BY_NAME[name]
    if not edit.applies(core_text):
        pytest.skip(f"this flashinfer release lacks what {name} edits")
    if name not in _built:
        _built[name] = drift.build_site(edit, tmp_path_factory.mktemp(name))
    return _built[name]


def guard_verdict(release: drift.SyntheticRelease, tmp_path_factory):
    """The guard's decode verdict on the release's wheel, with the spec as it is now."""
    from fi_compat.verdict.judgement import judge_release
    from fi_compat.commands.guard.wheel import WheelSources, lookup_for

    path = drift.build_wheel(release, tmp_path_factory.mktemp("wheel"))
    with WheelSources.open(path) as wheel:
        return judge_release(lookup_for(wheel), Version(release.version)).call_api


def declare_here(monkeypatch, change: list) -> None:
    """The same one line, in this process, undone after the test."""
    from fi_compat.model.specs import DECODE

    method, *arguments = change
    monkeypatch.setitem(DECODE.__dict__, "params", getattr(DECODE, method)(*arguments).params)


def test_a_declared_rename_binds_by_the_new_name(fork_server, core_text, tmp_path_factory, monkeypatch):
    release = synthetic("decode-rename-bmm2", core_text, tmp_path_factory)
    change = ["renamed", "bmm2_scale", "output_scale", release.version]  # the one line in specs.py
    report = fork_server.run(release.site, CHECKS, change=change, scale_name="output_scale")
    assert "output_scale" in report["installed"] and "bmm2_scale" not in report["installed"]
    assert "output_scale" in report["names"] and "bmm2_scale" not in report["names"]
    for form, length in (("positional", 300), ("keywords", 301)):
        outcome = report[form]
        assert "raised" not in outcome, outcome
        assert outcome["received"]["output_scale"] == BMM2 and outcome["received"]["bmm1_scale"] == BMM1, outcome
        assert outcome["launch"] == [length, BMM1, BMM2], outcome
    assert report["call_api"] is None and report["doctor_call_api"] == "ok", report
    assert not [w for w in report["warnings"] if "output_scale" in w or "bmm2_scale" in w], report["warnings"]
    declare_here(monkeypatch, change)
    assert guard_verdict(release, tmp_path_factory) is None


def test_without_the_declaration_the_rename_stays_an_error(fork_server, core_text, tmp_path_factory):
    release = synthetic("decode-rename-bmm2", core_text, tmp_path_factory)
    report = fork_server.run(release.site, CHECKS, change=None, scale_name="bmm2_scale")
    for form in ("positional", "keywords"):
        outcome = report[form]
        assert outcome.get("raised", "").startswith("UnsupportedFeatureError: "), outcome
        assert "'bmm2_scale' is not a parameter of" in outcome["raised"] and not outcome["entered"], outcome
    assert report["call_api"] == "gained optional parameter 'output_scale'" and report["doctor_call_api"] == "mismatch"
    assert "gained optional parameter 'output_scale'" in guard_verdict(release, tmp_path_factory).difference


def test_a_declared_removal_passes_the_default_and_refuses_a_value(
    fork_server, core_text, tmp_path_factory, monkeypatch
):
    release = synthetic("decode-remove-sinks", core_text, tmp_path_factory)
    change = ["removed", "sinks", release.version]  # the one line in specs.py
    report = fork_server.run(release.site, CHECKS, change=change, scale_name="bmm2_scale")
    assert "sinks" not in report["installed"]
    assert report["keywords"]["launch"] == [301, BMM1, BMM2], report["keywords"]  # sinks left at its default
    assert report["call_api"] is None and report["doctor_call_api"] == "ok", report
    with_sinks = fork_server.run(release.site, CHECKS, change=change, scale_name="bmm2_scale", sinks=True)
    for form in ("positional", "keywords"):
        outcome = with_sinks[form]
        assert outcome.get("raised", "").startswith("UnsupportedFeatureError: "), outcome
        assert (
            f"'sinks' was removed from {drift.DECODE.qualname} in flashinfer-python {release.version}"
            in outcome["raised"]
            and not outcome["entered"]
            and not outcome["launched"]
        ), outcome
    # undeclared: the value is still refused, by the generic "renamed or removed" error
    undeclared = fork_server.run(release.site, CHECKS, change=None, scale_name="bmm2_scale", sinks=True)
    assert "'sinks' is not a parameter of" in undeclared["keywords"]["raised"], undeclared
    declare_here(monkeypatch, change)
    assert guard_verdict(release, tmp_path_factory) is None
