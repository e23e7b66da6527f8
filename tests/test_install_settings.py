"""A bare ``install()`` after an install keeps the settings in force (issue #25).

TensorRT-LLM's patched module calls a bare ``fi_compat.install()`` at import;
a user who installed earlier with arguments must keep them.  Checked on the
installed flashinfer (real wheel, CPU-host shim): the bounded memo's real
capacity and the ``max_seq_len`` the recorded trtllm-gen launch receives, not
only what ``status()`` says."""

from __future__ import annotations

import pytest

import fi_compat
from fi_compat.workload.workload import make_inputs, trtllm_call


def _launched_max_seq_len(fi_launches, length: int) -> int:
    import torch

    fi_launches.clear()
    trtllm_call(fi_compat.mla_decode, make_inputs(torch, "trtllm", width=64, page_size=64), length)
    launches = [launch for launch in fi_launches.launches if launch.max_seq_len is not None]
    assert launches, "the decode reached no recorded trtllm-gen launch"
    return launches[-1].max_seq_len


def _builder_capacity() -> int:
    return fi_compat.status()["caches"]["builder"]["maxsize"]


def test_a_bare_install_keeps_the_arguments_of_an_earlier_one(fi_cpu_host, fi_launches, caplog, monkeypatch):
    for name in ("FI_COMPAT_STRICT", "FI_COMPAT_CACHE_SIZE", "FI_COMPAT_MAX_SEQ_LEN_POLICY"):
        monkeypatch.delenv(name, raising=False)
    fi_compat.install(strict=True, cache_size=64, max_seq_len_policy="bucket")
    assert _launched_max_seq_len(fi_launches, 1000) == 1024  # bucket: 16 pages of 64
    with caplog.at_level("INFO", logger="fi_compat"):
        state = fi_compat.install()
    assert not [r for r in caplog.records if "re-installing" in r.getMessage()]
    settings = {name: (s["value"], s["source"]) for name, s in state["settings"].items()}
    assert settings["strict"] == (True, "argument")
    assert settings["cache_size"] == (64, "argument")
    assert settings["max_seq_len_policy"] == ("bucket", "argument")
    assert _builder_capacity() == 64
    assert _launched_max_seq_len(fi_launches, 1000) == 1024


def test_an_explicit_different_argument_re_installs_and_keeps_the_others(fi_cpu_host, fi_launches, caplog):
    fi_compat.install(strict=True, cache_size=64, max_seq_len_policy="bucket")
    with caplog.at_level("INFO", logger="fi_compat"):
        state = fi_compat.install(max_seq_len_policy="exact")
    assert [r for r in caplog.records if "re-installing" in r.getMessage()]
    assert state["settings"]["strict"]["value"] is True
    assert _builder_capacity() == 64
    assert _launched_max_seq_len(fi_launches, 1000) == 1000


def test_uninstall_forgets_the_arguments(fi_cpu_host, fi_launches, monkeypatch):
    monkeypatch.delenv("FI_COMPAT_CACHE_SIZE", raising=False)
    monkeypatch.delenv("FI_COMPAT_MAX_SEQ_LEN_POLICY", raising=False)
    fi_compat.install(cache_size=64, max_seq_len_policy="bucket")
    fi_compat.uninstall()
    fi_compat.install()
    assert _builder_capacity() == fi_compat.config.DEFAULT_CACHE_SIZE
    assert _launched_max_seq_len(fi_launches, 1000) == 1000


def test_environment_settings_are_read_again_by_a_bare_install(fi_cpu_host, monkeypatch):
    """Only earlier *arguments* are kept: a setting that came from the
    environment follows the environment, as it always did."""
    monkeypatch.setenv("FI_COMPAT_CACHE_SIZE", "32")
    fi_compat.install(strict=True)
    assert _builder_capacity() == 32
    monkeypatch.setenv("FI_COMPAT_CACHE_SIZE", "48")
    state = fi_compat.install()
    assert _builder_capacity() == 48
    assert state["settings"]["strict"] == {"value": True, "source": "argument", "env": "FI_COMPAT_STRICT"}


@pytest.mark.parametrize("first", [{"cache_size": 64}, {"transparent": True}])
def test_the_same_argument_again_is_a_no_op(fi_cpu_host, first, caplog):
    fi_compat.install(**first)
    with caplog.at_level("DEBUG", logger="fi_compat"):
        fi_compat.install(**first)
        fi_compat.install()
    assert not [r for r in caplog.records if "re-installing" in r.getMessage()]
    assert [r for r in caplog.records if "already in force" in r.getMessage()]
