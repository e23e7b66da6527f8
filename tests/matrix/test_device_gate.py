"""The device gate (tests/helpers/device_gate.py) against the installed release,
on this run's device: the GPU's on the GPU matrix, the CPU-host shim's
elsewhere (SM100 by default, SM90 with ``FI_COMPAT_SHIM_CAPABILITY=9.0``).

The tests that need a backend skip where the gate says this device cannot run
it; these check that flashinfer itself agrees, each engine's call both ways:
where the gate says a path runs, flashinfer launches it; where it says it
cannot, flashinfer refuses it.  A release that resolves ``"auto"`` otherwise
fails here, with both answers, instead of failing (or skipping) elsewhere.
"""

from __future__ import annotations

import pytest

from fi_compat.workload import workload
from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal, installed_release

torch = pytest.importorskip("torch")

#: Each engine's call with each backend it sends (TensorRT-LLM's is always trtllm-gen).
PATHS = [("trtllm", "trtllm-gen")] + [(layout, backend) for layout in ("vllm", "sglang")
                                      for backend in ("auto", "trtllm-gen", "cute-dsl")]


@pytest.mark.parametrize(("layout", "backend"), PATHS, ids=[f"{layout}/{backend}" for layout, backend in PATHS])
def test_flashinfer_runs_a_path_exactly_where_the_gate_says(fi_cpu_host, layout, backend):
    import flashinfer.mla

    decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    t = workload.make_inputs(torch, layout, batch=4, width=2048, page_size=64, num_pages=64)
    before = fi_cpu_host.recorder.total
    refusal = flashinfer_refusal(lambda: workload.call(layout, decode, t, 1000, backend))
    reason = device_gate.unavailable(backend)
    where = f"flashinfer {installed_release()} on {device_gate.describe()}"
    if reason is None:
        assert refusal is None, f"the gate runs {layout}/{backend} here; {where} refused it: {describe_error(refusal)}"
        assert fi_cpu_host.recorder.total > before, f"{where}: {layout}/{backend} launched nothing"
    else:
        assert refusal is not None, f"the gate skips {layout}/{backend} here ({reason}); {where} runs it"


def test_auto_resolves_where_the_gate_says(fi_cpu_host):
    """Without the counter buffer (which XQA refuses before anything else), an
    ``"auto"`` call that flashinfer sends to XQA is refused by XQA's own check,
    which names it; one it keeps for trtllm-gen / cute-dsl launches."""
    import flashinfer.mla

    decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    t = workload.make_inputs(torch, "vllm", batch=4, width=2048, page_size=64, num_pages=64)
    before = fi_cpu_host.recorder.total
    refusal = flashinfer_refusal(lambda: workload.keyword_call(decode, t, 1000))
    resolved = device_gate.auto_resolves_to()
    where = f"flashinfer {installed_release()} on {device_gate.describe()}"
    if resolved == "xqa":
        assert refusal is not None and "XQA" in str(refusal), \
            f"the gate says 'auto' is XQA here; {where}: {describe_error(refusal) if refusal else 'it launched'}"
    else:
        assert refusal is None, f"the gate says 'auto' is {resolved} here; {where} refused: {describe_error(refusal)}"
        assert fi_cpu_host.recorder.total > before


def test_the_gate_names_the_device_the_host_presents(fi_cpu_host):
    """The gate's capability is the one flashinfer's own query answers in this run."""
    from flashinfer.utils import get_compute_capability

    assert tuple(get_compute_capability(torch.device("cuda", 0))) == device_gate.capability()
