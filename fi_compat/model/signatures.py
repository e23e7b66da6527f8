"""Comparing a function as found with its description in :mod:`fi_compat.model.specs`.

:mod:`fi_compat.lookup` finds functions (live, or in source with ``ast``) and
describes them as :class:`FoundFunction`; :func:`compare` says whether one fits
its spec and, if not, names each difference in words.  The runtime, doctor and
the guard all compare here, so they can never disagree about what "matches" means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

from packaging.version import Version

from .spec_model import FunctionSpec

POSITIONAL_ONLY = "positional-only"
POSITIONAL_OR_KEYWORD = "positional-or-keyword"
KEYWORD_ONLY = "keyword-only"
VAR_POSITIONAL = "*args"
VAR_KEYWORD = "**kwargs"


class Memo(str, Enum):
    """How a function is memoized, as :mod:`fi_compat.lookup` classifies its decorator (live or in source)."""

    UNBOUNDED = "unbounded"  # functools.cache, lru_cache(None)
    BOUNDED = "bounded"  # lru_cache(maxsize=N)
    NONE = "none"  # no memo

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FoundParam:
    name: str
    kind: str
    has_default: bool

    def __str__(self) -> str:
        prefix = {VAR_POSITIONAL: "*", VAR_KEYWORD: "**"}.get(self.kind, "")
        suffix = "=…" if self.has_default else ""
        marker = "/" if self.kind == POSITIONAL_ONLY else ""
        return f"{prefix}{self.name}{suffix}{marker}"


@dataclass(frozen=True)
class FoundFunction:
    """A function as found: its parameters and its memo decorator.

    ``memo`` is ``"unbounded"`` (``functools.cache``, ``lru_cache(None)``),
    ``"bounded"`` (``lru_cache(maxsize=N)``, ``maxsize`` says N when known) or
    ``"none"``; :mod:`fi_compat.lookup` classifies it."""

    qualname: str
    params: tuple[FoundParam, ...]
    memo: Memo = Memo.NONE
    maxsize: Optional[int] = None
    where: str = ""  # "file:line" for ast, "module.attribute" for live functions

    @property
    def memoized(self) -> bool:
        return self.memo != Memo.NONE

    def text(self) -> list[str]:
        return [str(p) for p in self.params]


@dataclass(frozen=True)
class Mismatch:
    """How a function differs from its spec; ``found is None`` means it is missing."""

    spec: FunctionSpec
    found: Optional[FoundFunction]
    difference: str
    problems: tuple[str, ...] = field(default=())
    positional_only: tuple[str, ...] = field(default=())  # the parameters that became positional-only

    @property
    def only_positional_only(self) -> bool:
        """Every difference is a parameter that became positional-only: callers that pass it
        positionally (flashinfer's own, for a memo it calls) see the same function."""
        return bool(self.problems) and len(self.problems) == len(self.positional_only)

    @property
    def expected(self) -> list[str]:
        return self.spec.expected_text()

    @property
    def found_text(self) -> Optional[list[str]]:
        return None if self.found is None else self.found.text()

    def describe(self) -> str:
        found = "not found" if self.found is None else f"({', '.join(self.found.text())})"
        return f"{self.spec.qualname}: {self.difference}; expected ({', '.join(self.expected)}), found {found}"


# --------------------------------------------------------------------------- comparison


def compare(
    spec: FunctionSpec, found: Optional[FoundFunction], release: Optional[Version] = None
) -> Optional[Mismatch]:
    """``None`` when ``found`` fits ``spec``; otherwise a :class:`Mismatch`
    whose ``difference`` names each problem in words.

    ``release`` (the release ``found`` comes from) applies the renames and
    removals the spec declares (:meth:`FunctionSpec.named_in`): they are
    expected there, not differences.  Any other rename or removal still is.

    Fits means: every required parameter present; no parameter the spec does
    not know; known parameters in the spec's order; none positional-only or
    keyword-only, no ``*args``/``**kwargs``; optional parameters have defaults.  Memo
    decorators are judged by :func:`fi_compat.verdict.judgement.judge`, not here.
    """
    if found is None:
        return Mismatch(spec, None, "is missing (moved or removed)", ("missing",))
    if release is not None:
        spec = spec.named_in(release)
    problems: list[str] = []
    positional_only: list[str] = []
    known = {p.name: p for p in spec.params}
    found_names = [p.name for p in found.params]
    missing = [p.name for p in spec.params if p.required and p.name not in found_names]
    unexpected = [p for p in found.params if p.name not in known and p.kind not in (VAR_POSITIONAL, VAR_KEYWORD)]
    if len(missing) == 1 and len(unexpected) == 1:
        problems.append(f"parameter {missing[0]!r} was renamed to {unexpected[0].name!r}")
    else:
        for name in missing:
            problems.append(f"lost required parameter {name!r}")
        for param in unexpected:
            state = "optional" if param.has_default else "required"
            problems.append(f"gained {state} parameter {param.name!r}")
    for param in found.params:
        if param.kind == POSITIONAL_ONLY:
            if param.name in known:
                positional_only.append(param.name)
            problems.append(f"parameter {param.name!r} became positional-only")
        elif param.kind == KEYWORD_ONLY:
            # Callers (TensorRT-LLM passes 16 positional arguments) and the
            # adapters rely on every known parameter being positional too.
            problems.append(f"parameter {param.name!r} became keyword-only")
        elif param.kind in (VAR_POSITIONAL, VAR_KEYWORD):
            problems.append(f"accepts {param}")
        elif param.name in known and not known[param.name].required and not param.has_default:
            problems.append(f"parameter {param.name!r} has no default")
    order = [n for n in found_names if n in known]
    expected_order = [n for n in spec.names if n in order]
    if order != expected_order and not missing and not unexpected:
        problems.append("parameters are in a different order")
    if not problems:
        return None
    return Mismatch(spec, found, "; ".join(problems), tuple(problems), tuple(positional_only))
