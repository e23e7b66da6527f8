"""fi_compat beside TensorRT-LLM's own builder memo, in both orders.

TensorRT-LLM cannot be installed here; ``support.trtllm_style_memo``
reproduces what its workaround does as described in
shared/flashinfer-notes.md.  Written for these tests, not copied.
"""

from __future__ import annotations

import logging

import pytest

import fi_compat
from fi_compat.adapters import CachedConfigAdapter, FreshConfigAdapter

from support import build_meta_config, installed_release, trtllm_style_memo

torch = pytest.importorskip("torch")


@pytest.fixture
def core(fi_cpu_host):
    import flashinfer.mla._core as core

    original = core._build_mla_decode_tuning_config
    yield core
    core._build_mla_decode_tuning_config = original


def build(core, max_seq_len):
    return build_meta_config(core, max_seq_len, width=512)


def test_workaround_first_then_fi_compat_adds_no_second_memo(core):
    workaround = trtllm_style_memo(core._build_mla_decode_tuning_config)
    core._build_mla_decode_tuning_config = workaround
    state = fi_compat.install()
    assert state["trtllm_workaround"] == {"present": True, "fi_compat_defers": True}
    assert core._build_mla_decode_tuning_config is workaround  # nothing stacked on it
    if CachedConfigAdapter.covers(installed_release()):
        # the inner functools.cache is still bounded by fi_compat
        assert state["patched"] == ["flashinfer.mla._core._mla_decode_tuning_config"]
        for length in range(1000, 3000):
            build(core, length)
        assert fi_compat.status()["caches"]["config"]["currsize"] <= 256
    else:
        assert FreshConfigAdapter.covers(installed_release())
        assert state["state"] == "deferred" and state["patched"] == []
    fi_compat.uninstall()
    assert core._build_mla_decode_tuning_config is workaround


def test_fi_compat_first_then_workaround_on_top(core, caplog):
    fi_compat.install()
    proxy = core._build_mla_decode_tuning_config
    workaround = trtllm_style_memo(proxy)
    core._build_mla_decode_tuning_config = workaround
    assert fi_compat.status()["trtllm_workaround"]["present"] is True
    assert build(core, 4096) is build(core, 4096)
    with caplog.at_level(logging.WARNING, logger="fi_compat"):
        state = fi_compat.uninstall()
    # The workaround stays in place (removing it would break TensorRT-LLM);
    # fi_compat's proxy inside it becomes a pass-through and says so.
    assert core._build_mla_decode_tuning_config is workaround
    assert any("pass-through" in r.getMessage() for r in caplog.records)
    assert any("pass-through" in n for n in state["notes"])
    assert proxy._self_active is False
    build(core, 5000)  # still works
