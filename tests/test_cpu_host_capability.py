"""The CPU-host shim's device: SM100 by default, the SM90 of the GPU matrix's
H100/H200 on request, chosen by ``cpu_host(capability=...)`` or
``FI_COMPAT_SHIM_CAPABILITY``; what real flashinfer sees and refuses on each."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from fi_compat.workload import CAPABILITY_ENV, SHIM_DEVICES, shim_device
from fi_compat.workload.hosts import flashinfer_host

from helpers.support import environ_without_fi_compat_settings


@pytest.mark.parametrize(("given", "expected"), [(None, (10, 0)), ("10.0", (10, 0)), ("9.0", (9, 0)),
                                                 ((9, 0), (9, 0)), (" 9.0 ", (9, 0))])
def test_the_capability_is_chosen_by_argument(given, expected, monkeypatch):
    monkeypatch.delenv(CAPABILITY_ENV, raising=False)
    assert shim_device(given).capability == expected


def test_the_environment_chooses_when_the_argument_does_not(monkeypatch):
    monkeypatch.setenv(CAPABILITY_ENV, "9.0")
    assert shim_device().capability == (9, 0) and shim_device().multi_processor_count == 132
    assert shim_device("10.0").capability == (10, 0)  # the argument wins
    monkeypatch.setenv(CAPABILITY_ENV, "")
    assert shim_device() is SHIM_DEVICES["10.0"]


@pytest.mark.parametrize("bad", ["8.0", "sm90", "9", (12, 0)])
def test_a_capability_the_shim_does_not_present_is_refused_by_name(bad, monkeypatch):
    monkeypatch.delenv(CAPABILITY_ENV, raising=False)
    with pytest.raises(ValueError, match=r"capability=.*presents 10.0 \(SM100\) or 9.0 \(SM90\)"):
        shim_device(bad)
    monkeypatch.setenv(CAPABILITY_ENV, str(bad))
    with pytest.raises(ValueError, match=rf"{CAPABILITY_ENV}=.*presents 10.0 \(SM100\) or 9.0 \(SM90\)"):
        shim_device()


def test_a_cuda_host_takes_no_capability():
    with pytest.raises(ValueError, match="is for the 'cpu' host"):
        with flashinfer_host("cuda", capability="9.0"):
            pass


CHILD = r"""
import json, sys
from fi_compat.workload import cpu_host, workload
seen = []
for capability in sys.argv[1:]:
    with cpu_host(capability=None if capability == "env" else capability) as host:
        import torch, flashinfer.mla
        from flashinfer.utils import get_compute_capability, get_device_sm_count
        from flashinfer.cute_dsl.utils import get_num_sm
        device = torch.device("cuda", 0)
        t = workload.make_inputs(torch, "vllm", batch=4, width=2048, page_size=64, num_pages=64)
        try:
            workload.call("vllm", flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla, t, 1000, "auto")
            auto = host.launches[-1].function
        except ValueError as exc:
            auto = str(exc)
        seen.append({"capability": list(get_compute_capability(device)), "sms": get_device_sm_count(device),
                     "cute_sms": get_num_sm(device), "torch": list(torch.cuda.get_device_capability()),
                     "name": torch.cuda.get_device_properties(0).name, "auto": auto})
print(json.dumps(seen))
"""


def test_flashinfer_sees_each_shims_device_in_turn():
    """One process, SM90 then SM100 then the environment's SM90: flashinfer's
    cached device queries answer for the shim in force, and backend auto on
    vLLM's call is refused on SM90 as on the H100 and launches on SM100."""
    pytest.importorskip("torch")
    if importlib.util.find_spec("flashinfer") is None:  # not imported here: it needs the shim
        pytest.skip("needs flashinfer-python")
    env = {**environ_without_fi_compat_settings(), CAPABILITY_ENV: "9.0"}
    done = subprocess.run([sys.executable, "-c", CHILD, "9.0", "10.0", "env"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    sm90, sm100, from_env = json.loads(done.stdout.splitlines()[-1])
    for seen in (sm90, from_env):
        assert (seen["capability"], seen["torch"], seen["sms"], seen["cute_sms"]) == ([9, 0], [9, 0], 132, 132), seen
        assert "SM90" in seen["name"]
        assert seen["auto"] == "multi_ctas_kv_counter_buffer is only supported by the trtllm-gen backend", seen
    assert (sm100["capability"], sm100["torch"], sm100["sms"], sm100["cute_sms"]) == ([10, 0], [10, 0], 148, 148)
    assert sm100["auto"] == "trtllm_paged_attention_decode", sm100
