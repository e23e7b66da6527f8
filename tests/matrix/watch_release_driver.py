"""Subprocess of test_watch.py: one edited release under the CPU-host shim, driven as vLLM calls it.

``run(out, edit, lengths)`` in a child of the fork server (or ``python
watch_release_driver.py OUT EDIT LENGTHS``).  The edited ``flashinfer`` is
first on ``sys.path``.  Two phases, each ``lengths`` new distinct max_seq_len
values through vLLM's call (backend auto) of the real decode host path:

``control``  fi_compat installed with ``FI_COMPAT_WATCH=off``: how much the edit's
             container grows (read by the edit's probe: flashinfer's own entries);
``watched``  installed again with the watch's setting ``mode`` (``auto``, the default: the edited
             release is outside the verified ones, so the watch runs; or ``warn``): when it reported the
             container (the call index), what it did, its warnings, and the
             container's entries at the end.

For the edit whose memo only lengths above 131,072 reach, each phase first
runs ``lengths`` lengths below it, then ``lengths`` above.  Not collected by
pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import json
import os
import sys
import warnings


def _lengths(count: int, low: int, high: int, seed: int) -> list[int]:
    import random

    return random.Random(seed).sample(range(low, high), count)


def main(out: str, edit: str, lengths: int, mode: str = "auto") -> int:
    import torch

    import fi_compat
    from fi_compat import watch
    from fi_compat.installing import installer
    from fi_compat.workload import cpu_host
    from fi_compat.workload import workload

    from helpers import watch_releases

    expected = watch_releases.EXPECTED[edit]
    report: dict = {"edit": edit}
    with cpu_host() as host:
        import flashinfer.autotuner
        import flashinfer.mla
        import flashinfer.mla._core as core

        from fi_compat.model.specs import DECODE

        host.recorder.launches = __import__("collections").deque(maxlen=2)
        report["flashinfer_file"] = flashinfer.__file__
        moved = sys.modules.get(watch_releases.MOVED_MODULE)
        context = 1 << 19
        inputs = workload.make_inputs(torch, "vllm", batch=4, width=context // 64, page_size=64, num_pages=64)

        def probe() -> int:
            tuner = flashinfer.autotuner.AutoTuner.get()
            return int(eval(expected.probe, {"core": core, "moved": moved, "tuner": tuner}))  # noqa: S307

        def drive(phase: str, values: list[int], name: str | None) -> dict:
            found_at = None
            decode = getattr(flashinfer.mla, DECODE.name)  # as an engine's module attribute holds it after install
            before = probe()
            for index, max_seq_len in enumerate(values):
                workload.call("vllm", decode, inputs, max_seq_len, "auto")
                if found_at is None and name is not None:
                    current = watch.current()
                    if current is not None and any(name in f.path for f in current.findings):
                        found_at = index + 1
            return {"phase": phase, "calls": len(values), "before": before, "after": probe(), "found_at": found_at}

        def phase_lengths(seed: int) -> list[list[int]]:
            if expected.late:
                return [_lengths(lengths, 1, watch_releases.LATE_FROM, seed),
                        _lengths(lengths, watch_releases.LATE_FROM + 1, context, seed)]
            return [_lengths(lengths, 1, context, seed)]

        os.environ["FI_COMPAT_WATCH"] = "off"
        fi_compat.install()
        report["control"] = [drive("control", values, None) for values in phase_lengths(1)]
        installer.reset()  # the watched install warns as a fresh process would (once per cause)
        os.environ["FI_COMPAT_WATCH"] = mode
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fi_compat.install()
            report["watched"] = [drive("watched", values, expected.container) for values in phase_lengths(2)]
        report["warnings"] = [{"category": w.category.__name__, "message": str(w.message)} for w in caught]
        report["status"] = fi_compat.status(walk=False)
        places = []  # every place the watch bounded a memo: (module, attribute, the flashinfer cache it replaced)
        for finding in report["status"]["watch"]["findings"]:
            for where in finding["patched"]:
                module_name, attribute = where.rsplit(".", 1)
                module = sys.modules[module_name]
                places.append((module, attribute, getattr(module, attribute).__wrapped__))
        fi_compat.uninstall()
        report["restored"] = [getattr(m, a) is original for m, a, original in places]
        report["restored"] = report["restored"] and all(report["restored"])
    with open(out, "w") as handle:
        json.dump(report, handle, default=str)
    return 0


def strict(out: str, edit: str, lengths: int) -> int:
    """Under ``FI_COMPAT_STRICT=1``: drive ``lengths`` distinct lengths through
    flashinfer, then call ``fi_compat.mla_decode`` once; write what it raised
    and the edit's container growth."""
    import torch

    import fi_compat
    from fi_compat.workload import cpu_host
    from fi_compat.workload import workload

    from helpers import watch_releases

    expected = watch_releases.EXPECTED[edit]
    report: dict = {"edit": edit}
    with cpu_host() as host:
        import flashinfer.autotuner
        import flashinfer.mla
        import flashinfer.mla._core as core

        from fi_compat.model.specs import DECODE

        host.recorder.launches = __import__("collections").deque(maxlen=2)
        os.environ["FI_COMPAT_WATCH"] = "bound"
        fi_compat.install(strict=True)
        decode = getattr(flashinfer.mla, DECODE.name)
        inputs = workload.make_inputs(torch, "vllm", batch=4, width=8192, page_size=64, num_pages=64)
        tuner = flashinfer.autotuner.AutoTuner.get()
        before = int(eval(expected.probe, {"core": core, "moved": None, "tuner": tuner}))  # noqa: S307
        for max_seq_len in _lengths(lengths, 1, 8192 * 64, 3):
            workload.call("vllm", decode, inputs, max_seq_len, "auto")
        report["grew"] = int(eval(expected.probe, {"core": core, "moved": None, "tuner": tuner})) - before  # noqa: S307
        try:
            workload.call("vllm", fi_compat.mla_decode, inputs, 4096, "auto")
            report["raised"] = None
        except Exception as exc:  # noqa: BLE001  (the test reads what was raised)
            report["raised"] = type(exc).__name__
            report["paths"] = list(getattr(exc, "paths", ()))
        report["then"] = fi_compat.status(walk=False)["state"]
        fi_compat.uninstall()
    with open(out, "w") as handle:
        json.dump(report, handle, default=str)
    return 0


