"""The real MLA decode host path on a CUDA device, with no shim.

Builder (``_build_mla_decode_tuning_config``), ``AutoTuner.choose_one`` with
the real config, and the public decode function up to the kernel launch, on
real CUDA tensors and the device's real properties.  Only the trtllm-gen
kernel-module loader is stubbed (the ``fi_cpu_host`` fixture on the GPU
matrix, see conftest.py), so this runs on any CUDA device (an H200 too).
``test_real_kernel_launch`` launches the real kernel and needs SM100/SM103.

Run by ``nox -s gpu_matrix``; skipped elsewhere ("needs a CUDA device").
"""

from __future__ import annotations

import inspect
import math

import pytest
from fi_compat.workload.builder import builder_arguments

from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal

pytestmark = pytest.mark.gpu

PAGE_SIZE = 32
PAGES_PER_SEQ = 64
HEADS = 128
RANK = 512
ROPE = 64
NOPE = 128


@pytest.fixture
def fresh_fi_compat():
    import fi_compat

    fi_compat.uninstall()
    yield fi_compat
    fi_compat.uninstall()


@pytest.fixture
def cuda_inputs(fi_cpu_host, fi_device):
    import torch

    assert fi_device.type == "cuda"
    batch = 2
    g = torch.Generator(device="cpu").manual_seed(0)
    pages = batch * PAGES_PER_SEQ
    return dict(
        query=torch.randn(batch, 1, HEADS, RANK + ROPE, generator=g, device="cpu").to(fi_device, torch.bfloat16),
        kv_cache=torch.randn(pages, PAGE_SIZE, RANK + ROPE, generator=g, device="cpu").to(fi_device, torch.bfloat16),
        workspace_buffer=torch.zeros(128 << 20, dtype=torch.uint8, device=fi_device),
        block_tables=torch.arange(pages, dtype=torch.int32, device=fi_device).view(batch, PAGES_PER_SEQ),
        seq_lens=torch.tensor([100, 1000], dtype=torch.int32, device=fi_device),
        device=fi_device,
    )


def build(core, t, max_seq_len):
    fn = core._build_mla_decode_tuning_config
    accepted = inspect.signature(fn).parameters
    kwargs = builder_arguments(kv_cache=t["kv_cache"], block_tables=t["block_tables"],
                               workspace_buffer=t["workspace_buffer"], max_seq_len=max_seq_len, device=t["device"])
    return fn(**{k: v for k, v in kwargs.items() if k in accepted})


def decode(t, max_seq_len, **kwargs):
    import flashinfer.mla

    return flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(
        t["query"], t["kv_cache"], t["workspace_buffer"], NOPE, RANK, ROPE,
        t["block_tables"], t["seq_lens"], max_seq_len, bmm1_scale=1.0 / math.sqrt(NOPE + ROPE),
        **kwargs,
    )


def test_device_is_real(fi_cpu_host, fi_device):
    import torch

    props = torch.cuda.get_device_properties(fi_device)
    assert "shim" not in props.name, "gpu_matrix must not run under the CPU shim"
    from flashinfer.utils import get_compute_capability

    assert tuple(get_compute_capability(fi_device)) == tuple(torch.cuda.get_device_capability(fi_device))


def test_builder_on_cuda(cuda_inputs):
    from flashinfer.mla import _core

    config = build(_core, cuda_inputs, 4096)
    assert type(config).__name__ == "TuningConfig"
    assert config.dynamic_tensor_specs


def test_builder_memo_is_bounded_on_cuda(cuda_inputs, fresh_fi_compat):
    from flashinfer.mla import _core

    status = fresh_fi_compat.install(cache_size=8)
    assert status["state"] == "installed", status
    assert status["outcome"] == "verified", status["bounds"]
    first = build(_core, cuda_inputs, 4096)
    assert build(_core, cuda_inputs, 4096) is first  # a hit returns the same object
    for max_seq_len in range(1000, 1000 + 300):
        build(_core, cuda_inputs, max_seq_len)
    for cache in fresh_fi_compat.status()["caches"].values():
        assert cache["currsize"] <= cache["maxsize"], cache


def test_autotuner_choose_one_on_cuda(cuda_inputs):
    import torch
    from flashinfer.autotuner import AutoTuner, TunableRunner
    from flashinfer.mla import _core

    class Fallback(TunableRunner):
        calls = 0

        def get_valid_tactics(self, inputs, profile, **kwargs):
            return [-1]

        def forward(self, inputs, tactic=-1, do_preparation=False, **kwargs):
            Fallback.calls += 1
            return inputs[-1]

    t = cuda_inputs
    config = build(_core, t, 2048)
    out = torch.empty(2, 1, HEADS, RANK, dtype=torch.bfloat16, device=t["device"])
    inputs = [t["query"], t["block_tables"], t["seq_lens"], out]
    runner = Fallback()
    chosen, tactic = AutoTuner.get().choose_one("trtllm_batch_decode_mla", [runner], config, inputs)
    assert chosen is runner and tactic == -1  # not tuning: cache miss -> fallback
    again = AutoTuner.get().choose_one("trtllm_batch_decode_mla", [runner], build(_core, t, 2048), inputs)
    assert again == (runner, -1)


