"""What changes from one decode batch to the next: the per-batch maximum KV
length and the batch size, as the soak, the benchmarks and the tests draw
them (seeded: the same arguments give the same stream).  Pure Python, no
torch; :mod:`fi_compat.workload.workload` re-exports every name.
"""

from __future__ import annotations

import math
import random
from typing import Iterator

DISTRIBUTIONS = ("serving", "uniform", "sweep", "repeat")


def serving_lengths(context: int, steps: int, rng: random.Random, slots: int = 8) -> Iterator[int]:
    """Per-batch maximum KV length of a toy continuous-batching server: each
    slot holds a request (prompt + generated tokens) that grows by one token a
    step and is replaced when it finishes or reaches the context."""

    def new_request() -> list[int]:
        prompt = int(min(context - 1, max(1, rng.lognormvariate(math.log(context / 8), 1.0))))
        return [prompt, prompt + rng.randint(1, max(1, context // 16))]

    active = [new_request() for _ in range(slots)]
    for _ in range(steps):
        yield max(min(current, context) for current, _ in active)
        for slot in active:
            slot[0] += 1
            if slot[0] >= slot[1] or slot[0] >= context:
                slot[:] = new_request()


def lengths(distribution: str, context: int, steps: int, seed: int = 0) -> list[int]:
    """``steps`` per-batch max_seq_len values up to ``context``."""
    rng = random.Random(seed)
    if distribution == "serving":
        return list(serving_lengths(context, steps, rng))
    if distribution == "uniform":
        return [rng.randint(1, context) for _ in range(steps)]
    if distribution == "repeat":
        return [max(1, context // 2)] * steps
    if distribution == "sweep":
        if steps >= context:
            return list(range(1, context + 1))
        return sorted({1 + (i * (context - 1)) // max(1, steps - 1) for i in range(steps)})
    raise ValueError(f"distribution {distribution!r}; accepted: {', '.join(DISTRIBUTIONS)}")


def batch_sizes(steps: int, low: int = 8, high: int = 64, seed: int = 0) -> list[int]:
    """Per-batch sizes, uniform in ``[low, high]`` (TensorRT-LLM's varying batches)."""
    rng = random.Random(seed + 1)
    return [rng.randint(low, high) for _ in range(steps)]


__all__ = ["DISTRIBUTIONS", "batch_sizes", "lengths", "serving_lengths"]
