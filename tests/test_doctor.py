"""``fi-compat doctor``: the JSON schema, and behaviour with flashinfer absent,
un-importable, imported under the CPU shim, and on a real older release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from fi_compat.commands import doctor

from support import site_without_flashinfer

ROOT = Path(__file__).resolve().parents[1]

# The schema, frozen here on purpose: changing a key in doctor.py without
# changing this copy (and SCHEMA_VERSION when a key goes away) fails.
EXPECTED_SCHEMA_VERSION = 1
EXPECTED_TOP_LEVEL = {
    "schema_version", "fi_compat", "python", "torch", "flashinfer", "adapter", "signatures",
    "installed", "caches", "settings", "install_result", "problems",
}
EXPECTED_SECTIONS = {
    "fi_compat": {"version", "path"},
    "python": {"version", "implementation", "executable", "platform"},
    "torch": {"installed", "version", "cuda_build", "device", "device_name", "capability", "error"},
    "flashinfer": {"release", "detected_from", "metadata_version", "build_meta_version", "module_version",
                   "notes", "package_dir", "imported", "import_mode", "import_error"},
    "adapter": {"name", "outcome", "reason", "verified_range", "summary", "probe"},
    "installed": {"state", "fi_compat_patches", "trtllm_workaround", "trtllm_package", "summary"},
    "caches": {"fi_compat", "flashinfer"},
}
EXPECTED_SIGNATURE = {"adapter", "selected", "function", "status", "checked_on", "where", "difference",
                      "expected", "found"}
EXPECTED_SETTING = {"value", "source", "env", "error"}
EXPECTED_SETTINGS = {"disable", "strict", "cache_size", "max_seq_len_policy", "transparent"}
EXPECTED_FUNCTIONS = {
    "flashinfer.mla._core._mla_decode_tuning_config",
    "flashinfer.mla._core._build_mla_decode_tuning_config",
    "flashinfer.mla._core.trtllm_batch_decode_with_kv_cache_mla",
}


def check_schema(report: dict) -> None:
    assert report["schema_version"] == EXPECTED_SCHEMA_VERSION
    assert set(report) == EXPECTED_TOP_LEVEL
    for section, keys in EXPECTED_SECTIONS.items():
        assert set(report[section]) == keys, section
    assert report["signatures"], "no signature checks"
    for entry in report["signatures"]:
        assert set(entry) == EXPECTED_SIGNATURE
        assert entry["status"] in {"ok", "mismatch", "missing"}
        assert entry["checked_on"] in {"live", "source"}
        assert isinstance(entry["expected"], list)
    assert {e["function"] for e in report["signatures"]} == EXPECTED_FUNCTIONS
    assert set(report["settings"]) == EXPECTED_SETTINGS
    for setting in report["settings"].values():
        assert set(setting) == EXPECTED_SETTING
        assert setting["source"] in {"argument", "environment", "default"}
    assert report["installed"]["summary"] in {"none", "fi_compat", "trtllm", "both", "unknown"}
    assert isinstance(report["problems"], list)
    json.dumps(report)  # JSON-ready


def test_module_constants_match_the_frozen_schema():
    assert doctor.SCHEMA_VERSION == EXPECTED_SCHEMA_VERSION
    assert set(doctor.TOP_LEVEL_KEYS) == EXPECTED_TOP_LEVEL
    assert {k: set(v) for k, v in doctor.SECTION_KEYS.items()} == EXPECTED_SECTIONS
    assert set(doctor.SIGNATURE_KEYS) == EXPECTED_SIGNATURE
    assert set(doctor.SETTING_KEYS) == EXPECTED_SETTING


def run_cli(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          env=env or dict(os.environ), timeout=180)


def test_json_schema_from_the_cli_and_settings_sources():
    env = dict(os.environ, FI_COMPAT_CACHE_SIZE="128")
    env.pop("FI_COMPAT_STRICT", None)
    done = run_cli("-m", "fi_compat", "doctor", "--json", "--no-import", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    assert report["settings"]["cache_size"] == {"value": 128, "source": "environment",
                                                "env": "FI_COMPAT_CACHE_SIZE", "error": None}
    assert report["settings"]["strict"]["source"] == "default"
    assert report["installed"]["state"] == "not-installed"  # doctor patches nothing by itself
    assert report["install_result"] is None
    assert report["flashinfer"]["import_error"] == "not attempted (--no-import)"


def test_invalid_environment_value_is_reported_not_raised(monkeypatch):
    monkeypatch.setenv("FI_COMPAT_STRICT", "maybe")
    report = doctor.gather(import_flashinfer=False)
    check_schema(report)
    assert report["settings"]["strict"]["error"] and "FI_COMPAT_STRICT" in report["settings"]["strict"]["error"]
    assert any("strict" in p for p in report["problems"])


def test_import_failure_on_a_cpu_host_falls_back_to_source_and_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("flashinfer imports on a CUDA host")
    done = run_cli("-m", "fi_compat", "doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    fi = report["flashinfer"]
    assert fi["imported"] is False and fi["import_error"]
    assert all(e["checked_on"] == "source" for e in report["signatures"])
    assert report["installed"]["trtllm_workaround"] is None
    assert any("could not be imported" in p for p in report["problems"])
    assert report["adapter"]["probe"] == "not run (flashinfer not imported)"
    text = doctor.format_text(report)
    assert "could not / problems:" in text and "failed/skipped: " in text


def test_failed_import_leaves_no_half_initialised_flashinfer_behind(monkeypatch):
    """Simulated: the import raises after a submodule was registered."""
    import importlib

    real = importlib.import_module

    def failing(name, *args):
        if name == "flashinfer.mla._core":
            sys.modules["flashinfer.fake_half_loaded"] = object()
            raise AssertionError("Torch not compiled with CUDA enabled")
        return real(name, *args)

    monkeypatch.setattr(doctor.importlib, "import_module", failing)
    assert doctor._import_flashinfer() == "AssertionError: Torch not compiled with CUDA enabled"
    assert "flashinfer.fake_half_loaded" not in sys.modules


# --------------------------------------------------------------------------- absent / other releases


def doctor_in(site: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    return run_cli("-S", "-m", "fi_compat", "doctor", *args, env=env, cwd=tmp_path)


def test_doctor_without_flashinfer(tmp_path):
    site = site_without_flashinfer(tmp_path)
    done = doctor_in(site, tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    fi = report["flashinfer"]
    assert fi["release"] is None and fi["detected_from"] == "none" and fi["package_dir"] is None
    assert fi["imported"] is False
    assert report["adapter"]["name"] is None and report["adapter"]["outcome"] == "unsupported"
    assert {e["status"] for e in report["signatures"]} == {"missing"}
    assert any("flashinfer is not installed" in p for p in report["problems"])
    text = doctor.format_text(report)
    assert "not installed (detected from none" in text
    assert "could not / problems:" in text


def fetch_wheel(version: str) -> Path:
    cache = Path(os.environ.get("FI_COMPAT_WHEEL_CACHE", Path.home() / ".cache" / "fi_compat" / "wheels"))
    path = cache / f"flashinfer_python-{version}-py3-none-any.whl"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                               "-d", str(cache), f"flashinfer-python=={version}"],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not path.exists():
            pytest.skip(f"flashinfer-python=={version} wheel unavailable")
    return path


@pytest.mark.parametrize("version,adapter,absent_function", [
    ("0.6.15", "fresh-config-0.6.15", "flashinfer.mla._core._mla_decode_tuning_config"),
    ("0.7.4", "cached-config-0.6.18", None),
])
def test_doctor_on_a_real_release_checks_signatures_from_source(tmp_path, version, adapter, absent_function):
    """The site holds that release's package (Python files and dist-info only)."""
    site = site_without_flashinfer(tmp_path)
    with zipfile.ZipFile(fetch_wheel(version)) as archive:
        for name in archive.namelist():
            if name.startswith("flashinfer/mla/") or name in ("flashinfer/__init__.py", "flashinfer/_build_meta.py") \
                    or ".dist-info/" in name:
                archive.extract(name, site)
    done = doctor_in(site, tmp_path, "--json", "--no-import")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    assert report["flashinfer"]["release"] == version
    assert report["flashinfer"]["metadata_version"] == version
    assert report["adapter"]["name"] == adapter and report["adapter"]["outcome"] == "verified"
    selected = [e for e in report["signatures"] if e["selected"]]
    assert selected and all(e["status"] == "ok" for e in selected)
    assert all(e["where"].rsplit(":", 1)[1].isdigit() for e in selected)  # file:line
    if absent_function:
        other = [e for e in report["signatures"] if e["function"] == absent_function]
        assert other and other[0]["status"] == "missing" and not other[0]["selected"]


