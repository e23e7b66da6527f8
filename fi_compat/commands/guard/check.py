"""The static verdict on one wheel: the runtime's own verdict, fed by ``ast``.

:func:`check_wheel` opens the wheel in memory and calls
:func:`fi_compat.verdict.judgement.judge_release` with a lookup over the wheel's sources,
the same function :func:`fi_compat.install` calls with a lookup over the live
modules, then :func:`fi_compat.verdict.judgement.decide`, the one verdict function
``status()`` and ``doctor`` use too; the census (:mod:`.census_check`) calls
``decide`` again with what it measured.  The guard only names the outcomes:

===============  =========================  ====================================
outcome          guard                      meaning
===============  =========================  ====================================
verified         ``verified``               every bound fits, on a verified release
unverified       ``compatible-unverified``  everything fits by name (static only)
partial          ``unsupported``            some cache cannot be bounded by name
unsupported                                 (static only)
predates         ``nothing-to-bound``       the release predates every cache
                                            fi_compat bounds (0.6.4 - 0.6.12)
bounded          ``bounded``                measured: flashinfer's memory stays bounded
leaks            ``leaks``                  measured: a flashinfer line keeps growing
breaks-call      ``breaks-call``            measured: an engine's call is refused
===============  =========================  ====================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from ...verdict.bounds import BOUNDS
from ...verdict.judgement import Decision, Outcome, ReleaseVerdict, decide, judge_release
from ...model.specs import DECODE
from .fetch import wheel_release
from .errors import WheelError
from .wheel import WheelSources, lookup_for, module_path

GUARD_VERIFIED = "verified"
GUARD_UNVERIFIED = "compatible-unverified"
GUARD_UNSUPPORTED = "unsupported"
GUARD_BOUNDED = "bounded"  # the census: flashinfer's memory stayed bounded with fi_compat installed
GUARD_LEAKS = "leaks"  # the census: a flashinfer line or memo keeps growing with fi_compat installed
GUARD_BREAKS_CALL = "breaks-call"  # the census: a call an engine makes is refused (TypeError)
GUARD_ERROR = "error"
GUARD_NOTHING = "nothing-to-bound"  # exit 0: fi_compat installs and leaves flashinfer as it is

WORDS: dict[Outcome, str] = {
    Outcome.VERIFIED: GUARD_VERIFIED,
    Outcome.UNVERIFIED: GUARD_UNVERIFIED,
    Outcome.PARTIAL: GUARD_UNSUPPORTED,
    Outcome.UNSUPPORTED: GUARD_UNSUPPORTED,
    Outcome.PREDATES: GUARD_NOTHING,
    Outcome.BOUNDED: GUARD_BOUNDED,
    Outcome.LEAKS: GUARD_LEAKS,
    Outcome.BREAKS_CALL: GUARD_BREAKS_CALL,
}

NOT_MEASURED = (
    "not measured: the static check reads names and signatures only; run `fi-compat guard` without "
    "--static to measure this release"
)


@dataclass
class Result:
    """One checked (or uncheckable) release."""

    release: Optional[str]
    origin: str  # requirement file:line, "--pin ...", or "--wheel PATH"
    verdict: str
    bounds: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    wheel: Optional[str] = None
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    census: Optional[dict[str, Any]] = None  # the census: CensusResult.as_dict(), or {"verdict": "error", ...}
    measured: bool = False  # the verdict comes from running the release (the census)
    static: Optional[ReleaseVerdict] = field(default=None, repr=False, compare=False)

    def apply(self, decision: Decision) -> None:
        """Show ``decision`` (from :func:`fi_compat.verdict.judgement.decide`) in the guard's words."""
        self.verdict = WORDS[decision.outcome]
        self.reason = decision.reason
        self.measured = decision.measured
        self.notes.extend(note for note in decision.notes if note not in self.notes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "origin": self.origin,
            "verdict": self.verdict,
            "bounds": self.bounds,
            "reason": self.reason,
            "wheel": self.wheel,
            "mismatches": self.mismatches,
            "notes": self.notes,
            "census": self.census,
            "measured": self.measured,
        }


