"""Doctor sections about what fi_compat makes of flashinfer: the verdict on
every bounded cache and the call API's decode signature.

Both come from :func:`fi_compat.verdict.judgement.judge_release`, the function
:func:`fi_compat.install` and ``fi-compat guard`` call, through the lookup
``install()`` uses (:func:`fi_compat.lookup.runtime_lookup`: the live function
where its module is imported, the package's source for modules not loaded
yet) or, when flashinfer is not imported, a source lookup over the
installed package directory.  Nothing is imported or called.
"""

from __future__ import annotations

from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from ..verdict.bounds import BOUNDS
from ..verdict import knowledge
from ..verdict.judgement import ReleaseVerdict, decide, judge_release
from ..lookup import DirectoryReader, Lookup, module_loaded, runtime_lookup, source_lookup
from ..model.specs import DECODE

ROW_KEYS = (
    "name",
    "cache",
    "verdict",
    "verified",
    "reason",
    "where",
    "checked_on",
    "memo",
    "maxsize",
    "grows_with",
    "patched",
    "waiting_for",
    "fi_compat",
    "flashinfer",
)
CALL_API_KEYS = ("function", "status", "checked_on", "where", "difference", "expected", "found")


def choose_lookup(flashinfer: dict[str, Any]) -> tuple[Optional[Lookup], Optional[str]]:
    """``(lookup, "live" | "source")``, or ``(None, None)`` when there is nothing to read."""
    version = _version(flashinfer["release"])
    if flashinfer["imported"]:
        return runtime_lookup(version), "live"
    if flashinfer["package_dir"] is not None:
        return source_lookup(DirectoryReader.for_package_dir(flashinfer["package_dir"])), "source"
    return None, None


def _version(text: Optional[str]) -> Optional[Version]:
    try:
        return None if text is None else Version(text)
    except InvalidVersion:
        return None


def judge(flashinfer: dict[str, Any]) -> tuple[Optional[ReleaseVerdict], Optional[Lookup], Optional[str]]:
    """The release verdict as install() would reach it, and the lookup used."""
    lookup, checked_on = choose_lookup(flashinfer)
    if lookup is None:
        return None, None, None
    return judge_release(lookup, _version(flashinfer["release"])), lookup, checked_on


def _checked_on(module: str, checked_on: Optional[str]) -> Optional[str]:
    if checked_on == "live" and not module_loaded(module):
        return "source"  # a module flashinfer has not imported yet: install() judges it from source too
    return checked_on


def bounds_section(
    judged: Optional[ReleaseVerdict], checked_on: Optional[str], state: dict[str, Any]
) -> dict[str, Any]:
    """Every row of :data:`fi_compat.verdict.bounds.BOUNDS`: the verdict now, and what
    is installed for it in this process (``status()["bounds"]``)."""
    installed = {row["name"]: row for row in state.get("bounds", [])}
    rows = []
    for index, bound in enumerate(BOUNDS):
        verdict = None if judged is None else judged.rows[index]
        found = None if verdict is None else verdict.found
        here = installed.get(bound.name, {})
        row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
        row.update(
            name=bound.name,
            cache=bound.spec.qualname,
            grows_with=bound.grows_with,
            checked_on=_checked_on(bound.module, checked_on),
            patched=here.get("patched", []),
            waiting_for=here.get("waiting_for"),
            fi_compat=here.get("fi_compat"),
            flashinfer=here.get("flashinfer"),
        )
        if verdict is not None:
            row.update(
                verdict=verdict.kind,
                verified=verdict.verified,
                reason=verdict.reason,
                where=None if found is None else found.where,
                memo=None if found is None else found.memo,
                maxsize=None if found is None else found.maxsize,
            )
        rows.append(row)
    return {
        "checked_on": checked_on,
        "outcome": None if judged is None else decide(judged).outcome.value,
        "reason": None if judged is None else decide(judged).reason,
        "rows": rows,
    }


def call_api_section(
    judged: Optional[ReleaseVerdict], lookup: Optional[Lookup], checked_on: Optional[str]
) -> dict[str, Any]:
    """The decode signature against :data:`fi_compat.model.specs.DECODE` (what ``mla_decode`` maps onto)."""
    section: dict[str, Any] = dict.fromkeys(CALL_API_KEYS)
    section.update(function=DECODE.qualname, expected=DECODE.expected_text())
    if judged is None or lookup is None:
        return section
    found = lookup(DECODE)
    mismatch = judged.call_api
    section.update(
        status="ok" if mismatch is None else ("missing" if found is None else "mismatch"),
        checked_on=_checked_on(DECODE.module, checked_on),
        where=None if found is None else found.where,
        difference=None if mismatch is None else mismatch.difference,
        found=None if found is None else found.function.text(),
    )
    return section


__all__ = ["CALL_API_KEYS", "ROW_KEYS", "bounds_section", "call_api_section", "choose_lookup", "judge"]


WATCH_KEYS = ("setting", "runs", "why", "phase", "findings", "retired_after_s")


def watch_section(judged: Optional[ReleaseVerdict], state: dict[str, Any], setting: str) -> dict[str, Any]:
    """Whether the runtime watch runs on this release (``FI_COMPAT_WATCH=auto``: only where
    :func:`fi_compat.verdict.knowledge.unknown` says knowledge is missing) and, in a process where
    fi_compat is installed, where it is: walking, reading or retired, and what it found."""
    why = None if judged is None else knowledge.unknown(judged) or None
    live = state.get("watch")
    return {
        "setting": setting,
        "runs": setting in ("bound", "warn") or (setting == "auto" and why is not None),
        "why": why,
        "phase": None if live is None else live["phase"],
        "findings": [] if live is None else [f"{f['path']}: {f['action']}" for f in live["findings"]],
        "retired_after_s": None if live is None else live["retired_after_s"],
    }