def strict_refusal(out: str) -> int:
    """``install(strict=True)`` on the release, then one decode through ``fi_compat.mla_decode``:
    what each raised, and the state after."""
    import torch

    import fi_compat
    from fi_compat.workload import cpu_host
    from fi_compat.workload import workload

    report: dict = {}
    with cpu_host() as host:
        import flashinfer.mla  # noqa: F401

        host.recorder.launches = __import__("collections").deque(maxlen=2)
        inputs = workload.make_inputs(torch, "vllm", batch=4, width=256, page_size=64, num_pages=64)
        for step, action in (("install", lambda: fi_compat.install(strict=True)),
                             ("decode", lambda: workload.call("vllm", fi_compat.mla_decode, inputs, 4096, "auto"))):
            try:
                action()
                report[step] = None
            except fi_compat.FiCompatError as exc:
                report[step] = type(exc).__name__
                report[f"{step}_message"] = str(exc)
        status = fi_compat.status(walk=False)
        report["state"], report["watch"] = status["state"], status["watch"]
    with open(out, "w") as handle:
        json.dump(report, handle, default=str)
    return 0


def lifecycle(out: str, most: int) -> int:
    """The watch on a release it does not know (the real one, relabelled): from install to
    retirement and back.  SGLang's call (backend auto) over up to ``most`` new distinct lengths,
    until the watch retires; every 250 lengths the memory its own lines hold (tracemalloc,
    filtered to fi_compat's watch, walk and lookup files).  Then a flashinfer module imported
    for the first time, which re-arms it.  The watch's duty cycles are raised to 1.0 here (a
    step at every call), so the run reaches retirement in seconds instead of a server's minute:
    what is measured (what it holds, what it takes out) does not depend on the pace."""
    import gc
    import pkgutil
    import tracemalloc

    import torch

    import fi_compat
    from fi_compat import watch
    from fi_compat.watch import state
    from fi_compat.workload import cpu_host
    from fi_compat.workload import workload

    state.WALK_DUTY = state.READ_DUTY = state.STARTUP_DUTY = 1.0
    own = [tracemalloc.Filter(True, f"*fi_compat/{part}/*") for part in ("watch", "counting", "lookup")]
    report: dict = {"held": []}
    with cpu_host() as host:
        import flashinfer
        import flashinfer.mla
        import flashinfer.mla._core as core

        from fi_compat.model.specs import DECODE

        host.recorder.launches = __import__("collections").deque(maxlen=2)
        inputs = workload.make_inputs(torch, "sglang", batch=4, width=2048, page_size=64, num_pages=64)
        tracemalloc.start(1)
        fi_compat.install()
        report["started"] = watch.report()
        values = _lengths(most, 1, 1 << 17, 7)
        for index, max_seq_len in enumerate(values):
            decode = getattr(flashinfer.mla, DECODE.name)
            workload.call("sglang", decode, inputs, max_seq_len, "auto")
            if index % 250 == 0:
                snapshot = tracemalloc.take_snapshot().filter_traces(own)
                report["held"].append(sum(stat.size for stat in snapshot.statistics("filename")))
            current = watch.current()
            if current is not None and current.phase == state.RETIRED:
                report["retired_at"] = index + 1
                break
        tracemalloc.stop()
        report["retired"] = watch.report()
        original = getattr(core, DECODE.name)
        report["decode_is_flashinfers"] = [
            name for name, module in sys.modules.copy().items()
            if module is not None and vars(module).get(DECODE.name, original) is not original
        ]
        report["callbacks"] = [getattr(c, "__module__", "") for c in gc.callbacks if "fi_compat" in getattr(c, "__module__", "")]
        # the first flashinfer module not imported yet that imports on this host (many need CUDA)
        candidates = sorted((info.name for info in pkgutil.walk_packages(flashinfer.__path__, "flashinfer.",
                                                                         onerror=lambda name: None)
                             if info.name not in sys.modules), key=len)
        for fresh in candidates:
            try:
                __import__(fresh)
            except Exception:  # noqa: BLE001  (a module this host cannot import: try the next)
                continue
            report["fresh_module"] = fresh
            break
        report["rearmed"] = watch.report()
        workload.call("sglang", getattr(flashinfer.mla, DECODE.name), inputs, 4097, "auto")
        fi_compat.uninstall()
    with open(out, "w") as handle:
        json.dump(report, handle, default=str)
    return 0


def run(out: str, edit: str, lengths: int, mode: str = "auto") -> int:
    """``main`` in a child of the fork server (tests/matrix/conftest.py's ``fork_server``)."""
    return main(out, edit, lengths, mode)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
