"""The vocabulary of :mod:`fi_compat.model.specs`: :class:`Param`, :class:`FunctionSpec`, :class:`Home`, ``REQUIRED``.

Kept apart from the facts (which function, which parameters) so that the
facts module stays one screenful of data.  A parameter's life across releases
is data here: added (``added_in``), renamed (``renamed_from``: the earlier
name and the release that renamed it) and removed (``removed_in``).  So is a
function's: added (``added_in``), renamed or moved to another module
(``renamed_from``: its earlier homes, each a :class:`Home` with the release that
left it) and removed (``removed_in``); each is one line in the specs
(:meth:`FunctionSpec.renamed_to`, :meth:`FunctionSpec.moved_to`,
:meth:`FunctionSpec.retired`, as :meth:`FunctionSpec.renamed` and
:meth:`FunctionSpec.removed` are for a parameter).  The stable API always uses
a parameter's current name; :mod:`fi_compat.calls.binding`,
:func:`fi_compat.model.signatures.compare` and the bounded caches' layouts ask
:meth:`FunctionSpec.installed_names` / :meth:`FunctionSpec.named_in` what the
installed release calls it, and :mod:`fi_compat.lookup` looks for a function at
every home the spec names (:meth:`FunctionSpec.homes`).  Release labels are
hints here, never proof: a build's label may sort before the code it holds (a
nightly ``X.devN`` holds what ``X`` will), so the lookups look everywhere and
:func:`fi_compat.verdict.judgement.judge` weighs what they find.  Pure data:
nothing here imports flashinfer or raises except ``KeyError`` for a parameter
a spec does not have and ``ValueError`` for a move that changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

from packaging.version import Version


class _Required:
    """The default of a parameter that has none."""

    _instance: Optional["_Required"] = None

    def __new__(cls) -> "_Required":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Param:
    """One expected parameter: its current name, its default and the release that added it.

    ``renamed_from``: ``(earlier name, release that renamed it)``; releases
    before that one call it by the earlier name.  ``removed_in``: the first
    release without it (the stable API keeps it; only its default may pass).
    """

    name: str
    default: Any = REQUIRED
    added_in: Optional[str] = None
    renamed_from: Optional[tuple[str, str]] = None
    removed_in: Optional[str] = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def present_in(self, release: Optional[Version]) -> bool:
        """Whether ``release`` has this parameter (an unknown release: assume the newest)."""
        if release is None:
            return self.removed_in is None
        added = self.added_in is None or release >= Version(self.added_in)
        return added and (self.removed_in is None or release < Version(self.removed_in))

    def name_in(self, release: Optional[Version]) -> str:
        """What ``release`` calls this parameter (an unknown release: the current name)."""
        if self.renamed_from is not None and release is not None and release < Version(self.renamed_from[1]):
            return self.renamed_from[0]
        return self.name

    def __str__(self) -> str:
        return self.name if self.required else f"[{self.name}]"


@dataclass(frozen=True)
class Home:
    """Where flashinfer defines a function (``name`` may be ``Class.member``), and, for an
    earlier home, ``until``: the first release that no longer has it there."""

    module: str
    name: str
    until: Optional[str] = None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    def same_place(self, other: "Home") -> bool:
        return (self.module, self.name) == (other.module, other.name)


@dataclass(frozen=True)
class FunctionSpec:
    """Where flashinfer defines a function, and its parameters in the newest order.

    ``module`` and ``name``: where the newest release has it.  ``added_in``: the
    first release that has the function at all; ``removed_in``: the first that
    no longer has it.  ``renamed_from``: its earlier homes, newest first, each
    with the release that renamed or moved it (``Home.until``).
    """

    module: str
    name: str
    params: tuple[Param, ...]
    added_in: Optional[str] = None
    renamed_from: tuple[Home, ...] = ()
    removed_in: Optional[str] = None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def home(self) -> Home:
        """Where the newest release defines it."""
        return Home(self.module, self.name)

    def homes(self) -> tuple[Home, ...]:
        """Every place the spec says the function has lived: the newest first."""
        return (self.home, *self.renamed_from)

    def home_in(self, release: Optional[Version]) -> Home:
        """Where ``release`` should have it (an unknown release: the newest home).  A hint:
        the lookups look at every home, since a build's label may lag its code."""
        if release is not None:
            for earlier in reversed(self.renamed_from):  # oldest first: the first home the release is before
                if earlier.until is not None and release < Version(earlier.until):
                    return Home(earlier.module, earlier.name)
        return self.home

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        raise KeyError(f"{self.qualname} has no parameter {name!r}")

    def defaults(self) -> dict[str, Any]:
        """Name -> default of every parameter that has one."""
        return {p.name: p.default for p in self.params if not p.required}

    def added_in_map(self) -> dict[str, str]:
        """Name -> release, for every parameter added after the function."""
        return {p.name: p.added_in for p in self.params if p.added_in is not None}

    def present_in(self, release: Optional[Version]) -> bool:
        """Whether ``release`` should have the function, by its label: a hint for the
        messages and for trusting a namesake found elsewhere, never a reason to skip a
        function found at its home (an unknown release: assume so)."""
        if release is None:
            return True
        added = self.added_in is None or release >= Version(self.added_in)
        return added and (self.removed_in is None or release < Version(self.removed_in))

    def forms(self) -> tuple[tuple[str, "FunctionSpec"], ...]:
        """``(first release, the function as that release has it)`` for every release
        that changed its parameters (added, renamed or removed one), oldest first, the
        form before any change first where the function has no ``added_in`` (its release
        ``""``); forms with the same parameters are given once.  Cost: a few dozen comparisons."""
        changes = {self.added_in} | {p.added_in for p in self.params}
        changes |= {p.renamed_from[1] for p in self.params if p.renamed_from is not None}
        changes |= {p.removed_in for p in self.params if p.removed_in is not None}
        releases = sorted(Version(r) for r in changes if r is not None)
        starts = ([] if self.added_in is not None else [("", Version("0"))]) + [(str(r), r) for r in releases]
        forms: list[tuple[str, FunctionSpec]] = []
        for label, release in starts:
            form = self.at(str(release))
            if not any(form.params == seen.params for _, seen in forms):
                forms.append((label, form))
        return tuple(forms)

    def installed_names(self, release: Optional[Version]) -> dict[str, str]:
        """Current name -> the name ``release`` uses, for each parameter renamed after it."""
        return {p.name: p.name_in(release) for p in self.params if p.name_in(release) != p.name}

    def earlier_names(self) -> dict[str, str]:
        """Earlier name -> current name, for every declared rename (whatever the release)."""
        return {p.renamed_from[0]: p.name for p in self.params if p.renamed_from is not None}

    def removed_at(self, release: Optional[Version]) -> dict[str, str]:
        """Current name -> ``removed_in``, for each parameter ``release`` no longer has."""
        gone = {p.name: p.removed_in for p in self.params if p.removed_in is not None}
        return {name: since for name, since in gone.items() if release is None or release >= Version(since)}

    def named_in(self, release: Optional[Version]) -> "FunctionSpec":
        """This spec as ``release`` names it: renamed parameters under the name it
        uses, declared removals left out (parameters added later stay: only a
        rename or removal the spec declares changes what is expected)."""
        removed = self.removed_at(release)
        params = tuple(
            replace(p, name=p.name_in(release), renamed_from=None) for p in self.params if p.name not in removed
        )
        return replace(self, params=params)

    def at(self, release: str) -> "FunctionSpec":
        """The function as ``release`` has it: only the parameters it has, by the names it uses."""
        version = Version(release)
        params = tuple(replace(p, name=p.name_in(version), renamed_from=None) for p in self.params)
        return replace(self, params=tuple(p for p in params if p.present_in(version)))

    def renamed(self, old: str, new: str, in_release: str) -> "FunctionSpec":
        """This spec with parameter ``old`` called ``new`` from ``in_release`` on:
        the one line a rename takes in :mod:`fi_compat.model.specs`."""
        return self._with(old, lambda p: replace(p, name=new, renamed_from=(old, in_release)))

    def removed(self, name: str, in_release: str) -> "FunctionSpec":
        """This spec with parameter ``name`` gone from ``in_release`` on (one line in the specs)."""
        return self._with(name, lambda p: replace(p, removed_in=in_release))

    def renamed_to(self, name: str, in_release: str) -> "FunctionSpec":
        """This spec with the function called ``name`` from ``in_release`` on (its module
        unchanged): the one line a function's rename takes in :mod:`fi_compat.model.specs`."""
        return self.moved_to(self.module, in_release, name=name)

    def moved_to(self, module: str, in_release: str, name: Optional[str] = None) -> "FunctionSpec":
        """This spec with the function defined in ``module`` (and called ``name``, when
        given) from ``in_release`` on: the one line a move takes in the specs.  ``ValueError``
        when that is where it already lives."""
        home = Home(module, self.name if name is None else name)
        if home.same_place(self.home):
            raise ValueError(f"{self.qualname} already lives at {home.qualname}")
        earlier = Home(self.module, self.name, in_release)
        return replace(self, module=home.module, name=home.name, renamed_from=(earlier, *self.renamed_from))

    def retired(self, in_release: str) -> "FunctionSpec":
        """This spec with the function gone from ``in_release`` on (one line in the specs)."""
        return replace(self, removed_in=in_release)

    def _with(self, name: str, change: Callable[[Param], Param]) -> "FunctionSpec":
        self.param(name)  # KeyError for a parameter this spec does not have
        return replace(self, params=tuple(change(p) if p.name == name else p for p in self.params))

    def expected_text(self) -> list[str]:
        return [str(p) for p in self.params]


__all__ = ["REQUIRED", "FunctionSpec", "Home", "Param"]
