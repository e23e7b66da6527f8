"""Where fi_compat's knowledge of a release is missing: the one decision that starts the runtime watch.

The installer starts the watch from it (``FI_COMPAT_WATCH=auto``), ``fi-compat doctor``
displays it, and strict mode refuses the release on it; none of them decides again.
Pure: reads a :class:`~fi_compat.verdict.judgement.ReleaseVerdict`, costs nothing.
"""

from __future__ import annotations

from .judgement import BOUND, PREDATES, VERIFIED, ReleaseVerdict

#: Outcomes where the knowledge is complete: every row found by name on a verified release,
#: or a release older than every cache fi_compat bounds.
KNOWN = (VERIFIED, PREDATES)


def unknown(judged: ReleaseVerdict) -> str:
    """Why fi_compat's knowledge of ``judged``'s release is incomplete, in one line; empty where
    it is complete.  Missing: a row missing or mismatched, a row bounded outside the verified
    releases (the next release, a nightly's ``.devN``, a source build, a function found moved),
    or a decode signature the matrix never ran.  A row that differs only by a note (parameters
    that became positional-only: the memo keys and calls them as flashinfer's callers pass them)
    is known."""
    if judged.outcome in KNOWN:
        return ""
    if judged.problems:
        return judged.reason()
    unverified = [v for v in judged.rows if v.kind == BOUND and not v.verified and not v.note]
    if not unverified and judged.call_api is None:
        return ""
    said = f"{len(unverified)} caches bounded by name, not verified here: {', '.join(v.bound.name for v in unverified)}"
    if judged.call_api is not None:
        said += f"; call API: {judged.call_api.describe()}"
    return f"flashinfer {judged.release} is outside the releases fi_compat verified ({said})"


__all__ = ["KNOWN", "unknown"]
