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
:func:`fi_compat.judgement.decide`, which gives the verdict.

A flashinfer functools cache **grows per distinct length** when, in the second
half of a call's soak, it gains at least :data:`PER_LENGTH` entries per new
distinct length (one per four), unless it is bounded (:func:`bounded_upstream`:
a finite bound it filled within the run, or one no larger than fi_compat would
set).  The census by memory (:mod:`fi_compat.memory_census`) adds every other
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

from ...judgement import Measured, decide
from ...memory_census import HUGE_FACTOR
from .census_env import CensusError, install_overlay, missing_message, probe_environment, requirements_missing
from .check import GUARD_ERROR, Result

PER_LENGTH = 0.25
"""Entries per new distinct length, in the second half, that make a cache "grow per length"."""
PROBE_MODULE = "fi_compat.commands.guard.census_probe"
PROBE_TIMEOUT_S = 600.0
FLAT = "flat"
GROWS = "grows"
BROKEN = "broken"
CACHE_SIZE = 256  # fi_compat's default bound, which the probe installs


def short_path(where: Optional[str]) -> Optional[str]:
    """``flashinfer/mla/_core.py:3224`` for a path inside the throwaway install (removed afterwards)."""
    if where is None:
        return None
    marker = "/flashinfer/"
    return "flashinfer/" + where.rsplit(marker, 1)[1] if marker in where else where


@dataclass
class Leak:
    """One flashinfer cache that grows per distinct length with fi_compat installed."""

    function: str
    key: Optional[list[str]]
    row: Optional[str]
    row_state: str
    layouts: list[dict[str, Any]]
    where: Optional[str] = None  # flashinfer/...py:LINE that keeps growing

    @property
    def per_length(self) -> float:
        return max(layout["per_length"] for layout in self.layouts)

    @property
    def lines(self) -> list[str]:
        """Every flashinfer ``file:line`` seen growing for this leak, its own first."""
        found = [self.where] if self.where else []
        for layout in self.layouts:
            found += layout.get("lines", [])
        return list(dict.fromkeys(found))

    def describe(self) -> str:
        calls = ", ".join(
            f"{l['layout']}/{l['backend']}/{l.get('mode', 'q1')} ("
            + (
                f"+{l['gained']} entries over {l['lengths']} new lengths"
                if l.get("bytes_per_length") is None
                else f"{l['bytes_per_length']:.0f} B per {l.get('per', 'length')}"
            )
            + ")"
            for l in self.layouts
        )
        if self.key is not None:  # a functools cache the census named
            at = f" [{self.where}]" if self.where else ""
            return (
                f"{self.function}({', '.join(self.key)}){at} grows by {self.per_length:.1f} entries per distinct "
                f"max_seq_len, reached by {calls}; {self.row_state}"
            )
        return f"{self.function} [lines {', '.join(self.lines)}], reached by {calls}; {self.row_state}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "key": self.key,
            "row": self.row,
            "row_state": self.row_state,
            "per_length": round(self.per_length, 2),
            "layouts": self.layouts,
            "where": self.where,
            "lines": self.lines,
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
    broken_calls: list[dict[str, Any]] = field(default_factory=list)
    bounded: list[str] = field(default_factory=list)  # what fi_compat bounded and what flashinfer bounds

    def measured(self) -> Measured:
        """This census in the words :func:`fi_compat.judgement.decide` reads."""
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


def _row_state(key: dict[str, Any], rows: dict[str, str]) -> str:
    row = key.get("row")
    if row is None:
        return "no fi_compat row covers it: a new leak"
    if row in rows:
        return f"fi_compat row {row!r}: {rows[row]} on this release"
    return f"fi_compat row {row!r} was not installed in the probe (--census-only-bounds)"


def bounded_upstream(entry: dict[str, Any]) -> bool:
    """A flashinfer functools cache with a finite bound that it filled within the run, or one
    no larger than fi_compat would set (:data:`fi_compat.memory_census.HUGE_FACTOR` times its
    bound): it grows until it is full and then evicts, so it is bounded, not a leak."""
    maxsize = entry.get("maxsize")
    if maxsize is None:
        return False
    return bool(entry.get("currsize", 0) >= maxsize or maxsize <= HUGE_FACTOR * CACHE_SIZE)


