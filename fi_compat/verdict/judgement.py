"""The verdict on each row of :data:`fi_compat.verdict.bounds.BOUNDS`, on one release.

:func:`judge` decides, per row and from what :mod:`fi_compat.lookup` found, what
fi_compat does -- the same function for the runtime, ``fi-compat doctor`` and
``fi-compat guard``, so they cannot disagree:

====================  ==========================================================
verdict               meaning, and what fi_compat does
====================  ==========================================================
``bound``             flashinfer's cache is unbounded (or, for the builder, there
                      is none and fi_compat memoizes it): fi_compat bounds it
``bounded-upstream``  flashinfer bounds it itself (``lru_cache(maxsize=N)``):
                      fi_compat stands aside
``no-cache``          flashinfer keeps no cache there: nothing to bound
``not-in-release``    the release lacks the function (before it arrived, after it
                      was removed), or is a release older than the row
                      (:attr:`Bound.since`), or has the function only in an older
                      form than the row's: nothing to bound here, no WARNING
``missing``           the release should have it and nothing binds it (moved or
                      removed): WARNING, or an error in strict mode
``mismatch``          its parameters changed, so the key may be incomplete:
                      fi_compat leaves it alone, WARNING or strict error
====================  ==========================================================

Presence decides, not the label: a function found at one of the homes the spec
gives it is judged by its signature and memo whatever the release's label says
(a nightly ``0.6.18.devN`` sorts before 0.6.18 but holds its code).  Each row is
judged by the release the build's code has reached by what it holds
(:mod:`fi_compat.verdict.code_release`), or a final label's where that is newer;
only a build whose code surely predates a row keeps the row off (:func:`judge`).

A row is *verified* when the release matrix ran that release
(:data:`fi_compat.model.release_list.MATRIX_RELEASES`), the release lies in the row's
verified range, and the function sits where the spec says that release has it;
otherwise a ``bound`` verdict is applied with an UnverifiedReleaseWarning: a build
the matrix never ran is bounded all the same, and unverified only in what it says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

from packaging.version import Version

from . import bounds
from ..model import specs
from .bounds import Bound
from ..config import DEFAULT_CACHE_SIZE
from ..lookup import BOUNDED, NO_MEMO, UNBOUNDED, Found
from ..model.release_list import MATRIX_RELEASES
from ..model.signatures import Mismatch, compare
from .code_release import NOTHING_KNOWN, reached as code_reached
from .vocabulary import PROBLEMS, Kind, Outcome

BOUND = Kind.BOUND
BOUNDED_UPSTREAM = Kind.BOUNDED_UPSTREAM
NO_CACHE = Kind.NO_CACHE
NOT_IN_RELEASE = Kind.NOT_IN_RELEASE
MISSING = Kind.MISSING
MISMATCH = Kind.MISMATCH


@dataclass(frozen=True)
class Verdict:
    """What fi_compat does with one row on one release, and why."""

    bound: Bound
    kind: Kind
    reason: str
    verified: bool = False
    found: Optional[Found] = None
    mismatch: Optional[Mismatch] = None
    note: str = ""  # a difference from the spec that changes nothing fi_compat does (a note, not a problem)

    @property
    def problem(self) -> bool:
        return self.kind in PROBLEMS

    def as_dict(self) -> dict[str, Any]:
        return {
            "cache": self.bound.spec.qualname,
            "name": self.bound.name,
            "verdict": self.kind,
            "verified": self.verified,
            "reason": self.reason,
            "where": None if self.found is None else self.found.where,
        }


_MATRIX = frozenset(Version(r) for r in MATRIX_RELEASES)


def _ran_in_matrix(release: Optional[Version]) -> bool:
    """Verified means "the release matrix ran it": a release inside a row's
    range that the matrix never ran (0.7.3, published only on flashinfer's own
    index) is unverified.  A local label (``+cu130``) is the same release."""
    return release is not None and Version(release.public) in _MATRIX


HUGE = 16
"""A flashinfer bound over HUGE times fi_compat's own (``cache_size * scale``) is effectively unbounded."""


