"""The guard's census: a release's verdict from running it, not from its names.

The static check reads signatures; it cannot see a cache flashinfer starts
keying on the length in a function fi_compat does not know, a memo renamed or
written by hand, or that a renamed memo is now bounded upstream.  The census
runs the release: :func:`census_wheel` installs the wheel into a throwaway
directory (:mod:`.census_env`), runs :mod:`.census_probe` there -- fi_compat
installed, the real MLA decode host path under the CPU-host shim, each
engine's call, distinct ``max_seq_len`` up to 1M in two halves -- and reads
its report: :func:`leaks` (what keeps growing), :func:`what_is_bounded` (what
fi_compat bounded, what flashinfer bounds), the engine calls the release
refused.  :meth:`CensusResult.measured` hands that to
:func:`fi_compat.verdict.judgement.decide`, which gives the verdict.

A flashinfer functools cache **grows per distinct length** when, in the second
half of a call's soak, it gains at least :data:`PER_LENGTH` entries per new
distinct length (one per four), unless it is bounded (:func:`bounded_upstream`:
a finite bound it filled within the run, or one no larger than fi_compat would
set).  The census by memory (:mod:`fi_compat.counting.memory_census`) adds every other
memo and every flashinfer source line that keeps growing, per length or per
call.  Each is reported with its ``flashinfer/...py:LINE``, the engine calls
that reach it and, for a functools cache, its parameters (the key) and the
fi_compat row that covers it, if any.

Cost, per release on 2 shared cores (docs/guard.md, docs/benchmarks.md): the
wheel install (5-25 s), the probe (about 10-20 s per engine call and query
mode, the census by memory included) and removing the throwaway directory.
Failure: anything that stops the census is a :class:`~.census_env.CensusError`
(exit 2).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ...verdict.judgement import Measured, decide
from .census_env import CensusError, install_overlay, missing_message, probe_environment, requirements_missing
from .census_leaks import BROKEN as BROKEN
from .census_leaks import CACHE_SIZE as CACHE_SIZE
from .census_leaks import FLAT as FLAT
from .census_leaks import GROWS as GROWS
from .census_leaks import PER_LENGTH as PER_LENGTH
from .census_leaks import Leak as Leak
from .census_leaks import bounded_upstream as bounded_upstream
from .census_leaks import leaks as leaks
from .census_leaks import short_path as short_path
from .census_leaks import what_is_bounded as what_is_bounded
from .check import GUARD_ERROR, Result

PROBE_MODULE = "fi_compat.commands.guard.census_probe"
PROBE_TIMEOUT_S = 600.0


@dataclass
class CensusResult:
    """The census of one wheel: ``flat`` or ``grows`` (with the leaks)."""

    verdict: str
    release: str
    leaks: list[Leak] = field(default_factory=list)
    layouts: list[dict[str, Any]] = field(default_factory=list)
    fi_compat: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    broken_calls: list[dict[str, Any]] = field(default_factory=list)
    bounded: list[str] = field(default_factory=list)  # what fi_compat bounded and what flashinfer bounds

    def measured(self) -> Measured:
        """This census in the words :func:`fi_compat.verdict.judgement.decide` reads."""
        broken = tuple(
            f"the {b['layout']} engine's call (backend {b['backend']}, {b['mode']}) is refused by "
            f"{self.release}: {b['error']}" + (f" [{b['where']}]" if b.get("where") else "")
            for b in self.broken_calls
        )
        return Measured(self.summary(), tuple(leak.describe() for leak in self.leaks), broken, tuple(self.bounded))

    def summary(self) -> str:
        total = sum(sum(layout["lengths"]) for layout in self.layouts)
        shown = ", ".join(f"{l['layout']}/{l['backend']}" for l in self.layouts)
        head = (
            f"census of {self.release}: {total} distinct max_seq_len over {len(self.layouts)} layouts "
            f"({shown}) with fi_compat installed, {sum(self.seconds.values()):.1f} s"
        )
        if self.verdict == BROKEN:
            return f"{head}: {len(self.broken_calls)} engine call(s) refused"
        if self.verdict == FLAT:
            return f"{head}: flashinfer's memory stays bounded"
        return f"{head}: {len(self.leaks)} flashinfer line(s) or memo(s) keep growing"

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "release": self.release,
            "summary": self.summary(),
            "leaks": [leak.as_dict() for leak in self.leaks],
            "layouts": self.layouts,
            "fi_compat": self.fi_compat,
            "seconds": self.seconds,
            "notes": self.notes,
            "broken_calls": self.broken_calls,
            "bounded": self.bounded,
        }


def run_probe(
    overlay: Path,
    scratch: Path,
    release: str,
    *,
    lengths: Optional[int] = None,
    only_bounds: Optional[Sequence[str]] = None,
    modes: Optional[Sequence[str]] = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> dict[str, Any]:
    """Run :mod:`.census_probe` over ``overlay``; its JSON report."""
    out = scratch / "census.json"
    command = [sys.executable, "-m", PROBE_MODULE, "--release", release, "--target", str(overlay), "--out", str(out)]
    if lengths is not None:
        command += ["--lengths", str(lengths)]
    if only_bounds is not None:
        command += ["--only-bounds", ",".join(only_bounds)]
    if modes is not None:
        command += ["--modes", ",".join(modes)]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=probe_environment(overlay, scratch),
            cwd=scratch,
        )
    except subprocess.TimeoutExpired:
        raise CensusError(f"the census probe of {release} did not finish within {timeout:.0f} s") from None
    try:
        payload = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = " / ".join(line for line in done.stderr.strip().splitlines()[-3:] if line.strip())
        raise CensusError(
            f"the census probe of {release} exited {done.returncode} without a report: {tail or '(no output)'}"
        ) from None
    if "error" in payload:
        raise CensusError(f"the census probe of {release} failed: {payload['error']}")
    return payload


def census_wheel(
    wheel: Path,
    release: str,
    *,
    lengths: Optional[int] = None,
    only_bounds: Optional[Sequence[str]] = None,
    modes: Optional[Sequence[str]] = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> CensusResult:
    """Install ``wheel`` in a throwaway directory, run the probe, judge the census.

    Raises :class:`~.census_env.CensusError` when the census cannot run."""
    missing, notes = requirements_missing(wheel)
    if missing:
        raise CensusError(missing_message(release, missing))
    scratch = Path(tempfile.mkdtemp(prefix="fi-compat-census-"))
    try:
        overlay = scratch / "site"
        started = time.perf_counter()
        install_overlay(wheel, overlay)
        installed = time.perf_counter()
        payload = run_probe(
            overlay, scratch, release, lengths=lengths, only_bounds=only_bounds, modes=modes, timeout=timeout
        )
        finished = time.perf_counter()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if only_bounds is not None:
        notes.append(f"fi_compat installed with only these rows (--census-only-bounds): {', '.join(only_bounds)}")
    if modes is not None:
        notes.append(f"query modes driven (--census-modes): {', '.join(modes)}")
    found = leaks(payload)
    layouts = [
        {k: layout.get(k) for k in ("layout", "backend", "mode", "lengths", "launches", "seconds")}
        for layout in payload["layouts"]
    ]
    notes.extend(
        f"query mode {r['mode']} not accepted by {payload['release']} ({r['layout']}/{r['backend']}): {r['error']}"
        for r in payload.get("refused_modes", [])
    )
    broken = payload.get("broken_calls", [])
    return CensusResult(
        BROKEN if broken else GROWS if found else FLAT,
        payload["release"],
        found,
        layouts,
        payload["fi_compat"],
        {"install": round(installed - started, 2), "probe": round(finished - installed, 2)},
        notes,
        broken,
        what_is_bounded(payload),
    )


def add_census(
    result: Result,
    wheel: Path,
    *,
    lengths: Optional[int] = None,
    only_bounds: Optional[Sequence[str]] = None,
    modes: Optional[Sequence[str]] = None,
) -> None:
    """Run the census of ``wheel`` and let :func:`fi_compat.verdict.judgement.decide` give the verdict
    from the static reading and what was measured; a census that cannot run makes the
    result ``error`` (exit 2), since the release was not measured."""
    release = result.release or wheel.name
    try:
        census = census_wheel(wheel, release, lengths=lengths, only_bounds=only_bounds, modes=modes)
    except CensusError as exc:
        result.census = {"verdict": GUARD_ERROR, "release": release, "summary": f"census not run: {exc}"}
        result.verdict = GUARD_ERROR
        result.reason = f"census not run: {exc}"
        return
    result.census = census.as_dict()
    result.notes[:] = [note for note in result.notes if not note.startswith("not measured:")]
    result.notes.extend(census.notes)
    assert result.static is not None, "add_census takes a result of check_wheel"
    result.apply(decide(result.static, census.measured()))


__all__ = [
    "BROKEN",
    "CensusError",
    "CensusResult",
    "FLAT",
    "GROWS",
    "Leak",
    "PER_LENGTH",
    "add_census",
    "bounded_upstream",
    "census_wheel",
    "leaks",
    "run_probe",
]
