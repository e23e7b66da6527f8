"""Find the installed flashinfer release without importing flashinfer.

Three places can name the release, consulted in this order:

1. ``sys.modules["flashinfer"].__version__`` when flashinfer is *already*
   imported (reading it costs nothing and imports nothing);
2. the ``_build_meta.py`` file of the package that ``import flashinfer`` would
   load, parsed with :mod:`ast` (never executed);
3. the ``flashinfer-python`` distribution metadata (``importlib.metadata``).

When they disagree the code wins over the metadata: adapters patch the
functions that will actually run, and a source checkout on ``PYTHONPATH`` or an
editable install rebuilt from a newer commit keeps stale metadata.  The
disagreement is logged at WARNING and kept in :class:`ReleaseInfo` so
``fi-compat doctor`` shows it.  Whatever wins, each bounded cache is still
judged against the real function signatures at install time.

Cost: one metadata lookup and, if a package directory exists, one small file
read; no import of torch or flashinfer.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from packaging.version import InvalidVersion, Version

from .specs import DISTRIBUTION, PACKAGE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReleaseInfo:
    """What was found.  ``version`` is ``None`` when flashinfer is not installed
    or no source named a parseable version."""

    version: Version | None
    source: str  # "module", "build-meta", "metadata" or "none"
    metadata_version: str | None = None
    build_meta_version: str | None = None
    module_version: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def installed(self) -> bool:
        return self.version is not None

    @property
    def public(self) -> str | None:
        """The version without its local label (``0.6.18+cu130`` -> ``0.6.18``)."""
        return None if self.version is None else self.version.public

    def __str__(self) -> str:
        return "not installed" if self.version is None else str(self.version)


def _parse(raw: str | None) -> Version | None:
    if raw is None:
        return None
    try:
        version = Version(raw)
    except InvalidVersion:
        return None
    # flashinfer's version.py falls back to "0.0.0+unknown" when _build_meta is missing.
    return None if version.release == (0, 0, 0) else version


def read_metadata_version(distribution: str = DISTRIBUTION) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_directories(package: str = PACKAGE) -> list[str]:
    """The directories ``import package`` would load from, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return list(spec.submodule_search_locations)


def build_meta_version(source: str | bytes) -> str | None:
    """The string ``__version__ = "..."`` assigns at module level in a
    ``_build_meta.py`` source, or ``None`` (no such line, or not Python).
    Parses with :mod:`ast`; executes nothing."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def read_build_meta_version(package: str = PACKAGE) -> str | None:
    """``__version__`` from ``<package>/_build_meta.py`` of the importable package, via ast."""
    for location in package_directories(package):
        path = os.path.join(location, "_build_meta.py")
        try:
            with open(path, encoding="utf-8") as handle:
                source = handle.read()
        except (OSError, ValueError):
            continue
        version = build_meta_version(source)
        if version is not None:
            return version
    return None


def read_module_version(package: str = PACKAGE) -> str | None:
    module = sys.modules.get(package)
    version = getattr(module, "__version__", None)
    return version if isinstance(version, str) else None


def detect_release(
    *,
    metadata_reader: Callable[[], str | None] = read_metadata_version,
    build_meta_reader: Callable[[], str | None] = read_build_meta_version,
    module_reader: Callable[[], str | None] = read_module_version,
) -> ReleaseInfo:
    """Detect the installed release.  The readers are parameters so tests can
    feed synthetic metadata; the defaults read the real environment."""
    metadata_raw = metadata_reader()
    build_raw = build_meta_reader()
    module_raw = module_reader()
    notes: list[str] = []
    candidates = [("module", module_raw), ("build-meta", build_raw), ("metadata", metadata_raw)]
    chosen_source, chosen = "none", None
    for source, raw in candidates:
        parsed = _parse(raw)
        if raw is not None and parsed is None:
            notes.append(f"{source} version {raw!r} is not a usable PEP 440 version; ignored")
        if parsed is not None and chosen is None:
            chosen_source, chosen = source, parsed
    if chosen is not None:
        for source, raw in candidates:
            parsed = _parse(raw)
            if parsed is not None and parsed != chosen:
                note = (
                    f"{source} says flashinfer {raw} but the {chosen_source} says {chosen}; "
                    f"using {chosen} (the code that runs wins over stale metadata)"
                )
                notes.append(note)
                logger.warning("fi_compat: %s", note)
    return ReleaseInfo(
        version=chosen,
        source=chosen_source,
        metadata_version=metadata_raw,
        build_meta_version=build_raw,
        module_version=module_raw,
        notes=tuple(notes),
    )