def wheel_version(wheel: WheelSources) -> tuple[Optional[Version], list[str]]:
    """The release a wheel holds: its METADATA ``Version``, else its file name."""
    notes: list[str] = []
    from_name = wheel_release(wheel.path)
    name_version = from_name[1] if from_name else None
    meta: Optional[Version] = None
    if wheel.metadata_version:
        try:
            meta = Version(wheel.metadata_version)
        except InvalidVersion:
            notes.append(f"METADATA version {wheel.metadata_version!r} is not PEP 440")
    if meta is not None and name_version is not None and meta != name_version:
        notes.append(f"file name says {name_version}, METADATA says {meta}; METADATA wins")
    version = meta or name_version
    if version is not None and version.release == (0, 0, 0):
        # flashinfer's own label when its build metadata is missing (an editable checkout): no release,
        # as release detection reads it at runtime
        notes.append(f"version {version} is flashinfer's label for a build without its metadata")
        version = None
    if version is None:
        notes.append(
            "release unknown (no usable METADATA version, file name not a wheel name): "
            "judged by what its code holds, so the best verdict is compatible-unverified"
        )
    return version, notes


def check_wheel(path: Path | str, origin: str, expected_release: Optional[str] = None) -> Result:
    """The verdict on one wheel.  Raises :class:`~fi_compat.commands.guard.errors.WheelError` when refused."""
    with WheelSources.open(path) as wheel:
        version, notes = wheel_version(wheel)
        if (
            expected_release is not None
            and version is not None
            and str(version) != expected_release
            and version != _maybe_version(expected_release)
        ):
            notes.append(f"asked for {expected_release}, the wheel holds {version}")
        lookup = lookup_for(wheel)
        try:
            judged = judge_release(lookup, version)
            # where the release should have each function by its label: a hint, said only where nothing is found
            expected = [bound.spec for bound in BOUNDS if bound.spec.present_in(version)] + [DECODE]
            for module in sorted({spec.home_in(version).module for spec in expected if lookup(spec) is None}):
                if not wheel.has_module(module):
                    notes.append(
                        f"{' / '.join(module_path(module))} is not in the wheel (module {module} moved or removed)"
                    )
        except SyntaxError as exc:  # a wheel is refused, never a traceback (docs/guard.md)
            raise WheelError(f"{path}!{exc.filename}:{exc.lineno}: does not parse: {exc.msg}") from None
    decision = decide(judged)
    if decision.outcome not in (Outcome.VERIFIED, Outcome.PREDATES):
        notes.append(NOT_MEASURED)
    problems = [v.mismatch for v in judged.problems if v.mismatch is not None]
    if judged.call_api is not None:
        problems.append(judged.call_api)
    mismatches = [
        {
            "function": m.spec.qualname,
            "difference": m.difference,
            "expected": m.expected,
            "found": m.found_text,
            "where": None if m.found is None else m.found.where,
        }
        for m in problems
    ]
    bounds = [v.as_dict() for v in judged.rows]
    result = Result(
        release=None if version is None else str(version),
        origin=origin,
        verdict="",
        bounds=bounds,
        wheel=str(path),
        mismatches=mismatches,
        notes=notes,
        static=judged,
    )
    result.apply(decision)
    return result


def _maybe_version(text: str) -> Optional[Version]:
    try:
        return Version(text)
    except InvalidVersion:
        return None


__all__ = [
    "GUARD_BOUNDED",
    "GUARD_BREAKS_CALL",
    "GUARD_ERROR",
    "GUARD_LEAKS",
    "GUARD_NOTHING",
    "GUARD_UNSUPPORTED",
    "GUARD_UNVERIFIED",
    "GUARD_VERIFIED",
    "NOT_MEASURED",
    "Result",
    "WORDS",
    "check_wheel",
    "wheel_version",
]
