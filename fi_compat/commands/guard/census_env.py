"""The throwaway environment of ``fi-compat guard --census``.

The candidate wheel is installed with ``pip install --no-deps --no-index
--target DIR WHEEL`` into a temporary directory, and the probe runs with DIR
first on ``PYTHONPATH``: an overlay over the guard's own interpreter, which
supplies torch and flashinfer's other dependencies (installing torch per check
would take minutes and gigabytes).  Nothing is installed anywhere else, nothing
is downloaded (the wheel is a local file: the guard's wheel cache or
``--find-links``), and the directory is removed afterwards.

What the guard's interpreter must hold (checked by :func:`requirements_missing`
before anything is installed; an absence is a :class:`CensusError`, exit 2):

* ``pip``, to install the wheel;
* ``torch`` (a CPU build is enough), importable;
* every distribution the wheel's METADATA ``Requires-Dist`` names for this
  interpreter (markers evaluated, no extras), ``flashinfer-python`` itself
  excepted: what ``pip install flashinfer-python==X`` would have installed.
  A version outside the wheel's specifier is a note, not an error: the census
  runs on what is installed, and says so.

The probe's environment (:func:`probe_environment`) keeps the caller's, with
the overlay and fi_compat's own location put first on ``PYTHONPATH``, every
``FI_COMPAT_*`` variable removed (the probe installs fi_compat itself, with
defaults), flashinfer's workspace, the XDG cache and the temporary directory
pointed into the throwaway directory (so nothing lands in ``~/.cache`` or
``/tmp``: the CuTe DSL keeps a cache in ``$TMPDIR/$USER``), no bytecode written,
and flashinfer's cubin-package version check off (no kernel is loaded under
the CPU-host shim).
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from . import DISTRIBUTION
from .errors import GuardError
from .pip import run_pip

INSTALL_TIMEOUT_S = 600.0


class CensusError(GuardError):
    """The census could not run: a missing dependency, an install or probe failure."""


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` that apply to this interpreter without extras."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if not names:
                raise CensusError(f"{wheel}: no *.dist-info/METADATA; cannot tell what flashinfer needs")
            text = archive.read(names[0]).decode("utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile) as exc:
        raise CensusError(f"{wheel}: unreadable wheel: {exc}") from None
    wanted = []
    for line in HeaderParser().parsestr(text).get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(requirement.name) != canonicalize_name(DISTRIBUTION):
            wanted.append(requirement)
    return wanted


def requirements_missing(wheel: Path) -> tuple[list[str], list[str]]:
    """``(missing, notes)``: what this interpreter lacks to run the census of
    ``wheel``, and versions outside the wheel's specifiers (notes)."""
    missing: list[str] = []
    notes: list[str] = []
    for module in ("pip", "torch"):
        if importlib.util.find_spec(module) is None:
            missing.append(f"{module} (not importable)")
    for requirement in wheel_requirements(wheel):
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            if canonicalize_name(requirement.name) != "torch" or importlib.util.find_spec("torch") is None:
                missing.append(str(requirement))
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            notes.append(f"{requirement.name} {version} is installed; the wheel asks for {requirement}")
    return list(dict.fromkeys(missing)), notes


def missing_message(release: str, missing: list[str]) -> str:
    return (
        f"--census needs pip, torch and flashinfer-python {release}'s dependencies in the Python that runs "
        f"the guard (they are reused; the guard installs nothing there); missing: {', '.join(missing)}. "
        f"Run the guard with the Python of your serving environment, or install them into this one "
        f"(`pip install 'flashinfer-python=={release}'` brings all of them)"
    )


def install_overlay(wheel: Path, target: Path, timeout: float = INSTALL_TIMEOUT_S) -> None:
    """``pip install --no-deps --no-index --target`` of one wheel file; offline by construction."""
    arguments = [
        "install",
        "--no-deps",
        "--no-index",
        "--no-compile",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--quiet",
        "--target",
        str(target),
        str(wheel),
    ]
    run_pip(
        arguments,
        what=f"pip install --target of {wheel.name}",
        timeout=timeout,
        error=CensusError,
        env={**_without_settings(os.environ), "PIP_NO_INPUT": "1"},
    )


def fi_compat_root() -> Path:
    """The directory that holds the running ``fi_compat`` package."""
    return Path(__file__).resolve().parents[3]


def _without_settings(environ: "os._Environ[str] | dict[str, str]") -> dict[str, str]:
    return {k: v for k, v in environ.items() if not k.startswith("FI_COMPAT_")}


def probe_environment(overlay: Path, scratch: Path, environ: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The probe's environment: the caller's, with the overlay first (see the module docstring)."""
    env = _without_settings(os.environ if environ is None else environ)
    rest = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(overlay), str(fi_compat_root()), rest) if p)
    env["FLASHINFER_WORKSPACE_BASE"] = str(scratch)
    env["XDG_CACHE_HOME"] = str(scratch / "cache")
    temporary = scratch / "tmp"  # the CuTe DSL keeps a cache under $TMPDIR/$USER
    temporary.mkdir(exist_ok=True)
    env["TMPDIR"] = env["TMP"] = env["TEMP"] = str(temporary)
    env["FLASHINFER_DISABLE_VERSION_CHECK"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


__all__ = [
    "CensusError",
    "fi_compat_root",
    "install_overlay",
    "missing_message",
    "probe_environment",
    "requirements_missing",
    "wheel_requirements",
]
