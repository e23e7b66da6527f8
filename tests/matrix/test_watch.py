"""The runtime watch against memory measured in the same run, on releases edited from the real wheel.

Each case is the real flashinfer (0.7.4 or newer) with ONE edit
(tests/helpers/watch_releases.py): a memo written by hand (instance dict, module set,
closure dict, thread-local dict, per-call list, a ``functools.cache`` only
lengths past 131,072 reach), the tuning functions moved into
``flashinfer/mla/_batch_mla/`` as flashinfer's redesign moves them, moved and
renamed (no fi_compat row names them), and the good upgrades (renamed and
bounded with ``lru_cache(maxsize=256)``; the tuning config's parameters
positional-only).  A child process
(``watch_release_driver.py``) drives vLLM's call (backend auto) with 1,500
new distinct max_seq_len per phase, first with the watch off (the control:
how much flashinfer's own container grows, read from the container itself),
then with it on; the watch's verdict must be the one that memory gives:

* a growing ``functools`` memo no row names: bounded (and then holds nothing more);
* any other growing container: named in a WARNING (and left to grow);
* memory that does not grow (moved: the rows bound it; the good upgrade):
  nothing reported.

Detection must come within the first 1,000 distinct lengths of growth.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from helpers.support import environ_without_fi_compat_settings

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:  # find, not import: it needs the shim
    pytest.skip("needs flashinfer-python", allow_module_level=True)

from helpers import drift  # noqa: E402
from helpers import watch_releases  # noqa: E402

HERE = Path(__file__).resolve().parent
LENGTHS = 1500
DETECTED_WITHIN = 1000
CACHE_SIZE = 256  # fi_compat's default: what a bounded memo holds at most
#: The edits are written against the MLA code of 0.7.4 (flashinfer/mla/_batch_mla/ exists from there on).
FROM_RELEASE = Version("0.7.4")


def _base() -> str:
    return drift.base_version(drift.real_package_dir())


@pytest.fixture(scope="module", params=sorted(watch_releases.EDITS))
def watched(request, tmp_path_factory):
    name = request.param
    base = _base()
    if Version(base) < FROM_RELEASE:
        pytest.skip(f"the watch's releases are edited from {FROM_RELEASE} or newer; this is {base}")
    edit = watch_releases.EDITS[name]
    root = tmp_path_factory.mktemp(f"watch-{name}")
    release = drift.build_site(edit, root, version=f"{Version(base).base_version}.post0.dev950")
    out = root / "report.json"
    if hasattr(os, "fork"):
        request.getfixturevalue("fork_server").run(release.site, "watch_release_driver:run", timeout=300,
                                                   out=str(out), edit=name, lengths=LENGTHS)
    else:
        path = os.pathsep.join([str(release.site), str(HERE), str(HERE.parent), *sys.path])
        env = {**environ_without_fi_compat_settings(), "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, str(HERE / "watch_release_driver.py"), str(out), name, str(LENGTHS)],
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["flashinfer_file"].startswith(str(release.site)), "the child imported the installed flashinfer"
    return name, watch_releases.EXPECTED[name], report


def _edited(edit: str, root: Path, version: str | None = None) -> drift.SyntheticRelease:
    """The real release with ``edit``, under an unverified label unless ``version`` is given; skips
    where the edits do not apply or the run has no fork server."""
    base = _base()
    if Version(base) < FROM_RELEASE:
        pytest.skip(f"the watch's releases are edited from {FROM_RELEASE} or newer; this is {base}")
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork (the run's fork server)")
    return drift.build_site(watch_releases.EDITS[edit], root,
                            version=version or f"{Version(base).base_version}.post0.dev950")


def _grew(phase: dict) -> int:
    return phase["after"] - phase["before"]


def test_the_verdict_is_the_one_memory_gives(watched):
    name, expected, report = watched
    control, during = report["control"], report["watched"]
    findings = report["status"]["watch"]["findings"]
    growth_warnings = [w["message"] for w in report["warnings"] if w["category"] == "UnboundedGrowthWarning"]
    # knowledge missing is said at install, once per cause: each row the edit took away is named
    by_name = [w["message"] for w in report["warnings"] if w["category"] == "UnsupportedReleaseWarning"]
    assert len(by_name) == len(expected.missing), by_name
    for function, message in zip(sorted(expected.missing), sorted(by_name)):
        assert function in message and "left unbounded" in message, (function, message)
    assert report["status"]["watch"]["why"], report["status"]["watch"]  # the watch says why it runs
    if expected.container is None:
        # flashinfer's memory stays bounded (rows, or its own LRU): the watch says nothing
        assert all(phase["after"] <= CACHE_SIZE for phase in control + during), (control, during)
        assert findings == [] and growth_warnings == [], (findings, growth_warnings)
        return
    # the control run measures the growth: one entry per new distinct length, from the phase it begins in
    if expected.late:
        assert _grew(control[0]) == 0, control  # nothing below 131,072 reaches it
        assert during[0]["found_at"] is None, during
    assert _grew(control[-1]) >= 0.9 * LENGTHS, control
    (finding,) = [f for f in findings if expected.container in f["path"]]
    assert finding["action"] == expected.action, finding
    assert finding["gained"] > 0 and finding["where"], finding
    assert during[-1]["found_at"] is not None and during[-1]["found_at"] <= DETECTED_WITHIN, during
    (message,) = [m for m in growth_warnings if expected.container.split(".")[-1] in m]
    if expected.action == "bounded":
        assert finding["patched"] and "fi_compat bounded it" in message, (finding, message)
        # flashinfer's own cache holds nothing new once bounded: at most what it held when the watch took it over
        assert during[-1]["after"] <= CACHE_SIZE, during
    else:
        assert "left it unbounded" in message and finding["path"] in message, message
        assert _grew(during[-1]) >= 0.9 * LENGTHS, during  # named, not changed: it still grows
    # everything else the watch reported grew too (no false alarm beside the edit's container)
    assert [f["path"] for f in findings if expected.container not in f["path"]] == [], findings


def test_strict_raises_the_typed_error_at_the_next_fi_compat_call(tmp_path, request):
    """Strict, with the watch asked for (``FI_COMPAT_WATCH=bound``) on a release labelled as the
    verified one it was edited from: growth the watch cannot bound (a module-level set) is an
    ``UnboundedGrowthError``, raised by the next fi_compat call, naming the container."""
    release = _edited("module-set", tmp_path, version=_base())
    out = tmp_path / "strict.json"
    request.getfixturevalue("fork_server").run(release.site, "watch_release_driver:strict", timeout=300,
                                               out=str(out), edit="module-set", lengths=LENGTHS)
    report = json.loads(out.read_text())
    assert report["grew"] >= 0.9 * LENGTHS, report  # measured: the set grew by one entry per length
    assert report["raised"] == "UnboundedGrowthError", report
    assert report["paths"] == ["flashinfer.mla._core._SEEN_BATCH_LENGTHS"], report


@pytest.mark.parametrize(
    ("edit", "error"),
    [("moved-renamed", "SignatureMismatchError"), ("hand-memo", "SignatureMismatchError"),
     ("instance-dict", "UnverifiedReleaseError")],
)
def test_strict_refuses_a_release_it_does_not_know(edit, error, tmp_path, request):
    """Strict on a release outside the verified ones (a row missing or changed, or only the label
    unknown): install() raises the typed error with nothing installed, and fi_compat's decode
    raises it too: nothing decodes unbounded through fi_compat."""
    release = _edited(edit, tmp_path)
    out = tmp_path / "refused.json"
    request.getfixturevalue("fork_server").run(release.site, "watch_release_driver:strict_refusal", timeout=300,
                                               out=str(out))
    report = json.loads(out.read_text())
    assert report["install"] == error and report["decode"] == error, report
    assert report["state"] == "not-installed" and report["watch"] is None, report


@pytest.mark.parametrize("edit", ["moved-renamed", "module-set"])
def test_warn_mode_reports_the_same_growth_and_changes_nothing(edit, tmp_path, request):
    """``FI_COMPAT_WATCH=warn``: the memo bound mode bounds (moved-renamed's functools cache)
    and the container it names (a module-level set) are both reported in one WARNING each,
    within the same 1,000 lengths, and flashinfer is left as it is: the memo keeps growing."""
    release = _edited(edit, tmp_path)
    out = tmp_path / "warn.json"
    request.getfixturevalue("fork_server").run(release.site, "watch_release_driver:run", timeout=300,
                                               out=str(out), edit=edit, lengths=LENGTHS, mode="warn")
    report = json.loads(out.read_text())
    expected = watch_releases.EXPECTED[edit]
    during = report["watched"][-1]
    assert _grew(report["control"][-1]) >= 0.9 * LENGTHS, report["control"]
    (finding,) = [f for f in report["status"]["watch"]["findings"] if expected.container in f["path"]]
    assert finding["action"] == "warned" and finding["patched"] == [], finding
    assert during["found_at"] is not None and during["found_at"] <= DETECTED_WITHIN, during
    assert _grew(during) >= 0.9 * LENGTHS, during  # reported, not changed: it still grows
    growth = [w["message"] for w in report["warnings"] if w["category"] == "UnboundedGrowthWarning"]
    (message,) = [m for m in growth if expected.container.split(".")[-1] in m]
    assert "changed nothing (FI_COMPAT_WATCH=warn)" in message, message
    assert report["status"]["watch"]["patched"] == [] or all(
        "decode" in place for place in report["status"]["watch"]["patched"]), report["status"]["watch"]["patched"]


def test_uninstall_restores_what_the_watch_bounded(watched):
    name, expected, report = watched
    if expected.action != "bounded":
        pytest.skip("nothing bounded by the watch in this release")
    assert report["restored"], report["restored"]
