"""What runs inside a forked child on one synthetic release (tests/helpers/drift.py)
for tests/matrix/test_drift_declared.py: the decode spec changed by the one
line a maintainer would add to fi_compat/model/specs.py (``DECODE.renamed(...)`` or
``DECODE.removed(...)``), then ``mla_decode`` called and the runtime verdict
read.  Not a test module.

The spec object is changed in place (the fork server imported fi_compat
before the fork, so every module already holds ``specs.DECODE``); the child
exits afterwards, so nothing leaks into other children.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Optional

from fi_compat.model.specs import DECODE

from helpers.support import decode_inputs, entry_arguments, launch_scales

BMM1, BMM2 = 0.125, 0.5  # distinct from each other and from every default


def declare(change: Optional[list]) -> None:
    """Apply ``[method, *arguments]`` (``["renamed", old, new, release]``,
    ``["removed", name, release]``) to :data:`fi_compat.model.specs.DECODE` in place."""
    if change is None:
        return
    method, *arguments = change
    changed = getattr(DECODE, method)(*arguments)
    object.__setattr__(DECODE, "params", changed.params)  # frozen: the in-place edit a spec line would be


def _outcome(call: Any, target: Any, recorder: Any) -> dict:
    before = recorder.total
    with entry_arguments(target) as received:
        try:
            call()
        except Exception as exc:  # noqa: BLE001  (reported to the parent)
            return {
                "raised": f"{type(exc).__name__}: {exc}",
                "entered": bool(received),
                "launched": recorder.total - before,
            }
    got = {k: v for k, v in received[0].items() if type(v) in (int, float, str, bool, type(None))}
    return {"received": got, "launch": list(launch_scales(recorder.launches[-1])) if recorder.total > before else None}


def check_declared(change: Optional[list], scale_name: str, sinks: bool = False) -> dict:
    """Call ``mla_decode`` with TensorRT-LLM's 16 positional arguments and by
    keyword (the scale as ``scale_name``, optionally a ``sinks`` tensor), and
    report what flashinfer received, the runtime's decode verdict and warnings."""
    declare(change)
    import torch

    import fi_compat
    from fi_compat.verdict.judgement import judge_release
    from fi_compat.diagnosis import gather
    from fi_compat.lookup import runtime_lookup
    from fi_compat.model.release_detection import detect_release
    from fi_compat.workload import cpu_host

    report: dict = {"names": list(DECODE.names)}
    with warnings.catch_warnings(record=True) as caught, cpu_host() as host:
        warnings.simplefilter("always")
        import flashinfer.mla._core as core

        target = inspect.unwrap(getattr(core, DECODE.name))
        report["installed"] = list(inspect.signature(target).parameters)
        t = decode_inputs(torch, page_size=32, width=64)
        head = (t["query"], t["kv_cache"], t["workspace_buffer"], 128, 512, 64, t["block_tables"], t["seq_lens"])
        extra = {"sinks": torch.zeros(128, dtype=torch.float32)} if sinks else {}
        report["positional"] = _outcome(
            lambda: fi_compat.mla_decode(
                *head,
                300,
                0,
                t["out"],
                BMM1,
                BMM2,
                extra.get("sinks"),
                None,
                False,
                backend="trtllm-gen",
                uses_shared_paged_kv_idx=False,
            ),
            target,
            host.recorder,
        )
        report["keywords"] = _outcome(
            lambda: fi_compat.mla_decode(
                *head,
                max_seq_len=301,
                bmm1_scale=BMM1,
                backend="trtllm-gen",
                uses_shared_paged_kv_idx=False,
                **{scale_name: BMM2},
                **extra,
            ),
            target,
            host.recorder,
        )
        release = detect_release().version
        verdict = judge_release(runtime_lookup(release), release)
        report["call_api"] = None if verdict.call_api is None else verdict.call_api.difference
        report["doctor_call_api"] = gather(in_process=True)["call_api"]["status"]  # what the doctor prints
    report["warnings"] = [
        f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, fi_compat.FiCompatWarning)
    ]
    return report
