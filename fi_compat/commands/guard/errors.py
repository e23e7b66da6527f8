"""Errors of the guard.  Each one means "this could not be checked" (exit 2);
a release that was checked and found incompatible is a verdict, not an error."""

from __future__ import annotations

from ...errors import FiCompatError


class GuardError(FiCompatError):
    """Base of every guard error; the message is shown to the user as is."""


class RequirementsError(GuardError):
    """A requirement file could not be read or has a malformed line (``file:line: ...``)."""


class ReleaseListError(GuardError):
    """The list of releases could not be obtained."""


class FetchError(GuardError):
    """A wheel could not be downloaded."""


class WheelError(GuardError):
    """A wheel was refused: not a zip, not flashinfer-python, or an absurd member."""
