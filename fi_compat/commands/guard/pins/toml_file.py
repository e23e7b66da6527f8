"""Read a TOML file with :mod:`tomllib` (``tomli`` on Python 3.10, from the
guard's extra, :mod:`..extra`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import extra
from ..errors import RequirementsError


def load_toml(path: Path) -> dict[str, Any]:
    """The parsed file.  Raises :class:`~..extra.GuardExtraMissing` without
    the guard's extra and :class:`~..errors.RequirementsError` when the file
    is not readable or not valid TOML (the parser's message names line and
    column).  Cost: one read and parse of the file."""
    parser = extra.module("toml")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RequirementsError(f"{path}: no such file") from None
    except OSError as exc:
        raise RequirementsError(f"{path}: cannot read: {exc}") from None
    try:
        parsed: dict[str, Any] = parser.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise RequirementsError(f"{path}: not UTF-8 (TOML files are UTF-8): {exc}") from None
    except parser.TOMLDecodeError as exc:
        raise RequirementsError(f"{path}: not valid TOML: {exc}") from None
    return parsed
