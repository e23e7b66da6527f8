"""Issue 22, the runtime's part: each "Why" shape of tests/helpers/drift_shapes.py, built
from the real wheel on ``sys.path``, run as an engine runs it.

* a decorator stacked over the cache (config memo, and the lazily imported
  cute-dsl sizer): the cache is bounded where it sits, the decorator stays at
  the module attribute and keeps running, and uninstall puts the cache back;
* ``lru_cache(maxsize=1 << 20)``: effectively unbounded, bounded, an INFO line;
* the sizer moved to a lazily imported module with no re-export: found and bounded;
* ``lru_cache(maxsize=CONST)`` with ``CONST = None``, ``@_memo`` after
  ``from functools import cache as _memo``: read right from source (the guard,
  ``doctor --no-import`` and the runtime's verdict on modules not imported yet).

Each fails on the code before #22: the shapes' caches grew by one entry per
length, the verdicts were ``no-cache`` / ``bounded-upstream`` / ``missing``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("flashinfer") is None:  # find, not import: it needs the shim
    pytest.skip("needs flashinfer-python", allow_module_level=True)

from helpers import drift_shapes  # noqa: E402

drift_shapes.skip_unless_on_a_shape_base()
from packaging.version import Version  # noqa: E402

from fi_compat.verdict import bounds, judgement  # noqa: E402
from fi_compat.lookup import DirectoryReader, source_lookup  # noqa: E402

HERE = Path(__file__).resolve().parent
ROW = {"config": "tuning-config", "sizer": "split-kv"}


def site_of(name: str, tmp_path: Path):
    try:
        return drift_shapes.build_site(drift_shapes.SHAPES_BY_NAME[name], tmp_path)
    except ValueError as exc:
        pytest.skip(str(exc))


def run_child(name: str, tmp_path: Path) -> dict:
    pytest.importorskip("torch")
    release = site_of(name, tmp_path)
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env.update(
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
        PYTHONPATH=os.pathsep.join([str(release.site), str(HERE.parent), str(HERE), *sys.path]),
    )
    done = subprocess.run(
        [sys.executable, str(HERE / "shape_runtime_child.py"), name, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["config-decorated", "sizer-decorated"])
def test_a_cache_under_a_decorator_is_bounded_where_it_sits(name, tmp_path):
    report = run_child(name, tmp_path)
    row = report["rows"][ROW[name.split("-")[0]]]
    assert row["verdict"] == "bound" and row["waiting_for"] is None and row["patched"], report
    assert report["found_cache"]
    # fi_compat's memo answers, not flashinfer's cache (cleared at install: its growth would be one per length)
    assert report["grown"] == 0, report
    assert report["outer_kept"], "the decorator stays at the module attribute and keeps running"
    assert report["restored"] and report["wrapped_restored"], "uninstall puts flashinfer's cache back, is-identical"
    # the control grows by an entry per length at least (the sizer: plus the batch-cap search's probes)
    assert report["control"] >= report["control_lengths"], "the control grows: the measurement is live"
    if name == "sizer-decorated":
        # the lazily imported sizer was read from source at install, provisionally, then judged live
        assert report["at_install"]["split-kv"][1] is not None, report["at_install"]


def test_a_huge_maxsize_is_bounded_with_an_info_line(tmp_path):
    report = run_child("config-huge-maxsize", tmp_path)
    row = report["rows"]["tuning-config"]
    assert row["verdict"] == "bound" and row["patched"], row
    assert "effectively unbounded" in row["reason"] and str(drift_shapes.HUGE_MAXSIZE) in row["reason"]
    assert any(line.startswith("INFO") and "effectively unbounded" in line for line in report["log"]), report["log"]
    assert report["grown"] == 0 and report["control"] == report["control_lengths"], report


def test_a_sizer_moved_to_a_lazy_module_is_found_and_bounded(tmp_path):
    report = run_child("sizer-moved-lazy", tmp_path)
    row = report["rows"]["split-kv"]
    assert row["verdict"] == "bound" and row["waiting_for"] is None, row
    assert any(drift_shapes.MOVED_SIZER_MODULE in where for where in row["patched"]), row
    assert report["grown"] == 0 and report["control"] >= report["control_lengths"], report


@pytest.mark.parametrize(
    "name, memo",
    [
        ("config-const-none", "unbounded"),
        ("config-aliased-cache", "unbounded"),
        ("config-huge-maxsize", "bounded"),
        ("config-decorated", "unbounded"),
    ],
)
def test_the_source_is_read_as_the_module_binds_it(name, memo, tmp_path):
    release = site_of(name, tmp_path)
    find = source_lookup(DirectoryReader(str(release.site)))
    bound = bounds.by_name("tuning-config")
    found = find(bound.spec)
    assert found is not None and found.memo == memo, found
    verdict = judgement.judge(bound, found, Version(release.version))
    assert verdict.kind == "bound", verdict.reason
    if name == "config-huge-maxsize":
        assert found.maxsize == drift_shapes.HUGE_MAXSIZE
