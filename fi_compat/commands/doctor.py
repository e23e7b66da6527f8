"""``fi-compat doctor``: one screen to paste into a bug report.

What it shows: fi_compat, Python, torch (version, CUDA or CPU), the
flashinfer release and how it was detected, the adapter and why, every
expected signature (ok, or the difference), what is installed (fi_compat's
patches, TensorRT-LLM's workaround, both), cache statistics and the active
configuration with the source of each value.  docs/doctor.md explains each
line and what to do about it.

Side effects, decided once:

* doctor never patches anything unless ``--install`` is given; then it runs
  :func:`fi_compat.install` *in the doctor process* (settings from the
  environment) and reports the result: what install would do in your
  process, without touching your process;
* it tries ``import flashinfer.mla`` (what your application would do) so the
  signatures are checked on the live functions; ``--no-import`` skips that.
  When flashinfer is missing or cannot import (a CPU-only host, a broken
  install) the signatures are read from the source with :mod:`ast` instead
  and ``problems`` says what could not be done.

:func:`gather` returns the report as a dict with a fixed set of keys
(:data:`SCHEMA_VERSION`, :data:`TOP_LEVEL_KEYS`); ``--json`` prints it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys
from typing import Any, Optional

from .. import config
from .._version import __version__

SCHEMA_VERSION = 1
"""Bump when a key is removed or changes meaning; adding keys inside a section does not."""

TOP_LEVEL_KEYS = (
    "schema_version", "fi_compat", "python", "torch", "flashinfer", "adapter", "signatures",
    "installed", "caches", "settings", "install_result", "problems",
)
SECTION_KEYS = {
    "fi_compat": ("version", "path"),
    "python": ("version", "implementation", "executable", "platform"),
    "torch": ("installed", "version", "cuda_build", "device", "device_name", "capability", "error"),
    "flashinfer": ("release", "detected_from", "metadata_version", "build_meta_version", "module_version",
                   "notes", "package_dir", "imported", "import_mode", "import_error"),
    "adapter": ("name", "outcome", "reason", "verified_range", "summary", "probe"),
    "installed": ("state", "fi_compat_patches", "trtllm_workaround", "trtllm_package", "summary"),
    "caches": ("fi_compat", "flashinfer"),
}
SIGNATURE_KEYS = ("adapter", "selected", "function", "status", "checked_on", "where", "difference", "expected", "found")
SETTING_KEYS = ("value", "source", "env", "error")


def _python() -> dict[str, Any]:
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable, "platform": platform.platform()}


def _torch() -> dict[str, Any]:
    info: dict[str, Any] = dict.fromkeys(SECTION_KEYS["torch"])
    info["installed"] = False
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


def _import_flashinfer(cpu_shim: bool = False) -> Optional[str]:
    """Import flashinfer's MLA module; ``None`` on success, else the error in words.

    A failed import leaves half-initialised submodules in ``sys.modules``
    (``flashinfer.mla._core`` loads before ``flashinfer/__init__`` fails on a
    CPU-only torch); those the attempt added are removed again, so neither
    doctor nor a later ``install()`` mistakes them for a working flashinfer.
    """
    before = set(sys.modules)
    try:
        if cpu_shim:
            from ..testing import cpu_host

            with cpu_host():
                importlib.import_module("flashinfer.mla._core")
        else:
            importlib.import_module("flashinfer.mla._core")
    except BaseException as exc:  # noqa: BLE001 - AssertionError/RuntimeError from CUDA probing included
        if isinstance(exc, KeyboardInterrupt):
            raise
        for name in set(sys.modules) - before:
            if name == "flashinfer" or name.startswith("flashinfer."):
                del sys.modules[name]
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return None


def _source_lookup(package_dir: Optional[str]):
    """A signature lookup that reads ``flashinfer/<module>.py`` with ast (nothing imported)."""
    from ..signatures import find_function_in_source

    parsed: dict[str, Optional[str]] = {}

    def lookup(spec):
        if package_dir is None:
            return None
        relative = spec.module.split(".", 1)[1].replace(".", os.sep) + ".py"
        path = os.path.join(package_dir, relative)
        if path not in parsed:
            try:
                with open(path, encoding="utf-8") as handle:
                    parsed[path] = handle.read()
            except OSError:
                parsed[path] = None
        text = parsed[path]
        return None if text is None else find_function_in_source(text, spec.name, filename=path)

    return lookup


def _settings() -> tuple[dict[str, Any], list[str]]:
    from .. import installer

    problems: list[str] = []
    if installer.status()["state"] != "not-installed":
        resolved = {n: s for n, s in installer.settings().items()}
        return ({n: {"value": s.value, "source": s.source, "env": s.env_var, "error": None}
                 for n, s in resolved.items()}, problems)
    out: dict[str, Any] = {}
    for name, (env_var, _default, _validate) in config._SPECS.items():
        try:
            setting = config.resolve(name)
        except ValueError as exc:
            out[name] = {"value": None, "source": "environment", "env": env_var, "error": str(exc)}
            problems.append(f"setting {name}: {exc}; install() would raise ValueError")
            continue
        out[name] = {"value": setting.value, "source": setting.source, "env": setting.env_var, "error": None}
    return out, problems


def gather(*, import_flashinfer: bool = True, install: bool = False, cpu_shim: bool = False) -> dict[str, Any]:
    """The doctor report as a JSON-ready dict (keys: :data:`TOP_LEVEL_KEYS`).

    ``import_flashinfer``: try ``import flashinfer.mla`` when it is not
    imported yet.  ``install``: run :func:`fi_compat.install` here first.
    Never raises for a missing or broken flashinfer or torch: what could not
    be done goes to ``problems``.
    """
    from .. import installer
    from ..adapters import ADAPTERS, select
    from ..adapters.base import carries_trtllm_marker
    from ..specs import CORE_MODULE
    from .audit.scan import installed_package_dir
    from ..release_detection import detect_release
    from ..signatures import compare

    problems: list[str] = []
    report: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    report["fi_compat"] = {"version": __version__, "path": os.path.dirname(os.path.abspath(__file__))}
    report["python"] = _python()
    report["torch"] = _torch()
    if not report["torch"]["installed"]:
        problems.append(f"torch is not importable ({report['torch']['error']}); flashinfer cannot run")

    package_dir = installed_package_dir()
    release = detect_release()
    import_error: Optional[str] = None
    import_mode = "already-imported" if CORE_MODULE in sys.modules else None
    if CORE_MODULE not in sys.modules and package_dir is not None:
        if import_flashinfer and report["torch"]["installed"]:
            import_error = _import_flashinfer(cpu_shim)
            import_mode = None if import_error else ("cpu-shim" if cpu_shim else "imported")
        elif not import_flashinfer:
            import_error = "not attempted (--no-import)"
        else:
            import_error = "not attempted: torch is not importable"
        release = detect_release()
    core = sys.modules.get(CORE_MODULE) if import_error is None else None
    report["flashinfer"] = {
        "release": None if release.version is None else str(release.version),
        "detected_from": release.source,
        "metadata_version": release.metadata_version,
        "build_meta_version": release.build_meta_version,
        "module_version": release.module_version,
        "notes": list(release.notes),
        "package_dir": package_dir,
        "imported": core is not None,
        "import_mode": import_mode,
        "import_error": None if core is not None else (import_error or "flashinfer is not installed"),
    }
    if package_dir is None and release.version is None:
        problems.append("flashinfer is not installed: no release, no signatures, nothing to patch")
    elif core is None:
        problems.append(f"flashinfer could not be imported ({report['flashinfer']['import_error']}); "
                        "signatures were read from the source with ast, the feature probe and the "
                        "TensorRT-LLM workaround check were not run")

    live = core is not None
    lookup = installer.live_lookup if live else _source_lookup(package_dir)
    checked_on = "live" if live else "source"

    # Adapter: the installed one if any, else what install() would choose.
    state = installer.status()
    selection = select(release.version, lookup)
    adapter = selection.adapter
    probe: Optional[str] = None
    if adapter is not None and live:
        try:
            problem = adapter.probe(core)
            probe = "ok" if problem is None else problem
        except Exception as exc:  # noqa: BLE001
            probe = f"raised {type(exc).__name__}: {exc}"
    elif adapter is not None:
        probe = "not run (flashinfer not imported)"
    report["adapter"] = {
        "name": state["adapter"] or selection.adapter_name,
        "outcome": state["outcome"] or selection.outcome,
        "reason": state["reason"] or selection.reason,
        "verified_range": None if adapter is None else str(adapter.verified),
        "summary": None if adapter is None else adapter.summary,
        "probe": probe,
    }

    signatures = []
    for candidate in ADAPTERS:
        for spec, _ in candidate.functions:
            found = lookup(spec)
            mismatch = compare(spec, found)
            signatures.append({
                "adapter": candidate.name,
                "selected": candidate is adapter or adapter is None,
                "function": spec.qualname,
                "status": "ok" if mismatch is None else ("missing" if found is None else "mismatch"),
                "checked_on": checked_on,
                "where": None if found is None else (found.where or "live"),
                "difference": None if mismatch is None else mismatch.difference,
                "expected": spec.expected_text(),
                "found": None if found is None else found.text(),
            })
    report["signatures"] = signatures

    install_result: Optional[dict[str, Any]] = None
    if install:
        try:
            install_result = {"ok": True, "status": installer.install(), "error": None}
        except Exception as exc:  # noqa: BLE001 - strict mode or invalid settings
            install_result = {"ok": False, "status": None, "error": f"{type(exc).__name__}: {exc}"}
        state = installer.status()
    report["install_result"] = install_result

    builder = getattr(core, "_build_mla_decode_tuning_config", None)
    trtllm = carries_trtllm_marker(builder) if live else None
    patched = list(state["patched"])
    if patched and trtllm:
        summary = "both"
    elif patched:
        summary = "fi_compat"
    elif trtllm:
        summary = "trtllm"
    elif live:
        summary = "none"
    else:
        summary = "unknown"
    try:
        trtllm_package = importlib.util.find_spec("tensorrt_llm") is not None
    except (ImportError, ValueError):
        trtllm_package = False
    report["installed"] = {"state": state["state"], "fi_compat_patches": patched, "trtllm_workaround": trtllm,
                           "trtllm_package": trtllm_package, "summary": summary}

    flashinfer_cache = None
    memo = getattr(core, "_mla_decode_tuning_config", None)
    if memo is not None and callable(getattr(memo, "cache_info", None)):
        info = memo.cache_info()
        flashinfer_cache = {"function": f"{CORE_MODULE}._mla_decode_tuning_config",
                            "bounded_by_fi_compat": bool(getattr(memo, "_fi_compat_wrapper", False)),
                            "currsize": info.currsize, "maxsize": info.maxsize,
                            "hits": info.hits, "misses": info.misses}
    report["caches"] = {"fi_compat": state["caches"], "flashinfer": flashinfer_cache}

    settings, setting_problems = _settings()
    report["settings"] = settings
    problems += setting_problems
    if selection.outcome == "unsupported" and release.version is not None:
        problems.append(f"no adapter fits: {selection.reason}")
    report["problems"] = problems
    return report


def _line(label: str, value: Any) -> str:
    return f"{label:<22}{value}"


def format_text(report: dict[str, Any]) -> str:
    fi, torch, adapter, installed = report["flashinfer"], report["torch"], report["adapter"], report["installed"]
    lines = [f"fi-compat doctor (schema {report['schema_version']})", ""]
    lines.append(_line("fi_compat", f"{report['fi_compat']['version']} ({report['fi_compat']['path']})"))
    py = report["python"]
    lines.append(_line("python", f"{py['version']} {py['implementation']} ({py['executable']})"))
    lines.append(_line("platform", py["platform"]))
    if torch["installed"]:
        device = torch["device"]
        if device == "cuda":
            device = f"CUDA {torch['device_name']} (sm {torch['capability']})"
        elif device == "cpu":
            device = "CPU only (no CUDA device visible)"
        lines.append(_line("torch", f"{torch['version']} (CUDA build: {torch['cuda_build'] or 'none'}); {device}"))
    else:
        lines.append(_line("torch", f"not importable: {torch['error']}"))
    release = fi["release"] or "not installed"
    lines.append(_line("flashinfer", f"{release} (detected from {fi['detected_from']}; metadata "
                       f"{fi['metadata_version']}, _build_meta {fi['build_meta_version']}, module "
                       f"{fi['module_version']})"))
    for note in fi["notes"]:
        lines.append(_line("", f"note: {note}"))
    lines.append(_line("flashinfer import", f"ok ({fi['import_mode']})" if fi["imported"] else f"failed/skipped: {fi['import_error']}"))
    lines.append(_line("adapter", f"{adapter['name'] or 'none'} ({adapter['outcome']})"))
    if adapter["reason"]:
        lines.append(_line("", adapter["reason"]))
    if adapter["probe"]:
        lines.append(_line("feature probe", adapter["probe"]))
    lines.append("")
    lines.append("signatures (checked on %s):" % (report["signatures"][0]["checked_on"] if report["signatures"] else "-"))
    others = [e for e in report["signatures"] if not e["selected"]]
    for entry in report["signatures"]:
        if entry["selected"]:
            lines.append(_signature_line(entry))
    if others:
        lines.append("  other adapters' layouts (informational; differences expected):")
        lines.extend("  " + _signature_line(e) for e in others)
    lines.append("")
    trt = {True: "present", False: "absent", None: "unknown (flashinfer not imported)"}[installed["trtllm_workaround"]]
    lines.append(_line("state", installed["state"]))
    lines.append(_line("fi_compat patches", ", ".join(installed["fi_compat_patches"]) or "none"))
    lines.append(_line("TensorRT-LLM memo", f"{trt} (tensorrt_llm package "
                       f"{'installed' if installed['trtllm_package'] else 'not installed'})"))
    lines.append(_line("installed", installed["summary"]))
    caches = report["caches"]
    for name, stats in (caches["fi_compat"] or {}).items():
        lines.append(_line(f"cache {name}", f"{stats['currsize']}/{stats['maxsize']} entries, {stats['hits']} hits, "
                           f"{stats['misses']} misses, {stats['evictions']} evictions, ~{stats['approx_bytes']} B"))
    if caches["flashinfer"] is not None:
        fc = caches["flashinfer"]
        lines.append(_line("flashinfer memo", f"{fc['currsize']} entries (maxsize {fc['maxsize']}); "
                           f"{'bounded by fi_compat' if fc['bounded_by_fi_compat'] else 'unbounded'}"))
    lines.append("")
    lines.append("settings:")
    for name, setting in report["settings"].items():
        if setting["error"]:
            lines.append(f"  {name:<20}INVALID ({setting['env']}): {setting['error']}")
        else:
            lines.append(f"  {name:<20}{setting['value']!r:<12} from {setting['source']} ({setting['env']})")
    if report["install_result"] is not None:
        result = report["install_result"]
        lines.append("")
        lines.append("install (--install, in this doctor process only): " +
                     ("ok" if result["ok"] else f"failed: {result['error']}"))
    if report["problems"]:
        lines.append("")
        lines.append("could not / problems:")
        lines.extend(f"  - {p}" for p in report["problems"])
    lines.append("")
    lines.append("What each line means: docs/doctor.md")
    return "\n".join(lines)


def _signature_line(entry: dict[str, Any]) -> str:
    verdict = "ok" if entry["status"] == "ok" else f"{entry['status'].upper()}: {entry['difference']}"
    where = f" ({entry['where']})" if entry["where"] and entry["where"] != "live" else ""
    return f"  [{entry['adapter']}] {entry['function']}{where}: {verdict}"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="report fi_compat, torch, flashinfer, adapter, signatures, patches and settings",
        description="One screen for a bug report. Patches nothing unless --install. See docs/doctor.md.",
    )
    parser.add_argument("--json", action="store_true", help=f"print JSON (schema_version {SCHEMA_VERSION})")
    parser.add_argument("--install", action="store_true",
                        help="run fi_compat.install() in the doctor process first and report the result "
                             "(shows what install would do; your application is not affected)")
    parser.add_argument("--no-import", action="store_true",
                        help="do not import flashinfer; check signatures from the source with ast")
    parser.add_argument("--cpu-shim", action="store_true",
                        help="import flashinfer under fi_compat.testing.cpu_host() (CPU-only CI): live "
                             "signatures, feature probe and TensorRT-LLM check on a host without a GPU")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = gather(import_flashinfer=not args.no_import, install=args.install, cpu_shim=args.cpu_shim)
    print(json.dumps(report, indent=2, default=str) if args.json else format_text(report))
    return 0
