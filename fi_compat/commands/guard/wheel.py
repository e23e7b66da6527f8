"""Read flashinfer sources out of a wheel, in memory, and find functions with ``ast``.

Nothing is extracted to disk, imported or executed.  A wheel is refused
(:class:`~fi_compat.commands.guard.errors.WheelError`) when it

* is not a zip archive;
* is not a flashinfer-python wheel (no ``flashinfer/`` package and no
  ``flashinfer_python-*.dist-info``);
* has a member the guard must read whose declared size exceeds
  :data:`MAX_MEMBER_BYTES`, or whose compression ratio exceeds
  :data:`MAX_RATIO` (zip-bomb shape), or that decompresses to more than it
  declared;
* has a needed source that is not UTF-8 or does not parse.

A flashinfer-python wheel that simply lacks a module fi_compat looks in is not
refused: its functions are reported missing, exactly as the runtime registry
would find them missing, and the verdict is ``unsupported``.

Functions are found by :mod:`fi_compat.lookup` with the runtime's own rules;
this module only reads the archive safely.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Optional

from packaging.utils import canonicalize_name

from ...lookup import Lookup, source_lookup
from . import DISTRIBUTION
from .errors import WheelError

MAX_MEMBER_BYTES = 16 * 1024 * 1024
"""Largest source member read (flashinfer/mla/_core.py is about 230 KB in 0.7.4)."""
MAX_RATIO = 100.0
"""Largest uncompressed/compressed ratio accepted (Python source compresses about 4.7x)."""
RATIO_FLOOR_BYTES = 64 * 1024
"""Members smaller than this are not ratio-checked (tiny files compress oddly)."""


def module_path(module: str) -> tuple[str, str]:
    """Candidate archive paths of a dotted module: ``a/b.py`` and ``a/b/__init__.py``."""
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


@dataclass
class WheelSources:
    """An open wheel; read with :meth:`source`, close with :meth:`close` (or ``with``)."""

    path: Path
    archive: zipfile.ZipFile
    metadata_name: Optional[str] = None
    metadata_version: Optional[str] = None
    _sources: dict[str, Optional[tuple[str, str]]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path | str) -> "WheelSources":
        path = Path(path)
        if not path.is_file():
            raise WheelError(f"{path}: no such file")
        if not zipfile.is_zipfile(path):
            raise WheelError(f"{path}: not a zip archive, so not a wheel (a .whl file is a zip)")
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise WheelError(f"{path}: unreadable zip archive: {exc}") from None
        wheel = cls(path, archive)
        try:
            wheel._read_metadata()
        except BaseException:
            archive.close()
            raise
        return wheel

    def __enter__(self) -> "WheelSources":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.archive.close()

    # ------------------------------------------------------------------ reading

    def _read_metadata(self) -> None:
        names = self.archive.namelist()
        prefix = canonicalize_name(DISTRIBUTION).replace("-", "_")
        metadata = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        ours = [n for n in metadata if canonicalize_name(n.split("-", 1)[0]) == canonicalize_name(prefix)]
        if ours:
            headers = HeaderParser().parsestr(self.read_member(ours[0]))
            self.metadata_name = headers.get("Name")
            self.metadata_version = headers.get("Version")
            if self.metadata_name and canonicalize_name(self.metadata_name) != DISTRIBUTION:
                raise WheelError(f"{self.path}: METADATA names {self.metadata_name!r}, not {DISTRIBUTION}")
        elif not any(n.startswith("flashinfer/") for n in names):
            found = ", ".join(sorted({n.split("/", 1)[0] for n in names})[:5]) or "nothing"
            raise WheelError(
                f"{self.path}: not a {DISTRIBUTION} wheel: no flashinfer/ package and no "
                f"{prefix}-*.dist-info/METADATA (top level holds {found})"
            )

    def read_member(self, name: str) -> str:
        """One member's text, with the size and ratio limits enforced."""
        info = self.archive.getinfo(name)
        where = f"{self.path}!{name}"
        if info.file_size > MAX_MEMBER_BYTES:
            raise WheelError(
                f"{where}: declares {info.file_size:,} bytes uncompressed, over the "
                f"{MAX_MEMBER_BYTES:,}-byte limit for a source file; refusing to read it"
            )
        if info.file_size > RATIO_FLOOR_BYTES:
            ratio = info.file_size / max(info.compress_size, 1)
            if ratio > MAX_RATIO:
                raise WheelError(
                    f"{where}: compression ratio {ratio:,.0f}:1 ({info.compress_size:,} -> "
                    f"{info.file_size:,} bytes) exceeds {MAX_RATIO:.0f}:1 (zip-bomb shape); refusing to read it"
                )
        try:
            with self.archive.open(info) as member:
                data = member.read(MAX_MEMBER_BYTES + 1)
        except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError) as exc:
            raise WheelError(f"{where}: cannot decompress: {exc}") from None
        if len(data) > MAX_MEMBER_BYTES or len(data) != info.file_size:
            raise WheelError(f"{where}: decompressed size differs from the declared {info.file_size:,} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WheelError(f"{where}: not UTF-8 text: {exc}") from None

    def source(self, module: str) -> Optional[tuple[str, str]]:
        """``(archive path, text)`` of a dotted module, or ``None`` when the wheel lacks it."""
        if module not in self._sources:
            found: Optional[tuple[str, str]] = None
            names = set(self.archive.namelist())
            for candidate in module_path(module):
                if candidate in names:
                    found = (candidate, self.read_member(candidate))
                    break
            self._sources[module] = found
        return self._sources[module]

    def has_module(self, module: str) -> bool:
        return self.source(module) is not None

    def modules(self) -> list[str]:
        """Every dotted module of the ``flashinfer`` package in the wheel."""
        found = []
        for name in self.archive.namelist():
            if name.startswith("flashinfer/") and name.endswith(".py"):
                parts = name[:-3].split("/")
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        return found


def lookup_for(wheel: WheelSources) -> Lookup:
    """A :data:`fi_compat.lookup.Lookup` over the wheel's sources: the same rules
    as the runtime (re-exports, conditional definitions, memo decorators)."""
    return source_lookup(wheel)
