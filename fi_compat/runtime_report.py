"""What the runtime says about its verdicts: WARNING lines, INFO lines and the strict error.

Shared by :mod:`fi_compat.installer` for an install and for each lazily
imported module it bounds later.  Pure text and logging: nothing here changes
the installer's state.  Cost: string formatting per row, at install time.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Optional

from .judgement import BOUND, Verdict
from .errors import (
    SignatureMismatchError,
    UnsupportedReleaseError,
    UnsupportedReleaseWarning,
    UnverifiedReleaseWarning,
    warn,
)
from .lookup import BOUNDED
from .state import State

logger = logging.getLogger("fi_compat")


def warnings_for(rows: Iterable[Verdict], release: Any, provisional: Iterable[str] = ()) -> list[tuple[bool, str]]:
    """``(is_problem, message)`` for what the runtime says at WARNING: each row
    left unbounded, and one line for bounds outside the verified releases.
    A row in ``provisional`` was read from source: it is judged again, live,
    when its module is imported, and the message says so."""
    rows, provisional = list(rows), set(provisional)
    said = [
        (
            True,
            f"flashinfer {release}: {v.reason}. fi_compat left it unbounded"
            + (" (read from source: judged again when its module is imported)" if v.bound.name in provisional else "")
            + " (set FI_COMPAT_STRICT=1 to make this an error)",
        )
        for v in rows
        if v.problem
    ]
    unverified = [
        v.bound.spec.qualname + (f" (found in {v.found.defined_in})" if v.found and v.found.moved else "")
        for v in rows
        if v.kind == BOUND and not v.verified
    ]
    if unverified:
        said.append(
            (
                False,
                f"flashinfer {release} is outside the releases fi_compat verified for "
                f"{', '.join(unverified)}; their signatures match and fi_compat bounds them. "
                "Run the release matrix to verify it",
            )
        )
    return said


def report(problems: list[Verdict], state: State) -> None:
    """Log and warn each problem (appended to ``state.messages``) and the
    installer's unverified bounds; rows still waiting for their module are
    said to be read from source."""
    others = [v for v in state.verdicts.values() if not v.problem]
    for is_problem, message in warnings_for(problems + others, state.release, state.waiting):
        if is_problem:
            state.messages.append(message)
        logger.warning("fi_compat: %s", message)
        warn(message, UnsupportedReleaseWarning if is_problem else UnverifiedReleaseWarning)


def note_effectively_unbounded(rows: Iterable[Verdict]) -> None:
    """One INFO line per row flashinfer bounds so high (``judgement.HUGE`` times
    fi_compat's bound) that fi_compat bounds it anyway."""
    for verdict in rows:
        found = verdict.found
        if verdict.kind == BOUND and found is not None and found.memo == BOUNDED and not verdict.bound.replace_bounded:
            logger.info("fi_compat: %s", verdict.reason)


def strict_error(problems: list[Verdict], release_info: Any) -> Exception:
    """The typed error strict mode raises for the first problem (``release_info``: the detected release)."""
    release: Optional[str] = None if release_info is None else str(release_info)
    first = problems[0]
    if first.mismatch is not None:
        m = first.mismatch
        return SignatureMismatchError(m.spec.qualname, m.expected, m.found_text, release, m.difference)
    return UnsupportedReleaseError(release, first.reason)