def _names_its_code(release: Version) -> bool:
    """Whether a release label names the code it was read from: a final release (a local
    label such as ``+cu130`` is the same release).  A development or pre-release label
    (``X.devN``, a nightly; ``XrcN``) sorts before ``X`` while its code may already hold
    what ``X`` holds, so it names nothing certain about the code."""
    return not release.is_prerelease


def _leads_to(release: Version) -> Version:
    """The release a development or pre-release label leads to (``0.6.18.dev1`` -> 0.6.18,
    ``0.6.15.post1.dev3`` -> 0.6.15.post1): its code is at most that release's."""
    post = "" if release.post is None else f".post{release.post}"
    return Version(".".join(str(part) for part in release.release) + post)


def _follows(release: Version) -> Optional[Version]:
    """The final release a development label's code comes after, if its label says: a
    post-release's build (``0.6.13.post0.dev913``) follows its base release (0.6.13) and
    holds what that holds; a nightly of the next release (``0.6.18.dev1``) or a
    pre-release names none."""
    return Version(".".join(str(part) for part in release.release)) if release.post is not None else None


def code_release(release: Optional[Version], reached: Optional[Version]) -> Optional[Version]:
    """The release a build's code is judged as: a final label's release, or the newer
    release its code has reached by what it holds (``reached``:
    :func:`fi_compat.verdict.code_release.reached`); for any other label (a nightly, a
    pre-release, none) what it holds, and at least the release a post-release's build
    follows (:func:`_follows`).  ``None``: not known (no label that names the code, and
    nothing it holds dated)."""
    known = reached if reached is not None and reached > NOTHING_KNOWN else None
    if release is not None and _names_its_code(release):
        public = Version(release.public)
        return public if known is None or known <= public else known
    floor = None if release is None else _follows(release)
    return max((v for v in (known, floor) if v is not None), default=None)


def _code_at_most(release: Optional[Version], code: Optional[Version]) -> Optional[Version]:
    """The newest release a build's code can be: a final label's own (or newer where what
    it holds says so), the release a nightly's label leads to; ``None`` for an unlabelled build."""
    if release is None:
        return None
    if _names_its_code(release):
        return code
    leads = _leads_to(release)
    return leads if code is None or code <= leads else code


def judge(
    bound: Bound,
    found: Optional[Found],
    release: Optional[Version],
    cache_size: int = DEFAULT_CACHE_SIZE,
    reached: Optional[Version] = None,
) -> Verdict:
    """The verdict on ``bound`` given what a lookup found (``None``: nothing binds it);
    ``cache_size``: the setting in force (``maxsize`` is weighed against it); ``reached``:
    the release the build's code has reached by what it holds (:func:`judge_release` reads
    it from every row's lookup), ``None`` when not read.

    Presence decides, not the label.  A row applies from its first release
    (:attr:`Bound.since`) on, judged by the release the code is (:func:`code_release`: a
    final label's, or what the code holds where it is newer or the label is a nightly or
    none); a function found at one of its homes is then judged by its signature and memo.
    A build whose code surely predates the row (at most a release before it) has nothing
    to bound there.  Where the code's release is not known well enough (a nightly that
    holds nothing of the row's release, an unlabelled build), the function found in the
    row's form is judged, and in an older form is not the row's.  ``added_in`` only words
    the verdict on an absent function and makes a namesake found outside every home not
    it; an absent function the build should have is missing, loudly.  A build the matrix
    did not run is bounded all the same, unverified.

    Pure: reads ``found`` and the release, runs nothing of flashinfer's."""
    spec = bound.spec
    qualname = spec.qualname
    code = code_release(release, reached)
    label = code if code is not None else release
    if found is not None and found.moved and not spec.present_in(label):
        found = None  # a namesake outside every home, in a build that lacks the function by its release
    at_most = _code_at_most(release, code)
    below = at_most is not None and bound.since is not None and at_most < bound.since
    unsure = not below and bound.since is not None and label is not None and Version(label.public) < bound.since
    if found is None:
        return _absent(bound, release, label, below or unsure)
    if below:
        return _predates_row(bound, release, code, found)
    judged_as = bound.since if unsure else label
    mismatch = compare(spec, found.function, judged_as)
    if unsure and mismatch is not None:
        return Verdict(
            bound,
            NOT_IN_RELEASE,
            f"flashinfer {release} has {qualname} in an older form than this row's (from {bound.since}): "
            f"{mismatch.difference}; nothing keyed per request to bound",
            found=found,
        )
    note = ""
    if mismatch is not None and mismatch.only_positional_only and bound.strategy.calls_as_called:
        # flashinfer's callers of a memo it calls pass these positionally; fi_compat's memo keys
        # them by position and calls flashinfer as it was called, so the bound is the same
        note = f"{mismatch.difference}: fi_compat keys them by position, as flashinfer's callers pass them"
    elif mismatch is not None:
        return Verdict(bound, MISMATCH, mismatch.describe(), found=found, mismatch=mismatch)
    elsewhere = not found.moved and found.at is not None and not found.at.same_place(spec.home_in(label))
    where = ""
    if found.moved:
        where = f" (found in {found.defined_in}, moved from {spec.module})"
    elif elsewhere:
        where = f" (found as {found.at.qualname}, {_home_words(spec, found)})"  # type: ignore[union-attr]
    if release is None or code is None or code != Version(release.public):
        where = f"{where}; {_code_words(release, code, bound, unsure)}"
    if note:
        where = f"{where}; {note}"
    verified = (
        not note
        and release is not None
        and code == Version(release.public)
        and _ran_in_matrix(release)
        and bound.verified.contains(release, prereleases=False)
        and not found.moved
        and not elsewhere
    )
    verdict = _memo_verdict(bound, found, where, verified, cache_size)
    return replace(verdict, note=note) if note else verdict


