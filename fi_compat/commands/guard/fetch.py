"""Get a release's wheel into a reusable cache directory.

The cache is ``--cache-dir``, else ``$FI_COMPAT_WHEEL_CACHE``, else
``$XDG_CACHE_HOME/fi_compat/wheels`` (``~/.cache/fi_compat/wheels``).  A
wheel already there is used without asking the index, so a cached release is
checked offline.  Otherwise ``python -m pip download --no-deps
--only-binary=:all: flashinfer-python==X`` downloads it into a private
temporary directory inside the cache, and the finished file is renamed into
place: an interrupted download never leaves a half wheel behind, and two
guards sharing a cache do not trip over each other.

``--download`` fetches a wheel named by URL the same way, into
``urls/<sha256 of the URL>/`` inside the cache (:func:`fetch_url`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import DISTRIBUTION
from .pip import run_pip
from .errors import FetchError

CACHE_ENV = "FI_COMPAT_WHEEL_CACHE"
URL_CACHE = "urls"  # subfolder for --download wheels, out of find_cached's sight
DOWNLOAD_TIMEOUT_S = 900.0


def default_cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fi_compat" / "wheels"


def wheel_release(path: Path) -> Optional[tuple[str, Version]]:
    """(normalized project name, version) from a wheel file name, or ``None``."""
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    return str(name), version


def find_cached(cache_dir: Path, release: str) -> Optional[Path]:
    """A cached flashinfer-python wheel of exactly ``release`` (by PEP 440 equality)."""
    try:
        wanted = Version(release)
    except InvalidVersion:
        wanted = None
    if not cache_dir.is_dir():
        return None
    for path in sorted(cache_dir.glob("*.whl")):
        parsed = wheel_release(path)
        if parsed is None or parsed[0] != canonicalize_name(DISTRIBUTION):
            continue
        if (parsed[1] == wanted) if wanted is not None else (str(parsed[1]) == release):
            return path
    return None


def fetch(
    release: str,
    cache_dir: Path,
    *,
    offline: bool = False,
    python: str = sys.executable,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> Path:
    """Path of the flashinfer-python ``release`` wheel, downloading it if needed."""
    cached = find_cached(cache_dir, release)
    if cached is not None:
        return cached
    if offline:
        raise FetchError(f"{DISTRIBUTION}=={release}: no wheel in the cache {cache_dir} and --offline is set")
    operator = "===" if _not_pep440(release) else "=="
    return _pip_download(
        f"{DISTRIBUTION}{operator}{release}", cache_dir, f"{DISTRIBUTION}=={release}", python=python, timeout=timeout
    )


def url_cache_dir(cache_dir: Path, url: str) -> Path:
    """Where a wheel downloaded from ``url`` is kept: one folder per URL, so two
    URLs serving the same file name never share a file."""
    return cache_dir / URL_CACHE / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def fetch_url(url: str, cache_dir: Path, *, python: str = sys.executable, timeout: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """The flashinfer-python wheel at ``url`` (``--download``), downloaded once with
    ``pip download 'flashinfer-python @ URL'`` (pip's proxy, certificates and
    ``#sha256=`` check apply) into :func:`url_cache_dir`."""
    directory = url_cache_dir(cache_dir, url)
    if directory.is_dir():
        cached = sorted(directory.glob("*.whl"))
        if cached:
            return cached[0]
    return _pip_download(f"{DISTRIBUTION} @ {url}", directory, url, python=python, timeout=timeout)


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (about 30 ms for an 18 MB wheel)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(requirement: str, directory: Path, label: str, *, python: str, timeout: float) -> Path:
    """``pip download --no-deps`` of one flashinfer-python wheel into ``directory``,
    through a private staging folder renamed into place."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".download-", dir=directory))
    except OSError as exc:
        raise FetchError(f"cannot use the wheel cache {directory}: {exc}") from None
    arguments = [
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(staging),
        requirement,
    ]
    try:
        try:
            run_pip(arguments, what="pip download", timeout=timeout, error=FetchError, python=python)
        except FetchError as exc:
            raise FetchError(f"{label}: {exc}") from None
        wheels = [p for p in staging.glob("*.whl") if (wheel_release(p) or ("",))[0] == DISTRIBUTION]
        if len(wheels) != 1:
            found = ", ".join(p.name for p in staging.iterdir()) or "nothing"
            raise FetchError(f"{label}: expected one {DISTRIBUTION} wheel from pip, got {found}")
        target = directory / wheels[0].name
        os.replace(wheels[0], target)
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _not_pep440(release: str) -> bool:
    try:
        Version(release)
    except InvalidVersion:
        return True
    return False
