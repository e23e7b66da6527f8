#!/usr/bin/env python3
"""What ``fi_compat.doctor_report()`` costs inside a process that imported flashinfer and installed fi_compat.

Imports the installed flashinfer under the CPU-host shim (``fi_compat.workload.cpu_host``),
installs fi_compat, runs a few hundred decode calls in TensorRT-LLM's form
(``fi_compat.workload.workload``) so the caches hold something, then times
``doctor_report()`` and, separately, its two costly parts: the census
(``fi_compat.counting.census.take``) and the verdict on every row (``judge_release``
through the runtime lookup).  Prints one line each: median and minimum
wall time over ``--repeat`` calls.

    python scripts/measure_doctor_report.py --repeat 9
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable


def timed(function: Callable[[], Any], repeat: int) -> str:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        function()
        times.append(time.perf_counter() - began)
    return f"median {statistics.median(times) * 1e3:.1f} ms, min {min(times) * 1e3:.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed calls of each (default 9)")
    parser.add_argument("--steps", type=int, default=300, help="decode calls before timing (default 300)")
    args = parser.parse_args()

    import torch

    import fi_compat
    from fi_compat.counting import census
    from fi_compat.verdict.judgement import judge_release
    from fi_compat.lookup import runtime_lookup
    from fi_compat.model.release_detection import detect_release
    from fi_compat.model.specs import DECODE
    from fi_compat.workload import cpu_host, workload

    with cpu_host():
        import flashinfer.mla as mla

        fi_compat.install()
        inputs = workload.make_inputs(torch, "trtllm", workspace_bytes=1 << 20)
        for length in workload.lengths("uniform", inputs.capacity, args.steps):
            workload.call("trtllm", getattr(mla, DECODE.name), inputs, length)
        release = detect_release()
        loaded = sum(1 for name in sys.modules if name == "flashinfer" or name.startswith("flashinfer."))
        print(f"flashinfer {release}, {loaded} flashinfer modules loaded, fi_compat {fi_compat.status()['state']}")
        print(f"doctor_report()   {timed(fi_compat.doctor_report, args.repeat)}")
        print(f"  census.take()   {timed(census.take, args.repeat)}")
        print(f"  judge_release() {timed(lambda: judge_release(runtime_lookup(release.version), release.version), args.repeat)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
