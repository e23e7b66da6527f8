"""The words of a verdict, as ``str``-valued enums: what fi_compat does with a row (:class:`Kind`)
and a release's outcome (:class:`Outcome`).

One vocabulary: :mod:`fi_compat.verdict.judgement` decides, and ``status()``, ``fi-compat
doctor`` and ``fi-compat guard`` display these values in their own words without deciding
again.  Each member is its string value (``Kind.BOUND == "bound"``; ``str()`` and JSON give
the value), so ``status()`` and the guard's JSON carry plain strings as before.
"""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """What fi_compat does with one row of :data:`fi_compat.verdict.bounds.BOUNDS` on a release
    (the table in :mod:`fi_compat.verdict.judgement`)."""

    BOUND = "bound"  # flashinfer's cache is unbounded (or the builder has none): fi_compat bounds it
    BOUNDED_UPSTREAM = "bounded-upstream"  # flashinfer bounds it itself: fi_compat stands aside
    NO_CACHE = "no-cache"  # flashinfer keeps no cache there
    NOT_IN_RELEASE = "not-in-release"  # the release predates the function or the row
    MISSING = "missing"  # the release should have it and nothing binds it by name
    MISMATCH = "mismatch"  # its parameters changed: the key may be incomplete; left alone

    def __str__(self) -> str:
        return self.value


class Outcome(str, Enum):
    """The one vocabulary for a release's outcome: ``status()``, ``fi-compat doctor``
    and ``fi-compat guard`` display it in their own words, and none re-decides it.

    The first five come from reading the release (``ReleaseVerdict.outcome``);
    the last three only from running it (the guard's census, ``judgement.decide``)."""

    VERIFIED = "verified"  # every bound fits, on a release the matrix ran
    UNVERIFIED = "unverified"  # everything fits, outside the verified releases: not measured
    PARTIAL = "partial"  # some rows cannot be bounded, others can
    UNSUPPORTED = "unsupported"  # nothing can be bounded
    PREDATES = "predates"  # the release predates every cache fi_compat bounds
    BOUNDED = "bounded"  # measured: flashinfer's memory stayed bounded with fi_compat installed
    LEAKS = "leaks"  # measured: some flashinfer line or memo keeps growing with fi_compat installed
    BREAKS_CALL = "breaks-call"  # measured: a call an engine makes raises TypeError on this release

    def __str__(self) -> str:
        return self.value


#: Verdicts that leave a leak fi_compat was supposed to close: a WARNING, or an error when strict.
PROBLEMS = (Kind.MISSING, Kind.MISMATCH)

__all__ = ["Kind", "Outcome", "PROBLEMS"]
