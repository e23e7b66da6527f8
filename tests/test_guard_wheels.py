"""The pin-bump guard on real and synthetic wheels.

Real wheels are downloaded once into the wheel cache ($FI_COMPAT_WHEEL_CACHE,
default ~/.cache/fi_compat/wheels) by the session fixture ``real_wheel``
(tests/conftest.py) and reused by every later run; synthetic wheels are zips
written into tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Optional, Sequence

import pytest

import fi_compat
from fi_compat.model import specs
from fi_compat.commands.guard.check import WORDS
from fi_compat.verdict.judgement import Outcome, judge_release
from fi_compat.cli import main
from fi_compat.commands.guard import fetch as fetch_module
from fi_compat.commands.guard.errors import FetchError, GuardError
from fi_compat.commands.guard.fetch import default_cache_dir, fetch
from fi_compat.lookup import runtime_lookup
from fi_compat.model.release_list import MATRIX_RELEASES

from helpers import fakes

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- helpers


def run_guard(*argv: str, capsys, static: bool = True) -> tuple[int, str]:
    """The guard in this process; ``static``: the fast check alone (``--static``), as these
    tests judge what it reads from a wheel (tests/test_guard_measured.py runs releases)."""
    status = main(["guard", *(("--static",) if static else ()), *argv])
    out = capsys.readouterr()
    return status, out.out + out.err


def run_json(*argv: str, capsys, static: bool = True) -> tuple[int, dict]:
    status, text = run_guard(*argv, "--json", capsys=capsys, static=static)
    return status, json.loads(text)


def row_verdicts(bounds: list[dict]) -> dict[str, tuple]:
    return {row["name"]: (row["verdict"], row["verified"]) for row in bounds}


# --------------------------------------------------------------------------- synthetic wheels

NEVER_RUN = "raise SystemExit('the guard must never run wheel code')\n"
CORE_PATH = "flashinfer/mla/_core.py"

#: The fake 0.6.18 decode module (tests/helpers/fakes.py), which exits if anything ever imports it.
CORE_0618 = NEVER_RUN + fakes.release_files("0.6.18")[CORE_PATH]
_RELEASE_CORE = object()


def make_wheel(directory: Path, version: str, core: Optional[str] | object = _RELEASE_CORE, *,
               drifts: Sequence[fakes.Drift] = (), extra: Optional[dict[str, bytes | str]] = None,
               omit: Sequence[str] = (), name: Optional[str] = None, metadata: bool = True) -> Path:
    """A wheel of the fake ``version`` (every module fi_compat reads, each exiting if
    imported); ``core`` replaces its decode module (``None``: left out)."""
    files = {path: NEVER_RUN + text for path, text in fakes.release_files(version, drifts).items()}
    if core is None:
        del files[CORE_PATH]
    elif core is not _RELEASE_CORE:
        files[CORE_PATH] = core
    for path in omit:
        del files[path]
    path = directory / (name or f"flashinfer_python-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        if metadata:
            archive.writestr(f"flashinfer_python-{version}.dist-info/METADATA",
                             f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n\n")
        for member, data in (extra or {}).items():
            archive.writestr(member, data)
    return path


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --------------------------------------------------------------------------- real wheels

#: Caches fi_compat bounds on each release, of those that need it (read from the real wheels:
#: tests/helpers/fakes.py's table; 0.6.15 has no tuning-config memo, 0.6.18 adds the HCA sizer and the
#: cached nearest-profile memo, 0.7.4 the Rubin MTP sizer).
REAL = {"0.6.15": "4 of 4", "0.6.16": "6 of 6", "0.6.18": "7 of 7", "0.7.4": "8 of 8"}


@pytest.mark.parametrize("release, bounded", sorted(REAL.items()))
def test_real_wheel_is_verified_with_every_cache_bounded(release, bounded, real_wheel, capsys):
    status, data = run_json("--wheel", str(real_wheel(release)), capsys=capsys)
    assert status == 0
    (result,) = data["results"]
    assert (result["release"], result["verdict"], result["mismatches"]) == (release, "verified", [])
    rows = [row for row in result["bounds"] if row["verdict"] == "bound"]
    assert f"{len(rows)} of {len(rows)}" == bounded and all(row["verified"] for row in rows)


def test_real_pins_through_the_cache_and_a_requirement_file(real_wheel, wheel_cache, tmp_path, capsys):
    for release in REAL:
        real_wheel(release)
    req = tmp_path / "requirements.txt"
    req.write_text("numpy\nflashinfer-python==0.6.15  # old\n")
    status, text = run_guard(str(req), "--pin", "flashinfer-python==0.7.4", "--offline",
                             "--cache-dir", str(wheel_cache), capsys=capsys)
    assert status == 0, text
    lines = text.splitlines()
    assert lines[0].split() == ["RELEASE", "VERDICT", "BOUNDED", "FROM"]
    assert lines[1].split() == ["0.6.15", "verified", "4", "of", "4", f"{req}:2"]
    assert lines[2].split() == ["0.7.4", "verified", "8", "of", "8", "--pin", "flashinfer-python==0.7.4"]


def test_every_matrix_release_is_verified(real_wheel, capsys):
    started = time.perf_counter()
    failures = []
    for release in MATRIX_RELEASES:
        status, data = run_json("--wheel", str(real_wheel(release)), capsys=capsys)
        (result,) = data["results"]
        if (status, result["release"], result["verdict"]) != (0, release, "verified"):
            failures.append((release, status, result["verdict"], result["reason"]))
    assert failures == []
    print(f"matrix walk: {len(MATRIX_RELEASES)} releases in {time.perf_counter() - started:.1f} s")


def test_guard_agrees_with_the_runtime_lookup_on_the_installed_release(fi_cpu_host, real_wheel, capsys):
    """The strongest form of 'cannot disagree': the runtime's own lookup on the
    imported flashinfer, against the guard's ast lookup on the same release's wheel."""
    from fi_compat.model.release_detection import detect_release

    installed = detect_release().version
    assert installed is not None
    live = judge_release(runtime_lookup(installed), installed)
    _, data = run_json("--wheel", str(real_wheel(str(installed))), capsys=capsys)
    (result,) = data["results"]
    assert row_verdicts(result["bounds"]) == row_verdicts([v.as_dict() for v in live.rows])
    assert (live.outcome, result["verdict"]) == ("verified", "verified")


# --------------------------------------------------------------------------- synthetic: the runtime's verdict

AGREEMENT = [
    pytest.param(fakes.DRIFT_RELEASE[row], (drift,), id=f"{row}/{case}")
    for row, cases in fakes.DRIFTS.items() for case, drift in cases.items()
] + [
    pytest.param("0.6.18", (drift,), id=name) for name, drift in [
        ("bounded-upstream", fakes.CONFIG_BOUNDED_UPSTREAM), ("lost-cache", fakes.CONFIG_LOST_CACHE),
        ("moved-and-reimported", fakes.CONFIG_MOVED_REIMPORTED), ("builder-gained-cache", fakes.BUILDER_GAINED_CACHE)]
] + [pytest.param(release, (), id=release) for release in ("0.6.13", "0.6.15.post1", "0.7.3", "0.7.5")]


@pytest.mark.parametrize("release, drifts", AGREEMENT)
def test_the_guard_on_a_wheel_says_what_install_does_with_the_same_source(release, drifts, tmp_path, capsys):
    """The drift catalogue through the guard (a built wheel) and through install()
    (the same files as an imported package): the same verdict on every row."""
    wheel = make_wheel(tmp_path, release, drifts=drifts)
    _, data = run_json("--wheel", str(wheel), capsys=capsys)
    (result,) = data["results"]
    with fakes.loaded_release(release, tmp_path / "installed", drifts=drifts):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = fi_compat.install()
    assert row_verdicts(result["bounds"]) == row_verdicts(state["bounds"])
    # one verdict: status() shows fi_compat.verdict.judgement.decide's outcome, the guard names the same one
    assert result["verdict"] == WORDS[Outcome(state["outcome"])]


# --------------------------------------------------------------------------- synthetic: verdicts


def test_synthetic_baseline_is_verified_and_runs_no_wheel_code(tmp_path, capsys, monkeypatch):
    def no_extraction(*args, **kwargs):
        raise AssertionError("the guard must not extract anything")

    monkeypatch.setattr(zipfile.ZipFile, "extract", no_extraction)
    monkeypatch.setattr(zipfile.ZipFile, "extractall", no_extraction)
    before = set(tmp_path.iterdir())
    wheel = make_wheel(tmp_path, "0.6.18", CORE_0618)
    status, data = run_json("--wheel", str(wheel), capsys=capsys)
    assert status == 0
    assert data["results"][0]["verdict"] == "verified"
    assert set(tmp_path.iterdir()) == before | {wheel}
    assert "flashinfer" not in sys.modules or hasattr(sys.modules["flashinfer"], "__version__")


def test_drift_gained_required_parameter_is_unsupported(tmp_path, capsys):
    drifted = CORE_0618.replace("max_seq_len, device,", "max_seq_len, device, page_table_layout,")
    wheel = make_wheel(tmp_path, "0.6.18", drifted)
    status, text = run_guard("--wheel", str(wheel), capsys=capsys)
    assert status == 3, text  # --static: a difference by name, not measured
    assert "unsupported (not measured)" in text and "6 of 7" in text
    assert "flashinfer.mla._core._build_mla_decode_tuning_config: gained required parameter 'page_table_layout'" in text
    status, data = run_json("--wheel", str(wheel), capsys=capsys)
    (mismatch,) = data["results"][0]["mismatches"]
    assert mismatch["function"] == specs.TUNING_CONFIG_BUILDER.qualname
    assert "page_table_layout" in mismatch["found"] and "page_table_layout" not in mismatch["expected"]
    line = line_of(drifted, f"def {specs.TUNING_CONFIG_BUILDER.name}(")
    assert mismatch["where"] == f"{CORE_PATH}:{line}"


def test_renamed_parameter_is_unsupported_and_a_lost_cache_is_not(tmp_path, capsys):
    renamed = CORE_0618.replace("profile_seq_len,", "profile_len,")
    status, data = run_json("--wheel", str(make_wheel(tmp_path, "0.7.4", renamed)), capsys=capsys)
    assert status == 3
    result = data["results"][0]
    assert result["verdict"] == "unsupported"
    (mismatch,) = [m for m in result["mismatches"] if m["function"] == specs.TUNING_CONFIG.qualname]
    assert "'profile_seq_len' was renamed to 'profile_len'" in mismatch["difference"]
    uncached = CORE_0618.replace("@functools.cache\n", "")
    status, data = run_json("--wheel", str(make_wheel(tmp_path, "0.7.4", uncached, name="uncached.whl")),
                            capsys=capsys)
    assert status == 0
    assert row_verdicts(data["results"][0]["bounds"])["tuning-config"] == ("no-cache", True)


def test_matching_signatures_outside_the_matrix_are_compatible_unverified(tmp_path, capsys):
    status, text = run_guard("--wheel", str(make_wheel(tmp_path, "0.7.5")), capsys=capsys)
    assert status == 3, text
    assert "0.7.5" in text and "compatible-unverified (not measured)" in text and "8 of 8" in text
    assert "without --static to measure this release" in text


def test_release_comes_from_metadata_not_the_file_name(tmp_path, capsys):
    wheel = make_wheel(tmp_path, "0.7.5", name="renamed.whl")
    status, data = run_json("--wheel", str(wheel), capsys=capsys)
    assert (status, data["results"][0]["release"], data["results"][0]["verdict"]) == (3, "0.7.5", "compatible-unverified")


def test_reexported_function_is_followed_like_the_runtime_attribute(tmp_path, capsys):
    moved = (fakes.Drift(specs.TUNING_CONFIG_BUILDER, "", moved=True, reimport=True),)
    status, data = run_json("--wheel", str(make_wheel(tmp_path, "0.6.18", drifts=moved)), capsys=capsys)
    assert (status, data["results"][0]["verdict"]) == (0, "verified")
    moved_to = fakes.MOVED_TO.replace(".", "/") + ".py"
    broken = make_wheel(tmp_path, "0.6.18", drifts=moved, omit=[moved_to], name="no-builder.whl")
    status, data = run_json("--wheel", str(broken), capsys=capsys)
    assert status == 3
    assert any(m["found"] is None and m["function"] == specs.TUNING_CONFIG_BUILDER.qualname
               for m in data["results"][0]["mismatches"])


def test_missing_module_is_unsupported_and_says_which_file(tmp_path, capsys):
    status, text = run_guard("--wheel", str(make_wheel(tmp_path, "0.7.6", core=None)), capsys=capsys)
    assert status == 3, text
    assert "flashinfer/mla/_core.py / flashinfer/mla/_core/__init__.py is not in the wheel" in text
    assert "trtllm_batch_decode_with_kv_cache_mla: is missing" in text


# --------------------------------------------------------------------------- synthetic: refusals (exit 2)


def test_non_zip_is_refused(tmp_path, capsys):
    bogus = tmp_path / "flashinfer_python-0.6.18-py3-none-any.whl"
    bogus.write_bytes(b"<html>403 Forbidden</html>\n")
    status, text = run_guard("--wheel", str(bogus), capsys=capsys)
    assert status == 2
    assert f"{bogus}: not a zip archive" in text


def test_zip_that_is_not_flashinfer_is_refused(tmp_path, capsys):
    other = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("other/__init__.py", "")
    status, text = run_guard("--wheel", str(other), capsys=capsys)
    assert status == 2
    assert "not a flashinfer-python wheel" in text and "other" in text


def test_oversized_member_is_refused_without_reading_it(tmp_path, capsys):
    huge = CORE_0618 + "#" * (17 * 1024 * 1024)
    status, text = run_guard("--wheel", str(make_wheel(tmp_path, "0.6.18", huge)), capsys=capsys)
    assert status == 2
    assert "flashinfer/mla/_core.py: declares" in text and "over the 16,777,216-byte limit" in text


def test_zip_bomb_ratio_is_refused(tmp_path, capsys):
    bomb = CORE_0618 + "\n" * (4 * 1024 * 1024)  # 4 MiB under the size limit, ~1000:1
    status, text = run_guard("--wheel", str(make_wheel(tmp_path, "0.6.18", bomb)), capsys=capsys)
    assert status == 2
    assert "compression ratio" in text and "zip-bomb" in text


def test_source_that_does_not_parse_is_refused(tmp_path, capsys):
    status, text = run_guard("--wheel", str(make_wheel(tmp_path, "0.6.18", "def broken(:\n")), capsys=capsys)
    assert status == 2
    assert "flashinfer/mla/_core.py:1: does not parse" in text


# --------------------------------------------------------------------------- usage, fetch, exit codes


def test_no_input_is_a_usage_error(capsys):
    status, text = run_guard(capsys=capsys)
    assert status == 2 and "give requirement FILEs" in text


def test_not_measured_wins_over_verified_and_errors_win_over_both(tmp_path, capsys):
    good = make_wheel(tmp_path, "0.6.18")
    bad = make_wheel(tmp_path, "0.6.18", CORE_0618.replace("kv_lora_rank, max_seq_len, device,", "kv_lora_rank, device,"),
                     name="bad.whl")
    assert run_guard("--wheel", str(good), "--wheel", str(bad), capsys=capsys)[0] == 3
    missing = tmp_path / "absent.whl"
    status, text = run_guard("--wheel", str(good), "--wheel", str(bad), "--wheel", str(missing), capsys=capsys)
    assert status == 2 and "absent.whl: no such file" in text


def test_offline_cache_miss_and_empty_range_are_errors(tmp_path, capsys):
    status, text = run_guard("--pin", "flashinfer-python==0.6.18", "--offline", "--cache-dir", str(tmp_path),
                             capsys=capsys)
    assert status == 2 and "no wheel in the cache" in text
    status, text = run_guard("--pin", "flashinfer-python>0.6.18,<0.6.18.post1", "--offline",
                             "--cache-dir", str(tmp_path), capsys=capsys)
    assert status == 2 and "no release satisfies" in text
    req = tmp_path / "r.txt"
    req.write_text("flashinfer-python==0.6.18\nnot a requirement!\n")
    status, text = run_guard(str(req), "--offline", capsys=capsys)
    assert status == 2 and f"{req}:2: malformed requirement" in text


def test_file_without_flashinfer_checks_nothing_and_passes(tmp_path, capsys):
    req = tmp_path / "r.txt"
    req.write_text("numpy==2.0\n")
    status, text = run_guard(str(req), capsys=capsys)
    assert status == 0 and "no flashinfer-python requirement" in text


def test_range_is_expanded_offline_from_the_builtin_list(tmp_path, capsys):
    for release in ("0.6.16.post1", "0.6.16.post2"):
        make_wheel(tmp_path, release)
    status, data = run_json("--pin", "flashinfer-python>=0.6.16.post1,<0.6.16.post3", "--offline",
                            "--cache-dir", str(tmp_path), capsys=capsys)
    assert status == 0
    assert [(r["release"], r["verdict"]) for r in data["results"]] == [
        ("0.6.16.post1", "verified"), ("0.6.16.post2", "verified")]
    assert any("--offline" in note and "PUBLISHED_RELEASES" in note for note in data["notes"])


def test_fetch_downloads_once_into_the_cache(tmp_path, monkeypatch):
    """A fake pip writes the wheel; the second fetch must come from the cache."""
    source = make_wheel(tmp_path, "0.7.4", name="source.whl")
    calls = tmp_path / "calls"
    script = tmp_path / "python"
    script.write_text(
        f"#!{sys.executable}\nimport shutil, sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "dest = sys.argv[sys.argv.index('--dest') + 1]\n"
        f"shutil.copy({str(source)!r}, dest + '/flashinfer_python-0.7.4-py3-none-any.whl')\n"
    )
    script.chmod(0o755)
    cache = tmp_path / "cache"
    first = fetch("0.7.4", cache, python=str(script))
    second = fetch("0.7.4", cache, python=str(script))
    assert first == second == cache / "flashinfer_python-0.7.4-py3-none-any.whl"
    (call,) = calls.read_text().splitlines()
    assert "download --no-deps --only-binary=:all:" in call and call.endswith("flashinfer-python==0.7.4")
    assert [p.name for p in cache.iterdir()] == [first.name]  # no staging directory left behind


def test_failed_download_is_a_fetch_error_and_leaves_nothing(tmp_path):
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('ERROR: No matching distribution\\n')\nsys.exit(1)\n")
    script.chmod(0o755)
    with pytest.raises(FetchError, match="No matching distribution"):
        fetch("9.9.9", tmp_path / "cache", python=str(script))
    assert list((tmp_path / "cache").iterdir()) == []


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FI_COMPAT_WHEEL_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("FI_COMPAT_WHEEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x" / "fi_compat" / "wheels"


# --------------------------------------------------------------------------- process-level


def test_python_m_fi_compat_guard_imports_neither_torch_nor_flashinfer(tmp_path):
    wheel = make_wheel(tmp_path, "0.6.18")
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['fi_compat', 'guard', '--wheel', sys.argv[1]]\n"
        "try:\n    runpy.run_module('fi_compat', run_name='__main__')\n"
        "except SystemExit as exc:\n    code = exc.code\n"
        "bad = sorted(m for m in ('torch', 'flashinfer') if m in sys.modules)\n"
        "print('IMPORTED', bad)\nsys.exit(code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", probe, str(wheel)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout and "IMPORTED []" in done.stdout
    cli = subprocess.run([sys.executable, "-m", "fi_compat", "guard", "--wheel", str(wheel), "--json"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert cli.returncode == 0 and json.loads(cli.stdout)["results"][0]["verdict"] == "verified"


def test_guard_errors_are_fi_compat_errors():
    from fi_compat.errors import FiCompatError

    assert issubclass(GuardError, FiCompatError)
    assert fetch_module.CACHE_ENV == "FI_COMPAT_WHEEL_CACHE"
