"""The installer's state, and the read-only :class:`Snapshot` the rest of fi_compat sees.

:mod:`fi_compat.installing.installer` owns the one :class:`State` and changes it under its
lock; everything else (the call API, ``status()``, the doctor) reads a
:class:`Snapshot`.  Importing it imports nothing but :mod:`fi_compat.config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Optional

from .. import config

if TYPE_CHECKING:  # annotations only: this module stays as light as config
    from ..adapters.base import Installation
    from ..verdict.judgement import Verdict
    from ..model.release_detection import ReleaseInfo
    from .tripwire import Armed


class Phase(str, Enum):
    """The installer's phase: ``status()["state"]`` (its value, a plain string),
    the doctor's ``state`` line.  The values are public and stay as they are.

    ``not-installed`` -> ``install()`` -> ``pending`` (flashinfer not imported
    yet), ``installed``, ``unsupported`` (nothing could be bounded),
    ``disabled`` (FI_COMPAT_DISABLE) or ``failed`` (an import hook's failure,
    kept for the next fi_compat call); ``uninstall()`` returns to
    ``not-installed`` from any of them."""

    NOT_INSTALLED = "not-installed"
    PENDING = "pending"
    INSTALLED = "installed"
    UNSUPPORTED = "unsupported"
    DISABLED = "disabled"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class State:
    """Everything the installer knows; only :mod:`fi_compat.installing.installer` changes it."""

    def __init__(self) -> None:
        self.late_tick: Optional[Any] = None  # an Installation while an import caught late is pending
        self.phase = Phase.NOT_INSTALLED
        self.settings: dict[str, config.Setting] = config.resolve_all(environ={})
        self.release: Optional[ReleaseInfo] = None
        self.verdicts: dict[str, Verdict] = {}
        self.waiting: dict[str, str] = {}  # bound name -> module it waits for
        self.installation: Optional[Installation] = None
        self.extras: Optional[Installation] = None  # what registered plan providers put in place
        self.tripwire: Optional[Armed] = None  # strict at start-up: the decode tripwire after a raised error
        self.messages: list[str] = []
        self.error: Optional[BaseException] = None  # a strict failure raised at the next fi_compat call
        # a strict refusal (install(strict=True) raised): every decode through fi_compat raises it
        # until the program chooses otherwise (uninstall(), reset(), another install())
        self.refusal: Optional[BaseException] = None
        self.hooked: set[str] = set()  # modules with a post-import hook (wrapt cannot unregister one)
        self.explicit = False  # install()/uninstall() called: the call API never installs behind its back
        self.generation = 0  # bumped by every change: the call API's one-int staleness check


@dataclass(frozen=True)
class Snapshot:
    """A read-only view of the installer's state for the rest of fi_compat."""

    phase: Phase
    generation: int
    release: Optional[ReleaseInfo]
    settings: Mapping[str, config.Setting]
    explicit: bool
    verdicts: Mapping[str, Verdict]
    waiting: Mapping[str, str]
    installation: Optional[Installation]
    extras: Optional[Installation]
    messages: tuple[str, ...]
    error: Optional[BaseException]

    def setting(self, name: str) -> Any:
        return self.settings[name].value


def snapshot_of(s: State) -> Snapshot:
    """A read-only copy of ``s`` (mappings copied, so later changes do not show through)."""
    return Snapshot(
        s.phase,
        s.generation,
        s.release,
        MappingProxyType(s.settings),
        s.explicit,
        MappingProxyType(dict(s.verdicts)),
        MappingProxyType(dict(s.waiting)),
        s.installation,
        s.extras,
        tuple(s.messages),
        s.error,
    )


#: Phases in which an install's settings are in force (a failed one left nothing installed).
IN_FORCE = (Phase.PENDING, Phase.INSTALLED, Phase.UNSUPPORTED, Phase.DISABLED)


def keeping_earlier_arguments(s: State, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with each omitted (``None``) argument replaced by the value an
    earlier ``install()`` argument put in force.  Settings that came from the
    environment or the defaults are resolved again, as before; after
    ``uninstall()`` nothing is kept.  The installer's lock held; costs a dict walk."""
    if s.phase not in IN_FORCE:
        return dict(given)
    kept = {
        name: setting.value for name, setting in s.settings.items() if setting.source == "argument" and name in given
    }
    return {name: kept.get(name) if value is None else value for name, value in given.items()}


def values(settings: Mapping[str, config.Setting]) -> dict[str, Any]:
    return {name: setting.value for name, setting in settings.items()}
