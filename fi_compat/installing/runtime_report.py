"""What the runtime says about its verdicts: WARNING lines, INFO lines and the strict error.

Shared by :mod:`fi_compat.installing.installer` for an install and for each lazily
imported module it bounds later.  Pure text and logging: nothing here changes
the installer's state.  Cost: string formatting per row, at install time.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Optional

from ..verdict.judgement import BOUND, Verdict
from ..errors import (
    SignatureMismatchError,
    UnsupportedReleaseError,
    UnsupportedReleaseWarning,
    UnverifiedReleaseError,
    UnverifiedReleaseWarning,
    shortened,
    warn,
)
from ..lookup import BOUNDED
from .state import State

logger = logging.getLogger("fi_compat")


DETAILS = " (details: fi-compat doctor)"


def warnings_for(
    rows: Iterable[Verdict], release: Any, provisional: Iterable[str] = ()
) -> list[tuple[type[Warning], str, tuple[str, ...]]]:
    """``(category, message, cause)`` for what the runtime warns about: each row left
    unbounded, and one line for bounds outside the verified releases; each at
    most :data:`~fi_compat.errors.WARNING_LIMIT` characters (the expected and
    found parameters, and every row, are in ``fi-compat doctor``).  A row in
    ``provisional`` was read from source: it is judged again, live, when its
    module is imported, and the message says so."""
    rows, provisional = list(rows), set(provisional)
    said: list[tuple[type[Warning], str, tuple[str, ...]]] = []
    for v in rows:
        if not v.problem:
            continue
        difference = v.mismatch.difference if v.mismatch is not None else v.reason
        source = " (read from source)" if v.bound.name in provisional else ""
        keep = f"; left unbounded{source}{DETAILS}"
        message = shortened(f"flashinfer {release}: {v.bound.spec.qualname} {difference}", keep=keep)
        # one cause per release and function: the same row judged again when a module loads says nothing new
        said.append((UnsupportedReleaseWarning, message, ("unbounded", str(release), v.bound.spec.qualname)))
    unverified = [v for v in rows if v.kind == BOUND and not v.verified]
    if unverified:
        moved = [v.found.defined_in for v in unverified if v.found is not None and v.found.moved]
        where = f"; {len(moved)} found moved, in {', '.join(sorted(set(moved)))}" if moved else ""
        message = shortened(
            f"flashinfer {release} is outside the releases fi_compat verified; {len(unverified)} caches bounded "
            f"(signatures match{where})",
            keep=f"; run the release matrix{DETAILS}",
        )
        # one cause per release: a lazily imported module's rows join the same release's
        said.append((UnverifiedReleaseWarning, message, ("unverified", str(release))))
    return said


def report(problems: list[Verdict], state: State) -> None:
    """Warn once per cause per process (:func:`~fi_compat.errors.warn`) about each
    problem (its full reason appended to ``state.messages``) and the installer's
    unverified bounds; rows still waiting for their module are said to be read
    from source.  Warnings only, no log line: docs/errors.md, "Warnings or logging"."""
    others = [v for v in state.verdicts.values() if not v.problem]
    for v in problems:
        state.messages.append(f"flashinfer {state.release}: {v.reason}")
    for category, message, cause in warnings_for(problems + others, state.release, state.waiting):
        warn(message, category, cause)


def note_effectively_unbounded(rows: Iterable[Verdict]) -> None:
    """One INFO line per row flashinfer bounds so high (``judgement.HUGE`` times
    fi_compat's bound) that fi_compat bounds it anyway."""
    for verdict in rows:
        found = verdict.found
        if verdict.kind == BOUND and found is not None and found.memo == BOUNDED and not verdict.bound.replace_bounded:
            logger.info("fi_compat: %s", verdict.reason)


def strict_error(problems: list[Verdict], release_info: Any, unknown: str = "") -> Exception:
    """The typed error strict mode raises where knowledge is missing: for the first row left
    unbounded, else (``unknown``: why) for a release outside the verified ones
    (``release_info``: the detected release)."""
    release: Optional[str] = None if release_info is None else str(release_info)
    if not problems:
        return UnverifiedReleaseError(release, unknown)
    first = problems[0]
    if first.mismatch is not None:
        m = first.mismatch
        return SignatureMismatchError(m.spec.qualname, m.expected, m.found_text, release, m.difference)
    return UnsupportedReleaseError(release, first.reason)