@pytest.mark.parametrize("with_fi_compat", [False, True], ids=["flashinfer", "fi_compat"])
def test_decode_host_path_records_launch(cuda_inputs, fi_launches, fresh_fi_compat, with_fi_compat):
    import torch

    if with_fi_compat:
        assert fresh_fi_compat.install()["state"] == "installed"
    out = decode(cuda_inputs, 1536, backend="trtllm-gen")
    assert isinstance(out, torch.Tensor) and out.is_cuda
    assert tuple(out.shape[-2:]) == (HEADS, RANK)
    assert fi_launches.total >= 1
    launch = fi_launches.launches[-1]
    assert launch.max_seq_len == 1536  # "exact" policy: the caller's value reaches the kernel
    tensors = [a for a in launch.args if isinstance(a, torch.Tensor)]
    assert tensors and all(a.is_cuda for a in tensors)


def test_decode_many_max_seq_len_stays_bounded(cuda_inputs, fi_launches, fresh_fi_compat):
    from fi_compat.counting import census

    fresh_fi_compat.install(cache_size=16)
    before = census.take()
    for max_seq_len in range(1000, 1400):
        decode(cuda_inputs, max_seq_len, backend="trtllm-gen")
    assert fi_launches.launches[-1].max_seq_len == 1399
    for cache in fresh_fi_compat.status()["caches"].values():
        assert cache["currsize"] <= cache["maxsize"], cache
    over = census.over_bound(census.take(), before, 16)  # flashinfer's own caches, on the real device
    assert not over, [g.describe() for g in over]


def reference_mla(t, scale):
    """Plain torch MLA decode over the paged cache (fp32)."""
    import torch

    outs = []
    for b in range(t["query"].shape[0]):
        n = int(t["seq_lens"][b])
        pages = t["block_tables"][b]
        kv = t["kv_cache"][pages.long()].reshape(-1, RANK + ROPE)[:n].float()
        q = t["query"][b, 0].float()  # [heads, 576]
        p = torch.softmax(q @ kv.T * scale, dim=-1)
        outs.append((p @ kv[:, :RANK]).unsqueeze(0))
    return torch.stack(outs)  # [batch, 1, heads, rank]


@pytest.mark.mla_kernel
def test_real_kernel_launch(fi_device):
    """Launches the real trtllm-gen kernel (no stub) and compares with torch."""
    import torch

    import flashinfer.mla

    batch = 2
    g = torch.Generator(device="cpu").manual_seed(1)
    pages = batch * PAGES_PER_SEQ
    t = dict(
        query=torch.randn(batch, 1, HEADS, RANK + ROPE, generator=g, device="cpu").to(fi_device, torch.bfloat16),
        kv_cache=torch.randn(pages, PAGE_SIZE, RANK + ROPE, generator=g, device="cpu").to(fi_device, torch.bfloat16),
        block_tables=torch.arange(pages, dtype=torch.int32, device=fi_device).view(batch, PAGES_PER_SEQ),
        seq_lens=torch.tensor([100, 1000], dtype=torch.int32, device=fi_device),
    )
    scale = 1.0 / math.sqrt(NOPE + ROPE)
    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device=fi_device)
    out = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla(
        t["query"], t["kv_cache"], workspace, NOPE, RANK, ROPE, t["block_tables"], t["seq_lens"],
        PAGES_PER_SEQ * PAGE_SIZE, bmm1_scale=scale, backend="trtllm-gen",
    )
    torch.cuda.synchronize()
    expected = reference_mla(t, scale)
    torch.testing.assert_close(out.float().view_as(expected), expected, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("backend", ["trtllm-gen", "auto"])
def test_decode_under_cuda_graph_capture_launches_as_flashinfer_alone(cuda_inputs, fi_launches, fresh_fi_compat,
                                                                      backend):
    """What an engine's CUDA-graph decode does (vLLM's and SGLang's capture
    path): a warm-up outside the capture, then the decode call inside
    ``torch.cuda.graph``.  With fi_compat installed the host path runs under
    capture wherever it does alone, and hands the launcher the same arguments.
    Skips where this device cannot run ``backend`` (tests/helpers/device_gate.py),
    and where the release's own host path cannot run under capture, with
    flashinfer's error (only the loader is stubbed: nothing is launched); an
    error that is not flashinfer's fails."""
    import torch
    from engine_replay import launch_key

    device_gate.require_backend(backend)

    def captured(max_seq_len):
        decode(cuda_inputs, max_seq_len, backend=backend)  # autotuner and memos filled outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        before = fi_launches.total
        with torch.cuda.graph(graph):
            decode(cuda_inputs, max_seq_len, backend=backend)
        launched = fi_launches.total - before  # the recorder keeps a bounded deque: count, then take its tail
        return [launch_key(launch) for launch in list(fi_launches.launches)[len(fi_launches.launches) - launched:]]

    alone: list = []
    refusal = flashinfer_refusal(lambda: alone.extend(captured(2048)))
    if refusal is not None:
        pytest.skip(f"flashinfer's host path does not run under CUDA-graph capture here: {describe_error(refusal)}")
    assert alone, "the captured decode recorded no launch"
    fresh_fi_compat.install()
    assert captured(2048) == alone
