"""``fi_compat.status()``: the installer's state as a JSON-ready dict.

Next to each fi_compat cache it shows the flashinfer cache it stands in for,
counted from flashinfer's own object (``cache_info()`` of the original
``functools.cache``), so a leak cannot hide behind a proxy: a call that
reached flashinfer's cache directly would show there as entries.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from .._version import __version__
from ..config import DEFAULT_CACHE_SIZE
from ..counting import memory_census
from ..verdict.judgement import BOUND, ReleaseVerdict, decide
from ..lookup import find_live, foreign_memo
from ..lookup.modules import loaded
from ..memo.proxies import is_fi_compat_proxy
from ..model.release_detection import detect_release
from ..model.signatures import compare
from ..model.specs import CORE_MODULE, DECODE, TUNING_CONFIG_BUILDER
from .state import Snapshot


def _flashinfer_cache(verdict: Any) -> Optional[dict[str, Any]]:
    """flashinfer's own cache behind a row: its size now, whatever fi_compat did."""
    found = verdict.found
    if found is None or found.obj is None:
        return None
    # the cache under flashinfer's decorators, if that is where it sits
    original = found.site.cache if found.site is not None else getattr(found.obj, "_fi_compat_original", found.obj)
    info = getattr(original, "cache_info", None)
    if not callable(info):
        return None
    try:
        counted = info()
    except Exception:  # noqa: BLE001
        return None
    return {"currsize": counted.currsize, "maxsize": counted.maxsize}


def _outcome(snap: Snapshot) -> Optional[str]:
    if not snap.verdicts:
        return None
    version = None if snap.release is None else snap.release.version
    decode = find_live(DECODE)  # the imported modules only: status() imports nothing
    call_api = None if decode is None else compare(DECODE, decode.function, version)
    return decide(ReleaseVerdict(version, tuple(snap.verdicts.values()), call_api)).outcome.value


def _trtllm(snap: Snapshot) -> dict[str, Any]:
    core = loaded(CORE_MODULE)
    current = getattr(core, TUNING_CONFIG_BUILDER.name, None)
    present = foreign_memo(current) is not None
    position = None
    if present:
        if is_fi_compat_proxy(current):
            position = "inside fi_compat's builder memo"  # it came first: fi_compat memoizes around it
        elif snap.installation is not None and "builder" in snap.verdicts and snap.verdicts["builder"].kind == BOUND:
            position = "around fi_compat's builder memo"  # it came second and wrapped fi_compat's proxy
        else:
            position = "alone"
    return {"present": present, "position": position}


def summary_line(snap: Snapshot) -> str:
    """The line a user greps in serving logs: release, process, what is bounded
    (with each bound's size), what waits for its module, what was left alone,
    and TensorRT-LLM's builder memo when it is already in place."""
    caches = {} if snap.installation is None else snap.installation.caches
    bound, other = [], []
    for name, verdict in snap.verdicts.items():
        if verdict.kind != BOUND:
            other.append(f"{name}: {verdict.kind}" + (" until imported" if name in snap.waiting else ""))
        elif name not in snap.waiting:
            bound.append(f"{name} ({caches[name].maxsize})" if name in caches else name)
    parts = [f"flashinfer {snap.release}", f"pid {os.getpid()}", f"bounded: {', '.join(bound) or '-'}"]
    waiting = sorted(name for name in snap.waiting if snap.verdicts[name].kind == BOUND)
    if waiting:
        parts.append(f"bounded when imported: {', '.join(waiting)}")
    if other:
        parts.append("; ".join(other))
    workaround = _trtllm(snap)
    if workaround["present"]:
        parts.append(f"TensorRT-LLM's workaround: {workaround['position']}")
    return "; ".join(parts)


def render(snap: Snapshot) -> dict[str, Any]:
    release = snap.release or detect_release()
    installation = snap.installation
    caches = {} if installation is None else {name: c.stats().as_dict() for name, c in installation.caches.items()}
    patched_by_name: dict[str, list[str]] = {}
    for step in [] if installation is None else installation.steps():
        patched_by_name.setdefault(step.name, []).extend(step.where())
    bounds = []
    for name, verdict in snap.verdicts.items():
        row = verdict.as_dict()
        row["waiting_for"] = snap.waiting.get(name)
        row["patched"] = patched_by_name.get(verdict.bound.spec.qualname, [])
        row["fi_compat"] = caches.get(name)
        row["flashinfer"] = _flashinfer_cache(verdict)
        bounds.append(row)
    patched = [] if installation is None else installation.patched()
    if snap.extras is not None:
        patched += snap.extras.patched()
    return {
        "fi_compat_version": __version__,
        "state": snap.phase.value,  # a plain string, as status() always gave
        "outcome": _outcome(snap),
        "error": None if snap.error is None else f"{type(snap.error).__name__}: {snap.error}",
        "release": {
            "version": None if release.version is None else str(release.version),
            "source": release.source,
            "metadata_version": release.metadata_version,
            "build_meta_version": release.build_meta_version,
            "module_version": release.module_version,
            "notes": list(release.notes),
        },
        "flashinfer_imported": loaded(CORE_MODULE) is not None,
        "bounds": bounds,
        "patched": patched,
        "caches": caches,
        "trtllm_workaround": _trtllm(snap),
        "notes": ([] if installation is None else list(installation.notes)) + list(snap.messages),
        "settings": {
            name: {"value": s.value, "source": s.source, "env": s.env_var} for name, s in snap.settings.items()
        },
    }


def walked(view: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The census by walk for ``status()``: every flashinfer memo that nothing
    bounds and that holds entries, wherever it sits (under decorators, held by
    an instance or a closure: :func:`fi_compat.counting.memory_census.walk_report`);
    ``None`` before ``import flashinfer``.  Cost: one walk of the objects
    reachable from flashinfer's modules, 70-80 ms on 0.6.18 (CPU host, about
    1,300 memos), docs/doctor.md; nothing is imported or changed."""
    if not view["flashinfer_imported"]:
        return None

    size = view["settings"].get("cache_size", {}).get("value") or DEFAULT_CACHE_SIZE
    return memory_census.walk_report(cache_size=int(size))


__all__ = ["render", "walked"]
