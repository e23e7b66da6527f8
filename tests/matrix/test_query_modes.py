"""Every query mode the engines' records send reaches flashinfer's kernel launch on the real
release, or is refused: by fi_compat's call where the release lacks the mode's parameter, or by
flashinfer itself (0.6.14-0.6.15.post1's cute-dsl refuses ``cum_seq_lens_q``), which the guard
reports as a note.

:class:`fi_compat.workload.driver.Driver` builds each mode's batch (a ragged query with
``cum_seq_lens_q``, a sparse table, DCP's keywords, ...) and makes the engine's call from its
record (:mod:`fi_compat.workload.engines`).  A census that drives a call flashinfer refuses would
count nothing and pass: this checks, per (layout, backend, mode) the records list (what
``fi-compat guard --census`` drives), that the call is one flashinfer accepts on this release, by
the launch the shim records.
"""

from __future__ import annotations

import pytest

from fi_compat.workload.driver import Driver
from fi_compat.workload.engine_model import accepted
from fi_compat.workload.engines import ENGINES
from fi_compat.workload.modes import MODES, NEEDS
from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal

torch = pytest.importorskip("torch")

COMBINATIONS = [(engine.name, backend, mode) for engine in ENGINES.values() for backend, mode in engine.paths()]


def test_every_mode_is_driven_somewhere():
    assert {mode for _, _, mode in COMBINATIONS} == set(MODES)


@pytest.mark.parametrize(("layout", "backend", "mode"), COMBINATIONS, ids=["/".join(c) for c in COMBINATIONS])
def test_the_mode_reaches_the_launch_or_names_the_missing_parameter(fi_cpu_host, layout, backend, mode):
    import flashinfer.mla

    decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    driver = Driver(torch, decode, layout, backend, mode, context=2048 * 64, num_pages=512, max_batch=4)
    needed = NEEDS.get(mode)
    if needed is not None and needed not in accepted(decode):
        with pytest.raises(TypeError, match=needed):
            driver.call(4, 4000)
        return
    device_gate.require_backend(backend, sparse=mode == "sparse")
    before = fi_cpu_host.recorder.total
    refusal = flashinfer_refusal(lambda: driver.call(4, 4000))
    if refusal is not None:  # raised inside flashinfer; an error of fi_compat's call fails the test
        pytest.skip(f"flashinfer refuses it: {describe_error(refusal)}")
    assert fi_cpu_host.recorder.total > before, "no kernel launch recorded"
