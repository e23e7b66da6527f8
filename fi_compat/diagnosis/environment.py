"""Doctor sections about the environment: fi_compat, Python, torch, flashinfer (release and import)."""

from __future__ import annotations

import importlib
import os
import platform
import sys
from typing import Any, Optional

from .._version import __version__
from ..model.release_detection import detect_release, package_directories
from ..lookup.modules import loaded
from ..model.specs import CORE_MODULE, PACKAGE

TORCH_KEYS = ("installed", "version", "cuda_build", "device", "device_name", "capability", "error")
FLASHINFER_KEYS = (
    "release",
    "detected_from",
    "metadata_version",
    "build_meta_version",
    "module_version",
    "notes",
    "package_dir",
    "imported",
    "import_mode",
    "import_error",
)

NOT_IMPORTED_HERE = "not imported in this process"
NOT_ATTEMPTED = "not attempted (--no-import)"
FAILED_HERE = "import failed in this process"  # the start of import_error after a failed `import flashinfer`


def fi_compat_section() -> dict[str, Any]:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {"version": __version__, "path": package}


def python_section() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
    }


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
            from ..workload import cpu_host

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


def _flashinfer_modules() -> list[str]:
    return [
        name
        for name, module in sys.modules.items()
        if module is not None and (name == PACKAGE or name.startswith(PACKAGE + "."))
    ]


def flashinfer_imported() -> bool:
    """Whether flashinfer's MLA module is imported *and* the package itself is.

    Python removes a package from ``sys.modules`` when its ``__init__`` raises,
    but keeps the submodules that finished loading before it did (0.6.18's
    ``flashinfer/__init__.py`` loads ``flashinfer.mla._core`` and 160-odd
    others, then fails on a CPU-only torch).  Those leftovers are not a working
    flashinfer: reading them would report rows of a verified release as
    missing, because the modules that failed never loaded."""
    return loaded(PACKAGE) is not None and loaded(CORE_MODULE) is not None


def _raised_by_flashinfer(exc: Optional[BaseException], package_dir: Optional[str]) -> bool:
    if exc is None:
        return False
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == PACKAGE:
        return True
    if package_dir is None:
        return False
    root = os.path.normcase(os.path.abspath(package_dir)) + os.sep
    tb = exc.__traceback__
    while tb is not None:
        if os.path.normcase(os.path.abspath(tb.tb_frame.f_code.co_filename)).startswith(root):
            return True
        tb = tb.tb_next
    return False


def recorded_import_error(package_dir: Optional[str]) -> Optional[str]:
    """The exception a failed ``import flashinfer`` raised, when this process
    still holds it, in words; else ``None``.

    Python keeps no record of a failed import.  What can still hold it: the
    exception being handled (``doctor_report()`` called from the ``except``
    around ``import flashinfer``) and the last one that reached the
    interactive prompt (``sys.last_exc`` / ``sys.last_value``).  One of them
    counts when its traceback runs through the flashinfer package (or it is an
    ImportError of a flashinfer module), so an unrelated error is not blamed
    on flashinfer.  Cost: a walk over at most three tracebacks."""
    candidates = (sys.exc_info()[1], getattr(sys, "last_exc", None), getattr(sys, "last_value", None))
    for exc in candidates:
        if _raised_by_flashinfer(exc, package_dir):
            assert exc is not None
            first = str(exc).splitlines()[0] if str(exc) else ""
            return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return None


def failed_import(package_dir: Optional[str]) -> Optional[str]:
    """``import_error`` for a process whose ``import flashinfer`` failed
    earlier, or ``None`` when there is no sign of that.

    The sign is flashinfer submodules in ``sys.modules`` without the package
    (see :func:`flashinfer_imported`).  A failure before any submodule loaded
    leaves no trace and reads as "not imported in this process".  Reads
    ``sys.modules`` only; imports nothing."""
    if loaded(PACKAGE) is not None:
        return None
    leftovers = _flashinfer_modules()
    if not leftovers:
        return None
    error = recorded_import_error(package_dir)
    cause = (
        f"it raised {error}"
        if error is not None
        else "the error itself is not recorded anywhere this report can read (log it where `import flashinfer` "
        "is caught, or run `fi-compat doctor`, which imports flashinfer itself and shows it)"
    )
    example = CORE_MODULE if CORE_MODULE in leftovers else sorted(leftovers)[0]
    return (
        f"{FAILED_HERE}: {len(leftovers)} flashinfer submodules are loaded (such as {example}) "
        f"but the flashinfer package is not, which is what a raising flashinfer/__init__.py leaves; {cause}"
    )


def flashinfer_section(
    *, attempt_import: bool, torch_importable: bool, cpu_shim: bool, not_attempted: str = NOT_ATTEMPTED
) -> dict[str, Any]:
    """The release (from the files, without importing) and whether flashinfer
    is imported; imports it first when ``attempt_import`` and it is not
    (``not_attempted`` says why it was not)."""
    directories = package_directories()
    package_dir = directories[0] if directories else None
    import_error: Optional[str] = failed_import(package_dir)
    import_mode = "already-imported" if flashinfer_imported() else None
    if import_mode is None and package_dir is not None and import_error is None:
        if attempt_import and torch_importable:
            import_error = import_flashinfer(cpu_shim)
            import_mode = None if import_error else ("cpu-shim" if cpu_shim else "imported")
        elif not attempt_import:
            import_error = not_attempted
        else:
            import_error = "not attempted: torch is not importable"
    release = detect_release()
    imported = flashinfer_imported()
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


__all__ = [
    "FAILED_HERE",
    "FLASHINFER_KEYS",
    "NOT_ATTEMPTED",
    "NOT_IMPORTED_HERE",
    "TORCH_KEYS",
    "failed_import",
    "fi_compat_section",
    "flashinfer_imported",
    "flashinfer_section",
    "import_flashinfer",
    "python_section",
    "recorded_import_error",
    "torch_section",
]
