"""``fi-compat guard --census``: catch the next leak, not only the next signature.

The static check reads signatures; it cannot see a cache flashinfer starts
keying on the length in a function fi_compat does not know, or a known one
that gains ``max_seq_len`` (0.6.16's cute-dsl sizer).  The census runs the
release: :func:`census_wheel` installs the wheel into a throwaway directory
(:mod:`.census_env`), runs :mod:`.census_probe` there -- fi_compat installed,
the real MLA decode host path under the CPU-host shim, each engine's layout
and backends, a few hundred distinct ``max_seq_len`` values in two halves --
and judges its census with :func:`leaks`.

A flashinfer-owned cache **grows per distinct length** when, in the second
half of a layout's soak, it gains at least :data:`PER_LENGTH` entries per new
distinct length (one per four).  Unbounded caches on the real history gain 1
(the tuning config) to 14 (the cute-dsl sizer) per length; with fi_compat's
bound the flashinfer cache behind it gains none; caches keyed on a few kernel
variants or on a geometric ladder gain a handful in the first half and almost
nothing in the second.  A leak is reported with the cached function's
qualified name, its parameters (the key), the fi_compat row that covers it,
if any, and the growth per layout.

Cost, per release (docs/guard.md has the measurements): the wheel install
(4-13 s), the probe (14-22 s, most of it importing torch and flashinfer) and
removing the throwaway directory (0.7.4 installs 18,000 files: from about a
second on tmpfs to tens of seconds on a filesystem with slow unlinks).
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

from .census_env import CensusError, install_overlay, missing_message, probe_environment, requirements_missing
from .check import GUARD_ERROR, GUARD_LEAKS, GUARD_UNVERIFIED, GUARD_VERIFIED, Result

PER_LENGTH = 0.25
"""Entries per new distinct length, in the second half, that make a cache "grow per length"."""
PROBE_MODULE = "fi_compat.commands.guard.census_probe"
PROBE_TIMEOUT_S = 600.0
FLAT = "flat"
GROWS = "grows"


@dataclass
class Leak:
    """One flashinfer cache that grows per distinct length with fi_compat installed."""

    function: str
    key: Optional[list[str]]
    row: Optional[str]
    row_state: str
    layouts: list[dict[str, Any]]

    @property
    def per_length(self) -> float:
        return max(layout["per_length"] for layout in self.layouts)

    def describe(self) -> str:
        key = "(parameters unknown)" if self.key is None else f"({', '.join(self.key)})"
        where = ", ".join(
            f"{l['layout']}/{l['backend']}/{l.get('mode', 'q1')} "
            + (
                f"+{l['gained']} over {l['lengths']} new lengths"
                if l.get("gained") is not None
                else f"{l['bytes_per_length']:.0f} B per new length"
            )
            for l in self.layouts
        )
        return (
            f"{self.function}{key} grows by {self.per_length:.1f} entries per distinct max_seq_len "
            f"({where}); {self.row_state}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "key": self.key,
            "row": self.row,
            "row_state": self.row_state,
            "per_length": round(self.per_length, 2),
            "layouts": self.layouts,
        }


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

    def summary(self) -> str:
        total = sum(sum(layout["lengths"]) for layout in self.layouts)
        shown = ", ".join(f"{l['layout']}/{l['backend']}" for l in self.layouts)
        head = (
            f"census of {self.release}: {total} distinct max_seq_len over {len(self.layouts)} layouts "
            f"({shown}) with fi_compat installed, {sum(self.seconds.values()):.1f} s"
        )
        if self.verdict == FLAT:
            return f"{head}: no flashinfer cache grows per distinct length"
        return f"{head}: {len(self.leaks)} flashinfer cache(s) grow per distinct length"

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
        }


def _row_state(key: dict[str, Any], rows: dict[str, str]) -> str:
    row = key.get("row")
    if row is None:
        return "no fi_compat row covers it: a new leak"
    if row in rows:
        return f"fi_compat row {row!r}: {rows[row]} on this release"
    return f"fi_compat row {row!r} was not installed in the probe (--census-only-bounds)"


def leaks(payload: dict[str, Any]) -> list[Leak]:
    """The flashinfer caches of a probe's report that grow per distinct length (see the module docstring)."""
    rows = {row["name"]: row["verdict"] for row in payload["fi_compat"]["bounds"]}
    found: dict[str, Leak] = {}
    for layout in payload["layouts"]:
        new_lengths = layout["lengths"][1]
        for entry in layout["grown"]:
            gained = entry["gained"][1]
            if entry["owner"] != "flashinfer" or new_lengths <= 0 or gained < PER_LENGTH * new_lengths:
                continue
            key = payload["keys"].get(entry["qualname"], {})
            leak = found.setdefault(
                entry["qualname"],
                Leak(entry["qualname"], key.get("parameters"), key.get("row"), _row_state(key, rows), []),
            )
            leak.layouts.append(
                {
                    "layout": layout["layout"],
                    "backend": layout["backend"],
                    "mode": layout.get("mode", "q1"),
                    "gained": gained,
                    "lengths": new_lengths,
                    "per_length": gained / new_lengths,
                    "first_half": entry["gained"][0],
                }
            )
    _memory_leaks(payload, found)
    return sorted(found.values(), key=lambda leak: -leak.per_length)


