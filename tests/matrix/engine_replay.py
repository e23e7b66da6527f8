"""SGLang's and vLLM's decode batches, replayed on the installed real release.

Written from the facts of their published code (docs/integration/sglang.md and
vllm.md cite file, line and commit of each), through :mod:`fi_compat.workload.workload`:

``sglang``
    per batch: the batch's maximum length, a block-table width padded from it
    (:func:`~fi_compat.workload.workload.sglang_width`), backend omitted
    (``auto``, with the counter buffer) or ``cute-dsl``; one batch in
    :data:`VERIFY_EVERY` is a target-verify batch with 2-4 draft tokens
    (q_len = drafts, max_seq_len = maximum + 2 x drafts, width padded from
    maximum + drafts).
``vllm``
    per batch: the batch's maximum length (both model runners, eager), a
    block-table width fixed by ``max_model_len``, backend omitted (``auto``);
    or, under decode context parallelism, ``cute-dsl`` with the DCP keywords,
    the rank's ``ceil(max / world)`` and the global lengths.

Per-batch maxima are uniform in [1, :data:`CONTEXT`] and batch sizes in
[1, :data:`MAX_BATCH`], so nearly every batch brings a length flashinfer has
not seen.  Inputs are views of buffers allocated once (:class:`Buffers`), so
the replay's own tensors never count as growth.

A launch is compared as ``tests/helpers/support.py``'s ``launch_signature`` reads it
(tensors by shape, dtype and stride; scalars by value; CuTe-DSL scalars by
their repr), plus the kernel's name, ``max_seq_len`` and the keywords.
"""

from __future__ import annotations

import dataclasses
import random
import sys
import types
from array import array
from typing import Any, Callable, Optional

from fi_compat.workload import growth
from fi_compat.model.specs import DECODE
from fi_compat.workload import cuda_flagged, workload

from helpers.support import launch_signature

CONTEXT = 131_072
PAGE_SIZE = 64
NUM_PAGES = 1024
MAX_BATCH = 64
VERIFY_EVERY = 4
DRAFT_TOKENS = (2, 3, 4)
DCP_WORLD, DCP_RANK = 2, 0
# fi_compat's cache size in the replays.  Small on purpose: everything fi_compat
# holds at this size (its 16x caches full: about 0.5 MiB for SGLang's replay on
# 0.6.18) stays well inside GROWTH_LIMIT, so growth per distinct length shows;
# flashinfer alone exceeds it 12x at the fewest batches the matrix allows (200).
CACHE_SIZE = 16
GROWTH_LIMIT = 1 << 20   # tracemalloc bytes over a whole replay
PUBLIC_MODULE = "flashinfer.decode"   # where SGLang and vLLM find the decode function


@dataclasses.dataclass(frozen=True)
class Step:
    """One batch as the engine sends it."""

    batch: int
    max_seq_len: int
    width: int
    q_len: int = 1


def sglang_steps(count: int, seed: int) -> list[Step]:
    rng = random.Random(seed)
    steps = []
    for index, (length, batch) in enumerate(zip(workload.lengths("uniform", CONTEXT, count, seed),
                                                workload.batch_sizes(count, 1, MAX_BATCH, seed))):
        if index % VERIFY_EVERY == VERIFY_EVERY - 1:
            drafts = rng.choice(DRAFT_TOKENS)
            max_seq_len, width = workload.sglang_target_verify(length, drafts, PAGE_SIZE)
            steps.append(Step(batch, max_seq_len, width, drafts))
        else:
            steps.append(Step(batch, length, workload.sglang_width(length, PAGE_SIZE)))
    return steps


def vllm_steps(count: int, seed: int, dcp: bool = False) -> list[Step]:
    width = workload.vllm_width(CONTEXT, PAGE_SIZE)
    lengths = workload.lengths("uniform", CONTEXT, count, seed)
    if dcp:
        lengths = [workload.vllm_dcp_max_seq_len(n, DCP_WORLD) for n in lengths]
    return [Step(batch, n, width) for n, batch in zip(lengths, workload.batch_sizes(count, 1, MAX_BATCH, seed))]