def _code_words(release: Optional[Version], code: Optional[Version], bound: Bound, unsure: bool) -> str:
    """Why a build is judged by what it holds rather than by its label, in words."""
    called = "an unlabelled build" if release is None else f"flashinfer {release}"
    if unsure:
        return f"{called} holds nothing dated {bound.since} (this row's first release) or later, but has its form"
    if code is None:
        return f"{called} holds nothing fi_compat's specs date: judged by its signatures alone"
    return f"{called} holds {code}'s code or newer by what it has: judged as that"


def _absent(bound: Bound, release: Optional[Version], label: Optional[Version], below: bool) -> Verdict:
    """The verdict on a row whose function nothing binds (``label``: the release judged by)."""
    spec = bound.spec
    qualname = spec.qualname
    if spec.removed_in is not None and label is not None and label >= Version(spec.removed_in):
        return Verdict(bound, NOT_IN_RELEASE, f"{qualname} was removed in {spec.removed_in}")
    if not spec.present_in(label):
        return Verdict(bound, NOT_IN_RELEASE, f"{qualname} arrived in {spec.added_in}")
    if below:
        return _predates_row(bound, release, label, None)
    return Verdict(bound, MISSING, f"{qualname} is missing (moved or removed)", mismatch=compare(spec, None, label))


def _predates_row(bound: Bound, release: Optional[Version], code: Optional[Version], found: Optional[Found]) -> Verdict:
    qualname = bound.spec.qualname
    if not bound.spec.present_in(code):
        return Verdict(bound, NOT_IN_RELEASE, f"{qualname} arrived in {bound.spec.added_in}")
    called = f"flashinfer {release}"
    if release is None or code != Version(release.public):
        called = f"{'an unlabelled build' if release is None else called}, by what its code holds,"
    return Verdict(
        bound,
        NOT_IN_RELEASE,
        f"{called} predates this row: fi_compat bounds {qualname} from {bound.since} on "
        "(before it keys no cache on max_seq_len); nothing to bound here",
        found=found,
    )


def _home_words(spec: specs.FunctionSpec, found: Found) -> str:
    """Where the spec has the home ``found`` was found at, in words."""
    assert found.at is not None
    if found.at.same_place(spec.home):
        since = spec.renamed_from[0].until if spec.renamed_from else None
        return f"its home from {since} on" if since else "its home"
    until = next((h.until for h in spec.renamed_from if h.same_place(found.at)), None)
    return f"its home before {until}"


