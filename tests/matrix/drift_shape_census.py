"""Child-side checks of tests/matrix/test_drift_shapes.py: the guard's census
(both eyes: the functools census and the census by memory) over chosen
(layout, backend, query mode) combinations, in a forked child with one
synthetic release first on ``sys.path`` (tests/helpers/drift_runner.py)."""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Optional


def all_combos() -> list[list[str]]:
    from fi_compat.commands.guard import census_probe

    return [[layout, backend, mode] for layout, backend in census_probe.ENGINE_BACKENDS
            for mode in ("q1", *census_probe.EXTRA_MODES.get((layout, backend), ()))]


def _size_at(module_name: str, attributes: str) -> Optional[int]:
    """Entries held by flashinfer's own memo at ``module.attributes`` (behind a
    fi_compat proxy: the flashinfer cache it replaced), the ground truth the
    census is checked against; ``None`` where there is nothing."""
    import sys

    value: Any = sys.modules.get(module_name)
    for name in attributes.split("."):
        if value is None:
            return None
        value = getattr(value, "_fi_compat_original", value)
        value = getattr(value, name, None)
    value = getattr(value, "_fi_compat_original", value)
    if isinstance(value, dict):
        return len(value)
    info = getattr(value, "cache_info", None)
    return int(info().currsize) if callable(info) else None


def _not_walked(walked: dict) -> list[str]:
    """Caches the functools census (fi_compat.counting.census) sees that the walk does not: must be none."""
    import sys

    from fi_compat.counting import census, memory_census

    ids = {id(memory_census._resolve(path)) for path, memo in walked.items() if memo.kind == "functools"}
    missing = []
    for module_name in sorted(n for n in list(sys.modules) if n == "flashinfer" or n.startswith("flashinfer.")):
        for qualname, value in census._members(module_name, sys.modules[module_name]):
            for _owner, cache in census._caches_in(value):
                if id(cache) not in ids:
                    missing.append(qualname)
    return missing


def census_report(combos: Optional[list[list[str]]] = None, lengths: int = 64,
                  grows_at: Optional[list[str]] = None) -> dict[str, Any]:
    """fi_compat installed, each combination soaked as the guard's probe does,
    judged by the guard's :func:`census_check.leaks`; ``grows_at`` (module,
    attribute path): also the entries flashinfer's memo there holds at the end."""
    warnings.filterwarnings("ignore")
    import torch

    import fi_compat
    from fi_compat.counting import memo_walk
    from fi_compat.commands.guard import census_check, census_probe
    from fi_compat.model.specs import DECODE
    from fi_compat.workload import cpu_host

    fi_compat.install()
    results, refused = [], []
    with cpu_host() as host:
        flashinfer = importlib.import_module("flashinfer")
        decode = getattr(importlib.import_module("flashinfer.mla"), DECODE.name)
        for index, (layout, backend, mode) in enumerate(combos or all_combos()):
            halves = census_probe.probe_lengths(lengths, index)
            try:
                results.append(census_probe.soak_layout(torch, decode, host, layout, backend, halves, mode))
            except Exception as exc:  # noqa: BLE001  (a mode this release refuses: reported)
                refused.append({"layout": layout, "backend": backend, "mode": mode, "error": repr(exc)[:300]})
        state = fi_compat.status()
        keys = {}
        for result in results:
            for entry in result["grown"]:
                if entry["owner"] == "flashinfer" and entry["qualname"] not in keys:
                    keys[entry["qualname"]] = census_probe.describe_key(entry["qualname"])
        walked = memo_walk.walk()
        unseen = _not_walked(walked)
        truth = None if grows_at is None else _size_at(*grows_at)
    payload = {"release": flashinfer.__version__, "fi_compat": {"bounds": [
        {"name": row["name"], "verdict": row["verdict"]} for row in state["bounds"]]}, "layouts": results, "keys": keys}
    leaks = census_check.leaks(payload)
    return {
        "version": flashinfer.__version__,
        "verdicts": {row["name"]: row["verdict"] for row in state["bounds"]},
        "leaks": [{"function": leak.function, "describe": leak.describe(), "row": leak.row,
                   "modes": sorted({(row["layout"], row["backend"], row.get("mode", "q1")) for row in leak.layouts})}
                  for leak in leaks],
        # flashinfer memos that gained entries in the second half: qualname -> entries at the end
        "functools_grown": {f"{r['layout']}/{r['backend']}/{r['mode']}": {
            e["qualname"]: e["currsize"] for e in r["grown"] if e["owner"] == "flashinfer" and e["gained"][1]}
            for r in results},
        "memory_sites": {f"{r['layout']}/{r['backend']}/{r['mode']}": r["memory"]["sites"] for r in results},
        "census_s": {f"{r['layout']}/{r['backend']}/{r['mode']}": r["memory"]["census_s"] for r in results},
        "refused": refused,
        "walked": sorted(walked),
        "census_not_walked": unseen,
        "truth": truth,
        "lengths_driven": sum(sum(r["lengths"]) for r in results),
    }
