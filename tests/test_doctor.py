"""``fi-compat doctor`` and ``fi_compat.doctor_report()``: the JSON schema; flashinfer
absent, un-importable, imported under the CPU shim, and real older releases read
from source; the in-process report inside a process that installed fi_compat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import fi_compat
from fi_compat.model import specs
from fi_compat import diagnosis as doctor
from fi_compat.diagnosis import environment
from fi_compat.commands.guard.check import check_wheel
from fi_compat.lookup import TRTLLM_MARKER

from helpers import fakes
from helpers.support import site_without_flashinfer

ROOT = Path(__file__).resolve().parents[1]

# The schema, frozen here on purpose: changing a key in the doctor without
# changing this copy (and SCHEMA_VERSION when a key goes away) fails.
EXPECTED_SCHEMA_VERSION = 3
EXPECTED_TOP_LEVEL = {
    "schema_version", "fi_compat", "python", "torch", "flashinfer", "bounds", "call_api", "installed",
    "trtllm_workaround", "census", "settings", "watch", "install_result", "problems",
}
EXPECTED_SECTIONS = {
    "fi_compat": {"version", "path"},
    "python": {"version", "implementation", "executable", "platform"},
    "torch": {"installed", "version", "cuda_build", "device", "device_name", "capability", "error"},
    "flashinfer": {"release", "detected_from", "metadata_version", "build_meta_version", "module_version",
                   "notes", "package_dir", "imported", "import_mode", "import_error"},
    "bounds": {"checked_on", "outcome", "reason", "rows"},
    "call_api": {"function", "status", "checked_on", "where", "difference", "expected", "found"},
    "installed": {"state", "outcome", "patched", "waiting_for", "error", "notes"},
    "trtllm_workaround": {"present", "position", "checked_in", "tensorrt_llm_imported", "tensorrt_llm_installed",
                          "note"},
    "census": {"taken", "caches", "flashinfer_unbounded", "flashinfer_unbounded_entries", "fi_compat",
               "grown_behind_fi_compat", "walked"},
    "watch": {"setting", "runs", "why", "phase", "findings", "retired_after_s"},
}
EXPECTED_ROW = {"name", "cache", "verdict", "verified", "reason", "where", "checked_on", "memo", "maxsize",
                "grows_with", "patched", "waiting_for", "fi_compat", "flashinfer"}
EXPECTED_SETTING = {"value", "source", "env", "error"}
EXPECTED_SETTINGS = {"disable", "strict", "cache_size", "max_seq_len_policy", "transparent", "watch"}
EXPECTED_ROWS = ["tuning-config", "split-kv", "batch-cap", "split-kv-modular", "split-kv-hca", "split-kv-rubin-mtp",
                 "nearest-profile", "nearest-profile-cached", "builder"]


def check_schema(report: dict) -> None:
    assert report["schema_version"] == EXPECTED_SCHEMA_VERSION
    assert set(report) == EXPECTED_TOP_LEVEL
    for section, keys in EXPECTED_SECTIONS.items():
        assert set(report[section]) == keys, section
    assert [row["name"] for row in report["bounds"]["rows"]] == EXPECTED_ROWS
    for row in report["bounds"]["rows"]:
        assert set(row) == EXPECTED_ROW
    assert set(report["settings"]) == EXPECTED_SETTINGS
    for setting in report["settings"].values():
        assert set(setting) == EXPECTED_SETTING
        assert setting["source"] in {"argument", "environment", "default"}
    assert isinstance(report["problems"], list)
    json.dumps(report)  # JSON-ready


def rows(report: dict) -> dict[str, dict]:
    return {row["name"]: row for row in report["bounds"]["rows"]}


def test_module_constants_match_the_frozen_schema():
    assert doctor.SCHEMA_VERSION == EXPECTED_SCHEMA_VERSION
    assert set(doctor.TOP_LEVEL_KEYS) == EXPECTED_TOP_LEVEL
    assert {k: set(v) for k, v in doctor.SECTION_KEYS.items()} == EXPECTED_SECTIONS
    assert set(doctor.verdicts.ROW_KEYS) == EXPECTED_ROW
    assert set(doctor.SETTING_KEYS) == EXPECTED_SETTING


def run_cli(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env=env or dict(os.environ), timeout=300)


def verdicts(judged_rows) -> dict[str, tuple]:
    return {row["name"]: (row["verdict"], row["verified"]) for row in judged_rows}


def test_no_import_judges_the_installed_source_as_the_guard_judges_its_wheel(real_wheel):
    env = dict(os.environ, FI_COMPAT_CACHE_SIZE="128")
    env.pop("FI_COMPAT_STRICT", None)
    done = run_cli("-m", "fi_compat", "doctor", "--json", "--no-import", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    assert report["settings"]["cache_size"] == {"value": 128, "source": "environment",
                                                "env": "FI_COMPAT_CACHE_SIZE", "error": None}
    assert report["settings"]["strict"]["source"] == "default"
    assert report["installed"]["state"] == "not-installed" and report["install_result"] is None
    assert report["flashinfer"]["import_error"] == "not attempted (--no-import)"
    assert report["bounds"]["checked_on"] == "source" and report["census"]["taken"] is False
    release = report["flashinfer"]["release"]
    guard = check_wheel(real_wheel(release), "--wheel")
    assert verdicts(report["bounds"]["rows"]) == verdicts(guard.bounds)
    assert report["call_api"]["status"] == "ok"


def test_fi_compat_path_is_the_package_directory():
    """The report's path is where this fi_compat was imported from (the report
    lives in fi_compat/diagnosis/, one directory below the package)."""
    import os

    import fi_compat

    assert doctor.environment.fi_compat_section()["path"] == os.path.dirname(os.path.abspath(fi_compat.__file__))


def test_invalid_environment_value_is_reported_not_raised(monkeypatch):
    monkeypatch.setenv("FI_COMPAT_STRICT", "maybe")
    report = doctor.gather(import_flashinfer=False)
    check_schema(report)
    assert report["settings"]["strict"]["error"] and "FI_COMPAT_STRICT" in report["settings"]["strict"]["error"]
    assert any(p.startswith("setting strict: ") for p in report["problems"])


def test_import_failure_on_a_cpu_host_falls_back_to_source_and_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("flashinfer imports on a CUDA host")
    done = run_cli("-m", "fi_compat", "doctor", "--json")
    assert done.returncode == 1, done.stderr  # the failed import is a problem the report lists
    report = json.loads(done.stdout)
    check_schema(report)
    fi = report["flashinfer"]
    assert fi["imported"] is False and fi["import_error"]
    assert report["bounds"]["checked_on"] == "source" and report["bounds"]["outcome"] == "verified"
    assert report["trtllm_workaround"]["present"] is None and report["census"]["taken"] is False
    assert any("could not be imported" in p for p in report["problems"])
    text = doctor.format_text(report)
    assert "could not / problems:" in text and "failed/skipped: " in text


def test_failed_import_leaves_no_half_initialised_flashinfer_behind(monkeypatch):
    """Simulated: the import raises after a submodule was registered."""
    import importlib

    real = importlib.import_module

    def failing(name, *args):
        if name == specs.CORE_MODULE:
            sys.modules["flashinfer.fake_half_loaded"] = object()
            raise AssertionError("Torch not compiled with CUDA enabled")
        return real(name, *args)

    monkeypatch.setattr(environment.importlib, "import_module", failing)
    assert environment.import_flashinfer() == "AssertionError: Torch not compiled with CUDA enabled"
    assert "flashinfer.fake_half_loaded" not in sys.modules


def _leftovers_of_a_failed_import(monkeypatch) -> None:
    """sys.modules as a raising flashinfer/__init__.py leaves it: the package
    gone, a submodule that finished loading still there (the real case is
    test_doctor_report_after_a_failed_real_import)."""
    import types

    for name in [n for n in sys.modules if n == "flashinfer" or n.startswith("flashinfer.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, specs.CORE_MODULE, types.ModuleType(specs.CORE_MODULE))


def test_doctor_report_after_a_failed_import_says_so_and_reads_the_source(monkeypatch):
    if environment.package_directories() == []:
        pytest.skip("needs an installed flashinfer to read from source")
    _leftovers_of_a_failed_import(monkeypatch)
    report = doctor.gather(in_process=True)
    fi = report["flashinfer"]
    assert (fi["imported"], fi["import_mode"]) == (False, None)
    assert fi["import_error"].startswith(environment.FAILED_HERE), fi["import_error"]
    assert "the error itself is not recorded" in fi["import_error"]
    assert report["bounds"]["checked_on"] == "source" and report["census"]["taken"] is False
    assert any(p.startswith("flashinfer could not be imported (import failed in this process")
               for p in report["problems"]), report["problems"]
    try:
        raise ValueError("an unrelated error being handled")
    except ValueError:
        unrelated = doctor.gather(in_process=True)["flashinfer"]["import_error"]
    assert "the error itself is not recorded" in unrelated and "ValueError" not in unrelated
    try:
        raise ImportError("cannot import name 'x' from 'flashinfer.jit'", name="flashinfer.jit")
    except ImportError:
        recorded = doctor.gather(in_process=True)["flashinfer"]["import_error"]
    assert recorded.endswith("it raised ImportError: cannot import name 'x' from 'flashinfer.jit'"), recorded


FAILED_IMPORT = """
import json
try:
    import flashinfer
