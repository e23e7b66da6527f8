"""The census's reading of the probe's report: which flashinfer caches grow per distinct length, and what is bounded.

One job: :func:`leaks` (a functools cache that gains at least :data:`PER_LENGTH`
entries per new length in the second half, unless :func:`bounded_upstream`, and
every memo and source line the census by memory saw keep growing) and
:func:`what_is_bounded`, each :class:`Leak` with its place, engine calls and key;
:mod:`.census_check` runs the probe and gives the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ...counting.memory_census import HUGE_FACTOR

PER_LENGTH = 0.25
"""Entries per new distinct length, in the second half, that make a cache "grow per length"."""
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
        rates: list[float] = [layout["per_length"] for layout in self.layouts]
        return max(rates)

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


def _row_state(key: dict[str, Any], rows: dict[str, str]) -> str:
    row = key.get("row")
    if row is None:
        return "no fi_compat row covers it: a new leak"
    if row in rows:
        return f"fi_compat row {row!r}: {rows[row]} on this release"
    return f"fi_compat row {row!r} was not installed in the probe (--census-only-bounds)"


def bounded_upstream(entry: dict[str, Any]) -> bool:
    """A flashinfer functools cache with a finite bound that it filled within the run, or one
    no larger than fi_compat would set (:data:`fi_compat.counting.memory_census.HUGE_FACTOR` times its
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
    """The census by memory's sites (fi_compat.counting.memory_census), one leak per memo or
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