def _memory_leaks(payload: dict[str, Any], found: dict[str, Leak]) -> None:
    """The census by memory's sites (fi_compat.memory_census), one leak per
    ``file:line``.  A memo the functools census already named is not repeated;
    in a layout where it named one, lines that hold memory outside any memo
    found (the buckets a leaking config holds, in another file) are listed with
    that leak (``also_held``), not as leaks of their own."""
    functools_leaks = dict(found)
    for layout in payload["layouts"]:
        mode = layout.get("mode", "q1")
        here = [
            leak
            for leak in functools_leaks.values()
            if any(
                (l["layout"], l["backend"], l.get("mode", "q1")) == (layout["layout"], layout["backend"], mode)
                for l in leak.layouts
            )
        ]
        for site in layout.get("memory", {}).get("sites", []):
            words = site["what"].replace(",", " ").split()
            if any(qualname in words for qualname in functools_leaks):
                continue
            if site["kind"] == "memory" and here:
                for entry in here[0].layouts:
                    if (entry["layout"], entry["backend"], entry.get("mode", "q1")) == (
                        layout["layout"],
                        layout["backend"],
                        mode,
                    ):
                        entry.setdefault("also_held", []).append(
                            f"{site['where']} ({site['bytes_per_length']:.0f} B per length)"
                        )
                continue
            name = f"{site['where']}: {site['what']} ({site['bytes_per_length']:.0f} B per length)"
            leak = found.setdefault(
                name, Leak(name, None, None, "no fi_compat row bounds it (the census by memory found it)", [])
            )
            leak.layouts.append(
                {
                    "layout": layout["layout"],
                    "backend": layout["backend"],
                    "mode": mode,
                    "gained": site["entries_per_length"],
                    "lengths": layout["lengths"][1],
                    "per_length": site["entries_per_length"] or 0.0,
                    "bytes_per_length": site["bytes_per_length"],
                }
            )


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
    return CensusResult(
        GROWS if found else FLAT,
        payload["release"],
        found,
        layouts,
        payload["fi_compat"],
        {"install": round(installed - started, 2), "probe": round(finished - installed, 2)},
        notes,
    )


def add_census(
    result: Result,
    wheel: Path,
    *,
    lengths: Optional[int] = None,
    only_bounds: Optional[Sequence[str]] = None,
    modes: Optional[Sequence[str]] = None,
) -> None:
    """Run the census of ``wheel`` and fold it into its static ``result``: growth
    makes a passing verdict ``leaks`` (exit 1); a census that cannot run makes
    it ``error`` (exit 2), since the check asked for was not done."""
    release = result.release or wheel.name
    try:
        census = census_wheel(wheel, release, lengths=lengths, only_bounds=only_bounds, modes=modes)
    except CensusError as exc:
        result.census = {"verdict": GUARD_ERROR, "release": release, "summary": f"census not run: {exc}"}
        result.verdict = GUARD_ERROR
        result.reason = f"census not run: {exc}"
        return
    result.census = census.as_dict()
    result.notes.extend(census.notes)
    if census.verdict == GROWS and result.verdict in (GUARD_VERIFIED, GUARD_UNVERIFIED):
        # an unsupported release keeps its static reason; its leaks are in result.census
        result.verdict = GUARD_LEAKS
        result.reason = f"{census.summary()}: {'; '.join(leak.describe() for leak in census.leaks)}"


__all__ = [
    "CensusError",
    "CensusResult",
    "FLAT",
    "GROWS",
    "Leak",
    "PER_LENGTH",
    "add_census",
    "census_wheel",
    "leaks",
    "run_probe",
]
