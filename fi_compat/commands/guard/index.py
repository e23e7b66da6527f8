"""Which releases a requirement admits.

A pin (``==X`` without a wildcard, or ``===X``) names its release directly
and needs no index.  Anything else (a range, a wildcard, no specifier) is
checked against every *published* release it admits.

The list of published releases comes from ``python -m pip index versions
flashinfer-python --pre --json``, run with the same interpreter and therefore
the same pip configuration (index URL, extra indexes, proxy, certificates) as
the ``pip download`` that fetches the wheels: the guard sees the releases the
CI's pip would install.  ``--pre`` is passed so the index returns
pre-releases and :mod:`packaging` decides, as pip does, whether the
specifier admits them (only when it names one).  Yanked releases are not
listed by pip and are not checked.

Offline (``--offline``, or the index does not answer within the timeout), the
guard falls back to :data:`fi_compat.model.release_list.PUBLISHED_RELEASES`, the list
shipped with this fi_compat, and says so in its output.  That list starts at
0.6.13 (older releases exist on the index) and ends where it was written, so
:func:`offline_gap` names the part of a range that lies before its oldest or
after its newest release: the guard checks the listed releases and reports
the rest as not checked (exit 2) instead of narrowing the range silently.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ...model.release_list import PUBLISHED_RELEASES
from . import DISTRIBUTION
from .errors import ReleaseListError
from .pip import run_pip

INDEX_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ReleaseList:
    versions: tuple[str, ...]
    source: str  # "index" or "builtin"
    note: Optional[str] = None


@dataclass
class ReleaseSource:
    """Lazily asks the index once per guard run."""

    offline: bool = False
    timeout: float = INDEX_TIMEOUT_S
    python: str = sys.executable
    _cached: Optional[ReleaseList] = field(default=None, repr=False)

    def get(self) -> ReleaseList:
        if self._cached is None:
            self._cached = self._load()
        return self._cached

    def _load(self) -> ReleaseList:
        builtin = (
            f"fi_compat's built-in list of {len(PUBLISHED_RELEASES)} releases "
            "(fi_compat.model.release_list.PUBLISHED_RELEASES)"
        )
        if self.offline:
            return ReleaseList(
                PUBLISHED_RELEASES,
                "builtin",
                f"--offline: releases come from {builtin}; a range reaching past its oldest or newest "
                "release is not checked there (exit 2)",
            )
        try:
            versions = query_index(self.python, self.timeout)
        except ReleaseListError as exc:
            return ReleaseList(
                PUBLISHED_RELEASES,
                "builtin",
                f"package index unavailable ({exc}); releases come from {builtin}; a range reaching "
                "past its oldest or newest release is not checked there (exit 2)",
            )
        return ReleaseList(tuple(versions), "index")


def query_index(python: str = sys.executable, timeout: float = INDEX_TIMEOUT_S) -> list[str]:
    """Published releases of flashinfer-python, newest first, from pip's configured index."""
    command = [
        "index",
        "versions",
        DISTRIBUTION,
        "--pre",
        "--json",
        "--disable-pip-version-check",
        "--retries",
        "1",
        "--timeout",
        str(int(max(1, timeout))),
    ]
    try:
        return _run_index(command, timeout, python)
    except ReleaseListError as exc:
        if "--json" not in str(exc):
            raise
    command.remove("--json")  # a pip without --json prints the text form
    return _run_index(command, timeout, python)


def _run_index(arguments: list[str], timeout: float, python: str) -> list[str]:
    done = run_pip(
        arguments, what="pip index versions", timeout=timeout + 15, error=ReleaseListError, python=python, tail_lines=1
    )
    return parse_index_output(done.stdout)


