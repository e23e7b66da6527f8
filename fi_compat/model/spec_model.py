"""The vocabulary of :mod:`fi_compat.model.specs`: :class:`Param`, :class:`FunctionSpec`, ``REQUIRED``.

Kept apart from the facts (which function, which parameters) so that the
facts module stays one screenful of data.  A parameter's life across releases
is data here: added (``added_in``), renamed (``renamed_from``: the earlier
name and the release that renamed it) and removed (``removed_in``).  The
stable API always uses a parameter's current name; :mod:`fi_compat.calls.binding`,
:func:`fi_compat.model.signatures.compare` and the bounded caches' layouts ask
:meth:`FunctionSpec.installed_names` / :meth:`FunctionSpec.named_in` what the
installed release calls it.  Pure data: nothing here imports flashinfer or
raises except ``KeyError`` for a parameter a spec does not have.
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
class FunctionSpec:
    """Where flashinfer defines a function, and its parameters in the newest order.

    ``added_in``: the first release that has the function at all.
    """

    module: str
    name: str
    params: tuple[Param, ...]
    added_in: Optional[str] = None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

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
        return self.added_in is None or release is None or release >= Version(self.added_in)

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

    def _with(self, name: str, change: Callable[[Param], Param]) -> "FunctionSpec":
        self.param(name)  # KeyError for a parameter this spec does not have
        return replace(self, params=tuple(change(p) if p.name == name else p for p in self.params))

    def expected_text(self) -> list[str]:
        return [str(p) for p in self.params]


__all__ = ["REQUIRED", "FunctionSpec", "Param"]
