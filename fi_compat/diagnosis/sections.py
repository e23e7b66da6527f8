"""Doctor sections about this process: what is installed, TensorRT-LLM's
workaround, the census of flashinfer's caches, and the settings.

All of them read state; none imports anything (``importlib.util.find_spec``
of a top-level name only searches the path) or patches anything.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from ..counting import census, memory_census
from .. import config
from ..installing.state import Phase

INSTALLED_KEYS = ("state", "outcome", "patched", "waiting_for", "error", "notes")
TRTLLM_KEYS = ("present", "position", "checked_in", "tensorrt_llm_imported", "tensorrt_llm_installed", "note")
CENSUS_KEYS = (
    "taken",
    "caches",
    "flashinfer_unbounded",
    "flashinfer_unbounded_entries",
    "fi_compat",
    "grown_behind_fi_compat",
    "walked",
)
SETTING_KEYS = ("value", "source", "env", "error")

TRTLLM_PACKAGE = "tensorrt_llm"


def installed_section(state: dict[str, Any]) -> dict[str, Any]:
    """``fi_compat.status()`` in short: phase, outcome, what is patched, what waits for its module."""
    return {
        "state": state["state"],
        "outcome": state["outcome"],
        "patched": list(state["patched"]),
        "waiting_for": {row["name"]: row["waiting_for"] for row in state["bounds"] if row["waiting_for"]},
        "error": state["error"],
        "notes": list(state["notes"]),
    }


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def trtllm_section(state: dict[str, Any], *, flashinfer_imported: bool, in_process: bool) -> dict[str, Any]:
    """TensorRT-LLM's builder memo, as ``status()["trtllm_workaround"]`` finds it in this process.

    TensorRT-LLM installs it when its attention backend module is imported, so
    only a report from inside the engine's process can see it."""
    seen = state["trtllm_workaround"]
    imported = TRTLLM_PACKAGE in sys.modules
    note = None
    if not in_process and not imported:
        note = (
            "checked in the doctor's own process, which never imports tensorrt_llm: TensorRT-LLM installs its "
            "workaround when its module is imported, so call fi_compat.doctor_report() inside the engine"
        )
    return {
        "present": seen["present"] if flashinfer_imported else None,
        "position": seen["position"] if flashinfer_imported else None,
        "checked_in": "this process" if in_process else "the doctor process",
        "tensorrt_llm_imported": imported,
        "tensorrt_llm_installed": imported or _installed(TRTLLM_PACKAGE),
        "note": note,
    }


def census_section(state: dict[str, Any], *, flashinfer_imported: bool) -> dict[str, Any]:
    """flashinfer's unbounded ``functools`` caches now loaded, largest first
    (:func:`fi_compat.counting.census.take`), fi_compat's own, and every flashinfer
    cache that fi_compat bounds yet holds entries: something reached it
    behind fi_compat's proxy.  Cost: one pass over the loaded flashinfer modules."""
    section: dict[str, Any] = dict.fromkeys(CENSUS_KEYS)
    section.update(taken=False, flashinfer_unbounded=[], fi_compat=[], grown_behind_fi_compat=[], walked=None)
    if not flashinfer_imported:
        return section
    # the second eye (fi_compat.counting.memo_walk): caches under decorators, held by instances or
    # closures, or bounded far above fi_compat's bound, which census.take cannot see
    size = state.get("settings", {}).get("cache_size", {}).get("value") or config.DEFAULT_CACHE_SIZE
    section["walked"] = memory_census.walk_report(cache_size=int(size))
    counts = census.take()
    unbounded = sorted(
        (c for c in counts.values() if c.owner == census.FLASHINFER and c.unbounded),
        key=lambda c: (-c.currsize, c.qualname),
    )
    behind = [
        {"name": row["name"], "cache": row["cache"], "currsize": row["flashinfer"]["currsize"]}
        for row in state["bounds"]
        if row["patched"] and row["flashinfer"] and row["flashinfer"]["currsize"] > 0
    ]
    section.update(
        taken=True,
        caches=len(counts),
        flashinfer_unbounded=[c.as_dict() for c in unbounded],
        flashinfer_unbounded_entries=sum(c.currsize for c in unbounded),
        fi_compat=[c.as_dict() for c in counts.values() if c.owner == census.FI_COMPAT],
        grown_behind_fi_compat=behind,
    )
    return section


def settings_section(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each setting's value and where it came from: the install's, or what
    ``install()`` would resolve from the environment now (an invalid value
    is reported, not raised)."""
    if state["state"] != Phase.NOT_INSTALLED:
        return {
            name: {"value": s["value"], "source": s["source"], "env": s["env"], "error": None}
            for name, s in state["settings"].items()
        }
    out: dict[str, dict[str, Any]] = {}
    for name, (env_var, _default, _validate) in config._SPECS.items():
        try:
            setting = config.resolve(name)
        except ValueError as exc:
            out[name] = {"value": None, "source": "environment", "env": env_var, "error": str(exc)}
            continue
        out[name] = {"value": setting.value, "source": setting.source, "env": setting.env_var, "error": None}
    return out


__all__ = [
    "CENSUS_KEYS",
    "INSTALLED_KEYS",
    "SETTING_KEYS",
    "TRTLLM_KEYS",
    "census_section",
    "installed_section",
    "settings_section",
    "trtllm_section",
]