# --------------------------------------------------------------------------- live (CPU shim)


def test_live_report_under_the_cpu_shim_and_the_trtllm_marker(fi_cpu_host, monkeypatch):
    from fi_compat import installer
    from fi_compat.adapters.base import TRTLLM_MARKER

    assert installer.status()["state"] == "not-installed"
    report = doctor.gather()
    check_schema(report)
    assert report["flashinfer"]["imported"] is True
    assert report["flashinfer"]["import_mode"] == "already-imported"
    assert report["adapter"]["probe"] == "ok"
    assert all(e["checked_on"] == "live" for e in report["signatures"])
    assert report["installed"] == {"state": "not-installed", "fi_compat_patches": [], "trtllm_workaround": False,
                                   "trtllm_package": report["installed"]["trtllm_package"], "summary": "none"}
    assert report["caches"]["flashinfer"]["maxsize"] is None  # flashinfer's own, unbounded

    core = sys.modules["flashinfer.mla._core"]
    original = core._build_mla_decode_tuning_config

    def trtllm_builder(*args, **kwargs):
        return original(*args, **kwargs)

    setattr(trtllm_builder, TRTLLM_MARKER, True)
    monkeypatch.setattr(core, "_build_mla_decode_tuning_config", trtllm_builder)
    report = doctor.gather()
    assert report["installed"]["trtllm_workaround"] is True
    assert report["installed"]["summary"] == "trtllm"


def test_install_only_when_asked_and_then_reports_the_patches():
    pytest.importorskip("torch")
    done = run_cli("-m", "fi_compat", "doctor", "--json", "--cpu-shim", "--install")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    check_schema(report)
    assert report["flashinfer"]["import_mode"] == "cpu-shim"
    assert report["install_result"]["ok"] is True
    installed = report["installed"]
    assert installed["state"] == "installed" and installed["summary"] == "fi_compat"
    assert "flashinfer.mla._core._mla_decode_tuning_config" in installed["fi_compat_patches"]
    assert set(report["caches"]["fi_compat"]) == {"config", "builder"}
    assert report["caches"]["flashinfer"]["bounded_by_fi_compat"] is True