def what_is_bounded(payload: dict[str, Any]) -> list[str]:
    """What fi_compat bounded (its rows with verdict ``bound``) and what flashinfer bounds
    itself (rows ``bounded-upstream`` and every flashinfer cache of finite size that grew)."""
    said = [f"fi_compat bounded {row['name']}" for row in payload["fi_compat"]["bounds"] if row["verdict"] == "bound"]
    said += [
        f"flashinfer bounds {row['name']} itself"
        for row in payload["fi_compat"]["bounds"]
        if row["verdict"] == "bounded-upstream"
    ]
    upstream: dict[str, tuple[int, int]] = {}
    for layout in payload["layouts"]:
        for entry in layout["grown"]:
            if entry["owner"] == "flashinfer" and bounded_upstream(entry):
                held = max(entry.get("currsize", 0), upstream.get(entry["qualname"], (0, 0))[1])
                upstream[entry["qualname"]] = (entry["maxsize"], held)
    said += [
        f"flashinfer bounds {name} (lru_cache maxsize {maxsize}, {held} entries at the end"
        + (", full" if held >= maxsize else "")
        + ")"
        for name, (maxsize, held) in sorted(upstream.items())
    ]
    return said


def leaks(payload: dict[str, Any]) -> list[Leak]:
    """The flashinfer caches and lines of a probe's report that keep growing (see the module docstring)."""
    rows = {row["name"]: row["verdict"] for row in payload["fi_compat"]["bounds"]}
    found: dict[str, Leak] = {}
    for layout in payload["layouts"]:
        new_lengths = layout["lengths"][1]
        for entry in layout["grown"]:
            gained = entry["gained"][1]
            if entry["owner"] != "flashinfer" or new_lengths <= 0 or gained < PER_LENGTH * new_lengths:
                continue
            if bounded_upstream(entry):
                continue
            key = payload["keys"].get(entry["qualname"], {})
            leak = found.setdefault(
                entry["qualname"],
                Leak(
                    entry["qualname"],
                    key.get("parameters"),
                    key.get("row"),
                    _row_state(key, rows),
                    [],
                    short_path(key.get("where")),
                ),
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


def _same_call(entry: dict[str, Any], layout: dict[str, Any]) -> bool:
    return (entry["layout"], entry["backend"], entry.get("mode", "q1")) == (
        layout["layout"],
        layout["backend"],
        layout.get("mode", "q1"),
    )


def _named_already(site: dict[str, Any], leaks: dict[str, Leak]) -> bool:
    """Whether the census by memory's ``site`` is a functools cache the functools census named:
    the same class and function (a module can be reached under two paths) in the same file."""
    words = site["what"].replace(",", " ").split()
    if any(qualname in words for qualname in leaks):
        return True
    file = (short_path(site["where"]) or "").rpartition(":")[0]
    tails = {".".join(word.split(".")[-2:]) for word in words if "." in word}
    return any(
        ".".join(leak.function.split(".")[-2:]) in tails and (leak.where or "").rpartition(":")[0] == file
        for leak in leaks.values()
    )


def _memory_leaks(payload: dict[str, Any], found: dict[str, Leak]) -> None:
    """The census by memory's sites (fi_compat.memory_census), one leak per memo or
    ``file:line``.  A memo the functools census already named is not repeated;
    in a layout where a memo was named, lines that hold memory outside any memo
    (the buckets a leaking config holds, in another file) are listed with that
    memo (``also_held``), not as leaks of their own."""
    functools_leaks = dict(found)
    for layout in payload["layouts"]:
        mode = layout.get("mode", "q1")
        sites = layout.get("memory", {}).get("sites", [])
        memos_here: list[dict[str, Any]] = [
            entry for leak in functools_leaks.values() for entry in leak.layouts if _same_call(entry, layout)
        ]
        for site in sites:
            if _named_already(site, functools_leaks):
                continue
            where = short_path(site["where"])
            lines = [line for line in (short_path(l) for l in site.get("lines", [])) if line]
            if site["kind"] == "memory" and memos_here:  # held by the functools leak of this call
                memos_here[0].setdefault("also_held", []).append(
                    f"{where} ({site['bytes_per_length']:.0f} B per length)"
                )
                continue
            what = site["what"].replace(site["where"], where or "")
            name = f"{where}: {what}"
            leak = found.setdefault(
                name, Leak(name, None, None, "no fi_compat row bounds it (the census by memory found it)", [], where)
            )
            entry = {
                "layout": layout["layout"],
                "backend": layout["backend"],
                "mode": mode,
                "gained": site["entries_per_length"],
                "lengths": layout["lengths"][1],
                "per_length": site["entries_per_length"] or 0.0,
                "bytes_per_length": site["bytes_per_length"],
                "per": "call" if site["kind"] == "per-call" else "length",
                "lines": lines,
            }
            leak.layouts.append(entry)


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
    """Run the census of ``wheel`` and let :func:`fi_compat.judgement.decide` give the verdict
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
