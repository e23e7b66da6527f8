"""Committed matrix results against the code they vouch for: the fingerprint
(scripts/_matrix_common.py), the freshness check (scripts/check_results_fresh.py) and
the CI's representative release set (scripts/run_cpu_matrix.py --ci)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from fi_compat.model.release_list import CI_RELEASES, CI_SESSION_RELEASES, DEFAULT_RELEASE, MATRIX_RELEASES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def common(load):
    return load("_matrix_common")


@pytest.fixture
def tree(tmp_path):
    """A copy of the package and of the suite files the fingerprint reads."""
    shutil.copytree(ROOT / "fi_compat", tmp_path / "fi_compat", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests" / "matrix", tmp_path / "tests" / "matrix",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("tests/helpers/support.py", "tests/conftest.py", "scripts/measure_growth.py",
                 "scripts/run_release_suite.py", "pyproject.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


# --------------------------------------------------------------------------- fingerprint


def test_fingerprint_of_a_copy_equals_the_checkouts(common, tree):
    assert common.fingerprint(tree / "fi_compat", tree) == common.fingerprint()


@pytest.mark.parametrize("edit, changes", [
    ("fi_compat/adapters/cached_config.py", "code"),
    ("fi_compat/memo/cache.py", "code"),
    ("fi_compat/workload/__init__.py", "code"),  # the shim decides what the CPU matrix exercises
    ("fi_compat/a_new_module.py", "code"),  # new modules are covered without a list to update
    ("tests/matrix/test_memoization.py", "suite"),
    ("scripts/measure_growth.py", "suite"),
    ("fi_compat/commands/soak.py", None),
    ("fi_compat/cli.py", None),
    ("fi_compat/model/release_list.py", None),
])
def test_fingerprint_follows_what_a_result_depends_on(common, tree, edit, changes):
    before = common.fingerprint(tree / "fi_compat", tree)
    path = tree / edit
    path.write_text((path.read_text() if path.exists() else "") + "\n# changed\n")
    after = common.fingerprint(tree / "fi_compat", tree)
    assert {key for key in before if before[key] != after[key]} == ({changes} if changes else set())


def test_line_endings_do_not_change_the_fingerprint(common, tree):
    before = common.fingerprint(tree / "fi_compat", tree)
    path = tree / "fi_compat" / "memo" / "cache.py"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert common.fingerprint(tree / "fi_compat", tree) == before


def imported_fi_compat_modules(path: Path, package_dir: Path) -> set[str]:
    """fi_compat modules that ``path`` imports, as paths relative to the
    package (``commands/guard``, ``cli``), relative imports resolved; a string
    naming a module (``importlib.import_module(".commands.soak", ...)``)
    counts as an import."""
    package = list(path.relative_to(package_dir).with_suffix("").parts)[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[list[str]] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.replace(".", "").replace(
                "_", "").isalnum() and (node.value.startswith("fi_compat.") or node.value.startswith(".")):
            dotted = node.value
            names = [dotted.split(".") if not dotted.startswith(".") else ["fi_compat"] + dotted.lstrip(".").split(".")]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["fi_compat"] + package[:len(package) - (node.level - 1)]
            else:
                base = []
            stem = base + (node.module.split(".") if node.module else [])
            names = [stem + [alias.name] for alias in node.names] + [stem]
        for parts in names:
            if parts[:1] == ["fi_compat"] and len(parts) > 1:
                found.add("/".join(parts[1:]))
    return found


def left_out(common, module: str) -> bool:
    return any(module == entry.removesuffix(".py") or (entry.endswith("/") and (module + "/").startswith(entry))
               for entry in common.NOT_IN_CODE_FINGERPRINT)


#: Imports of left-out modules that cannot change a result, each with why:
#: ``fi_compat.doctor_report`` is a public name leading into the doctor's report,
#: resolved lazily on access and called by no library code; judgement reads
#: release_list only for membership ("verified" means the matrix lists the
#: release), which check_results_fresh checks per release instead.
IMPORTS_THAT_CANNOT_CHANGE_A_RESULT = {
    ("__init__.py", "diagnosis"), ("__init__.py", "diagnosis/doctor_report"),
    ("verdict/judgement.py", "model/release_list"),
}


def test_no_fingerprinted_module_imports_one_left_out(common):
    """What the fingerprint leaves out must stay out of what a result ran:
    a covered module importing a left-out one fails here (then cover it)."""
    offending = []
    for path in common.code_files():
        for module in imported_fi_compat_modules(path, common.PACKAGE):
            relative = path.relative_to(common.PACKAGE).as_posix()
            if left_out(common, module) and (relative, module) not in IMPORTS_THAT_CANNOT_CHANGE_A_RESULT:
                offending.append(f"{path.relative_to(common.PACKAGE)} imports fi_compat/{module}")
    assert offending == []


def test_the_import_scan_can_fail(common, tmp_path):
    package = tmp_path / "fi_compat"
    (package / "adapters").mkdir(parents=True)
    (package / "adapters" / "x.py").write_text(
        "from ..commands.guard import index\nfrom ..model import release_list\nimport fi_compat.cli\nfrom . import base\n"
        "importlib.import_module('.commands.soak', 'fi_compat')\n")
    modules = imported_fi_compat_modules(package / "adapters" / "x.py", package)
    assert {m for m in modules if left_out(common, m)} == {"commands/guard/index", "commands/guard",
                                                             "model/release_list", "cli", "commands/soak"}


# --------------------------------------------------------------------------- the check


def result(release: str, code: str, suite: str = "s", verified: bool = True) -> dict:
    return {"release": release, "verified": verified, "fingerprint": {"code": code, "suite": suite}}


def test_findings_name_each_kind_of_problem(load):
    check = load("check_results_fresh")
    matrix = ("0.6.13", "0.6.15", "0.6.18", "0.7.4")
    current = {"code": "c", "suite": "s"}
    results = {
        "0.6.13": result("0.6.13", "c"),
        "0.6.15": result("0.6.15", "old"),
        "0.6.18": result("0.6.18", "c", suite="older"),
        "0.7.2": result("0.7.2", "c"),
        "0.7.4": {"release": "0.7.4", "verified": True},
    }
    problems, notes = check.findings(results, matrix, current)
    assert problems == {
        "stale (ran older fi_compat code)": ["0.6.15"],
        "not in MATRIX_RELEASES (delete the file or add the release back)": ["0.7.2"],
        "stale (no fingerprint recorded)": ["0.7.4"],
    }
    assert notes == {"ran an older tests/matrix or growth script": ["0.6.18"]}
    del results["0.6.13"]
    results["0.6.18"] = result("0.6.18", "c", verified=False)
    problems, _ = check.findings(results, matrix, current)
    assert problems["missing (no result)"] == ["0.6.13"]
    assert problems["not verified (the committed run failed)"] == ["0.6.18"]


def test_outside_the_release_gate_older_code_is_a_note_and_the_rest_still_fails(load):
    check = load("check_results_fresh")
    matrix = ("0.6.13", "0.6.15", "0.6.18", "0.7.4")
    current = {"code": "c", "suite": "s"}
    results = {"0.6.13": result("0.6.13", "c"), "0.6.15": result("0.6.15", "old"),
               "0.6.18": result("0.6.18", "old", verified=False), "0.7.2": result("0.7.2", "c"),
               "0.7.4": {"release": "0.7.4", "verified": True}}
    problems, notes = check.findings(results, matrix, current, stale_fails=False)
    assert problems == {
        "not in MATRIX_RELEASES (delete the file or add the release back)": ["0.7.2"],
        "not verified (the committed run failed)": ["0.6.18"],  # a committed failure fails on any code
    }
    assert notes == {"stale (ran older fi_compat code)": ["0.6.15", "0.6.18"],
                     "stale (no fingerprint recorded)": ["0.7.4"]}
    del results["0.6.13"]
    problems, _ = check.findings(results, matrix, current, stale_fails=False)
    assert problems["missing (no result)"] == ["0.6.13"]


def test_check_notes_stale_results_and_the_release_gate_fails_on_them(load, tmp_path, capsys):
    check = load("check_results_fresh")
    common = load("_matrix_common")
    fresh = common.fingerprint()
    folder = tmp_path / "cpu"
    for release in MATRIX_RELEASES:
        common.write_result(folder, {**result(release, fresh["code"], fresh["suite"])})
    (folder / common.MATRIX_RUN_FILE).write_text("{}")  # not a result: ignored
    assert check.main(["--results", str(tmp_path)]) == 0
    assert check.main(["--results", str(tmp_path), "--release-gate"]) == 0
    assert "match the code" in capsys.readouterr().out

    stale = ["0.6.16", "0.7.0"]
    for release in stale:
        common.write_result(folder, {**result(release, "0" * 64, fresh["suite"]), "commit": "74bf0ef0a1b2"})
    assert check.main(["--results", str(tmp_path)]) == 0  # every change: a note
    out = capsys.readouterr().out
    assert "stale (ran older fi_compat code): 0.6.16 (commit 74bf0ef0a1b2), 0.7.0 (commit 74bf0ef0a1b2)" in out
    assert "docs/compatibility.md marks these 2 as run on older code" in out
    assert check.main(["--results", str(tmp_path), "--release-gate"]) == 1  # a release: a failure
    err = capsys.readouterr().err
    assert "stale (ran older fi_compat code): 0.6.16, 0.7.0" in err
    assert "python3 scripts/run_cpu_matrix.py --jobs 2 --releases 0.6.16 0.7.0" in err

    (folder / "0.7.0.json").unlink()
    assert check.main(["--results", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "missing (no result): 0.7.0" in err
    (folder / "0.7.0.json").write_text("not json")
    assert check.main(["--results", str(tmp_path)]) == 2
    assert "0.7.0.json is not a matrix result" in capsys.readouterr().err


def test_the_generator_marks_results_of_older_code_with_the_code_they_ran(load, tmp_path):
    common = load("_matrix_common")
    fresh = common.fingerprint()
    base = {"verified": True, "device": "CPU x", "python": "3.11.7", "torch": "2.13.0+cpu", "date": "2026-12-03",
            "command": "c", "growth": None,
            "pytest": {"tests": 1, "passed": 1, "failed": 0, "errors": 0, "skipped": 0}}
    for release in MATRIX_RELEASES:
        common.write_result(tmp_path / "cpu", {**base, "release": release, "fingerprint": fresh})
    generate = load("generate_compatibility")
    text = generate.render(tmp_path)
    assert "All CPU results ran this code." in text and "ran on older code" not in text.split("## Runs")[0].split(
        "commit, or the start")[1]
    common.write_result(tmp_path / "cpu", {**base, "release": "0.6.16", "commit": "74bf0ef0a1b2",
                                           "fingerprint": {"code": "a" * 64, "suite": fresh["suite"]}})
    common.write_result(tmp_path / "cpu", {**base, "release": "0.7.0",
                                           "fingerprint": {"code": "b" * 64, "suite": fresh["suite"]}})
    text = generate.render(tmp_path)
    row = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| 0.")}
    assert "1 passed, 0 failed, 0 skipped; ran on older code, commit 74bf0ef0a1b2, 2026-12-03" in row["| 0.6.16"]
    assert "ran on older code, fingerprint bbbbbbbbbbbb, 2026-12-03" in row["| 0.7.0"]
    assert "ran on older code" not in row["| 0.6.18"]
    assert f"**2 of {len(MATRIX_RELEASES)} CPU results ran on older code** than this checkout's (0.6.16, 0.7.0;" in text


def test_the_writer_fingerprints_the_package_that_ran(load):
    """run_release_suite fingerprints fi_compat as imported; here that is the
    checkout, so the checker's fingerprint must be the same."""
    import fi_compat

    common = load("_matrix_common")
    assert common.fingerprint(Path(fi_compat.__file__).parent) == common.fingerprint()


