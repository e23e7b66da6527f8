"""Child of tests/matrix/test_drift_shapes_runtime.py: one synthetic release, run as an engine would.

    python shape_runtime_child.py SHAPE OUT.json     (the release's site first on PYTHONPATH)

Under the CPU shim: import flashinfer, ``fi_compat.install()``, then decode
calls over distinct ``max_seq_len`` values (SGLang's "auto" call for the config
memo, vLLM's cute-dsl call for the sizer, which imports the lazy cute-dsl module
through flashinfer's own code).  It measures flashinfer's growing cache
(:data:`drift_shapes.GROWS_AT`, found by following ``__wrapped__`` and
fi_compat's ``_fi_compat_original``), then uninstalls and, as a control, runs
more distinct lengths, which must grow that cache by one entry each.
Not collected by pytest.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

LENGTHS = [4096 + 997 * i for i in range(12)]
CONTROL = [70_000 + 1_009 * i for i in range(6)]


def functools_cache_under(obj: Any) -> Any:
    """The functools cache at ``obj`` or under it (through fi_compat's proxy too)."""
    seen = 0
    while obj is not None and seen < 16:
        if callable(getattr(obj, "cache_info", None)) and callable(getattr(obj, "cache_clear", None)):
            if not getattr(obj, "_fi_compat_wrapper", False):
                return obj
        obj = getattr(obj, "_fi_compat_original", None) or getattr(obj, "__wrapped__", None)
        seen += 1
    return None


def main() -> None:
    shape, out = sys.argv[1], sys.argv[2]
    from helpers import drift_shapes
    import fi_compat
    from fi_compat.model import specs
    from fi_compat.workload import cpu_host, workload

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(f"{record.levelname} {record.getMessage()}")

    logging.getLogger("fi_compat").addHandler(Keep())
    logging.getLogger("fi_compat").setLevel(logging.INFO)
    module_name, path = drift_shapes.GROWS_AT[shape]
    attribute = path.split(".")[0]
    sizer = shape.startswith("sizer")
    with cpu_host():
        import torch
        import flashinfer.mla

        decode = getattr(flashinfer.mla, specs.DECODE.name)
        if sizer:
            t = workload.make_inputs(torch, "vllm", page_size=64, width=4096)

            def run(length: int) -> None:
                workload.vllm_call(decode, t, length, backend="cute-dsl")
        else:
            t = workload.make_inputs(torch, "sglang", page_size=64, width=4096)

            def run(length: int) -> None:
                workload.sglang_call(decode, t, length)  # its "auto" call builds tuning configs (0.6.18, 0.7.4)

        installed = fi_compat.install()
        at_install = {r["name"]: [r["verdict"], r["waiting_for"]] for r in installed["bounds"]}
        run(LENGTHS[0])
        module = sys.modules[module_name]
        outer = getattr(module, attribute)
        cache = functools_cache_under(outer)
        start = cache.cache_info().currsize if cache is not None else None
        for length in LENGTHS[1:]:
            run(length)
        grown = None if cache is None else cache.cache_info().currsize - start
        state = fi_compat.status()
        outer_kept = getattr(module, attribute) is outer and not getattr(outer, "_fi_compat_wrapper", False)
        fi_compat.uninstall()
        restored = functools_cache_under(getattr(module, attribute)) is cache
        wrapped_restored = getattr(getattr(module, attribute), "__wrapped__", None) is cache
        control_start = None if cache is None else cache.cache_info().currsize
        for length in CONTROL:
            run(length)
        control = None if cache is None else cache.cache_info().currsize - control_start
    report = {
        "at_install": at_install,
        "rows": {
            r["name"]: {
                "verdict": r["verdict"],
                "waiting_for": r["waiting_for"],
                "patched": r["patched"],
                "reason": r["reason"],
            }
            for r in state["bounds"]
        },
        "grown": grown,
        "lengths": len(LENGTHS) - 1,
        "control": control,
        "control_lengths": len(CONTROL),
        "outer_kept": outer_kept,
        "restored": restored,
        "wrapped_restored": wrapped_restored,
        "found_cache": cache is not None,
        "log": records,
    }
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    main()
