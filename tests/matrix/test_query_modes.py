"""Every query mode ``fi-compat guard --census`` drives reaches flashinfer's
kernel launch on the real release, or is refused: by fi_compat's call where the
release lacks the mode's parameter, or by flashinfer itself (0.6.14-0.6.15.post1's
cute-dsl refuses ``cum_seq_lens_q``), which the guard reports as a note.

``fi_compat.workload.modes`` builds each mode's call (a ragged query with
``cum_seq_lens_q``, a sparse table, DCP's keywords, ...).  A census that drives
a call flashinfer refuses would count nothing and pass: this checks, per
(layout, backend, mode) the probe drives, that the call is one flashinfer
accepts on this release, by the launch the shim records.
"""

from __future__ import annotations

import pytest

from fi_compat.commands.guard.census_probe import ENGINE_BACKENDS, EXTRA_MODES
from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal
from fi_compat.workload import modes, workload

torch = pytest.importorskip("torch")

#: The decode parameter a mode needs; before it a release refuses the mode (TypeError, before flashinfer runs).
NEEDS = {"varq": "cum_seq_lens_q", "sparse": "sparse_mla_top_k", "dcp": "enable_dcp", "modular": "cute_dsl_impl"}

COMBINATIONS = [
    (layout, backend, mode) for layout, backend in ENGINE_BACKENDS for mode in ("q1", *EXTRA_MODES[(layout, backend)])
]


def test_every_mode_is_driven_somewhere():
    assert {mode for _, _, mode in COMBINATIONS} == set(modes.MODES)


@pytest.mark.parametrize(("layout", "backend", "mode"), COMBINATIONS, ids=["/".join(c) for c in COMBINATIONS])
def test_the_mode_reaches_the_launch_or_names_the_missing_parameter(fi_cpu_host, layout, backend, mode):
    import flashinfer.mla

    decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    t = modes.mode_inputs(torch, layout, mode, batch=4, width=2048, page_size=64, num_pages=512)
    t.seq_lens.fill_(4000)
    needed = NEEDS.get(mode)
    if needed is not None and needed not in workload.accepted(decode):
        with pytest.raises(TypeError, match=needed):
            modes.mode_call(torch, mode, layout, decode, t, 4000, backend)
        return
    device_gate.require_backend(backend, sparse=mode == "sparse")
    before = fi_cpu_host.recorder.total
    refusal = flashinfer_refusal(lambda: modes.mode_call(torch, mode, layout, decode, t, 4000, backend))
    if refusal is not None:  # raised inside flashinfer; an error of fi_compat's call fails the test
        pytest.skip(f"flashinfer refuses it: {describe_error(refusal)}")
    assert fi_cpu_host.recorder.total > before, "no kernel launch recorded"