# --------------------------------------------------------------------------- the CI's releases


def test_ci_releases_are_matrix_releases_oldest_and_newest_included():
    assert set(CI_RELEASES) <= set(MATRIX_RELEASES) and len(set(CI_RELEASES)) == len(CI_RELEASES)
    assert list(CI_RELEASES) == sorted(CI_RELEASES, key=Version)
    assert CI_RELEASES[0] == MATRIX_RELEASES[0] and CI_RELEASES[-1] == MATRIX_RELEASES[-1]


def test_ci_runs_every_representative_release_once():
    """The default release through `nox -s tests` (tests/matrix included), the
    others as matrix sessions."""
    assert DEFAULT_RELEASE in CI_RELEASES and DEFAULT_RELEASE not in CI_SESSION_RELEASES
    assert set(CI_SESSION_RELEASES) | {DEFAULT_RELEASE} == set(CI_RELEASES)
    noxfile = (ROOT / "noxfile.py").read_text()
    assert "DEFAULT_FLASHINFER: str = _releases.DEFAULT_RELEASE" in noxfile and "--ignore" not in noxfile
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert pytest_options["testpaths"] == ["tests"] and "matrix" not in str(pytest_options.get("addopts", ""))


def test_ci_spells_no_release_number():
    """The set lives in fi_compat/model/release_list.py only."""
    text = (ROOT / ".ci" / "run").read_text()
    assert not [r for r in MATRIX_RELEASES if r in text]
    assert "--ci" in text and "check_results_fresh.py" in text and "--release-gate" not in text
    assert '"check_results_fresh.py"), "--release-gate"]' in (ROOT / "noxfile.py").read_text()  # nox -s release_gate


