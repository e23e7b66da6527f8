"""What the runtime watch costs per decode call: the builder memo's heartbeat, or the decode tick.

Wherever flashinfer builds a tuning config on the decode path, fi_compat's memo of
the builder compares one clock reading per call with the watch's schedule (its
heartbeat) and takes the due steps; after a few, the decode tick (a pass-through
in front of the decode function, the watch's largest per-call cost) is taken out
and every module attribute holds flashinfer's function again.  On a path that
builds no config (TensorRT-LLM's trtllm-gen call on 0.7.4) nothing beats, and
the tick stays: the watch still steps there.  Which path builds is read from
the builder memo's own counts, not assumed per release.
"""

from __future__ import annotations

import sys
import time

import pytest

import fi_compat
from fi_compat import watch
from fi_compat.model import specs
from fi_compat.workload import workload

torch = pytest.importorskip("torch")

PATHS = [("vllm", "auto"), ("sglang", "auto"), ("trtllm", "trtllm-gen"), ("vllm", "trtllm-gen")]


@pytest.mark.parametrize(("layout", "backend"), PATHS, ids=[f"{layout}/{backend}" for layout, backend in PATHS])
def test_the_decode_tick_stays_only_where_nothing_beats(fi_cpu_host, quiet_launches, monkeypatch, layout, backend):
    import flashinfer.mla

    monkeypatch.setenv("FI_COMPAT_WATCH", "bound")
    core = sys.modules[specs.CORE_MODULE]
    original = getattr(core, specs.DECODE.name)
    fi_compat.uninstall()
    fi_compat.install()
    try:
        assert flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla is not original  # the tick stands there
        builder = getattr(core, specs.TUNING_CONFIG_BUILDER.name)
        counted = getattr(builder, "cache_info", None)
        t = workload.make_inputs(torch, layout, batch=4, width=2048, page_size=64, num_pages=64)
        calls, until = 0, time.perf_counter() + 1.0
        while calls < 5000 and (time.perf_counter() < until or calls < 200):
            workload.call(layout, flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla, t, 1000 + calls, backend)
            calls += 1
            report = watch.report()
            if report is not None and report["decode_tick"] == "retired":
                break
        report = watch.report()
        assert report is not None and report["steps"] > 0, report
        built = 0 if counted is None else counted().hits + counted().misses
        if built:  # the builder's memo ran on this path: its heartbeat took the steps
            assert report["heartbeats"] >= watch.BEATS_TO_RETIRE_TICK, (built, report)
            assert report["decode_tick"] == "retired"
            assert flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla is original
        else:
            assert report["heartbeats"] == 0 and report["decode_tick"] == "in place", report
            assert flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla is not original
    finally:
        fi_compat.uninstall()
    assert flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla is original
