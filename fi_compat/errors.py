"""Every exception and warning fi_compat raises, in one place.

Each message says what was found and what to do next.  Catch
:class:`FiCompatError` to handle them all.
"""

from __future__ import annotations

from typing import Sequence


class FiCompatError(Exception):
    """Base class of every fi_compat error."""


class UnsupportedReleaseError(FiCompatError):
    """No adapter fits the installed flashinfer release (strict mode)."""

    def __init__(self, release: str | None, detail: str) -> None:
        self.release = release
        self.detail = detail
        super().__init__(
            f"flashinfer-python {release or '(not installed)'}: {detail}. "
            "Pin a release listed in docs/compatibility.md, run `fi-compat doctor` for "
            "details, or call install(strict=False) to leave flashinfer unpatched with a warning."
        )


class SignatureMismatchError(FiCompatError):
    """A flashinfer function's parameters differ from every known layout."""

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
    """A keyword of the stable call API does not exist in the installed release."""

    def __init__(self, keyword: str, added_in: str | None, release: str | None) -> None:
        self.keyword = keyword
        self.added_in = added_in
        self.release = release
        since = f"was added in flashinfer-python {added_in}" if added_in else "is unknown to"
        super().__init__(
            f"keyword {keyword!r} {since}; the installed release is {release}. "
            f"Upgrade flashinfer-python (>= {added_in}) or leave {keyword!r} at its default."
        )


class FiCompatWarning(UserWarning):
    """Base class of fi_compat's warnings."""


class UnverifiedReleaseWarning(FiCompatWarning):
    """The release lies outside every verified range but its signatures match an adapter."""


class UnsupportedReleaseWarning(FiCompatWarning):
    """Nothing matches the installed release; flashinfer was left untouched."""


def _internal_prefixes() -> tuple[str, ...]:
    import os

    import wrapt

    return tuple(os.path.join(os.path.dirname(os.path.abspath(m.__file__)), "") for m in (wrapt,)) + (
        os.path.join(os.path.dirname(os.path.abspath(__file__)), ""),
    )


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the user's line: the first frame outside
    fi_compat, wrapt and the import machinery (an import hook fires deep inside
    ``import flashinfer``, where a fixed stack level would point at importlib)."""
    import sys
    import warnings

    internal = _internal_prefixes()
    frame = sys._getframe(1)
    level = 2
    while frame is not None and (
        frame.f_code.co_filename.startswith(internal) or frame.f_code.co_filename.startswith("<frozen ")
    ):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level)
