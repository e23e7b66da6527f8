"""``fi-compat soak``: host time from untraced passes only, memory from traced ones, the census of both.

One real soak (four worker processes importing the installed flashinfer under
the CPU shim) with SGLang's call: varying batch sizes and block-table widths.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from fi_compat.commands import soak, soak_report

pytestmark = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None or
                                importlib.util.find_spec("torch") is None,
                                reason="needs torch and flashinfer-python")
STEPS = 40


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _soak(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fi_compat", "soak", "--no-progress", *args], capture_output=True,
                          text=True, check=False, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def soak_run(monkeypatch_module) -> dict:
    # The bounds' memory alone: the runtime watch's one-time record of the containers it reads
    # (22-52 KB in 40 lengths, depending on how far its walk got; ~380 KB once it has read them
    # all, at most MAX_TRACKED records) would decide a run this short.
    monkeypatch_module.setenv("FI_COMPAT_WATCH", "off")
    process = _soak("--json", "--steps", str(STEPS), "--layout", "sglang", "--batch-sizes", "8:64",
                    "--context", "65536")
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout)


def test_times_come_from_untraced_passes_and_memory_from_traced_ones(soak_run):
    for variant in soak.VARIANTS:
        timed, traced = soak_run["timed"][variant], soak_run["traced"][variant]
        assert timed["traced"] is False and timed["tracemalloc_growth_bytes"] is None
        assert timed["time_per_call_us"]["median"] > 0
        assert traced["traced"] is True and "time_per_call_us" not in traced
        assert traced["tracemalloc_growth_bytes"] is not None
        assert timed["steps"] == traced["steps"] == STEPS  # the same batches
    text = soak_report.report_text(soak_run["timed"], soak_run["traced"], soak_run["options"])
    (times,) = [line for line in text.splitlines() if line.startswith("time/call, median / p99 (wall, untraced)")]
    medians = [f"{soak_run['timed'][v]['time_per_call_us']['median']:.0f} / " for v in soak.VARIANTS]
    assert all(median in times for median in medians)


def test_census_shows_flashinfer_growth_only_without_fi_compat(soak_run):
    def flashinfer_unbounded_growth(result: dict) -> int:
        before, after = result["census_before"], result["census_after"]
        return sum(after[name]["currsize"] - before.get(name, {"currsize": 0})["currsize"]
                   for name, count in after.items() if count["owner"] == "flashinfer" and count["maxsize"] is None)

    for passes in (soak_run["timed"], soak_run["traced"]):
        # one new tuning config per distinct max_seq_len, and cute-dsl sizer entries, without fi_compat
        assert flashinfer_unbounded_growth(passes["unpatched"]) >= STEPS
        assert flashinfer_unbounded_growth(passes["fi_compat"]) == 0
        assert passes["fi_compat"]["fi_compat_caches"] and not passes["unpatched"]["fi_compat_caches"]
    assert soak_report.census_growth(soak_run["timed"]["unpatched"])  # the report lists what grew
    traced = soak_run["traced"]
    assert traced["unpatched"]["tracemalloc_growth_bytes"] > 4 * traced["fi_compat"]["tracemalloc_growth_bytes"]


def test_memo_rows_give_the_second_half_miss_rate(soak_run):
    """The memo table reads fi_compat's statistics at the end and at the half-way snapshot."""
    timed = soak_run["timed"]["fi_compat"]
    assert timed["half"] == STEPS // 2 and timed["half_fi_compat_caches"] is not None
    rows = soak_report.memo_rows(timed)
    builder = timed["fi_compat_caches"]["builder"]
    half = timed["half_fi_compat_caches"]["builder"]
    late = builder["hits"] + builder["misses"] - half["hits"] - half["misses"]
    late_misses = builder["misses"] - half["misses"]
    calls = STEPS - STEPS // 2
    (row,) = [row for row in rows if row.startswith("memo builder: ")]
    assert late > 0 and f"entries (bound {builder['maxsize']:,})" in row, row
    assert f"second half: {late_misses:,} misses in {late:,} lookups" in row, row  # readable alone
    assert f"% of {calls:,} decode calls" in row, row
    # the memos' footprint is measured over all of them at once (fi_compat.memo.cache.footprint)
    assert timed["fi_compat_memo_bytes"] > 0
    assert rows[-1].startswith("all fi_compat memos: ") and "counted once" in rows[-1], rows[-1]


