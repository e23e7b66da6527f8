"""Read a TOML file: :mod:`tomllib` (Python 3.11+), else :mod:`tomli` when installed.

fi_compat supports Python 3.10, whose standard library has no TOML parser,
and depends on nothing for it: writing a TOML parser here would be a second,
less tested one.  On 3.10 without ``tomli`` the guard refuses TOML inputs
(``pyproject.toml``, ``uv.lock``, ``poetry.lock``, ``pylock.toml``) with
:class:`TomlUnavailable`, which says to use Python 3.11+ or ``pip install
tomli``; requirement files need no TOML and work everywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..errors import RequirementsError


class TomlUnavailable(RequirementsError):
    """No TOML parser: Python 3.10 without tomli."""


def _parser() -> Any:
    try:
        import tomllib  # Python 3.11+

        return tomllib
    except ImportError:
        pass
    try:
        import tomli  # the same parser, for Python 3.10

        return tomli
    except ImportError:
        return None


def load_toml(path: Path) -> dict[str, Any]:
    """The parsed file.  Raises :class:`TomlUnavailable` when no parser is
    available and :class:`~..errors.RequirementsError` when the file is not
    readable or not valid TOML (the parser's message names line and column).
    Cost: one read and parse of the file."""
    parser = _parser()
    if parser is None:
        version = ".".join(map(str, sys.version_info[:2]))
        raise TomlUnavailable(
            f"{path}: reading TOML needs Python 3.11 or later (tomllib) or the tomli package on Python "
            f"{version}: `pip install tomli`, or check the requirement with --pin"
        )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RequirementsError(f"{path}: no such file") from None
    except OSError as exc:
        raise RequirementsError(f"{path}: cannot read: {exc}") from None
    try:
        return parser.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise RequirementsError(f"{path}: not UTF-8 (TOML files are UTF-8): {exc}") from None
    except parser.TOMLDecodeError as exc:
        raise RequirementsError(f"{path}: not valid TOML: {exc}") from None
