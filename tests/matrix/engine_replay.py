"""SGLang's and vLLM's decode batches, replayed on the installed real release.

Written from the facts of their published code (docs/integration/sglang.md and
vllm.md cite file, line and commit of each), through their records
(:mod:`fi_compat.workload.engines`) and the workload's driver
(:class:`fi_compat.workload.driver.Driver`):

``sglang``
    per batch: the batch's maximum length, a block-table width padded from it
    (:func:`~fi_compat.workload.engines.sglang_width`), backend omitted
    (``auto``, with the counter buffer) or ``cute-dsl``; one batch in
    :data:`VERIFY_EVERY` is a target-verify batch with 2-4 draft tokens
    (q_len = drafts, max_seq_len = maximum + 2 x drafts, width padded from
    maximum + drafts: the record's ``verify``).
``vllm``
    per batch: the batch's maximum length (both model runners, eager), a
    block-table width fixed by ``max_model_len``, backend omitted (``auto``);
    or, under decode context parallelism, ``cute-dsl`` with the DCP keywords,
    the rank's ``ceil(max / world)`` and the global lengths.

Per-batch maxima are uniform in [1, :data:`CONTEXT`] and batch sizes in
[1, :data:`MAX_BATCH`], so nearly every batch brings a length flashinfer has
not seen.  Inputs are views of buffers the driver allocates once, so the
replay's own tensors never count as growth.

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

from fi_compat.model.specs import DECODE
from fi_compat.workload import growth
from fi_compat.workload.driver import Driver
from fi_compat.workload.streams import batch_sizes, lengths

from helpers.support import launch_signature

CONTEXT = 131_072
PAGE_SIZE = 64
NUM_PAGES = 1024
MAX_BATCH = 64
VERIFY_EVERY = 4
DRAFT_TOKENS = (2, 3, 4)
# fi_compat's cache size in the replays.  Small on purpose: everything fi_compat
# holds at this size (its 16x caches full: about 0.5 MiB for SGLang's replay on
# 0.6.18) stays well inside GROWTH_LIMIT, so growth per distinct length shows;
# flashinfer alone exceeds it 12x at the fewest batches the matrix allows (200).
CACHE_SIZE = 16
GROWTH_LIMIT = 1 << 20   # tracemalloc bytes over a whole replay
PUBLIC_MODULE = "flashinfer.decode"   # where SGLang and vLLM find the decode function


@dataclasses.dataclass(frozen=True)
class Step:
    """One batch: its size, its longest request, and its query tokens per request."""

    batch: int
    max_seq: int
    q_len: int = 1


def sglang_steps(count: int, seed: int) -> list[Step]:
    rng = random.Random(seed)
    steps = []
    for index, (length, batch) in enumerate(zip(lengths("uniform", CONTEXT, count, seed),
                                                batch_sizes(count, 1, MAX_BATCH, seed))):
        drafts = rng.choice(DRAFT_TOKENS) if index % VERIFY_EVERY == VERIFY_EVERY - 1 else 1
        steps.append(Step(batch, length, drafts))
    return steps


def vllm_steps(count: int, seed: int) -> list[Step]:
    return [Step(batch, n, 1) for n, batch in zip(lengths("uniform", CONTEXT, count, seed),
                                                  batch_sizes(count, 1, MAX_BATCH, seed))]


def driver(torch: Any, layout: str, backend: Optional[str], steps: list[Step], dcp: bool = False) -> Driver:
    """The engine's driver, every tensor of the replay allocated once (one KV pool, workspace and
    counter buffer for every query length, as in an engine)."""
    q_lens = sorted({s.q_len for s in steps} | {1})
    return Driver(torch, None, layout, backend, "dcp" if dcp else "mtp", context=CONTEXT,
                  page_size=PAGE_SIZE, num_pages=NUM_PAGES, max_batch=MAX_BATCH, q_lens=q_lens)


def send(replayer: Driver, decode: Callable, step: Step) -> Any:
    return replayer.send(replayer.batch(step.batch, step.max_seq, step.q_len), decode)


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


def run(replayer: Driver, steps: list[Step], decode_for: Callable[[int], Callable], recorder: Any,
        traced: bool) -> Replay:
    """Call every step through ``decode_for(index)``; one launch each, hashed into a
    preallocated array (nothing kept per batch); with ``traced``, the tracemalloc
    growth over the whole pass after a warm-up call on a length outside it."""
    hashes = array("q", bytes(8 * len(steps)))
    send(replayer, decode_for(0), dataclasses.replace(steps[0], max_seq=1))
    recorder.clear()
    not_one = 0
    with growth.traced(traced) as memory:
        for index, step in enumerate(steps):
            send(replayer, decode_for(index), step)
            launches = recorder.launches
            not_one += len(launches) != 1
            hashes[index] = hash(launch_key(launches[-1])) if launches else 0
            launches.clear()  # the recorder keeps launches (and their tensors) otherwise
        grown = memory.grown()
    return Replay(hashes, grown, not_one)


def differences(steps: list[Step], replayed: Replay, alone: Replay) -> list[str]:
    """Batches whose launch under fi_compat differs from flashinfer's alone (first 5)."""
    return [f"batch {i}: {steps[i]}" for i, (a, b) in enumerate(zip(replayed.hashes, alone.hashes)) if a != b][:5]


__all__ = ["CACHE_SIZE", "GROWTH_LIMIT", "Replay", "Step", "bind_early", "differences", "driver", "held_decode",
           "launch_key", "public_decode", "run", "send", "sglang_steps", "vllm_steps"]
