"""The doctor report: every section gathered, and the problems they show."""

from __future__ import annotations

from typing import Any, Optional

from ..verdict.judgement import PARTIAL, UNSUPPORTED, UNVERIFIED
from .environment import (
    NOT_ATTEMPTED,
    NOT_IMPORTED_HERE,
    fi_compat_section,
    flashinfer_section,
    python_section,
    torch_section,
)
from .sections import census_section, installed_section, settings_section, trtllm_section
from .verdicts import bounds_section, call_api_section, judge, watch_section

SCHEMA_VERSION = 3
"""Bumped when a key is removed or changes meaning; adding keys inside a section does not."""

TOP_LEVEL_KEYS = (
    "schema_version",
    "fi_compat",
    "python",
    "torch",
    "flashinfer",
    "bounds",
    "call_api",
    "installed",
    "trtllm_workaround",
    "census",
    "settings",
    "watch",
    "install_result",
    "problems",
)


def gather(
    *, import_flashinfer: bool = True, install: bool = False, cpu_shim: bool = False, in_process: bool = False
) -> dict[str, Any]:
    """The report as a JSON-ready dict (keys: :data:`TOP_LEVEL_KEYS`).

    ``import_flashinfer``: import ``flashinfer.mla`` when it is not imported
    yet (``--cpu-shim``: under :func:`fi_compat.workload.cpu_host`).
    ``install``: run :func:`fi_compat.install` here first.  ``in_process``:
    report on this process as it is, importing nothing (not torch, not
    flashinfer) and installing nothing.  Never raises for a missing or broken
    flashinfer or torch: what could not be done goes to ``problems``.
    Cost: about 0.1 s with flashinfer imported (one census pass, one verdict
    per row; docs/doctor.md); reading the source instead parses the modules
    fi_compat looks in.
    """
    from ..installing import installer

    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "fi_compat": fi_compat_section(),
        "python": python_section(),
    }
    report["torch"] = torch_section(may_import=not in_process)
    report["flashinfer"] = flashinfer = flashinfer_section(
        attempt_import=import_flashinfer and not in_process,
        torch_importable=bool(report["torch"]["installed"]),
        cpu_shim=cpu_shim,
        not_attempted=NOT_IMPORTED_HERE if in_process else NOT_ATTEMPTED,
    )
    report["install_result"] = _install(installer) if install and not in_process else None
    judged, lookup, checked_on = judge(flashinfer)
    state = installer.status(walk=False)  # the census section walks once itself
    report["bounds"] = bounds_section(judged, checked_on, state)
    report["call_api"] = call_api_section(judged, lookup, checked_on)
    report["installed"] = installed_section(state)
    report["trtllm_workaround"] = trtllm_section(
        state, flashinfer_imported=flashinfer["imported"], in_process=in_process
    )
    report["census"] = census_section(state, flashinfer_imported=flashinfer["imported"])
    report["settings"] = settings_section(state)
    report["watch"] = watch_section(judged, state, report["settings"]["watch"]["value"])
    report["problems"] = problems(report)
    return report


def _install(installer: Any) -> dict[str, Any]:
    try:
        return {"ok": True, "state": installer.install()["state"], "error": None}
    except Exception as exc:  # noqa: BLE001 - strict mode or invalid settings
        return {"ok": False, "state": None, "error": f"{type(exc).__name__}: {exc}"}


def problems(report: dict[str, Any]) -> list[str]:
    """Everything the report shows that needs someone's attention, one sentence each."""
    found: list[str] = []
    torch, flashinfer, bounds = report["torch"], report["flashinfer"], report["bounds"]
    if torch["installed"] is False:
        found.append(f"torch is not importable ({torch['error']}); flashinfer cannot run")
    if flashinfer["package_dir"] is None and flashinfer["release"] is None:
        found.append("flashinfer is not installed: no release, no verdicts, nothing to bound")
    elif not flashinfer["imported"] and flashinfer["import_error"] not in (NOT_IMPORTED_HERE, NOT_ATTEMPTED):
        found.append(
            f"flashinfer could not be imported ({flashinfer['import_error']}); the verdicts were read "
            "from the source with ast and the census was not taken"
        )
    if bounds["outcome"] in (PARTIAL, UNSUPPORTED):
        found += [
            f"{row['name']}: {row['reason']}" for row in bounds["rows"] if row["verdict"] in ("missing", "mismatch")
        ]
    elif bounds["outcome"] == UNVERIFIED:
        found.append(f"{bounds['reason']}: run the release matrix on {flashinfer['release']}")
    call_api = report["call_api"]
    if call_api["status"] not in (None, "ok"):
        found.append(f"call API: {call_api['function']}: {call_api['difference']}")
    if report["installed"]["error"]:
        found.append(f"install failed in an import hook: {report['installed']['error']}")
    for grown in report["census"]["grown_behind_fi_compat"]:
        found.append(
            f"{grown['cache']} holds {grown['currsize']} entries in flashinfer's own unbounded cache "
            f"although fi_compat bounds it ({grown['name']}): something calls flashinfer's original "
            "directly (a reference taken before install()?)"
        )
    for name, setting in report["settings"].items():
        if setting["error"]:
            found.append(f"setting {name}: {setting['error']}; install() would raise ValueError")
    result: Optional[dict[str, Any]] = report["install_result"]
    if result is not None and not result["ok"]:
        found.append(f"install() failed: {result['error']}")
    return found


__all__ = ["SCHEMA_VERSION", "TOP_LEVEL_KEYS", "gather", "problems"]
