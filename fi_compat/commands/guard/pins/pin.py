"""The one result type of every pin reader, and how results combine into checks.

Every reader (requirement files, ``pyproject.toml``, lock files) returns
:class:`Pin` records, one per flashinfer-python requirement, each of one
kind:

* :data:`SPECIFIER`: a version specifier (``==0.6.18``, ``>=0.6.15,<0.7``,
  a lock file's resolved version); the guard checks every release it admits;
* :data:`LOCAL_WHEEL`: a wheel file on disk (``./flashinfer_python-X.whl``,
  ``@ file:///...``, a lock file's ``path`` source); the guard checks it;
* :data:`REMOTE_WHEEL`: a wheel at a URL; checked only with ``--download``;
* :data:`UNCHECKABLE`: VCS, editable, a source tree or an sdist: no wheel and
  no release to read; ``reason`` says why and what to do.

:func:`groups` turns the ``SPECIFIER`` records of one file into the sets of
lines pip would intersect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from packaging.specifiers import SpecifierSet

SPECIFIER = "specifier"
LOCAL_WHEEL = "local-wheel"
REMOTE_WHEEL = "remote-wheel"
UNCHECKABLE = "uncheckable"


@dataclass(frozen=True)
class Pin:
    """One flashinfer-python requirement, where it was written and what it asks for."""

    source: str  # the file it was read from, or "--pin TEXT"
    line: Optional[int]  # 1-based line in ``source``, when known
    text: str  # the requirement as written, for messages
    kind: str = SPECIFIER
    specifier: SpecifierSet = field(default_factory=SpecifierSet)
    marker: Optional[str] = None  # environment marker, as written (not evaluated)
    scope: Optional[str] = None  # "extra X", "group X", "lock entry N": see groups()
    with_base: bool = True  # whether the scope's environments also get the unscoped lines
    constraint: bool = False  # from a -c file or uv's constraint-dependencies
    location: Optional[str] = None  # LOCAL_WHEEL: a path; REMOTE_WHEEL: a URL
    sha256: Optional[str] = None  # the hash the file records for that wheel, if any
    reason: Optional[str] = None  # UNCHECKABLE: why, and what to do instead
    context: Optional[str] = None  # e.g. "[project.optional-dependencies] srt"

    @property
    def where(self) -> str:
        if self.line is not None:
            return f"{self.source}:{self.line}"
        return f"{self.source} ({self.context})" if self.context else self.source

    def __str__(self) -> str:
        extra = " (constraint)" if self.constraint else ""
        return f"{self.where}: {self.text}{extra}"


@dataclass
class Pins:
    """What one file yielded: its flashinfer-python requirements and notes for the reader."""

    found: list[Pin] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _applies(line: Pin, scope: Optional[str], marker: Optional[str], with_base: bool) -> bool:
    in_scope = line.scope == scope or (line.scope is None and with_base)
    return in_scope and line.marker in (None, marker)


def groups(found: list[Pin]) -> list[tuple[SpecifierSet, list[Pin]]]:
    """The specifier each environment gets, with the lines that make it up.

    Lines without scope or marker apply everywhere; a line with a marker or
    a scope (an extra, a dependency group, one lock entry) applies only to
    environments with that marker or scope, *together with* the unconditional
    lines, which is how pip and uv intersect them (a ``-c`` constraint
    narrows a requirement; ``pkg[srt]`` adds the ``srt`` extra's lines to the
    main ones).  A scope with ``with_base=False`` stands alone: a PEP 735
    dependency group can be installed without the project (``pip install
    --group``), and each lock entry is one resolution.  Environments matching no condition get the unconditional
    lines alone, when those install flashinfer (a constraint alone installs
    nothing, unless it is all there is).  Groups whose specifiers end up equal
    are checked once, with every line named.  Only ``SPECIFIER`` records
    count; the others are checked one by one.
    """
    found = [f for f in found if f.kind == SPECIFIER]
    unconditional = [f for f in found if f.scope is None and f.marker is None]
    conditions = list(dict.fromkeys((f.scope, f.marker) for f in found if f.scope or f.marker))
    line_sets: list[list[Pin]] = []
    if unconditional and (not conditions or any(not f.constraint for f in unconditional)):
        line_sets.append(unconditional)
    for scope, marker in conditions:
        with_base = all(f.with_base for f in found if f.scope == scope) if scope else True
        line_sets.append([f for f in found if _applies(f, scope, marker, with_base)])
    merged: dict[str, tuple[SpecifierSet, list[Pin]]] = {}
    for lines in line_sets:
        specifier = SpecifierSet()
        for line in lines:
            specifier &= line.specifier
        key = str(specifier)
        if key in merged:
            known = merged[key][1]
            known.extend(line for line in lines if line not in known)
        else:
            merged[key] = (specifier, list(lines))
    return list(merged.values())
