"""Subprocess of test_moved_and_reexported.py: one synthetic release, under the CPU-host shim.

    python moved_release_driver.py OUT.json LENGTHS

or ``run(out, lengths)`` in a child of the fork server.  The synthetic
``flashinfer`` comes first on ``sys.path``.  This imports it,
drives ``LENGTHS // 8`` distinct max_seq_len values through the real decode
host path without fi_compat, empties flashinfer's caches, installs fi_compat
(recording its warnings), drives ``LENGTHS`` more, and writes what it saw:
status(), the warnings, and the census growth of each run.  Not collected by
pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import json
import sys
import warnings


def main(out: str, lengths: int) -> int:
    import torch

    import fi_compat
    from fi_compat.counting import census
    from fi_compat.workload import cpu_host
    from fi_compat.workload.workload import DEFAULT_BACKEND

    import decode_driver

    report: dict = {}
    with cpu_host() as host:
        import flashinfer.mla

        from fi_compat.model.specs import DECODE

        report["flashinfer_file"] = flashinfer.__file__
        host.recorder.launches = __import__("collections").deque(maxlen=2)
        layout = "vllm"  # shared page indices, backend "auto": the builder, the tuning config and the sizer
        context = decode_driver.context_for(lengths)
        schedule, batches = decode_driver.schedule(lengths, context)
        driver = decode_driver.Driver(torch, getattr(flashinfer.mla, DECODE.name), layout, DEFAULT_BACKEND[layout],
                                      "q1", context=context)
        alone = lengths // 8
        before = census.take()
        driver.run(schedule[-alone:], iter(batches[-alone:]))
        report["alone"] = {g.qualname: g.gained for g in census.grown(before, census.take())
                           if g.after.owner == census.FLASHINFER}
        report["alone_lengths"] = alone
        decode_driver.clear_flashinfer_caches()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fi_compat.install()
        report["warnings"] = [{"category": w.category.__name__, "message": str(w.message)} for w in caught]
        before = census.take()
        driver.run(schedule, iter(batches))
        after = census.take()
        report["bounded"] = {g.qualname: g.gained for g in census.grown(before, after)
                             if g.after.owner == census.FLASHINFER}
        report["over_bound"] = [g.describe() for g in census.over_bound(after, before, 256)]
        report["status"] = fi_compat.status()
    with open(out, "w") as handle:
        json.dump(report, handle, default=str)
    return 0


def run(out: str, lengths: int) -> int:
    """``main`` in a child of the fork server (tests/matrix/conftest.py's
    ``fork_server``): the server imported torch and fi_compat, never
    flashinfer, and put the synthetic site first on ``sys.path``."""
    return main(out, lengths)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], int(sys.argv[2])))
