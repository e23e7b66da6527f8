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
guard falls back to :data:`fi_compat.release_list.PUBLISHED_RELEASES`, the list
shipped with this fi_compat, and says so in its output: releases published
after that list was written are then not checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ...release_list import PUBLISHED_RELEASES
from . import DISTRIBUTION
from .errors import ReleaseListError

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
        builtin = f"fi_compat's built-in list of {len(PUBLISHED_RELEASES)} releases (fi_compat.release_list.PUBLISHED_RELEASES)"
        if self.offline:
            return ReleaseList(PUBLISHED_RELEASES, "builtin",
                               f"--offline: releases come from {builtin}; newer releases are not checked")
        try:
            versions = query_index(self.python, self.timeout)
        except ReleaseListError as exc:
            return ReleaseList(PUBLISHED_RELEASES, "builtin",
                               f"package index unavailable ({exc}); releases come from {builtin}; "
                               "releases published since are not checked")
        return ReleaseList(tuple(versions), "index")


def query_index(python: str = sys.executable, timeout: float = INDEX_TIMEOUT_S) -> list[str]:
    """Published releases of flashinfer-python, newest first, from pip's configured index."""
    command = [python, "-m", "pip", "index", "versions", DISTRIBUTION, "--pre", "--json",
               "--disable-pip-version-check", "--retries", "1", "--timeout", str(int(max(1, timeout)))]
    try:
        return _run_index(command, timeout)
    except ReleaseListError as exc:
        if "--json" not in str(exc):
            raise
    command.remove("--json")  # a pip without --json prints the text form
    return _run_index(command, timeout)


def _run_index(command: list[str], timeout: float) -> list[str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 15,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ReleaseListError(f"`pip index versions` did not answer within {timeout:.0f} s") from None
    except OSError as exc:
        raise ReleaseListError(f"cannot run pip: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ReleaseListError(f"`pip index versions` failed: {tail}")
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