except Exception as exc:
    failure = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
else:
    failure = None
import fi_compat
from fi_compat import diagnosis as doctor
after = doctor.gather(in_process=True)
text = fi_compat.doctor_report()
during = None
try:
    import flashinfer
except Exception:
    during = doctor.gather(in_process=True)
print(json.dumps({"failure": failure, "after": after, "text": text, "during": during}, default=str))
"""


def test_doctor_report_after_a_failed_real_import():
    """The installed flashinfer imported without the CPU shim on a CPU-only
    torch: 0.6.18's __init__ raises after loading 160-odd submodules, which
    once made doctor_report() say "ok (already-imported)" and list verified
    rows as missing."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("flashinfer imports on a CUDA host")
    done = run_cli("-c", FAILED_IMPORT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    if result["failure"] is None:
        pytest.skip("import flashinfer succeeded here")
    after = result["after"]
    check_schema(after)
    fi = after["flashinfer"]
    assert fi["imported"] is False and fi["import_error"].startswith("import failed in this process"), fi
    assert after["bounds"]["checked_on"] == "source"
    assert [row["name"] for row in after["bounds"]["rows"] if row["verdict"] in ("missing", "mismatch")] == []
    if fi["release"] in specs_verified_releases():
        assert after["bounds"]["outcome"] == "verified"
    assert not any(" is missing " in p for p in after["problems"]), after["problems"]
    assert any("could not be imported (import failed in this process" in p for p in after["problems"])
    assert "ok (already-imported)" not in result["text"]
    assert "failed/skipped: import failed in this process" in result["text"]
    # Called while the import error is being handled, the report names it.
    assert result["during"]["flashinfer"]["import_error"].endswith(f"it raised {result['failure']}")


def specs_verified_releases() -> set[str]:
    from fi_compat.model.release_list import MATRIX_RELEASES

    return set(MATRIX_RELEASES)


# --------------------------------------------------------------------------- absent / other releases


def doctor_in(site: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    return run_cli("-S", "-m", "fi_compat", "doctor", *args, env=env, cwd=tmp_path)


def test_doctor_without_flashinfer(tmp_path):
    done = doctor_in(site_without_flashinfer(tmp_path), tmp_path, "--json")
    assert done.returncode == 1, done.stderr  # "flashinfer is not installed" is listed as a problem
    report = json.loads(done.stdout)
    check_schema(report)
    fi = report["flashinfer"]
    assert fi["release"] is None and fi["detected_from"] == "none" and fi["package_dir"] is None
    assert fi["imported"] is False and fi["import_error"] == "flashinfer is not installed"
    assert report["bounds"]["outcome"] is None and {r["verdict"] for r in report["bounds"]["rows"]} == {None}
    assert report["call_api"]["status"] is None
    assert any("flashinfer is not installed" in p for p in report["problems"])
    text = doctor.format_text(report)
    assert "not installed (detected from none" in text and "could not / problems:" in text


@pytest.mark.parametrize("version", ["0.6.15", "0.7.4"])
def test_doctor_on_a_real_release_judges_it_from_source(tmp_path, version, real_wheel):
    """The site holds that release's Python files and dist-info (nothing compiled)."""
    site = site_without_flashinfer(tmp_path)
    with zipfile.ZipFile(real_wheel(version)) as archive:
        for name in archive.namelist():
            if name.endswith(".py") or ".dist-info/" in name:
                archive.extract(name, site)
    done = doctor_in(site, tmp_path, "--json", "--no-import")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    assert report["flashinfer"]["release"] == version == report["flashinfer"]["metadata_version"]
    assert report["bounds"]["outcome"] == "verified"
    assert verdicts(report["bounds"]["rows"]) == verdicts(check_wheel(real_wheel(version), "--wheel").bounds)
    for row in report["bounds"]["rows"]:
        if row["verdict"] != "not-in-release":
            path, line = row["where"].rsplit(":", 1)
            assert path.startswith(str(site)) and line.isdigit()
    assert rows(report)["tuning-config"]["verdict"] == ("not-in-release" if version == "0.6.15" else "bound")


# --------------------------------------------------------------------------- live (CPU shim)


def test_live_report_under_the_cpu_shim_and_the_trtllm_marker(fi_cpu_host, monkeypatch):
    from fi_compat.installing import installer

    assert installer.status()["state"] == "not-installed"
    report = doctor.gather()
    check_schema(report)
    assert (report["flashinfer"]["imported"], report["flashinfer"]["import_mode"]) == (True, "already-imported")
    assert report["bounds"]["checked_on"] == "live" and report["bounds"]["outcome"] == "verified"
    assert rows(report)["tuning-config"]["checked_on"] == "live"
    census = report["census"]
    assert census["taken"] and census["caches"] > 10
    assert specs.TUNING_CONFIG.qualname in {c["qualname"] for c in census["flashinfer_unbounded"]}
    assert report["trtllm_workaround"] == {
        "present": False, "position": None, "checked_in": "the doctor process", "tensorrt_llm_imported": False,
        "tensorrt_llm_installed": False, "note": report["trtllm_workaround"]["note"]}

    core = sys.modules[specs.CORE_MODULE]
    original = getattr(core, specs.TUNING_CONFIG_BUILDER.name)

    def trtllm_builder(*args, **kwargs):
        return original(*args, **kwargs)

    setattr(trtllm_builder, TRTLLM_MARKER, True)
    monkeypatch.setattr(core, specs.TUNING_CONFIG_BUILDER.name, trtllm_builder)
    workaround = doctor.gather()["trtllm_workaround"]
    assert (workaround["present"], workaround["position"]) == (True, "alone")


def test_install_only_when_asked_and_then_reports_the_patches():
    pytest.importorskip("torch")
    done = run_cli("-m", "fi_compat", "doctor", "--json", "--cpu-shim", "--install")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    assert report["flashinfer"]["import_mode"] == "cpu-shim"
    assert report["install_result"] == {"ok": True, "state": "installed", "error": None}
    assert report["installed"]["state"] == "installed"
    assert specs.TUNING_CONFIG.qualname in report["installed"]["patched"]
    tuning = rows(report)["tuning-config"]
    assert tuning["patched"] == [specs.TUNING_CONFIG.qualname]
    assert tuning["fi_compat"]["maxsize"] == 256 and tuning["flashinfer"] == {"currsize": 0, "maxsize": None}
    assert rows(report)["split-kv"]["waiting_for"] == specs.CUTE_DSL_SPLIT_KV.module
    assert {c["qualname"] for c in report["census"]["fi_compat"]} >= {specs.TUNING_CONFIG.qualname + " [fi_compat]"}


# --------------------------------------------------------------------------- in process: fi_compat.doctor_report()

IN_PROCESS = """
import json, sys
import fi_compat
before = set(sys.modules)
text = fi_compat.doctor_report()
new = sorted(set(sys.modules) - before)
print(json.dumps({"text": text, "new": new}))
"""


def test_doctor_report_imports_nothing_new():
    done = run_cli("-c", IN_PROCESS)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    allowed = set(sys.stdlib_module_names) | {"fi_compat", "packaging", "wrapt"}
    assert [m for m in result["new"] if m.split(".")[0] not in allowed] == []
    assert result["text"].startswith("fi_compat doctor report for this process")
    assert "torch                 not imported in this process" in result["text"]


def test_doctor_report_in_a_process_that_installed_fi_compat(tmp_path):
    with fakes.loaded_release("0.6.18", tmp_path) as fake:
        fi_compat.install()
        for length in range(1, 3000, 7):
            fake.core.trtllm_batch_decode_with_kv_cache_mla(*fakes.decode_args(length))
        report = doctor.gather(in_process=True)
        assert fi_compat.doctor_report == doctor.doctor_report
        text = fi_compat.doctor_report()
    check_schema(report)
    assert report["installed"]["state"] == "installed" and report["problems"] == []
    tuning = rows(report)["tuning-config"]
    assert tuning["fi_compat"]["currsize"] == tuning["fi_compat"]["misses"] > 10
    assert tuning["flashinfer"] == {"currsize": 0, "maxsize": None}
    assert report["trtllm_workaround"]["checked_in"] == "this process" and report["trtllm_workaround"]["note"] is None
    assert "fi_compat doctor report for this process" in text and "state                 installed (verified)" in text


def test_a_cache_grown_behind_fi_compat_is_a_problem_in_the_report(tmp_path):
    with fakes.loaded_release("0.6.18", tmp_path) as fake:
        fi_compat.install()
        flashinfers_own = fake.core._mla_decode_tuning_config.__wrapped__  # held from before install(), say
        for length in range(40):
            flashinfers_own((1, 2), 8, length)
        report = doctor.gather(in_process=True)
        text = fi_compat.doctor_report()
    assert report["census"]["grown_behind_fi_compat"] == [
        {"name": "tuning-config", "cache": specs.TUNING_CONFIG.qualname, "currsize": 40}]
    counted = {c["qualname"]: c["currsize"] for c in report["census"]["flashinfer_unbounded"]}
    assert counted[specs.TUNING_CONFIG.qualname] == 40
    assert any(p.startswith(f"{specs.TUNING_CONFIG.qualname} holds 40 entries") for p in report["problems"])
    assert f"      40  {specs.TUNING_CONFIG.qualname}" in text


def test_doctor_report_sees_trtllm_workaround_installed_in_this_process(tmp_path):
    """TensorRT-LLM puts its memo on the builder when its module is imported: only
    a report from inside that process can see it."""
    with fakes.loaded_release("0.6.15", tmp_path) as fake:
        from helpers.support import trtllm_style_memo

        setattr(fake.core, specs.TUNING_CONFIG_BUILDER.name,
                trtllm_style_memo(getattr(fake.core, specs.TUNING_CONFIG_BUILDER.name)))
        report = doctor.gather(in_process=True)
    assert (report["trtllm_workaround"]["present"], report["trtllm_workaround"]["position"]) == (True, "alone")