def _memo_verdict(bound: Bound, found: Found, where: str, verified: bool, cache_size: int) -> Verdict:
    """The verdict on a row whose function fits its spec, from the memo flashinfer keeps there."""
    qualname = bound.spec.qualname
    if found.memo == BOUNDED and bound.replace_bounded:
        return Verdict(
            bound,
            BOUND,
            f"{qualname} is bounded by flashinfer at {found.maxsize} entries on a key "
            f"that grows per request; fi_compat holds it to its own bound{where}",
            verified,
            found,
        )
    if found.memo == BOUNDED and found.maxsize is not None and found.maxsize > HUGE * cache_size * bound.scale:
        return Verdict(
            bound,
            BOUND,
            f"{qualname} is bounded by flashinfer at {found.maxsize} entries, over {HUGE} "
            f"times fi_compat's {cache_size * bound.scale}: effectively unbounded; fi_compat bounds it"
            f"{where}",
            verified,
            found,
        )
    if found.memo == BOUNDED:
        return Verdict(
            bound,
            BOUNDED_UPSTREAM,
            f"{qualname} is bounded by flashinfer itself (maxsize {found.maxsize}){where}",
            verified,
            found,
        )
    if found.memo == UNBOUNDED:
        return Verdict(bound, BOUND, f"{qualname} has an unbounded functools cache{where}", verified, found)
    assert found.memo == NO_MEMO
    if bound.memoize_plain:
        also = f"; it was replaced by {found.foreign}" if found.foreign else ""
        return Verdict(bound, BOUND, f"{qualname} builds a fresh result per call{also}{where}", verified, found)
    return Verdict(bound, NO_CACHE, f"{qualname} keeps no cache{where}", verified, found)


VERIFIED = Outcome.VERIFIED
UNVERIFIED = Outcome.UNVERIFIED
PARTIAL = Outcome.PARTIAL
UNSUPPORTED = Outcome.UNSUPPORTED
PREDATES = Outcome.PREDATES
LEAKS = Outcome.LEAKS
BREAKS_CALL = Outcome.BREAKS_CALL


@dataclass(frozen=True)
class ReleaseVerdict:
    """Every row's verdict on one release, the call API's signature check, and the outcome.

    ``outcome``: ``predates`` (the release predates every row: nothing to
    bound, nothing to verify), ``verified`` (nothing to fix, every bound verified here),
    ``unverified`` (everything fits, but some bound runs outside the releases
    the matrix verified), ``partial`` (some rows cannot be bounded, others
    can) or ``unsupported`` (nothing can be bounded)."""

    release: Optional[Version]
    rows: tuple[Verdict, ...]
    call_api: Optional[Mismatch]
    code: Optional[Version] = None  # the release the code was judged as (judgement.code_release)

    @property
    def problems(self) -> list[Verdict]:
        return [v for v in self.rows if v.problem]

    @property
    def outcome(self) -> Outcome:
        """Decided here only; a decode signature that differs from :data:`fi_compat.model.specs.DECODE`
        (``call_api``) makes a verified release unverified: the caches are bounded and the call
        API maps by name, but that signature never ran in the matrix."""
        if self.problems:
            return PARTIAL if any(v.kind == BOUND for v in self.rows) else UNSUPPORTED
        if self.rows and all(v.kind == NOT_IN_RELEASE for v in self.rows):
            return PREDATES
        if self.call_api is None and all(v.verified for v in self.rows if v.kind == BOUND):
            return VERIFIED
        return UNVERIFIED

    def reason(self) -> str:
        parts = [v.reason for v in self.problems]
        unverified = [v.bound.spec.qualname for v in self.rows if v.kind == BOUND and not v.verified]
        if unverified:
            parts.append(f"outside the verified releases: {', '.join(unverified)}")
        if self.call_api is not None:
            parts.append(f"call API: {self.call_api.describe()}")
        if not parts and self.outcome == PREDATES:
            oldest = min((v.bound.since for v in self.rows if v.bound.since is not None), default=None)
            parts.append(
                f"flashinfer {self.release} predates every cache fi_compat bounds (the first arrives in "
                f"{oldest}): nothing to bound here"
            )
        if self.code is not None and (self.release is None or self.code != Version(self.release.public)):
            called = "an unlabelled build" if self.release is None else f"flashinfer {self.release}"
            parts.insert(0, f"{called} holds {self.code}'s code or newer by what it has: judged as that")
        return "; ".join(parts) or f"flashinfer {self.release}: every bound fits and is verified"


