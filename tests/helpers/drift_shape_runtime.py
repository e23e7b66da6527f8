"""Child side of tests/test_drift_shapes_bounded.py: one synthetic release
(tests/helpers/drift_shapes.py) first on ``sys.path``, fi_compat installed with a small
bound, distinct lengths decoded; what the shape's memo holds, and the verdicts."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def bounded_run(module: str, attributes: str, layout: str, backend: str, lengths: int = 48,
                cache_size: int = 8) -> dict[str, Any]:
    warnings.filterwarnings("ignore")
    import torch

    import fi_compat
    from fi_compat.model.specs import DECODE
    from fi_compat.workload import cpu_host, workload

    from drift_shape_census import _size_at

    fi_compat.install(cache_size=cache_size)
    with cpu_host() as host:
        decode = getattr(importlib.import_module("flashinfer.mla"), DECODE.name)
        context, page = 131072, 64
        inputs = workload.make_inputs(torch, layout, batch=8, width=context // page, page_size=page, num_pages=512)
        for index in range(lengths):
            length = 1 + index * (context // lengths)
            inputs.seq_lens.fill_(length)
            workload.call(layout, decode, inputs, length, backend)
            host.recorder.launches.clear()
        state = fi_compat.status()
        size = _size_at(module, attributes)
    return {"size": size, "verdicts": {row["name"]: row["verdict"] for row in state["bounds"]},
            "outcome": state["outcome"]}
