"""The guard's output: a table for people, JSON (``--json``) for machines, and the exit status.

Exit status, the first that applies:

* 2: anything could not be checked (usage error, unreadable requirement file,
  index or download failure, refused wheel, a census that could not run);
* 1: a measured release ``leaks`` or ``breaks-call`` (an engine's call is refused);
* 3: not measured: ``--static`` read a release outside the verified list
  (``compatible-unverified`` or ``unsupported`` by name) and did not run it;
* 0: every release is ``verified``, ``nothing-to-bound``, or measured ``bounded``.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from .check import (
    GUARD_BOUNDED,
    GUARD_BREAKS_CALL,
    GUARD_ERROR,
    GUARD_LEAKS,
    GUARD_NOTHING,
    GUARD_UNSUPPORTED,
    GUARD_UNVERIFIED,
    GUARD_VERIFIED,
    Result,
)

EXIT_OK = 0
EXIT_UNSUPPORTED = 1
EXIT_ERROR = 2
EXIT_NOT_MEASURED = 3


def not_measured(result: Result) -> bool:
    """A release outside the verified list that only the static check read (``--static``)."""
    return result.verdict in (GUARD_UNVERIFIED, GUARD_UNSUPPORTED) and not result.measured


def exit_status(results: Sequence[Result]) -> int:
    verdicts = {r.verdict for r in results}
    if GUARD_ERROR in verdicts:
        return EXIT_ERROR
    if GUARD_LEAKS in verdicts or GUARD_BREAKS_CALL in verdicts:
        return EXIT_UNSUPPORTED
    if any(not_measured(r) for r in results):
        return EXIT_NOT_MEASURED
    return EXIT_OK


def summary(results: Sequence[Result]) -> dict[str, int]:
    counts = {
        GUARD_VERIFIED: 0,
        GUARD_BOUNDED: 0,
        GUARD_UNVERIFIED: 0,
        GUARD_UNSUPPORTED: 0,
        GUARD_LEAKS: 0,
        GUARD_BREAKS_CALL: 0,
        GUARD_ERROR: 0,
    }
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    return counts


def as_json(results: Sequence[Result], notes: Sequence[str]) -> str:
    payload: dict[str, Any] = {
        "exit_status": exit_status(results),
        "summary": summary(results),
        "results": [r.as_dict() for r in results],
        "notes": list(notes),
    }
    return json.dumps(payload, indent=2)


def bounded_summary(result: Result) -> str:
    """``"4 of 4"``: the caches fi_compat bounds on that release, of those that need it."""
    verdicts = [row["verdict"] for row in result.bounds]
    needed = [v for v in verdicts if v in ("bound", "missing", "mismatch")]
    return f"{verdicts.count('bound')} of {len(needed)}" if verdicts else "-"


def as_table(results: Sequence[Result], notes: Sequence[str]) -> str:
    lines: list[str] = []
    if results:
        rows = [("RELEASE", "VERDICT", "BOUNDED", "FROM")]
        rows += [(r.release or "?", _word(r), bounded_summary(r), r.origin) for r in results]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        for row in rows:
            lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    for result in results:
        if result.verdict == GUARD_VERIFIED:
            if result.census is not None:
                lines.append("")
                lines.append(f"{result.release or '?'} ({result.origin}): {result.verdict}")
                lines.extend(_census_lines(result.census))
            continue
        lines.append("")
        lines.append(f"{result.release or '?'} ({result.origin}): {_word(result)}")
        if result.census is None or result.verdict not in (GUARD_LEAKS, GUARD_ERROR):
            lines.append(f"  {result.reason}")  # else the census lines say it
        if result.census is not None:
            lines.extend(_census_lines(result.census))
        for mismatch in result.mismatches:
            lines.append(f"  - {mismatch['function']}: {mismatch['difference']}")
            lines.append(f"      expected ({', '.join(mismatch['expected'])})")
            found = "not found" if mismatch["found"] is None else f"({', '.join(mismatch['found'])})"
            where = f"  [{mismatch['where']}]" if mismatch.get("where") else ""
            lines.append(f"      found    {found}{where}")
        for note in result.notes:
            lines.append(f"  note: {note}")
    if notes:
        lines.append("")
        lines.extend(f"note: {note}" for note in notes)
    counts = summary(results)
    lines.append("")
    unmeasured = sum(1 for r in results if not_measured(r))
    lines.append(
        f"{len(results)} checked: {counts[GUARD_VERIFIED]} verified, "
        + (f"{counts[GUARD_BOUNDED]} measured bounded, " if counts[GUARD_BOUNDED] else "")
        + (f"{unmeasured} not measured (--static), " if unmeasured else "")
        + (f"{counts[GUARD_LEAKS]} leaking, " if counts[GUARD_LEAKS] or any(r.census for r in results) else "")
        + (f"{counts[GUARD_BREAKS_CALL]} breaking an engine's call, " if counts[GUARD_BREAKS_CALL] else "")
        + (f"{counts[GUARD_NOTHING]} nothing to bound, " if counts.get(GUARD_NOTHING) else "")
        + f"{counts[GUARD_ERROR]} "
        f"not checked (errors); exit {exit_status(results)}"
    )
    return "\n".join(lines)


def _word(result: Result) -> str:
    return f"{result.verdict} (not measured)" if not_measured(result) else result.verdict


def _census_lines(census: dict[str, Any]) -> list[str]:
    """The census part of a result: its summary, each refused call, each leak with its line
    and key and the engine calls that reach it, then what stays bounded."""
    lines = [f"  {census['summary']}"]
    for broken in census.get("broken_calls", []):
        where = f" [{broken['where']}]" if broken.get("where") else ""
        lines.append(
            f"  - the {broken['layout']} engine's call (backend {broken['backend']}, {broken['mode']}): "
            f"{broken['error']}{where}"
        )
    for leak in census.get("leaks", []):
        if leak["key"] is None:
            lines.append(f"  - {leak['function']}")
        else:
            where = f"{leak['where']}: " if leak.get("where") else ""
            lines.append(f"  - {where}{leak['function']}({', '.join(leak['key'])})")
        lines.append(f"      {leak['per_length']} entries per distinct max_seq_len; {leak['row_state']}")
        for layout in leak["layouts"]:
            if layout.get("first_half") is not None:
                lines.append(
                    f"      {layout['layout']}/{layout['backend']}/{layout.get('mode', 'q1')}: +{layout['gained']} "
                    f"entries over {layout['lengths']} new lengths (+{layout['first_half']} over the first half)"
                )
            else:
                lines.append(
                    f"      reached by {layout['layout']}/{layout['backend']}/{layout.get('mode', 'q1')}: "
                    f"{layout['bytes_per_length']:.0f} B per new length"
                )
    for bounded in census.get("bounded", []):
        lines.append(f"  bounded: {bounded}")
    return lines