@dataclass(frozen=True)
class Measured:
    """What running the release showed (the guard's census), in words the verdict can use.

    ``leaks``: each flashinfer line or memo that kept growing, with the engine call
    that reaches it; ``broken_calls``: each engine call the release refused
    (``TypeError``), in its own words; ``bounded``: what stayed bounded and by whom."""

    summary: str
    leaks: tuple[str, ...] = ()
    broken_calls: tuple[str, ...] = ()
    bounded: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """The one verdict on a release: an :class:`Outcome`, why, and notes that decide nothing."""

    outcome: Outcome
    reason: str
    measured: bool
    notes: tuple[str, ...] = field(default_factory=tuple)


def decide(static: ReleaseVerdict, measured: Optional[Measured] = None) -> Decision:
    """The verdict on one release: from reading it alone (``measured`` None: ``status()``,
    ``doctor``, ``guard --static``) or from running it too (the guard's census).

    Measured memory decides over names: a release whose engine calls all run and whose
    flashinfer memory stays bounded is :attr:`Outcome.BOUNDED` (a verified release stays
    :data:`VERIFIED`, one that predates every row :data:`PREDATES`), and the static
    differences become notes, since they changed no measured behaviour.  A refused engine
    call is :data:`BREAKS_CALL`; growth is :data:`LEAKS`.  Pure; costs nothing."""
    if measured is None:
        return Decision(static.outcome, static.reason(), False)
    static_notes = tuple(f"static check: {part}" for part in _static_parts(static))
    if measured.broken_calls:
        return Decision(BREAKS_CALL, "; ".join(measured.broken_calls), True, static_notes)
    if measured.leaks:
        return Decision(LEAKS, f"{measured.summary}: {'; '.join(measured.leaks)}", True, static_notes)
    outcome = static.outcome if static.outcome in (VERIFIED, PREDATES) else Outcome.BOUNDED
    reason = measured.summary
    if measured.bounded:
        reason = f"{reason}; {'; '.join(measured.bounded)}"
    return Decision(outcome, reason, True, tuple(f"{note} (no effect measured)" for note in static_notes))


def _static_parts(static: ReleaseVerdict) -> list[str]:
    parts = [v.reason for v in static.problems] + [v.note for v in static.rows if v.note]
    if static.call_api is not None:
        parts.append(f"call API: {static.call_api.describe()}")
    return parts


def judge_release(
    lookup: Callable[[specs.FunctionSpec], Optional[Found]],
    release: Optional[Version],
    cache_size: int = DEFAULT_CACHE_SIZE,
) -> ReleaseVerdict:
    """Every row of :data:`fi_compat.verdict.bounds.BOUNDS` and the decode signature, through one lookup
    (live, a package directory or a wheel: the runtime, doctor and the guard).  Each row is
    judged by the release the build's code has reached by what the lookups found
    (:func:`fi_compat.verdict.code_release.reached`) where its label does not name the code."""
    found = [(bound, lookup(bound.spec)) for bound in bounds.BOUNDS]
    decode = lookup(specs.DECODE)
    reached = code_reached([(bound.spec, f) for bound, f in found] + [(specs.DECODE, decode)])
    rows = tuple(judge(bound, f, release, cache_size, reached) for bound, f in found)
    call_api = compare(specs.DECODE, None if decode is None else decode.function, code_release(release, reached))
    return ReleaseVerdict(release, rows, call_api, code_release(release, reached))


__all__ = [
    "BOUND",
    "BOUNDED_UPSTREAM",
    "BREAKS_CALL",
    "Decision",
    "Kind",
    "LEAKS",
    "Measured",
    "Outcome",
    "decide",
    "MISMATCH",
    "MISSING",
    "NOT_IN_RELEASE",
    "NO_CACHE",
    "PARTIAL",
    "PREDATES",
    "PROBLEMS",
    "ReleaseVerdict",
    "UNSUPPORTED",
    "UNVERIFIED",
    "VERIFIED",
    "Verdict",
    "code_release",
    "judge",
    "judge_release",
]
