"""Every exception and warning fi_compat raises, in one place.

Each message says what was found and what to do next.  Catch
:class:`FiCompatError` to handle them all.
"""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Hashable, Optional, Sequence

WARNING_LIMIT = 200
"""The longest warning fi_compat raises, in characters: one line to read; the
rest (expected and found parameters, every row) is in ``fi-compat doctor``."""


class FiCompatError(Exception):
    """Base class of every fi_compat error."""


class UnsupportedReleaseError(FiCompatError):
    """Strict mode: a cache fi_compat bounds cannot be bounded on the installed
    release for a reason other than its signature (a changed or missing
    function raises :class:`SignatureMismatchError`)."""

    def __init__(self, release: str | None, detail: str) -> None:
        self.release = release
        self.detail = detail
        super().__init__(
            f"flashinfer-python {release or '(not installed)'}: {detail}. "
            "Pin a release listed in docs/compatibility.md, run `fi-compat doctor` for "
            "details, or call install(strict=False) to leave flashinfer unpatched with a warning."
        )


class UnverifiedReleaseError(UnsupportedReleaseError):
    """Strict mode: the installed release is outside the releases fi_compat verified
    (the next release, a nightly, a source build), so what it bounds by name may not be
    all that grows; nothing is installed.  ``fi-compat guard --census`` measures it."""

    def __init__(self, release: str | None, detail: str) -> None:
        self.release = release
        self.detail = detail
        FiCompatError.__init__(
            self,
            f"flashinfer-python {release or '(not installed)'}: {detail}. Measure it with `fi-compat guard "
            f"--census --pin flashinfer-python=={release}`, pin a release listed in docs/compatibility.md, or "
            "call install(strict=False): fi_compat then bounds what it knows and its runtime watch measures the rest.",
        )


class SignatureMismatchError(FiCompatError):
    """A flashinfer function fi_compat bounds changed its parameters or is missing
    (strict mode), or the call API cannot bind a call to the installed function
    by name."""

    def __init__(
        self,
        qualname: str,
        expected: Sequence[str],
        found: Sequence[str] | None,
        release: str | None,
        difference: str,
    ) -> None:
        self.qualname = qualname
        self.expected = tuple(expected)
        self.found = None if found is None else tuple(found)
        self.release = release
        self.difference = difference
        found_text = "(function not found)" if found is None else f"({', '.join(found)})"
        super().__init__(
            f"flashinfer-python {release}: {qualname} {difference}; "
            f"expected ({', '.join(expected)}), found {found_text}. "
            "fi_compat left flashinfer untouched. Check `fi-compat guard --pin "
            f"flashinfer-python=={release}` and file an issue with `fi-compat doctor` output."
        )


class UnsupportedFeatureError(FiCompatError):
    """A keyword of the stable call API does not exist in the installed release,
    or (:meth:`release_predates`) the whole function it calls does not yet."""

    def __init__(self, keyword: str, added_in: str | None, release: str | None, qualname: str | None = None) -> None:
        self.keyword = keyword
        self.added_in = added_in
        self.release = release
        self.qualname = qualname
        if added_in:
            message = (
                f"keyword {keyword!r} was added in flashinfer-python {added_in}; the installed release is "
                f"{release}. Upgrade flashinfer-python (>= {added_in}) or leave {keyword!r} at its default."
            )
        else:
            # Every release fi_compat knows has it: this one renamed or removed it.
            where = f"{qualname} in " if qualname else ""
            message = (
                f"keyword {keyword!r} is not a parameter of {where}the installed flashinfer-python {release} "
                f"(renamed or removed; every release fi_compat knows has it). Leave {keyword!r} at its "
                "default, or pin a release listed in docs/compatibility.md."
            )
        super().__init__(message)

    @classmethod
    def removed(cls, keyword: str, removed_in: str, release: str | None, qualname: str) -> "UnsupportedFeatureError":
        """A keyword the spec declares removed (``Param.removed_in``) passed with a
        value other than its default: the installed release cannot honour it."""
        error = cls.__new__(cls)
        error.keyword, error.added_in, error.release, error.qualname = keyword, None, release, qualname
        FiCompatError.__init__(
            error,
            f"keyword {keyword!r} was removed from {qualname} in flashinfer-python {removed_in}; the installed "
            f"release is {release}. Leave {keyword!r} at its default, or pin a release before {removed_in}.",
        )
        return error

    @classmethod
    def release_predates(
        cls, api_name: str, qualname: str, added_in: str, release: str | None
    ) -> "UnsupportedFeatureError":
        """A whole function of the call API that the installed release predates
        (``keyword`` is then ``None``): e.g. the tuning-config builder before 0.6.13."""
        error = cls.__new__(cls)
        error.keyword, error.added_in, error.release, error.qualname = None, added_in, release, qualname
        FiCompatError.__init__(
            error,
            f"{api_name} calls {qualname}, which flashinfer-python added in {added_in}; the installed release "
            f"{release} predates it. Upgrade flashinfer-python (>= {added_in}); there is nothing for fi_compat "
            "to bound on this release.",
        )
        return error


