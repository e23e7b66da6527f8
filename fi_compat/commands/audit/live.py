"""Live half of ``fi-compat audit --live``: what each flagged cache actually gains.

The static scan only says a cache *could* grow per request.  This module runs
a short decode workload on the installed flashinfer (under the CPU-host shim
when there is no CUDA device, real kernels otherwise), with every flagged
function that the workload's imports loaded wrapped by a counting
:func:`wrapt.FunctionWrapper`, and reports per function the calls seen and
the entries its cache gained (``cache_info().currsize`` after minus before).

The workload is the MLA decode host path a serving loop drives:
``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` with
``backend="trtllm-gen"`` and a ``max_seq_len`` that changes every call, as
TensorRT-LLM's ``max_past_kv_length`` does.  Everything is restored when it
ends; flashinfer stays imported.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from .scan import Finding
from ...proxies import is_fi_compat_proxy

#: Default workload: distinct max_seq_len values, one decode call each.
DEFAULT_STEPS = 200


@dataclass
class LiveResult:
    function: str
    where: str
    status: str  # "measured", "bounded", "not-loaded", "not-a-cache", "nested"
    calls: int = 0
    before: Optional[int] = None
    after: Optional[int] = None
    detail: str = ""

    @property
    def gained(self) -> Optional[int]:
        return None if self.before is None or self.after is None else self.after - self.before

    def as_dict(self) -> dict[str, Any]:
        return {"function": self.function, "where": self.where, "status": self.status, "calls": self.calls,
                "currsize_before": self.before, "currsize_after": self.after, "gained": self.gained,
                "detail": self.detail}


def _resolve(finding: Finding) -> tuple[Optional[Any], Optional[str], Optional[Any], str]:
    """(owner, attribute, object, problem) for a finding, from already-imported modules only."""
    if "<locals>" in finding.qualname:
        return None, None, None, "nested"
    module = sys.modules.get(finding.module)
    if module is None:
        return None, None, None, "not-loaded"
    owner: Any = module
    parts = finding.qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None, None, None, "not-loaded"
    attribute = parts[-1]
    target = owner.__dict__.get(attribute) if hasattr(owner, "__dict__") else None
    if target is None:
        return None, None, None, "not-loaded"
    return owner, attribute, target, ""


def _currsize(obj: Any) -> Optional[int]:
    info = getattr(obj, "cache_info", None)
    if not callable(info):
        return None
    try:
        return int(info().currsize)
    except Exception:  # noqa: BLE001 - a foreign object; report, don't crash
        return None


@contextlib.contextmanager
def _host() -> Iterator[str]:
    """flashinfer importable here: real CUDA when present, else the CPU shim."""
    import torch

    if torch.cuda.is_available():
        import flashinfer.mla  # noqa: F401

        yield "cuda"
        return
    from ...testing import cpu_host

    with cpu_host():
        yield "cpu-shim"


def decode_workload(steps: int = DEFAULT_STEPS, *, batch: int = 4, heads: int = 16, page_size: int = 32,
                    pages_per_seq: int = 64, start: int = 97, stride: int = 7) -> dict[str, Any]:
    """Call the public MLA decode ``steps`` times with a new ``max_seq_len`` each time.

    Shapes are DeepSeek-style MLA (kv_lora_rank 512, rope 64, nope 128) with
    a small batch and head count so the host path runs in well under a
    millisecond per call on CPU.  Needs flashinfer imported (see :func:`_host`).
    """
    import torch
    import flashinfer.mla as mla

    device = "cuda" if torch.cuda.is_available() else "cpu"
    num_pages = batch * pages_per_seq
    capacity = pages_per_seq * page_size
    query = torch.zeros(batch, 1, heads, 576, dtype=torch.bfloat16, device=device)
    kv_cache = torch.zeros(num_pages, page_size, 576, dtype=torch.bfloat16, device=device)
    workspace = torch.zeros(1 << 20, dtype=torch.uint8, device=device)
    block_tables = torch.arange(num_pages, dtype=torch.int32, device=device).reshape(batch, pages_per_seq)
    began = time.perf_counter()
    values = []
    for step in range(steps):
        max_seq_len = 1 + (start + step * stride) % (capacity - 1)
        values.append(max_seq_len)
        seq_lens = torch.full((batch,), max_seq_len, dtype=torch.int32, device=device)
        mla.trtllm_batch_decode_with_kv_cache_mla(query, kv_cache, workspace, 128, 512, 64, block_tables,
                                                  seq_lens, max_seq_len, backend="trtllm-gen")
    return {"calls": steps, "distinct_max_seq_len": len(set(values)), "seconds": time.perf_counter() - began}


def live_audit(findings: Iterable[Finding], steps: int = DEFAULT_STEPS,
               workload: Optional[Callable[[int], dict[str, Any]]] = None) -> dict[str, Any]:
    """Wrap each flagged, loaded cache; run ``workload(steps)``; report what each gained.

    Raises ``ImportError`` when torch or flashinfer cannot be imported here.
    """
    import wrapt

    workload = workload or decode_workload
    results: list[LiveResult] = []
    with _host() as host:
        wrapped: list[tuple[Any, str, Any, LiveResult]] = []
        try:
            for finding in findings:
                owner, attribute, target, problem = _resolve(finding)
                result = LiveResult(finding.full_name, finding.where, problem or "measured")
                results.append(result)
                if problem:
                    continue
                if is_fi_compat_proxy(target):
                    result.status = "bounded"
                    result.detail = "fi_compat's bounded cache is installed here; currsize is its size"
                before = _currsize(target)
                if before is None:
                    result.status = "not-a-cache"
                    result.detail = f"{type(target).__name__} has no cache_info()"
                    continue
                result.before = before

                def counter(wrapped_fn: Any, instance: Any, args: tuple, kwargs: dict,
                            _result: LiveResult = result) -> Any:
                    _result.calls += 1
                    return wrapped_fn(*args, **kwargs)

                setattr(owner, attribute, wrapt.FunctionWrapper(target, counter))
                wrapped.append((owner, attribute, target, result))
            summary = workload(steps)
        finally:
            for owner, attribute, target, result in reversed(wrapped):
                setattr(owner, attribute, target)
                result.after = _currsize(target)
    summary["host"] = host
    return {"workload": summary, "results": [r.as_dict() for r in results]}
