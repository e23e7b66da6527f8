"""0.6.13 - 0.6.15: the nearest-profile cache stays small with fi_compat.

Drives the real decode host path (builder, AutoTuner.choose_one, runner,
recorded launch) with the same max_seq_len on every call.
"""

from __future__ import annotations

import pytest

import fi_compat
from fi_compat.adapters import FreshConfigAdapter

from support import decode_inputs, installed_release, trtllm_call

torch = pytest.importorskip("torch")


def nearest_profile_entries() -> int:
    from flashinfer.autotuner import AutoTuner

    return AutoTuner._find_nearest_profile.cache_info().currsize


@pytest.fixture
def fresh_autotuner(fi_cpu_host):
    if not FreshConfigAdapter.covers(installed_release()):
        pytest.skip("the colliding nearest-profile cache exists on 0.6.13 - 0.6.15 only")
    from flashinfer.autotuner import AutoTuner

    AutoTuner._find_nearest_profile.cache_clear()
    yield
    AutoTuner._find_nearest_profile.cache_clear()


def run_decodes(calls: int) -> None:
    import flashinfer.mla

    tensors = decode_inputs(torch)
    for _ in range(calls):
        trtllm_call(flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla, tensors, 2048)


def test_unpatched_nearest_profile_cache_fills_with_colliding_keys(fresh_autotuner):
    run_decodes(1_500)
    assert nearest_profile_entries() >= 1_000  # one entry per call: configs hash equal, compare unequal


def test_patched_nearest_profile_cache_holds_a_handful(fresh_autotuner):
    fi_compat.install()
    run_decodes(10_000)
    assert nearest_profile_entries() <= 8
    stats = fi_compat.status()["caches"]["builder"]
    assert stats["hits"] >= 9_990 and stats["currsize"] <= 2
