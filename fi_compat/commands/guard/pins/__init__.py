"""Where a flashinfer-python pin can be written, and how each is read.

================  ==========================================  =====================
format            files (by name)                             module
================  ==========================================  =====================
``requirements``  anything else: ``requirements*.txt``,       :mod:`.requirements`
                  ``*.in``, ``constraints*.txt``
``pyproject``     ``pyproject.toml``                          :mod:`.pyproject`
``uv-lock``       ``uv.lock``                                 :mod:`.locks`
``poetry-lock``   ``poetry.lock``                             :mod:`.locks`
``pylock``        ``pylock.toml``, ``pylock.NAME.toml``       :mod:`.locks`
================  ==========================================  =====================

:func:`detect_format` goes by the file name; another ``*.toml`` or
``*.lock`` name is told apart by its content (a ``*.lock`` that is not TOML,
such as rye's ``requirements.lock``, is a requirement file).  ``--format``
overrides the guess for every FILE.  :func:`read_pins` returns a
:class:`~.pin.Pins` whatever the format.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import RequirementsError
from .pin import LOCAL_WHEEL, REMOTE_WHEEL, SPECIFIER, UNCHECKABLE, Pin, Pins, groups
from .locks import READERS as LOCK_READERS
from .pyproject import read_pyproject
from .requirements import parse_file, parse_pin
from .toml_file import load_toml

REQUIREMENTS = "requirements"
PYPROJECT = "pyproject"
FORMATS = (REQUIREMENTS, PYPROJECT, "uv-lock", "poetry-lock", "pylock")
_PYLOCK_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")
_BY_NAME = {"pyproject.toml": PYPROJECT, "uv.lock": "uv-lock", "poetry.lock": "poetry-lock"}


def _read_requirements(path: Path) -> Pins:
    return Pins(parse_file(path))


_READERS: dict[str, Callable[[Path], Pins]] = {
    REQUIREMENTS: _read_requirements,
    PYPROJECT: read_pyproject,
    **LOCK_READERS,
}


def _sniff(data: dict[str, Any]) -> Optional[str]:
    """The format of a parsed TOML file with an unusual name, or ``None``."""
    if "lock-version" in data and "packages" in data:
        return "pylock"
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and "content-hash" in metadata and "package" in data:
        return "poetry-lock"
    if "package" in data and isinstance(data.get("version"), int):
        return "uv-lock"
    if {"project", "dependency-groups", "build-system"} & set(data) or "poetry" in data.get("tool", {}):
        return PYPROJECT
    return None


def detect_format(path: Path) -> str:
    """The format of ``path``, from its name, else its content.  Raises
    :class:`~..errors.RequirementsError` for a ``*.toml`` that is none of them."""
    name = path.name
    if name in _BY_NAME:
        return _BY_NAME[name]
    if _PYLOCK_NAME.match(name):
        return "pylock"
    if name.endswith((".toml", ".lock")):
        try:
            sniffed = _sniff(load_toml(path))
        except RequirementsError:
            if name.endswith(".toml"):
                raise
            sniffed = None  # a .lock that is not TOML: requirements.lock and the like
        if sniffed is not None:
            return sniffed
        if name.endswith(".toml"):
            raise RequirementsError(
                f"{path}: cannot tell which format this TOML file is (not a pyproject.toml, uv.lock, "
                f"poetry.lock or pylock.toml by its name or content); pass --format {{{','.join(FORMATS)}}}"
            )
    return REQUIREMENTS


def read_pins(path: Path | str, file_format: Optional[str] = None) -> Pins:
    """Every flashinfer-python requirement in one file (and, for requirement
    files, what it includes).  Raises :class:`~..errors.RequirementsError`."""
    path = Path(path)
    if file_format is None:
        if not path.exists():
            raise RequirementsError(f"{path}: no such requirement file")
        file_format = detect_format(path)
    if file_format not in _READERS:
        raise RequirementsError(f"unknown format {file_format!r}; choose from {', '.join(FORMATS)}")
    return _READERS[file_format](path)


__all__ = [
    "FORMATS",
    "LOCAL_WHEEL",
    "REMOTE_WHEEL",
    "SPECIFIER",
    "UNCHECKABLE",
    "Pin",
    "Pins",
    "detect_format",
    "groups",
    "parse_pin",
    "read_pins",
]
