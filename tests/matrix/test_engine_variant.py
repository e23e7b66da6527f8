"""An engine layout added in one place: a record defined here, driven by the soak, the guard's
census, ``audit --live`` and the release suite's driver without a line of theirs changed.

The record is TensorRT-LLM's older call (commit 9eabd2df, flashinfer-notes.md): 19 positional
arguments, ``backend``, ``is_var_seq`` and ``uses_shared_paged_kv_idx`` among them, on TensorRT-LLM's
shapes (separate K/V page indices).  Each consumer takes the record itself, or, across a process
boundary (the soak's worker), its import path ``test_engine_variant:OLDER_TRTLLM``.  Evidence, on
the installed real release: its launches are TensorRT-LLM's newer call's, batch for batch; the
guard's census of it with fi_compat installed finds nothing growing per length; the soak's worker
runs it unpatched and bounded, and flashinfer's unbounded caches grow per length only unpatched
(from 0.6.15.post1, where the tuning-config memo exists).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.commands.audit import live
from fi_compat.commands.guard import census_probe
from fi_compat.workload import engines, streams
from fi_compat.workload.driver import Driver

from engine_replay import launch_key
from helpers.support import installed_release

torch = pytest.importorskip("torch")

#: The layout under test: one record, nothing else.
OLDER_TRTLLM = dataclasses.replace(
    engines.TRTLLM,
    name="trtllm-9eabd2df",
    label="TensorRT-LLM 9eabd2df",
    call=functools.partial(engines.trtllm_call, form=19),
)

MATRIX = Path(__file__).resolve().parent
TUNING_MEMO_SINCE = Version("0.6.15.post1")
STEPS = 60


def test_its_launches_are_the_newer_calls_batch_for_batch(fi_cpu_host, decode_function):
    older = Driver(torch, decode_function, OLDER_TRTLLM, context=65_536, max_batch=16)
    newer = Driver(torch, decode_function, "trtllm", context=65_536, max_batch=16)
    recorder = fi_cpu_host.recorder
    for max_seq_len, batch in zip(streams.lengths("uniform", 65_536, 20, 3), streams.batch_sizes(20, 1, 16, 3)):
        keys = []
        for driver in (older, newer):
            recorder.clear()
            driver.call(batch, max_seq_len)
            assert len(recorder.launches) == 1, driver.engine.name
            keys.append(launch_key(recorder.launches[-1]))
        assert keys[0] == keys[1], (max_seq_len, batch)
    recorder.clear()


def test_the_guards_census_of_it_is_flat_with_fi_compat(fi_cpu_host, decode_function, fresh_flashinfer_caches,
                                                      monkeypatch):
    monkeypatch.setenv("FI_COMPAT_WATCH", "off")  # the rows' bounds alone, as the probe measures them
    fi_compat.install()
    halves = census_probe.probe_lengths(48, 0)
    soaked = census_probe.soak_layout(torch, decode_function, fi_cpu_host, OLDER_TRTLLM, "trtllm-gen", halves)
    assert soaked["layout"] == OLDER_TRTLLM.name
    assert soaked["launches"] == len(halves[0]) + 2 * len(halves[1])  # one per call, the second half twice
    flashinfer_grown = [e for e in soaked["grown"] if e["owner"] == "flashinfer" and e["maxsize"] is None
                        and min(e["gained"]) >= len(halves[1]) // 4]
    assert flashinfer_grown == [], flashinfer_grown
    assert soaked["memory"]["sites"] == [], soaked["memory"]["sites"]


def test_audit_live_drives_it(fi_cpu_host):
    summary = live.decode_workload(24, layout=OLDER_TRTLLM)
    assert summary["layout"] == OLDER_TRTLLM.name and summary["calls"] == summary["distinct_max_seq_len"] == 24


def _soak_pass(variant: str) -> dict:
    """One pass of ``fi-compat soak``'s own worker process, told the record by its import path."""
    options = {"lengths": streams.lengths("uniform", 65_536, STEPS, 0), "batch_sizes": [8] * STEPS,
               "layout": f"{Path(__file__).stem}:OLDER_TRTLLM", "backend": "trtllm-gen", "cache_size": 256,
               "policy": "exact", "call_api": False, "context": 65_536, "progress": False, "mode": "q1"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FI_COMPAT_WATCH": "off",
           "PYTHONPATH": os.pathsep.join([str(MATRIX), str(MATRIX.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "fi_compat.commands.soak_worker"], capture_output=True, text=True,
                          input=json.dumps({"variant": variant, "traced": False, "options": options}), env=env,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_soak_runs_it_unpatched_and_bounded():
    def unbounded_growth(result: dict) -> int:
        before, after = result["census_before"], result["census_after"]
        return sum(count["currsize"] - before.get(name, {"currsize": 0})["currsize"] for name, count in after.items()
                   if count["owner"] == "flashinfer" and count["maxsize"] is None)

    unpatched, bounded = _soak_pass("unpatched"), _soak_pass("fi_compat")
    for result in (unpatched, bounded):
        assert result["launches"] == STEPS + 1 and result["steps"] == STEPS  # and the warm-up call
    assert unbounded_growth(bounded) == 0
    builder = bounded["fi_compat_caches"]["builder"]
    if builder["hits"] + builder["misses"] == 0:
        # 0.7.4 skips the builder on an explicit backend="trtllm-gen": nothing grows, alone either
        assert unbounded_growth(unpatched) == 0
    elif installed_release() >= TUNING_MEMO_SINCE:
        assert unbounded_growth(unpatched) >= 0.9 * STEPS