class Buffers:
    """Every tensor of a replay, allocated once; :meth:`inputs` returns contiguous views."""

    def __init__(self, torch: Any, layout: str, steps: list[Step], dcp: bool = False) -> None:
        self.layout, self.dcp = layout, dcp
        workspace = (workload.SGLANG_WORKSPACE_BYTES if layout == "sglang" else
                     workload.VLLM_DCP_WORKSPACE_BYTES if dcp else workload.VLLM_WORKSPACE_BYTES)
        widest = max(s.width for s in steps)
        self.by_q_len = {q: workload.make_inputs(torch, layout, batch=MAX_BATCH, width=1, page_size=PAGE_SIZE,
                                                 num_pages=NUM_PAGES, q_len=q, workspace_bytes=workspace)
                         for q in sorted({s.q_len for s in steps} | {1})}
        shared = self.by_q_len[1]
        for q, inputs in self.by_q_len.items():  # one KV pool, workspace and counter buffer, as in an engine
            self.by_q_len[q] = dataclasses.replace(inputs, kv_cache=shared.kv_cache,
                                                   workspace_buffer=shared.workspace_buffer,
                                                   counter_buffer=shared.counter_buffer)
        self.tables = torch.zeros(MAX_BATCH * widest, dtype=torch.int32)
        self.global_lens = cuda_flagged(torch.ones(MAX_BATCH, dtype=torch.int32)) if dcp else None

    def inputs(self, step: Step) -> workload.Inputs:
        base = self.by_q_len[step.q_len]
        tables = self.tables[: step.batch * step.width].view(step.batch, step.width)
        return dataclasses.replace(base, query=base.query[: step.batch], out=base.out[: step.batch],
                                   seq_lens=base.seq_lens[: step.batch], block_tables=tables)

    def call(self, decode: Callable, step: Step, backend: Optional[str]) -> Any:
        inputs = self.inputs(step)
        if self.layout == "sglang":
            return workload.sglang_call(decode, inputs, step.max_seq_len, backend=backend)
        dcp = workload.Dcp(DCP_WORLD, DCP_RANK, self.global_lens[: step.batch]) if self.dcp else None
        return workload.vllm_call(decode, inputs, step.max_seq_len, backend=backend, dcp=dcp)


# --------------------------------------------------------------------------- launches


def _scalar(value: Any) -> Any:
    """CuTe-DSL numerics (``Int32(8)``) by repr: their ``==`` builds an expression."""
    return repr(value) if type(value).__module__.split(".")[0] == "cutlass" else value


def launch_key(launch: Any) -> tuple:
    """Everything a recorded launch received, comparable and hashable."""
    keywords = tuple(sorted((name, _scalar(value) if not hasattr(value, "shape") else
                             (tuple(value.shape), str(value.dtype), tuple(value.stride())))
                            for name, value in launch.kwargs.items()))
    return (launch.function, launch.max_seq_len, tuple(_scalar(v) for v in launch_signature(launch)), keywords)


# --------------------------------------------------------------------------- the passes


def public_decode() -> Any:
    """What SGLang calls: the attribute of ``flashinfer.decode``, looked up at every call."""
    return getattr(sys.modules[PUBLIC_MODULE], DECODE.name)


def bind_early(name: str) -> types.ModuleType:
    """A module that ran ``from flashinfer.decode import <decode>`` at its import, as
    vLLM's ``flashinfer_mla.py`` does (line 7); registered in ``sys.modules``."""
    module = types.ModuleType(name)
    exec(f"from {PUBLIC_MODULE} import {DECODE.name}", module.__dict__)  # noqa: S102  (the import statement itself)
    sys.modules[name] = module
    return module


def held_decode(module: types.ModuleType) -> Any:
    return getattr(module, DECODE.name)


@dataclasses.dataclass
class Replay:
    """What one pass saw: a hash of each call's launch, memory growth, and how many
    calls made other than exactly one launch."""

    hashes: array
    growth: Optional[int] = None
    not_one_launch: int = 0


def run(buffers: Buffers, steps: list[Step], decode_for: Callable[[int], Callable], backend: Optional[str],
        recorder: Any, traced: bool) -> Replay:
    """Call every step through ``decode_for(index)``; one launch each, hashed into a
    preallocated array (nothing kept per batch); with ``traced``, the tracemalloc
    growth over the whole pass after a warm-up call on a length outside it."""
    hashes = array("q", bytes(8 * len(steps)))
    warm = dataclasses.replace(steps[0], max_seq_len=1)
    buffers.call(decode_for(0), warm, backend)
    recorder.clear()
    not_one = 0
    with growth.traced(traced) as memory:
        for index, step in enumerate(steps):
            buffers.call(decode_for(index), step, backend)
            launches = recorder.launches
            not_one += len(launches) != 1
            hashes[index] = hash(launch_key(launches[-1])) if launches else 0
            launches.clear()  # the recorder keeps launches (and their tensors) otherwise
        grown = memory.grown()
    return Replay(hashes, grown, not_one)


def differences(steps: list[Step], replayed: Replay, alone: Replay) -> list[str]:
    """Batches whose launch under fi_compat differs from flashinfer's alone (first 5)."""
    return [f"batch {i}: {steps[i]}" for i, (a, b) in enumerate(zip(replayed.hashes, alone.hashes)) if a != b][:5]


__all__ = ["Buffers", "CACHE_SIZE", "GROWTH_LIMIT", "Replay", "Step", "bind_early", "differences", "held_decode",
           "launch_key", "public_decode", "run", "sglang_steps", "vllm_steps"]