def test_longest_previous_run_goes_first(load, tmp_path, monkeypatch):
    matrix = load("run_cpu_matrix")
    common = load("_matrix_common")
    committed, here = tmp_path / "committed", tmp_path / "here"
    monkeypatch.setattr(matrix, "RESULTS", committed)
    for release, seconds in (("0.6.13", {"pytest": 50.0, "growth": 20.0}), ("0.6.15", {"pytest": 300.0})):
        common.write_result(here, {"release": release, "seconds": seconds})
    common.write_result(committed / "cpu", {"release": "0.6.18", "seconds": {"pytest": 90.0}})
    common.write_result(committed / "cpu", {"release": "0.6.15", "seconds": {"pytest": 10.0}})  # here wins
    order = matrix.longest_first(["0.6.13", "0.6.15", "0.6.18", "0.7.4"], here)
    assert order == ["0.7.4", "0.6.15", "0.6.18", "0.6.13"]  # never run: unknown, first


def test_run_cpu_matrix_refuses_a_release_outside_the_matrix(load, capsys):
    with pytest.raises(SystemExit):
        load("run_cpu_matrix").main(["--releases", "0.6.15", "0.9.9"])
    assert "not in fi_compat.model.release_list.MATRIX_RELEASES: 0.9.9" in capsys.readouterr().err


