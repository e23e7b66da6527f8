"""The release a build's code has reached, read from what it holds: the label's check.

A release label sorts a build, but does not always name its code: flashinfer's nightly
workflow labels builds ``X.devYYYYMMDD``, which sorts before ``X`` although the code may
already hold what ``X`` holds; a source checkout carries whatever ``version.txt`` says;
an editable install without its build metadata has no label at all.  The specs know, for
each function and parameter, the release that added it (and each declared rename or move),
so what a build holds says which release its code has at least reached: a build that has
the decode function's ``use_fp16_softmax`` (0.6.18) and the nearest-profile memo of 0.6.18
is 0.6.18's code or newer, whatever its label.

:func:`reached` reads that from the functions one lookup found (at their homes only: a
namesake found elsewhere proves nothing), and :func:`fi_compat.verdict.judgement.judge`
judges each row by it where the label does not name the code.  Pure; costs one signature
comparison per function found.
"""

from __future__ import annotations

from typing import Iterable, Optional

from packaging.version import Version

from ..lookup import Found
from ..model.signatures import compare
from ..model.spec_model import FunctionSpec

NOTHING_KNOWN = Version("0")
"""What :func:`reached` says of a build that holds nothing any spec dates: older than every
release a spec names."""


def _first_release_at(spec: FunctionSpec, found: Found) -> Optional[Version]:
    """The first release whose home is where ``found`` was found (a declared rename or move)."""
    if found.at is None:
        return None
    homes = spec.homes()
    for index, home in enumerate(homes):
        if home.same_place(found.at) and index + 1 < len(homes):
            until = homes[index + 1].until
            return None if until is None else Version(until)
    return None


def dated_by(spec: FunctionSpec, found: Optional[Found]) -> Optional[Version]:
    """The newest release ``found`` shows its code has reached, or ``None``: the function's
    ``added_in`` when it has the form the spec gives that release, each parameter's
    ``added_in`` (or rename) it has, and the first release of the home it was found at.
    A function found outside its homes, or replaced by someone else's memo (whose
    parameters are described from the spec, not read), dates nothing."""
    if found is None or found.moved or found.foreign is not None:
        return None
    dates: list[Version] = []
    if spec.added_in is not None and compare(spec, found.function, Version(spec.added_in)) is None:
        dates.append(Version(spec.added_in))
    names = {p.name for p in found.function.params}
    for param in spec.params:
        if param.added_in is not None and (
            param.name in names or (param.renamed_from is not None and param.renamed_from[0] in names)
        ):
            dates.append(Version(param.added_in))
        if param.renamed_from is not None and param.name in names:
            dates.append(Version(param.renamed_from[1]))
    home = _first_release_at(spec, found)
    if home is not None:
        dates.append(home)
    return max(dates, default=None)


def reached(found: Iterable[tuple[FunctionSpec, Optional[Found]]]) -> Version:
    """The newest release the code behind these lookups has reached by what it holds
    (:func:`dated_by` over every function), :data:`NOTHING_KNOWN` when nothing dates it."""
    return max((d for spec, f in found if (d := dated_by(spec, f)) is not None), default=NOTHING_KNOWN)


__all__ = ["NOTHING_KNOWN", "dated_by", "reached"]