class UnboundedGrowthError(FiCompatError):
    """Strict mode: the runtime watch (:mod:`fi_compat.watch`) saw flashinfer
    memory grow per request that fi_compat cannot bound (a dict, set or list
    written by hand).  ``paths`` names each container; raised at the next
    fi_compat call after the watch saw it."""

    def __init__(self, paths: Sequence[str], detail: str) -> None:
        self.paths = tuple(paths)
        self.detail = detail
        super().__init__(detail)


class FiCompatWarning(UserWarning):
    """Base class of fi_compat's warnings."""


class UnverifiedReleaseWarning(FiCompatWarning):
    """Signatures match, but the release matrix never ran this release for a
    cache fi_compat bounds (or the function was found moved); it is bounded anyway."""


class UnsupportedReleaseWarning(FiCompatWarning):
    """A cache fi_compat bounds was left unbounded (its function changed or is
    missing); the other caches are bounded.  Also: transparent mode left out where the
    call API cannot bind the installed decode function."""


class UnboundedGrowthWarning(FiCompatWarning):
    """The runtime watch (:mod:`fi_compat.watch`) saw flashinfer memory grow per
    request: a ``functools`` memo it bounded, or containers it could not bound."""


class DefaultMismatchWarning(FiCompatWarning):
    """The installed release gives a parameter another default than fi_compat's
    call API documents; the call API passes its own default explicitly."""


#: Top-level packages whose frames a warning never points at: fi_compat itself,
#: wrapt (proxies, post-import hooks), the import machinery, and contextlib (a
#: ``with`` over a fi_compat context manager that imports flashinfer on entry,
#: such as ``fi_compat.workload.cpu_host()``: the user's line is the ``with``).
_INTERNAL_PACKAGES = frozenset({"fi_compat", "wrapt", "importlib", "contextlib"})


def _is_internal(frame: object) -> bool:
    name = frame.f_globals.get("__name__") or ""  # type: ignore[attr-defined]
    return name.partition(".")[0] in _INTERNAL_PACKAGES


def _skipped_by_warnings(frame: object) -> bool:
    # warnings.warn does not count these frames when it walks ``stacklevel``
    # (CPython's own rule for the frozen import machinery); neither may we.
    filename = frame.f_code.co_filename  # type: ignore[attr-defined]
    return "importlib" in filename and "_bootstrap" in filename


def user_stacklevel(skip: int = 1) -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` call in the function
    ``skip`` frames above this one point at the first frame outside fi_compat,
    wrapt and importlib: the user's call or ``import`` line.

    Cost: one step per frame walked (a few microseconds); warnings are rare."""
    frame = sys._getframe(skip)  # the function that calls warnings.warn: stacklevel 1
    level = 1
    while frame is not None and _is_internal(frame):
        frame = frame.f_back
        while frame is not None and _skipped_by_warnings(frame):
            frame = frame.f_back
        level += 1
    return level


_said: set[tuple[type, Hashable]] = set()
_said_lock = threading.Lock()


def warn(message: str, category: type[Warning], cause: Optional[Hashable] = None) -> bool:
    """``warnings.warn`` attributed to the user's line (see :func:`user_stacklevel`),
    once per ``(category, cause)`` per process (``cause`` defaults to the message):
    the same unverified release seen again when a cute-dsl module is imported
    lazily says nothing new.  Returns whether it warned.

    Every fi_compat warning goes through here, so ``-W error`` and warning
    filters by module see the caller's file, never ``sys:1`` or wrapt's
    importer.  Events that warn are not also logged (docs/errors.md, "Warnings
    or logging").  Never raises except as the warnings filters say."""
    key = (category, message if cause is None else cause)
    with _said_lock:  # taken for a set operation only: nothing waits inside it
        if key in _said:
            return False
        _said.add(key)
    warnings.warn(message, category, stacklevel=user_stacklevel(skip=1))
    return True


def forget_warnings() -> None:
    """Warn again for causes already warned about: :func:`fi_compat.reset` (a fresh process, for test suites)."""
    with _said_lock:
        _said.clear()


def shortened(text: str, limit: int = WARNING_LIMIT, keep: str = "") -> str:
    """``text + keep`` within ``limit`` characters: ``text`` cut with an ellipsis
    where it must be, ``keep`` (the pointer to the details) never."""
    room = limit - len(keep)
    if len(text) > room:
        text = text[: max(0, room - 1)].rstrip() + "…"
    return text + keep
