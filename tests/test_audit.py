"""``fi-compat audit`` on real flashinfer releases (wheels downloaded once and cached).

Wheels: ``$FI_COMPAT_WHEEL_CACHE`` (default ``~/.cache/fi_compat/wheels``),
filled with ``pip download --no-deps flashinfer-python==X`` on first use;
tests skip when a wheel can neither be found nor downloaded.  Nothing from a
wheel is written into the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fi_compat.commands.audit import cli as audit, scan as audit_scan
from fi_compat.commands.audit.scan import SourceFile, classify_parameter, scan_file

from helpers.support import site_without_flashinfer

ROOT = Path(__file__).resolve().parents[1]
TARGET = "flashinfer.mla._core._mla_decode_tuning_config"
NEAR_TOP = 3  # "near the top": within the first three of ~1,470 (0.7.4)


# --------------------------------------------------------------------------- wheels


def wheel_cache() -> Path:
    return Path(os.environ.get("FI_COMPAT_WHEEL_CACHE", Path.home() / ".cache" / "fi_compat" / "wheels"))


def fetch_wheel(version: str) -> Path:
    cache = wheel_cache()
    path = cache / f"flashinfer_python-{version}-py3-none-any.whl"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
             "-d", str(cache), f"flashinfer-python=={version}"],
            capture_output=True, text=True, timeout=600,
        )
        if done.returncode != 0 or not path.exists():
            pytest.skip(f"flashinfer-python=={version} wheel unavailable: {done.stderr.strip()[-300:]}")
    return path


_reports: dict[str, dict] = {}


def report_for(version: str) -> dict:
    """The full static report of one release, computed once per session."""
    if version not in _reports:
        _reports[version] = audit.run_audit(wheel=str(fetch_wheel(version)))
    return _reports[version]


def rank_of(report: dict, function: str) -> int | None:
    for index, finding in enumerate(report["findings"], 1):
        if finding["function"] == function:
            return index
    return None


def extract_py(version: str, dest: Path) -> Path:
    """Extract only ``flashinfer/**.py`` (and the dist-info) of a release's wheel into ``dest``."""
    with zipfile.ZipFile(fetch_wheel(version)) as archive:
        for name in archive.namelist():
            if (name.startswith("flashinfer/") and name.endswith(".py")) or ".dist-info/" in name:
                archive.extract(name, dest)
    return dest / "flashinfer"


# --------------------------------------------------------------------------- real releases


@pytest.mark.parametrize("version", ["0.6.15.post1", "0.6.18", "0.7.4"])
def test_mla_tuning_config_is_flagged_and_ranked_near_the_top(version):
    report = report_for(version)
    assert report["release"] == version
    rank = rank_of(report, TARGET)
    assert rank is not None, f"{TARGET} not found on {version}"
    assert rank <= NEAR_TOP, f"{TARGET} ranked {rank} on {version}"
    finding = report["findings"][rank - 1]
    flagged = {p["name"]: p["category"] for p in finding["flagged"]}
    assert flagged.get("profile_seq_len") == "sequence/KV length"
    assert {"buckets", "num_pages"} <= set(flagged)
    assert finding["decorator"] == "functools.cache"
    # file:line points at the def in the wheel itself.
    path, line = finding["where"].rsplit(":", 1)
    with zipfile.ZipFile(fetch_wheel(version)) as archive:
        text = archive.read(path).decode().splitlines()
    assert text[int(line) - 1].startswith("def _mla_decode_tuning_config(")


def test_absent_on_0_6_15_where_flashinfer_builds_a_fresh_config():
    report = report_for("0.6.15")
    assert report["release"] == "0.6.15"
    assert report["unbounded_caches"] > 100  # the scan did run
    assert rank_of(report, TARGET) is None
    assert not any(f["qualname"] == "_mla_decode_tuning_config" for f in report["findings"])


def test_0_7_4_has_about_1470_and_the_default_output_shows_top_n_with_a_count():
    report = report_for("0.7.4")
    assert 1400 <= report["unbounded_caches"] <= 1600
    assert report["files"] > 3000
    text = audit.format_text(audit._trim(report, 5))
    assert TARGET in text
    assert text.count("\n   ") >= 5  # five ranked rows
    rest = report["unbounded_caches"] - 5
    flagged_rest = report["flagged_count"] - 5
    assert f"... and {flagged_rest} more flagged, {rest - flagged_rest} unflagged" in text
    assert "flashinfer/mla/_core.py:" in text


def test_fast_scan_equals_whole_file_parse_on_a_real_release():
    wheel = str(fetch_wheel("0.6.15.post1"))
    fast, files = audit_scan.scan(audit_scan.iter_wheel(wheel))
    exact, _ = audit_scan.scan(audit_scan.iter_wheel(wheel), exact=True)
    assert files > 1000 and len(fast) > 100
    assert fast == exact


def test_cli_source_dir_json(tmp_path):
    package = extract_py("0.6.15.post1", tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", "audit", "--source", str(package), "--json", "--top", "3"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema_version"] == audit.SCHEMA_VERSION
    assert report["source"]["kind"] == "source"
    assert report["release"] == "0.6.15.post1"
    assert len(report["findings"]) == 3
    assert report["findings"][0]["function"] == TARGET
    assert report["omitted"]["flagged"] + report["omitted"]["unflagged"] == report["unbounded_caches"] - 3


# --------------------------------------------------------------------------- flashinfer absent


def run_without_flashinfer(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    site = site_without_flashinfer(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    return subprocess.run([sys.executable, "-S", "-m", "fi_compat", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)


def test_audit_without_flashinfer_says_so_and_exits_2(tmp_path):
    done = run_without_flashinfer(tmp_path, "audit")
    assert done.returncode == audit.EXIT_NOTHING_TO_AUDIT, done.stdout + done.stderr
    assert "flashinfer is not installed" in done.stderr
    assert "--source" in done.stderr
    done = run_without_flashinfer(tmp_path, "audit", "--json")
    assert done.returncode == audit.EXIT_NOTHING_TO_AUDIT
    assert "not installed" in json.loads(done.stdout)["error"]


def test_audit_of_a_wheel_works_without_flashinfer_installed(tmp_path):
    done = run_without_flashinfer(tmp_path, "audit", "--wheel", str(fetch_wheel("0.6.15.post1")), "--top", "1")
    assert done.returncode == 0, done.stderr
    assert TARGET in done.stdout


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize("name,category", [
    ("profile_seq_len", "sequence/KV length"), ("max_seq_len", "sequence/KV length"),
    ("max_kv_len", "sequence/KV length"), ("seq_lens", "sequence/KV length"), ("kv_len", "sequence/KV length"),
    ("num_tokens", "token count"), ("max_num_tokens", "token count"), ("seq_len_q", "query length"),
    ("q_len", "query length"), ("batch_size", "batch size"), ("buckets", "batch size"),
    ("offset", "offset"), ("kv_indptr", "offset"), ("num_pages", "page/block count"),
])
def test_per_request_names_are_flagged(name, category):
    verdict = classify_parameter(name)
    assert verdict is not None and verdict[0] == category


@pytest.mark.parametrize("name", [
    "self", "head_dim", "dtype", "use_cu_seqlens", "cu_seqlens_dtype", "kv_lengths_mode", "page_size",
    "num_heads", "kv_lora_rank", "backend", "has_sparse_mla_top_k_lens", "enable_dcp", "device",
])
def test_static_names_are_not_flagged(name):
    assert classify_parameter(name) is None


def test_decorator_forms_qualnames_and_lines():
    text = b'''import functools
from functools import cache, lru_cache

@functools.cache
def a(max_seq_len: int): ...

@cache
def b(x): ...

@lru_cache(maxsize=None)
def c(num_tokens): ...

@functools.lru_cache(None)
def d(batch_size): ...

@functools.lru_cache(maxsize=128)
def bounded(seq_len): ...

class K:
    @functools.cache
    def m(self, offset): ...

def outer():
    @functools.cache
    def inner(kv_len): ...
    return inner
'''
    found = {f.qualname: f for f in scan_file(SourceFile("flashinfer/x.py", text))}
    assert set(found) == {"a", "b", "c", "d", "K.m", "outer.<locals>.inner"}
    assert found["a"].line == 5 and found["K.m"].line == 21 and found["outer.<locals>.inner"].line == 25
    assert found["K.m"].params == ("offset",)
    assert found["b"].score == 0 and found["a"].score > 0
    assert found["a"].flagged[0].int_annotated


def test_decorator_inside_a_template_string_is_not_reported():
    text = b'''import functools
TEMPLATE = """
@functools.cache
def fake(max_seq_len):
    pass
"""

@functools.cache
def real(seq_len): ...
'''
    found = scan_file(SourceFile("flashinfer/t.py", text))
    assert [f.qualname for f in found] == ["real"]
    assert found[0].line == 9


# --------------------------------------------------------------------------- live


def test_live_audit_reports_what_each_flagged_cache_gained():
    pytest.importorskip("torch")
    if audit_scan.installed_package_dir() is None:
        pytest.skip("flashinfer is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", "audit", "--live", "--steps", "60", "--json", "--top", "5"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    workload = report["live"]["workload"]
    assert workload["calls"] == 60 and workload["distinct_max_seq_len"] == 60
    results = {r["function"]: r for r in report["live"]["results"]}
    from fi_compat.model.release_detection import detect_release
    from fi_compat.model.specs import TUNING_CONFIG

    if not TUNING_CONFIG.present_in(detect_release().version):
        # 0.6.13 - 0.6.15 have no functools.cache on the config: nothing flagged gains per length
        assert TARGET not in results
        assert all((r["gained"] or 0) == 0 for r in results.values())
        return
    target = results[TARGET]
    assert target["status"] == "measured"
    assert target["gained"] == 60  # one entry per distinct max_seq_len: the leak
    assert all((r["gained"] or 0) == 0 for name, r in results.items() if name != TARGET)
    # and nothing else on TensorRT-LLM's path grows per length: set-up values only, one entry each
    assert report["live"]["other_growth"] and all(o["gained"] == 1 for o in report["live"]["other_growth"])
    assert TARGET not in {o["function"] for o in report["live"]["other_growth"]}