def parse_index_output(stdout: str) -> list[str]:
    """The JSON form (``--json``), or the text form's
    ``Available versions:`` line as older pips print it."""
    text = stdout.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
            versions = data["versions"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ReleaseListError(f"unreadable `pip index versions` output: {exc}") from None
        return [str(v) for v in versions]
    for line in text.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise ReleaseListError("`pip index versions` printed no version list")


def pinned(specifier: SpecifierSet) -> Optional[list[str]]:
    """The releases a specifier set names exactly (``==X``, ``===X``), or ``None``
    when it names none (a range).  Several pins that disagree give ``[]``."""
    names: list[str] = []
    for spec in specifier:
        if spec.operator == "===" or (spec.operator == "==" and not spec.version.endswith(".*")):
            names.append(spec.version)
    if not names:
        return None
    return [name for name in dict.fromkeys(names) if admits(specifier, name)]


def admits(specifier: SpecifierSet, release: str) -> bool:
    try:
        Version(release)
    except InvalidVersion:
        # Only === can name a non-PEP 440 string.
        return all(s.operator == "===" and s.version == release for s in specifier)
    return specifier.contains(release)


def releases_for(specifier: SpecifierSet, source: ReleaseSource) -> tuple[list[str], Optional[str]]:
    """The releases to check for ``specifier`` (oldest first) and a note about their origin."""
    exact = pinned(specifier)
    if exact is not None:
        return exact, None
    listing = source.get()
    chosen = sorted(specifier.filter(_valid(listing.versions)), key=Version)
    return [str(v) for v in chosen], listing.note


def _valid(versions: Iterable[str]) -> Sequence[str]:
    out = []
    for v in versions:
        try:
            Version(v)
        except InvalidVersion:
            continue
        out.append(v)
    return out


# --------------------------------------------------------------------------- offline: what the built-in list cannot see


@dataclass(frozen=True)
class _Bound:
    version: Version
    inclusive: bool


def _next_prefix(release: tuple[int, ...]) -> Version:
    """The first version after every ``release.*``: ``(0, 6)`` -> ``0.7``."""
    return Version(".".join(str(n) for n in (*release[:-1], release[-1] + 1)))


def _range_bounds(specifier: SpecifierSet) -> tuple[Optional[_Bound], Optional[_Bound]]:
    """The lowest and highest version ``specifier`` can admit, as bounds
    (``None``: unbounded on that side).  ``!=`` bounds nothing; ``~=X.Y`` and
    ``==X.*`` bound both sides.  Conservative: the true set may be smaller
    (packaging's pre- and post-release rules), never larger."""
    lowers: list[_Bound] = []
    uppers: list[_Bound] = []
    for spec in specifier:
        op, text = spec.operator, spec.version
        if op == "===":
            try:
                exact = Version(text)
            except InvalidVersion:
                continue
            lowers.append(_Bound(exact, True))
            uppers.append(_Bound(exact, True))
            continue
        if op == "==" and text.endswith(".*"):
            prefix = Version(text[:-2]).release
            lowers.append(_Bound(Version(text[:-2]), True))
            uppers.append(_Bound(_next_prefix(prefix), False))
            continue
        version = Version(text)
        if op in (">=", "=="):
            lowers.append(_Bound(version, True))
        if op in ("<=", "=="):
            uppers.append(_Bound(version, True))
        if op == ">":
            lowers.append(_Bound(version, False))
        if op == "<":
            uppers.append(_Bound(version, False))
        if op == "~=":
            lowers.append(_Bound(version, True))
            uppers.append(_Bound(_next_prefix(version.release[:-1]), False))
    lower = max(lowers, key=lambda b: (b.version, not b.inclusive), default=None)
    upper = min(uppers, key=lambda b: (b.version, b.inclusive), default=None)
    return lower, upper


def outside_list(specifier: SpecifierSet, listed: Sequence[str]) -> list[str]:
    """The parts of ``specifier``'s range that lie outside ``listed``'s span,
    in words (``"releases before 0.6.13"``, ``"releases after 0.7.4"``); empty
    when the range stays within the oldest and newest listed release (the list
    is complete in between), or admits nothing.  Pure computation."""
    versions = sorted(Version(v) for v in _valid(listed))
    if not versions:
        return ["every release (the list is empty)"]
    oldest, newest = versions[0], versions[-1]
    lower, upper = _range_bounds(specifier)
    if (
        lower is not None
        and upper is not None
        and (
            lower.version > upper.version
            or (lower.version == upper.version and not (lower.inclusive and upper.inclusive))
        )
    ):
        return []  # an empty range: "no release satisfies" says it better
    parts = []
    if lower is None or lower.version < oldest:
        parts.append(f"releases before {oldest}")
    if upper is None or upper.version > newest:
        parts.append(f"releases after {newest}")
    return parts


def offline_gap(specifier: SpecifierSet, source: ReleaseSource) -> Optional[str]:
    """Why ``specifier`` cannot be checked in full from the built-in list, or
    ``None``: the index answered, the specifier pins its releases (``==X``),
    or the range lies within the list.  Asks the index at most once per run
    (:meth:`ReleaseSource.get`)."""
    if pinned(specifier) is not None:
        return None
    listing = source.get()
    if listing.source != "builtin":
        return None
    parts = outside_list(specifier, listing.versions)
    if not parts:
        return None
    known = sorted(_valid(listing.versions), key=Version)
    span = f"{known[0]} .. {known[-1]}" if known else "no release"
    narrow = f" (>={known[0]},<={known[-1]})" if known else ""
    text = f"{DISTRIBUTION}{specifier}" if str(specifier) else f"{DISTRIBUTION} (no version specifier)"
    why = "--offline" if source.offline else "the package index did not answer"
    return (
        f"{text} admits {' and '.join(parts)}, which were not checked: {why}, so the releases come from "
        f"fi_compat's built-in list (fi_compat.model.release_list.PUBLISHED_RELEASES), which holds only {span}. "
        f"Run the guard where `pip index versions {DISTRIBUTION}` answers (without --offline), narrow the range "
        f"to the listed releases{narrow}, or pin a release (==X)"
    )