def test_report_paths_start_at_the_package(monkeypatch, tmp_path):
    where = "/work/x/.nox/soak/lib/python3.11/site-packages/flashinfer/mla/_core.py:412"
    assert soak_report.short_path(where) == "flashinfer/mla/_core.py:412"
    monkeypatch.chdir(tmp_path)
    assert soak_report.short_path(str(tmp_path / "pkg" / "m.py:3")) == "pkg/m.py:3"
    assert soak_report.short_path("/elsewhere/m.py:3") == "/elsewhere/m.py:3"
    assert soak_report.short_path("<string>:1") == "<string>:1"


#: The traced pass, in a process of its own: flashinfer's host path leaving
#: cyclic garbage (10 KB a batch, freed only by a collection) with automatic
#: collection off, so the garbage is still there when the half-way census point
#: is taken.  Only the soak's own collections free it.
GARBAGE_PASS = """
import gc, json
from fi_compat.commands import soak_worker
from fi_compat.workload import streams
from fi_compat.workload.driver import Driver

send = Driver.send

def send_leaving_garbage(self, *args, **kwargs):
    junk = [bytearray(10_000)]
    junk.append(junk)
    return send(self, *args, **kwargs)

Driver.send = send_leaving_garbage
gc.disable()
options = {"lengths": streams.lengths("uniform", 65536, 200, 0), "batch_sizes": [8] * 200, "layout": "vllm",
           "backend": "auto", "cache_size": 256, "policy": "exact", "call_api": False, "context": 65536,
           "progress": False, "mode": "q1"}
result = soak_worker.run_pass("fi_compat", True, options)
print(json.dumps([result["tracemalloc_growth_bytes"], result["half_tracemalloc_bytes"]]))
"""


def test_traced_growth_counts_neither_garbage_nor_the_census_points():
    """200 batches leave 2 MB of garbage; what the bounded path retains is a
    small fraction of it.  A census point taken without a collection first
    counted the garbage it freed as growth (0.6 MiB too much on vLLM's DCP call
    at 1M context)."""
    done = subprocess.run([sys.executable, "-c", GARBAGE_PASS], capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    growth, half = json.loads(done.stdout.strip().splitlines()[-1])
    assert growth < 512 * 1024, growth  # the garbage freed at the half-way point is not growth
    assert 0 <= half <= growth + 256 * 1024, (half, growth)


def test_dcp_mode_is_vllms_call_only():
    done = _soak("--mode", "dcp", "--layout", "sglang", "--steps", "4")
    assert done.returncode == 2 and "--mode dcp replays vLLM's" in done.stderr, done.stderr


def test_dcp_and_mtp_modes_run_through_the_builder():
    """Each batch reaches the builder memo once; DCP sends backend cute-dsl, whose key holds the batch cap."""
    for mode, layout in (("dcp", "vllm"), ("mtp", "sglang")):
        done = _soak("--json", "--mode", mode, "--layout", layout, "--steps", "12", "--batch-sizes", "1:8",
                     "--variant", "fi_compat", "--no-trace-memory", "--distribution", "uniform")
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout)
        assert result["options"]["mode"] == mode
        caches = result["timed"]["fi_compat"]["fi_compat_caches"]
        assert caches["builder"]["hits"] + caches["builder"]["misses"] == 13  # warm-up and 12 batches
        if mode == "dcp":
            assert result["options"]["backend"] == "cute-dsl" and caches["batch-cap"]["misses"] > 0
