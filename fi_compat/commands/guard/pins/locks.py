"""Find the locked flashinfer-python in ``uv.lock``, ``poetry.lock`` and PEP 751 ``pylock.toml``.

A lock names one resolved release per entry; each entry is checked on its
own (scope ``lock entry N``, never intersected with another entry: a lock
may hold one entry per platform).  What each source becomes:

================  ============================  ==================================
lock              source                        checked as
================  ============================  ==================================
uv.lock           ``registry``                  ``==version``
uv.lock           ``url`` / ``path`` (a wheel)  that wheel (URL: ``--download``)
uv.lock           ``git``, ``directory``,       not checkable (exit 2, with why)
                  ``editable``, ``virtual``
poetry.lock       none or ``legacy`` (an index) ``==version``
poetry.lock       ``url`` / ``file`` (a wheel)  that wheel (URL: ``--download``)
poetry.lock       ``git``, ``directory``        not checkable
pylock.toml       ``wheels`` / ``sdist``        ``==version`` (from the index or
                                                the wheel's file name)
pylock.toml       ``archive`` (a wheel)         that wheel (URL: ``--download``)
pylock.toml       ``vcs``, ``directory``        not checkable
================  ============================  ==================================

``pylock.toml`` is read through ``packaging.pylock`` (the guard's extra),
which validates the whole file; uv's and Poetry's locks have no such model
in a kept library and are read as TOML.  Relative paths are relative to the lock file's directory, as each tool
writes them.  The sha256 a lock records for a wheel it points at is kept, and
the guard compares it with the wheel it reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .. import DISTRIBUTION, extra
from ..errors import RequirementsError
from .direct import classify
from .pin import SPECIFIER, UNCHECKABLE, Pin, Pins
from .toml_file import load_toml
from .toml_lines import LineIndex


class _Entry:
    """One flashinfer-python entry of a lock and where it is written."""

    def __init__(self, path: Path, lines: LineIndex, number: int, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self.version = data.get("version")
        self.line = lines.assignment("name", str(data.get("name")))
        self.scope = f"lock entry {number}"

    def located(self, text: str, marker: Optional[str] = None) -> dict[str, Any]:
        return dict(
            source=str(self.path),
            line=self.line,
            text=text,
            scope=self.scope,
            with_base=False,
            marker=marker,
            context=self.scope,
        )

    def pinned(self, marker: Optional[str] = None, version: Optional[str] = None) -> Pin:
        version = version or self.version
        if not isinstance(version, str):
            return self.uncheckable("the entry names no version", marker)
        return Pin(
            kind=SPECIFIER,
            specifier=SpecifierSet(f"=={version}"),
            **self.located(f"{DISTRIBUTION}=={version} (locked)", marker),
        )

    def direct(
        self, target: str, *, sha256: Optional[str] = None, editable: bool = False, marker: Optional[str] = None
    ) -> Pin:
        return classify(
            target,
            base_dirs=[self.path.parent],
            sha256=sha256,
            editable=editable,
            **self.located(f"{DISTRIBUTION} from {target} (locked)", marker),
        )

    def uncheckable(self, why: str, marker: Optional[str] = None) -> Pin:
        return Pin(
            kind=UNCHECKABLE,
            reason=f"the locked {DISTRIBUTION} cannot be checked: {why}",
            **self.located(f"{DISTRIBUTION} (locked)", marker),
        )


def _entries(path: Path, key: str) -> list[_Entry]:
    data = load_toml(path)
    packages = data.get(key, [])
    if not isinstance(packages, list):
        raise RequirementsError(f"{path}: [[{key}]] must be an array of tables")
    lines = LineIndex(path.read_bytes().decode("utf-8-sig"))
    ours = [p for p in packages if isinstance(p, dict) and canonicalize_name(str(p.get("name", ""))) == DISTRIBUTION]
    return [_Entry(path, lines, number, entry) for number, entry in enumerate(ours, start=1)]


def _sha256(hashes: Any) -> Optional[str]:
    """``{sha256 = "..."}`` (pylock) or ``"sha256:..."`` (uv, Poetry)."""
    if isinstance(hashes, dict):
        value = hashes.get("sha256")
        return value.lower() if isinstance(value, str) else None
    if isinstance(hashes, str) and hashes.startswith("sha256:"):
        return hashes.split(":", 1)[1].lower()
    return None


def read_uv_lock(path: Path) -> Pins:
    pins = Pins()
    for entry in _entries(path, "package"):
        source = entry.data.get("source", {})
        wheels = entry.data.get("wheels", [])
        sha = _sha256(wheels[0].get("hash")) if len(wheels) == 1 and isinstance(wheels[0], dict) else None
        if "registry" in source:
            pins.found.append(entry.pinned())
        elif "url" in source:
            pins.found.append(entry.direct(str(source["url"]), sha256=sha))
        elif "path" in source:
            pins.found.append(entry.direct(str(source["path"]), sha256=sha))
        elif "editable" in source:
            pins.found.append(entry.direct(str(source["editable"]), editable=True))
        elif "directory" in source:
            pins.found.append(entry.direct(str(source["directory"])))
        elif "git" in source:
            pins.found.append(entry.direct(f"git+{source['git']}"))
        else:
            pins.found.append(entry.uncheckable(f"unknown source {source!r}"))
    return pins


def read_poetry_lock(path: Path) -> Pins:
    pins = Pins()
    for entry in _entries(path, "package"):
        source = entry.data.get("source") or {}
        kind = source.get("type", "")
        url = str(source.get("url", ""))
        files = entry.data.get("files", [])
        hashes = {f.get("file"): _sha256(f.get("hash")) for f in files if isinstance(f, dict)}
        if kind in ("", "legacy"):
            pins.found.append(entry.pinned())
        elif kind in ("url", "file"):
            pins.found.append(entry.direct(url, sha256=hashes.get(url.rsplit("/", 1)[-1])))
        elif kind == "directory":
            pins.found.append(entry.direct(url, editable=bool(entry.data.get("develop"))))
        elif kind == "git":
            pins.found.append(entry.direct(f"git+{url}"))
        else:
            pins.found.append(entry.uncheckable(f"unknown source type {kind!r}"))
    return pins


def _pylock_wheel_version(wheels: Any) -> Optional[str]:
    """The version in the first wheel file name of a pylock entry (its
    ``name``, else the last part of its URL or path), or ``None``."""
    for wheel in wheels or ():
        name = wheel.name or str(wheel.url or wheel.path or "").rsplit("/", 1)[-1]
        try:
            return str(parse_wheel_filename(name)[1])
        except (InvalidWheelFilename, ValueError):
            continue
    return None


def read_pylock(path: Path) -> Pins:
    """PEP 751's model of the file is ``packaging.pylock`` (the guard's extra),
    which validates the whole lock first: a file it refuses is a
    :class:`~..errors.RequirementsError` (exit 2) naming what is wrong."""
    pylock = extra.module("packaging.pylock")
    data = load_toml(path)
    try:
        lock = pylock.Pylock.from_dict(data)
    except pylock.PylockValidationError as exc:  # PylockUnsupportedVersionError too
        raise RequirementsError(f"{path}: not a valid PEP 751 lock file: {exc}") from None
    # Package i of the model is [[packages]] i of the file, which keeps the
    # marker as written (for the report) and locates the entry's line.
    ours = [(package, raw) for package, raw in zip(lock.packages, data["packages"]) if package.name == DISTRIBUTION]
    lines = LineIndex(path.read_bytes().decode("utf-8-sig"))
    pins = Pins()
    for number, (package, raw) in enumerate(ours, start=1):
        entry = _Entry(path, lines, number, raw)
        marker = entry.data.get("marker") if isinstance(entry.data.get("marker"), str) else None
        if package.vcs is not None:
            vcs = package.vcs
            pins.found.append(entry.direct(f"{vcs.type}+{vcs.url or vcs.path}", marker=marker))
        elif package.directory is not None:
            directory = package.directory
            pins.found.append(entry.direct(directory.path, editable=bool(directory.editable), marker=marker))
        elif package.archive is not None:
            archive = package.archive
            target = str(archive.url or archive.path)
            pins.found.append(entry.direct(target, sha256=_sha256(dict(archive.hashes)), marker=marker))
        elif package.wheels or package.sdist is not None:
            version = str(package.version) if package.version is not None else _pylock_wheel_version(package.wheels)
            pins.found.append(entry.pinned(marker, version=version))
        else:
            pins.found.append(entry.uncheckable("it names no wheels, sdist, archive, VCS or directory", marker))
    return pins


READERS: dict[str, Callable[[Path], Pins]] = {
    "uv-lock": read_uv_lock,
    "poetry-lock": read_poetry_lock,
    "pylock": read_pylock,
}
