"""Requirements that name no version: a wheel file, a URL, a VCS checkout, a source tree.

:func:`classify` turns such a requirement into a :class:`~.found.Found` of
kind ``LOCAL_WHEEL``, ``REMOTE_WHEEL`` or ``UNCHECKABLE`` (with the reason
and what to do).  :func:`names_flashinfer` decides whether a bare path or
URL (``./x.whl``, ``git+https://...``, ``-e ./dir``) is flashinfer-python at
all: from a ``#egg=`` fragment, a wheel or sdist file name, a local
directory's ``pyproject.toml``, and last from the repository or directory
name (``flashinfer``, ``flashinfer-python``), so that an unnamed checkout of
flashinfer is never waved through.  Nothing here touches the network; the
only file reads are ``stat`` calls and one small ``pyproject.toml``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name,
                             parse_sdist_filename, parse_wheel_filename)

from .. import DISTRIBUTION
from .found import LOCAL_WHEEL, REMOTE_WHEEL, UNCHECKABLE, Found

VCS_SCHEMES = ("git+", "hg+", "svn+", "bzr+")
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)")
_SHA256 = re.compile(r"[#&]sha256=([0-9a-fA-F]{64})")
_FLASHINFER_DIRS = {canonicalize_name("flashinfer"), DISTRIBUTION}

WHEEL_HINT = "run `fi-compat guard --wheel PATH` on the wheel you will install"
BUILD_HINT = ("Build a wheel from it (`pip wheel --no-deps --no-build-isolation SOURCE -w dist`) and run "
              "`fi-compat guard --wheel dist/flashinfer_python-*.whl`, or pin a published release "
              f"({DISTRIBUTION}==X)")


def is_vcs(target: str) -> bool:
    return target.lower().startswith(VCS_SCHEMES)


def file_name(target: str) -> str:
    """The last path component of a URL or path, without query or fragment."""
    if "://" in target or target.startswith("file:"):
        path = unquote(urlsplit(target).path)
    else:
        path = target.split("#", 1)[0]
    return path.rstrip("/").rsplit("/", 1)[-1]


def _project_name_of_directory(directory: Path) -> Optional[str]:
    """``[project] name`` of a local source tree, when it says so (and TOML can be read)."""
    from ..errors import RequirementsError
    from .toml_file import load_toml

    pyproject = directory / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        data = load_toml(pyproject)
    except RequirementsError:  # unreadable, or no TOML parser: fall back to the name
        return None
    name = data.get("project", {}).get("name") if isinstance(data.get("project"), dict) else None
    return name if isinstance(name, str) else None


def names_flashinfer(target: str, base_dirs: Sequence[Path] = ()) -> bool:
    """Whether a bare path or URL (no ``name @``) installs flashinfer-python."""
    egg = _EGG.search(target)
    if egg:
        return canonicalize_name(egg.group(1).split("[", 1)[0]) == DISTRIBUTION
    name = file_name(target)
    if name.endswith(".whl"):
        try:
            return parse_wheel_filename(name)[0] == DISTRIBUTION
        except (InvalidWheelFilename, ValueError):
            return False
    if name.endswith((".tar.gz", ".zip")):
        try:
            return parse_sdist_filename(name)[0] == DISTRIBUTION
        except (InvalidSdistFilename, ValueError):
            return False
    if not is_vcs(target) and "://" not in target:
        for directory in _candidates(target, base_dirs):
            if directory.is_dir():
                declared = _project_name_of_directory(directory)
                if declared is not None:
                    return canonicalize_name(declared) == DISTRIBUTION
                break
    stem = name.split("@", 1)[0]  # git+https://host/flashinfer.git@v0.6.18
    stem = stem[:-4] if stem.endswith(".git") else stem
    return bool(stem) and canonicalize_name(stem) in _FLASHINFER_DIRS


def _candidates(path_text: str, base_dirs: Sequence[Path]) -> list[Path]:
    """Where a relative path may point: pip resolves it against the working
    directory; the file's own directory is tried next (what its author likely meant)."""
    if path_text.startswith("file:"):
        return [Path(url2pathname(urlsplit(path_text).path))]
    path = Path(os.path.expanduser(path_text.split("#", 1)[0]))
    if path.is_absolute():
        return [path]
    candidates = [Path.cwd() / path] + [base / path for base in base_dirs]
    return list(dict.fromkeys(Path(os.path.abspath(c)) for c in candidates))


def classify(target: str, *, source: str, line: Optional[int], text: str, editable: bool = False,
             base_dirs: Sequence[Path] = (), sha256: Optional[str] = None, **where: object) -> Found:
    """A :class:`Found` for a flashinfer-python requirement that points at ``target``.

    ``base_dirs`` are the directories a relative path may be relative to
    (the first existing candidate wins; the cwd is always tried first).
    ``where`` passes ``scope``, ``marker``, ``constraint`` and ``context`` on.
    """
    common = dict(source=source, line=line, text=text, **where)
    name = file_name(target)
    if editable:
        return Found(kind=UNCHECKABLE, location=target, reason=(
            f"an editable install of {DISTRIBUTION} ({target}) runs whatever that checkout holds when it is "
            "imported: there is no release or wheel to check before it merges. After installing it, "
            "`fi-compat doctor --no-import` reads the installed source and names the adapter. " + BUILD_HINT),
            **common)
    if is_vcs(target):
        return Found(kind=UNCHECKABLE, location=target, reason=(
            f"a VCS requirement ({target}) names a commit, not a release: which flashinfer code it installs "
            "is only known after building it, so the guard cannot check it offline. " + BUILD_HINT), **common)
    remote = "://" in target and not target.lower().startswith("file:")
    expected = sha256 or _fragment_sha256(target)
    if remote:
        if name.endswith(".whl"):
            return Found(kind=REMOTE_WHEEL, location=target, sha256=expected, **common)
        return Found(kind=UNCHECKABLE, location=target, reason=(
            f"{target} is not a wheel, and the guard reads wheels, not sdists or archives: download it. "
            + BUILD_HINT), **common)
    candidates = _candidates(target, base_dirs)
    existing = next((c for c in candidates if c.exists()), None)
    if name.endswith(".whl"):
        if existing is None or not existing.is_file():
            looked = " or ".join(str(c) for c in candidates)
            return Found(kind=UNCHECKABLE, location=target, reason=(
                f"the local wheel {target} does not exist (looked at {looked}); build or download it "
                "first, or " + WHEEL_HINT), **common)
        return Found(kind=LOCAL_WHEEL, location=str(existing), sha256=expected, **common)
    what = "a source tree" if existing is None or existing.is_dir() else "an sdist or archive"
    return Found(kind=UNCHECKABLE, location=target, reason=(
        f"{target} is {what}, not a wheel: the guard reads the wheel pip would build from it. " + BUILD_HINT),
        **common)


def _fragment_sha256(target: str) -> Optional[str]:
    match = _SHA256.search(target)
    return match.group(1).lower() if match else None
