"""Requirements that name no version: a wheel file, a URL, a VCS checkout, a source tree.

:func:`classify` turns such a requirement into a :class:`~.pin.Pin` of
kind ``LOCAL_WHEEL``, ``REMOTE_WHEEL`` or ``UNCHECKABLE`` (with the reason
and what to do).  :func:`names_flashinfer` decides whether a bare path or
URL (``./x.whl``, ``git+https://...``, ``-e ./dir``) is flashinfer-python at
all: from a ``#egg=`` fragment, a wheel or sdist file name, a local
directory's ``pyproject.toml``, the repository of a code host's archive URL
(``https://github.com/flashinfer-ai/flashinfer/archive/refs/tags/v0.7.4.tar.gz``,
whose file name says nothing), and last from the repository or directory
name (``flashinfer``, ``flashinfer-python``), so that an unnamed checkout of
flashinfer is never waved through.  :func:`is_flashinfer` applies the same
rule to ``name @ URL`` requirements, and :func:`versioned_direct_reference`
catches ``flashinfer-python==X @ URL``, which pip refuses.  Nothing here
touches the network; the only file reads are ``stat`` calls and one small
``pyproject.toml``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from .. import DISTRIBUTION
from .pin import LOCAL_WHEEL, REMOTE_WHEEL, UNCHECKABLE, Pin

VCS_SCHEMES = ("git+", "hg+", "svn+", "bzr+")
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)")
_SHA256 = re.compile(r"[#&]sha256=([0-9a-fA-F]{64})")
_FLASHINFER_DIRS = {canonicalize_name("flashinfer"), DISTRIBUTION}

WHEEL_HINT = "run `fi-compat guard --wheel PATH` on the wheel you will install"
BUILD_HINT = (
    "Build a wheel from it (`pip wheel --no-deps --no-build-isolation SOURCE -w dist`) and run "
    "`fi-compat guard --wheel dist/flashinfer_python-*.whl`, or pin a published release "
    f"({DISTRIBUTION}==X)"
)


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


def archive_repository(target: str) -> Optional[str]:
    """The repository a code host's source-archive URL downloads, else ``None``.

    GitHub (``/OWNER/REPO/archive/REF.tar.gz``, ``.zip``), GitLab
    (``/GROUP/REPO/-/archive/REF/FILE``) and GitHub's ``codeload`` host
    (``/OWNER/REPO/tar.gz/REF``, ``/zip/REF``) name the repository in the
    path, not in the file name (``v0.7.4.tar.gz``), and pip installs these
    URLs as source archives.  Pure string work, no network."""
    if "://" not in target:
        return None
    parts = urlsplit(target)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if parts.hostname == "codeload.github.com":
        if len(segments) >= 3 and segments[2] in ("tar.gz", "zip", "legacy.tar.gz", "legacy.zip"):
            return segments[1]
        return None
    if "archive" in segments:
        at = segments.index("archive")
        owner_and_repo = [s for s in segments[:at] if s != "-"]  # GitLab puts "/-/" before "archive"
        if len(owner_and_repo) >= 2:
            return owner_and_repo[-1]
    return None


def archive_release(target: str) -> Optional[str]:
    """The release an archive URL's ref looks like, else ``None``:
    ``.../refs/tags/v0.7.4.tar.gz`` and codeload's ``.../tar.gz/refs/tags/v0.7.4``
    give ``0.7.4``, and so does GitLab's ``.../-/archive/v0.7.4/flashinfer-v0.7.4.zip``."""
    name = file_name(target)
    for suffix in (".tar.gz", ".zip", ".tgz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for candidate in (name, name.rsplit("-", 1)[-1]):  # GitLab's file is REPO-REF
        try:
            return str(Version(candidate))  # PEP 440 accepts the tag's leading "v"
        except InvalidVersion:
            continue
    return None


def _is_flashinfer_name(name: str) -> bool:
    return canonicalize_name(name) in _FLASHINFER_DIRS


def names_flashinfer(target: str, base_dirs: Sequence[Path] = ()) -> bool:
    """Whether a bare path or URL (no ``name @``) installs flashinfer-python."""
    egg = _EGG.search(target)
    if egg:
        return canonicalize_name(egg.group(1).split("[", 1)[0]) == DISTRIBUTION
    repository = archive_repository(target)
    if repository is not None:
        # The file name of an archive is the ref (v0.7.4.tar.gz), never the project's name.
        return _is_flashinfer_name(repository[:-4] if repository.endswith(".git") else repository)
    name = file_name(target)
    if name.endswith(".whl"):
        try:
            return parse_wheel_filename(name)[0] == DISTRIBUTION
        except (InvalidWheelFilename, ValueError):
            return False
    if name.endswith((".tar.gz", ".zip")):
        try:
            # flashinfer-0.7.4.tar.gz (the repository's name) counts too: pip installs
            # whatever project the archive declares, and for flashinfer that is flashinfer-python.
            return _is_flashinfer_name(parse_sdist_filename(name)[0])
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


def is_flashinfer(requirement: Requirement, base_dirs: Sequence[Path] = ()) -> bool:
    """Whether a parsed requirement installs flashinfer-python: its name says
    so, or it is ``NAME @ URL`` whose name is the repository's
    (``flashinfer @ https://...``) or whose URL names flashinfer.  pip installs
    what the URL holds (and refuses a name that differs from it), so a
    ``flashinfer @ URL`` line is not "another package" to the guard."""
    name = canonicalize_name(requirement.name)
    if name == DISTRIBUTION:
        return True
    return bool(requirement.url) and (name in _FLASHINFER_DIRS or names_flashinfer(requirement.url, base_dirs))


_VERSIONED_REFERENCE = re.compile(r"^(?P<requirement>[^@]*?[<>=!~][^@]*?)\s*@\s*(?P<url>\S.*)$")


def versioned_direct_reference(text: str, base_dirs: Sequence[Path] = ()) -> Optional[str]:
    """Why ``flashinfer-python==X @ URL`` (a version and a URL on one line) is
    refused, or ``None`` when ``text`` is not that shape or not flashinfer.

    PEP 508 direct references (``name @ URL``) take no version, and pip
    refuses such a line ("Invalid requirement"); so does the guard, rather
    than guess which of the two was meant.  Costs one regex and one parse."""
    match = _VERSIONED_REFERENCE.match(text.strip())
    if match is None or "://" not in match.group("url") and not match.group("url").startswith("file:"):
        return None
    try:
        named = Requirement(match.group("requirement"))
    except InvalidRequirement:
        return None
    url = match.group("url").split(" ;", 1)[0].strip()
    if not (_is_flashinfer_name(named.name) or names_flashinfer(url, base_dirs)):
        return None
    release = next((s.version for s in named.specifier if s.operator in ("==", "===")), None)
    by_version = f"`{DISTRIBUTION}=={release}`" if release else f"`{DISTRIBUTION}{named.specifier}`"
    return (
        f"{text.strip()!r} gives both a version ({named.specifier}) and a URL: a direct reference "
        f'(`name @ URL`) takes no version, so pip refuses this line ("Invalid requirement") and the guard '
        f"cannot tell which was meant. Write `{DISTRIBUTION} @ {url}` to install that file, or {by_version} "
        "to install the release from the index"
    )


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


def classify(
    target: str,
    *,
    source: str,
    line: Optional[int],
    text: str,
    editable: bool = False,
    base_dirs: Sequence[Path] = (),
    sha256: Optional[str] = None,
    **where: object,
) -> Pin:
    """A :class:`Pin` for a flashinfer-python requirement that points at ``target``.

    ``base_dirs`` are the directories a relative path may be relative to
    (the first existing candidate wins; the cwd is always tried first).
    ``where`` passes ``scope``, ``marker``, ``constraint`` and ``context`` on.
    """
    common = dict(source=source, line=line, text=text, **where)
    name = file_name(target)
    if editable:
        return Pin(
            kind=UNCHECKABLE,
            location=target,
            reason=(
                f"an editable install of {DISTRIBUTION} ({target}) runs whatever that checkout holds when it is "
                "imported: there is no release or wheel to check before it merges. After installing it, "
                "`fi-compat doctor --no-import` reads the installed source and names the adapter. " + BUILD_HINT
            ),
            **common,
        )
    if is_vcs(target):
        return Pin(
            kind=UNCHECKABLE,
            location=target,
            reason=(
                f"a VCS requirement ({target}) names a commit, not a release: which flashinfer code it installs "
                "is only known after building it, so the guard cannot check it offline. " + BUILD_HINT
            ),
            **common,
        )
    remote = "://" in target and not target.lower().startswith("file:")
    expected = sha256 or _fragment_sha256(target)
    if remote:
        if name.endswith(".whl"):
            return Pin(kind=REMOTE_WHEEL, location=target, sha256=expected, **common)
        if archive_repository(target) is not None:
            release = archive_release(target)
            pin = (
                f"if {release} is a published release, pin it ({DISTRIBUTION}=={release}) and the guard checks "
                "its wheel; else "
                if release
                else ""
            )
            return Pin(
                kind=UNCHECKABLE,
                location=target,
                reason=(
                    f"{target} is a source archive of the flashinfer repository (a code host's archive of a ref), "
                    "not a wheel: the guard reads wheels, and --download fetches wheels only, so it cannot check "
                    f"this line; {pin}build a wheel from the archive (`pip wheel --no-deps --no-build-isolation "
                    f"{target} -w dist`) and run `fi-compat guard --wheel dist/flashinfer_python-*.whl`"
                ),
                **common,
            )
        return Pin(
            kind=UNCHECKABLE,
            location=target,
            reason=(
                f"{target} is not a wheel, and the guard reads wheels, not sdists or archives: download it. "
                + BUILD_HINT
            ),
            **common,
        )
    candidates = _candidates(target, base_dirs)
    existing = next((c for c in candidates if c.exists()), None)
    if name.endswith(".whl"):
        if existing is None or not existing.is_file():
            looked = " or ".join(str(c) for c in candidates)
            return Pin(
                kind=UNCHECKABLE,
                location=target,
                reason=(
                    f"the local wheel {target} does not exist (looked at {looked}); build or download it "
                    "first, or " + WHEEL_HINT
                ),
                **common,
            )
        return Pin(kind=LOCAL_WHEEL, location=str(existing), sha256=expected, **common)
    what = "a source tree" if existing is None or existing.is_dir() else "an sdist or archive"
    return Pin(
        kind=UNCHECKABLE,
        location=target,
        reason=(f"{target} is {what}, not a wheel: the guard reads the wheel pip would build from it. " + BUILD_HINT),
        **common,
    )


def _fragment_sha256(target: str) -> Optional[str]:
    match = _SHA256.search(target)
    return match.group(1).lower() if match else None
