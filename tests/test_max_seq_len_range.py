"""``max_seq_len`` below 1: what flashinfer does with it, and why fi_compat refuses it on every backend.

Run on the installed flashinfer (a real wheel) under the CPU-host shim; the
justification is in docs/errors.md, "Where fi_compat is stricter than flashinfer"."""

from __future__ import annotations

import pytest

import fi_compat
from fi_compat.workload.workload import make_inputs


def _decode(function, max_seq_len: int, backend: str):
    import torch

    s = make_inputs(torch, "vllm")  # shared K/V page indices: every backend can take this layout
    return function(s.query, s.kv_cache, s.workspace_buffer, 128, 512, 64, s.block_tables, s.seq_lens,
                    max_seq_len, backend=backend)


@pytest.mark.parametrize("backend", ["auto", "cute-dsl"])
def test_flashinfers_own_default_backends_refuse_zero(fi_cpu_host, fi_launches, backend):
    from flashinfer.mla import trtllm_batch_decode_with_kv_cache_mla

    with pytest.raises(ValueError, match="max_seq_len must be"):
        _decode(trtllm_batch_decode_with_kv_cache_mla, 0, backend)
    assert not fi_launches.launches


def test_flashinfers_trtllm_gen_backend_passes_zero_to_the_kernel(fi_cpu_host, fi_launches):
    from flashinfer.mla import trtllm_batch_decode_with_kv_cache_mla

    _decode(trtllm_batch_decode_with_kv_cache_mla, 0, "trtllm-gen")
    assert [launch.max_seq_len for launch in fi_launches.launches] == [0]


@pytest.mark.parametrize("backend", ["auto", "cute-dsl", "trtllm-gen"])
def test_fi_compat_refuses_zero_on_every_backend_before_flashinfer_runs(fi_cpu_host, fi_launches, backend):
    with pytest.raises(ValueError) as info:
        _decode(fi_compat.mla_decode, 0, backend)
    assert "max_seq_len=0 is out of range; accepted: 1 to 2147483647" in str(info.value)
    assert "auto and cute-dsl backends refuse 0" in str(info.value)
    assert not fi_launches.launches


def test_one_is_accepted_and_reaches_the_kernel_as_given(fi_cpu_host, fi_launches):
    _decode(fi_compat.mla_decode, 1, "trtllm-gen")
    assert [launch.max_seq_len for launch in fi_launches.launches] == [1]
