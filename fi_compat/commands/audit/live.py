"""Live half of ``fi-compat audit --live``: what each flagged cache actually gains.

The static scan only says a cache *could* grow per request.  This module runs
a short decode workload on the installed flashinfer (under the CPU-host shim
when there is no CUDA device, real kernels otherwise) and counts every
``functools`` cache of the loaded flashinfer modules before and after it
(:func:`fi_compat.counting.census.take`): per flagged function the entries it gained,
and every other cache that grew too, flagged or not.

The workload is the MLA decode host path a serving loop drives, in
TensorRT-LLM's call (its :mod:`~fi_compat.workload.engines` record, through
:class:`fi_compat.workload.driver.Driver`): ``backend="trtllm-gen"`` and a
``max_seq_len`` that changes every call, as its ``max_past_kv_length`` does;
the caches are counted through the census
(:class:`fi_compat.counting.measurement.Measurement`, untraced).  Nothing is
patched; flashinfer stays imported.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Union

from ...counting import census
from ...counting.measurement import Measurement
from ...workload.engine_model import Engine
from .scan import Finding

#: Default workload: distinct max_seq_len values, one decode call each.
DEFAULT_STEPS = 200
#: Block-table width and page size of the workload: 64 pages of 64 tokens, so
#: up to 4,096 distinct lengths.
WIDTH, PAGE_SIZE = 64, 64


@dataclass
class LiveResult:
    function: str
    where: str
    status: str  # "measured", "bounded" (fi_compat's proxy is installed there), "not-loaded", "nested"
    before: Optional[int] = None
    after: Optional[int] = None
    detail: str = ""

    @property
    def gained(self) -> Optional[int]:
        return None if self.before is None or self.after is None else self.after - self.before

    def as_dict(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "where": self.where,
            "status": self.status,
            "currsize_before": self.before,
            "currsize_after": self.after,
            "gained": self.gained,
            "detail": self.detail,
        }


@contextlib.contextmanager
def _host() -> Iterator[str]:
    """flashinfer importable here: real CUDA when present, else the CPU shim."""
    import torch

    if torch.cuda.is_available():
        import flashinfer.mla  # noqa: F401

        yield "cuda"
        return
    from ...workload import cpu_host

    with cpu_host():
        yield "cpu-shim"


def decode_workload(
    steps: int = DEFAULT_STEPS, *, layout: Union[str, Engine] = "trtllm", batch: int = 4
) -> dict[str, Any]:
    """Call the public MLA decode ``steps`` times, each with a new ``max_seq_len``,
    as the ``layout`` engine calls it (a record or its name, through
    :class:`fi_compat.workload.driver.Driver`).

    Needs flashinfer imported (see :func:`_host`).  Lengths sweep the block
    table's capacity (``WIDTH * PAGE_SIZE``); more steps than that repeat none.
    """
    import torch
    import flashinfer.mla as mla

    from ...model.specs import DECODE
    from ...workload.driver import Driver
    from ...workload.streams import lengths as stream_of

    device = "cuda" if torch.cuda.is_available() else "cpu"
    driver = Driver(
        torch,
        getattr(mla, DECODE.name),
        layout,
        context=WIDTH * PAGE_SIZE,
        page_size=PAGE_SIZE,
        num_pages=batch * WIDTH,
        max_batch=batch,
        device=device,
        workspace_bytes=1 << 20,
    )
    lengths = stream_of("sweep", WIDTH * PAGE_SIZE, steps)
    began = time.perf_counter()
    for max_seq_len in lengths:
        driver.call(batch, max_seq_len)
    return {
        "calls": len(lengths),
        "distinct_max_seq_len": len(set(lengths)),
        "layout": driver.engine.name,
        "seconds": time.perf_counter() - began,
    }


def _result(finding: Finding, before: dict[str, census.CacheCount], after: dict[str, census.CacheCount]) -> LiveResult:
    result = LiveResult(finding.full_name, finding.where, "measured")
    if "<locals>" in finding.qualname:
        result.status = "nested"
        return result
    proxy = after.get(f"{finding.full_name} [fi_compat]")
    counted = proxy or after.get(finding.full_name)
    if counted is None or finding.module not in sys.modules:
        result.status = "not-loaded"
        return result
    if proxy is not None:
        result.status = "bounded"
        result.detail = "fi_compat's bounded cache is installed here; the sizes are its own"
    previous = before.get(counted.qualname)
    result.before = 0 if previous is None else previous.currsize
    result.after = counted.currsize
    return result


def live_audit(
    findings: Iterable[Finding], steps: int = DEFAULT_STEPS, workload: Optional[Callable[[int], dict[str, Any]]] = None
) -> dict[str, Any]:
    """Run ``workload(steps)`` and report what each flagged cache gained, and every
    other flashinfer cache that grew.  Raises ``ImportError`` when torch or
    flashinfer cannot be imported here."""
    workload = workload or decode_workload
    with _host() as host:
        with Measurement(traced=False) as measured:
            before = measured.point().caches
            summary = workload(steps)
            after = measured.point().caches
    summary["host"] = host
    results = [_result(finding, before, after) for finding in findings]
    named = {r.function for r in results} | {f"{r.function} [fi_compat]" for r in results}
    others = [g for g in census.grown(before, after) if g.qualname not in named]
    return {
        "workload": summary,
        "results": [r.as_dict() for r in results],
        "other_growth": [
            {
                "function": g.qualname,
                "owner": g.after.owner,
                "maxsize": g.after.maxsize,
                "currsize_before": g.before.currsize,
                "currsize_after": g.after.currsize,
                "gained": g.gained,
            }
            for g in others
        ],
    }