def test_generator_shows_the_whole_matrix_time(load, tmp_path):
    common = load("_matrix_common")
    (tmp_path / "cpu").mkdir()
    common.write_result(tmp_path / "cpu", {
        "release": "0.6.18", "verified": True, "device": "CPU x", "python": "3.11.7", "torch": "2.13.0+cpu",
        "date": "2026-12-03", "command": "c", "growth": None,
        "pytest": {"tests": 1, "passed": 1, "failed": 0, "errors": 0, "skipped": 0}})
    run = {"command": "python3 scripts/run_cpu_matrix.py --jobs 2", "date": "2026-12-03", "jobs": 2,
           "sessions": 18, "wall_seconds": 1090, "cpu_count": 2, "failed": [],
           "load_average_1min": {"start": 2.5, "end": 3.0}}
    (tmp_path / "cpu" / common.MATRIX_RUN_FILE).write_text(json.dumps(run))
    text = load("generate_compatibility").render(tmp_path)
    assert "18 sessions, 2 at a time, **18.2 minutes wall** on 2 cores" in text
    assert "load average 2.5 at the start and 3.0 at the end" in text
    assert "`python3 scripts/run_cpu_matrix.py --jobs 2`" in text


def test_a_failed_session_shows_its_failed_tests_and_verdict(load, tmp_path):
    """CI keeps no files: what failed must be in the run's own output."""
    matrix = load("run_cpu_matrix")
    log = tmp_path / "0.6.13.log"
    log.write_text("\n".join(
        ["+ python -m pytest tests/matrix"] + [f"progress {i}" for i in range(100)]
        + ["==== short test summary info ====", "FAILED tests/matrix/test_autotuner.py::test_x - ratio 2.3",
           "==== 1 failed, 255 passed ===="] + [f"growth line {i}" for i in range(30)]
        + ["run_release_suite: flashinfer 0.6.13: 255 passed, 1 failed; verified=False -> x.json"]))
    shown = matrix.failure_summary(log, limit=3, tail=2).splitlines()
    assert [line.strip() for line in shown] == [
        "==== short test summary info ====", "FAILED tests/matrix/test_autotuner.py::test_x - ratio 2.3",
        "==== 1 failed, 255 passed ====", "...", "growth line 29",
        "run_release_suite: flashinfer 0.6.13: 255 passed, 1 failed; verified=False -> x.json"]
    assert "progress 99" not in "\n".join(shown)
    assert "no log" in matrix.failure_summary(tmp_path / "missing.log")
