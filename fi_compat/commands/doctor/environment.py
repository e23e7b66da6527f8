"""Doctor sections about the environment: fi_compat, Python, torch, flashinfer (release and import)."""

from __future__ import annotations

import importlib
import os
import platform
import sys
from typing import Any, Optional

from ..._version import __version__
from ...release_detection import detect_release, package_directories
from ...specs import CORE_MODULE

TORCH_KEYS = ("installed", "version", "cuda_build", "device", "device_name", "capability", "error")
FLASHINFER_KEYS = ("release", "detected_from", "metadata_version", "build_meta_version", "module_version", "notes",
                   "package_dir", "imported", "import_mode", "import_error")

NOT_IMPORTED_HERE = "not imported in this process"
NOT_ATTEMPTED = "not attempted (--no-import)"


def fi_compat_section() -> dict[str, Any]:
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {"version": __version__, "path": package}


def python_section() -> dict[str, Any]:
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable, "platform": platform.platform()}


def torch_section(*, may_import: bool) -> dict[str, Any]:
    """torch's version and device.  ``may_import=False``: read an already
    imported torch only (the in-process report imports nothing)."""
    info: dict[str, Any] = dict.fromkeys(TORCH_KEYS)
    info["installed"] = False
    if not may_import and "torch" not in sys.modules:
        info["installed"] = None
        info["error"] = NOT_IMPORTED_HERE
        return info
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
        info["error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["installed"] = True
    info["version"] = getattr(torch, "__version__", None)
    info["cuda_build"] = getattr(torch.version, "cuda", None)
    try:
        if torch.cuda.is_available():
            info["device"] = "cuda"
            info["device_name"] = torch.cuda.get_device_name(0)
            major, minor = torch.cuda.get_device_capability(0)
            info["capability"] = f"{major}.{minor}"
        else:
            info["device"] = "cpu"
    except Exception as exc:  # noqa: BLE001
        info["device"] = "unknown"
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def import_flashinfer(cpu_shim: bool = False) -> Optional[str]:
    """Import flashinfer's MLA module; ``None`` on success, else the error in words.

    A failed import leaves half-initialised submodules in ``sys.modules``
    (``flashinfer.mla._core`` loads before ``flashinfer/__init__`` fails on a
    CPU-only torch); those the attempt added are removed again, so neither
    doctor nor a later ``install()`` mistakes them for a working flashinfer.
    """
    before = set(sys.modules)
    try:
        if cpu_shim:
            from ...testing import cpu_host

            with cpu_host():
                importlib.import_module(CORE_MODULE)
        else:
            importlib.import_module(CORE_MODULE)
    except BaseException as exc:  # noqa: BLE001 - AssertionError/RuntimeError from CUDA probing included
        if isinstance(exc, KeyboardInterrupt):
            raise
        for name in set(sys.modules) - before:
            if name == "flashinfer" or name.startswith("flashinfer."):
                del sys.modules[name]
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return None


def flashinfer_section(*, attempt_import: bool, torch_importable: bool, cpu_shim: bool,
                       not_attempted: str = NOT_ATTEMPTED) -> dict[str, Any]:
    """The release (from the files, without importing) and whether flashinfer
    is imported; imports it first when ``attempt_import`` and it is not
    (``not_attempted`` says why it was not)."""
    directories = package_directories()
    package_dir = directories[0] if directories else None
    import_error: Optional[str] = None
    import_mode = "already-imported" if CORE_MODULE in sys.modules else None
    if import_mode is None and package_dir is not None:
        if attempt_import and torch_importable:
            import_error = import_flashinfer(cpu_shim)
            import_mode = None if import_error else ("cpu-shim" if cpu_shim else "imported")
        elif not attempt_import:
            import_error = not_attempted
        else:
            import_error = "not attempted: torch is not importable"
    release = detect_release()
    imported = sys.modules.get(CORE_MODULE) is not None
    if not imported and import_error is None:
        import_error = "flashinfer is not installed" if package_dir is None else NOT_IMPORTED_HERE
    return {
        "release": None if release.version is None else str(release.version),
        "detected_from": release.source,
        "metadata_version": release.metadata_version,
        "build_meta_version": release.build_meta_version,
        "module_version": release.module_version,
        "notes": list(release.notes),
        "package_dir": package_dir,
        "imported": imported,
        "import_mode": import_mode if imported else None,
        "import_error": None if imported else import_error,
    }


__all__ = ["FLASHINFER_KEYS", "NOT_ATTEMPTED", "NOT_IMPORTED_HERE", "TORCH_KEYS", "fi_compat_section", "flashinfer_section",
           "import_flashinfer", "python_section", "torch_section"]
