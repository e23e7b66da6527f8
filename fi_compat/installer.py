"""install(), uninstall(), status(): the process-wide state machine.

States: ``not-installed`` -> (install) -> ``pending`` (flashinfer not imported
yet; a wrapt post-import hook finishes the job) or ``installed`` /
``unsupported`` / ``deferred`` / ``disabled``; ``uninstall()`` returns to
``not-installed`` from any of them.  Every transition holds one re-entrant
lock, so concurrent install/uninstall calls serialise, and the lock is renewed
in a forked child.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Optional

import wrapt

from . import config
from ._version import __version__
from .adapters import UNSUPPORTED, UNVERIFIED, Installation, Selection, select
from .adapters.base import carries_trtllm_marker
from .specs import CORE_MODULE
from .errors import SignatureMismatchError, UnsupportedReleaseError, UnsupportedReleaseWarning, UnverifiedReleaseWarning
from .release_detection import PACKAGE, ReleaseInfo, detect_release
from .signatures import POSITIONAL_OR_KEYWORD, FoundFunction, FoundParam, FunctionSpec, found_from_callable

logger = logging.getLogger("fi_compat")

_lock = threading.RLock()


class _State:
    def __init__(self) -> None:
        self.phase = "not-installed"
        self.settings: dict[str, config.Setting] = config.resolve_all(environ={})
        self.release: Optional[ReleaseInfo] = None
        self.selection: Optional[Selection] = None
        self.installation: Optional[Installation] = None
        self.transparent: Optional[Any] = None  # fi_compat.call_api.TransparentInstallation
        self.messages: list[str] = []
        self.hook_registered = False
        # True once the process called install() or uninstall() itself: from
        # then on the call API never installs behind its back.
        self.explicit = False
        # Bumped by every change of phase; fi_compat.call_api compares it to
        # know when its cached argument mapping is stale (one int compare
        # per call instead of re-reading the whole state).
        self.generation = 0


_state = _State()


@dataclass(frozen=True)
class Snapshot:
    """A read-only view of the installer's state for the rest of fi_compat.

    ``generation`` changes with every change of phase, so a caller can keep
    what it derived from a snapshot until the number moves."""

    phase: str
    generation: int
    release: Optional[ReleaseInfo]
    settings: Mapping[str, config.Setting]
    explicit: bool

    def setting(self, name: str) -> Any:
        return self.settings[name].value


def snapshot() -> Snapshot:
    """The current state; cheap (no lock: every field is replaced, never mutated)."""
    state = _state
    return Snapshot(state.phase, state.generation, state.release, MappingProxyType(state.settings), state.explicit)


def generation() -> int:
    """The current generation number (see :class:`Snapshot`); the call API's hot path reads only this."""
    return _state.generation


def ensure_installed() -> Snapshot:
    """Install with the environment's settings, unless the process already
    called :func:`install` or :func:`uninstall` itself; returns the state.

    This is what the call API does on first use.  An explicit choice (an
    ``uninstall()``, a refused strict install) is never overridden."""
    with _lock:
        if _state.phase == "not-installed" and not _state.explicit:
            _install(None, None, None, None)
        return snapshot()


def _renew_lock_after_fork() -> None:
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


def live_lookup(spec: FunctionSpec) -> Optional[FoundFunction]:
    """Find ``spec`` among already-imported modules (never imports anything).

    TensorRT-LLM's workaround replaces the builder with its own memo, which may
    not expose the original's signature.  It looks through it when it can
    (``__wrapped__``); otherwise the builder is taken as expected: TensorRT-LLM
    installs only on a builder with 0.6.15's nine parameters, and fi_compat
    never patches a builder that carries the workaround.
    """
    module = sys.modules.get(spec.module)
    if module is None or not hasattr(module, spec.name):
        return None
    function = getattr(module, spec.name)
    if carries_trtllm_marker(function):
        underneath = inspect.unwrap(function)
        if underneath is function or carries_trtllm_marker(underneath):
            return FoundFunction(
                spec.qualname,
                tuple(FoundParam(p.name, POSITIONAL_OR_KEYWORD, not p.required) for p in spec.params),
                memoized=False,  # a dict memo, not a functools cache
                where="replaced by TensorRT-LLM's workaround",
            )
        function = underneath
    return found_from_callable(spec.qualname, function)


def install(
    *,
    strict: Optional[bool] = None,
    maxsize: Optional[int] = None,
    max_seq_len_policy: Optional[str] = None,
    transparent: Optional[bool] = None,
) -> dict[str, Any]:
    """Bound flashinfer's MLA decode tuning-config memoization.

    Arguments win over ``FI_COMPAT_*`` environment variables, which win over
    defaults.  Idempotent: a second call while installed is a no-op (DEBUG
    log) and returns :func:`status`.  If flashinfer is not imported yet, a
    post-import hook installs when it is, and importing fi_compat never
    imports it.

    Failure behaviour: invalid settings raise ``ValueError`` before anything
    changes.  An unknown release or changed signature raises
    :class:`~fi_compat.errors.SignatureMismatchError` /
    :class:`~fi_compat.errors.UnsupportedReleaseError` when strict, otherwise
    logs one WARNING, emits an
    :class:`~fi_compat.errors.UnsupportedReleaseWarning` and leaves flashinfer
    untouched.  Cost: microseconds, plus one builder call (the feature probe).
    """
    with _lock:
        _state.explicit = True
        return _install(strict, maxsize, max_seq_len_policy, transparent)


def _install(strict: Optional[bool], maxsize: Optional[int], max_seq_len_policy: Optional[str],
             transparent: Optional[bool]) -> dict[str, Any]:
    if maxsize is not None:
        # validated here too so the message names the keyword the caller used
        maxsize = config.check_cache_size(maxsize, "maxsize")
    settings = config.resolve_all(strict=strict, cache_size=maxsize, max_seq_len_policy=max_seq_len_policy,
                                  transparent=transparent)
    with _lock:
        if _state.phase != "not-installed":
            logger.debug("fi_compat: install() called while %s; nothing to do", _state.phase)
            return status()
        _state.settings = settings
        _state.messages = []
        if settings["disable"].value:
            _state.phase = "disabled"
            logger.info("fi_compat: FI_COMPAT_DISABLE is set (%s); flashinfer left untouched",
                        settings["disable"].source)
            return status()
        _state.release = detect_release()
        if PACKAGE in sys.modules:
            _apply(sys.modules.get(CORE_MODULE))
        else:
            _state.phase = "pending"
            if not _state.hook_registered:
                # The hook is on the top-level package, not on CORE_MODULE:
                # flashinfer's __init__ imports the MLA module, so it is
                # loaded by the time the hook runs, and if a release moved it
                # the hook still runs and reports it missing instead of
                # waiting forever.  A failed earlier import can leave a
                # half-initialised CORE_MODULE in sys.modules without the
                # package; that one is never patched.  wrapt cannot
                # unregister a hook, so the hook checks the phase instead.
                wrapt.register_post_import_hook(_on_flashinfer_import, PACKAGE)
                _state.hook_registered = True
            logger.debug("fi_compat: %s not imported yet; will install on import", PACKAGE)
        return status()


def _on_flashinfer_import(package: Any) -> None:
    with _lock:
        if _state.phase != "pending":
            return
        _state.release = detect_release()
        _apply(sys.modules.get(CORE_MODULE))


def _apply(module: Any) -> None:
    """Select, probe and patch.  Called with the lock held."""
    from .call_api import install_transparent  # late: keeps import fi_compat light

    release = _state.release
    strict = _state.settings["strict"].value
    selection = select(release.version if release else None, live_lookup)
    _state.selection = selection
    if selection.outcome == UNSUPPORTED:
        _refuse(selection, strict)
        return
    assert selection.adapter is not None
    try:
        problem = selection.adapter.probe(module)
    except Exception as exc:  # flashinfer's behaviour changed: same handling as a wrong return type
        problem = f"{selection.adapter.name}'s probe raised {type(exc).__name__}: {exc}"
    if problem is not None:
        selection = Selection(UNSUPPORTED, None, selection.release,
                              f"flashinfer {selection.release}: feature probe failed: {problem}")
        _state.selection = selection
        _refuse(selection, strict, probe_failure=problem)
        return
    if selection.outcome == UNVERIFIED:
        logger.warning("fi_compat: %s", selection.reason)
        warnings.warn(selection.reason, UnverifiedReleaseWarning, stacklevel=4)
    steps, caches, notes = selection.adapter.plan(module, _state.settings["cache_size"].value)
    installation = Installation.apply(selection.adapter, steps, caches, notes)
    try:
        if _state.settings["transparent"].value:
            _state.transparent = install_transparent()
    except BaseException:
        installation.remove()
        raise
    _state.installation = installation
    _state.phase = "installed" if steps else "deferred"
    _state.generation += 1
    for note in notes:
        logger.info("fi_compat: %s", note)
    logger.debug("fi_compat: installed %s on flashinfer %s", selection.adapter.name, release)


def _refuse(selection: Selection, strict: bool, probe_failure: Optional[str] = None) -> None:
    _state.phase = "unsupported"
    release = None if selection.release is None else str(selection.release)
    if strict:
        _state.phase = "not-installed"
        if selection.mismatches:
            first = selection.mismatches[0]
            raise SignatureMismatchError(first.spec.qualname, first.expected, first.found_text, release,
                                         first.difference)
        raise UnsupportedReleaseError(release, probe_failure or selection.reason)
    message = f"{selection.reason}. fi_compat left flashinfer untouched (set FI_COMPAT_STRICT=1 to make this an error)"
    logger.warning("fi_compat: %s", message)
    warnings.warn(message, UnsupportedReleaseWarning, stacklevel=4)


def uninstall() -> dict[str, Any]:
    """Take back everything install() did, restoring each original object
    exactly.  Safe to call at any time, any number of times."""
    with _lock:
        _state.explicit = True
        leftovers: list[str] = []
        if _state.transparent is not None:
            leftovers += _state.transparent.remove()
            _state.transparent = None
        if _state.installation is not None:
            leftovers += _state.installation.remove()
            _state.installation = None
        _state.phase = "not-installed"
        _state.selection = None
        _state.messages = leftovers
        _state.generation += 1
        return status()


def reset() -> dict[str, Any]:
    """:func:`uninstall`, then forget that the process chose anything, so the
    call API installs on first use again: a fresh process, for test suites."""
    with _lock:
        result = uninstall()
        _state.explicit = False
        return result


def settings() -> dict[str, config.Setting]:
    """The settings of the current (or last) install."""
    return dict(_state.settings)


def status() -> dict[str, Any]:
    """A JSON-ready snapshot: release and how it was found, adapter and why,
    what is patched, TensorRT-LLM's workaround, cache statistics, settings."""
    with _lock:
        release = _state.release or detect_release()
        selection = _state.selection
        installation = _state.installation
        core = sys.modules.get(CORE_MODULE)
        builder = getattr(core, "_build_mla_decode_tuning_config", None)
        trtllm_present = carries_trtllm_marker(builder)
        patched = [p.qualname for p in installation.patches] if installation else []
        if _state.transparent is not None:
            patched += _state.transparent.qualnames()
        caches = {name: cache.stats().as_dict() for name, cache in (installation.caches.items() if installation else ())}
        return {
            "fi_compat_version": __version__,
            "state": _state.phase,
            "release": {
                "version": None if release.version is None else str(release.version),
                "source": release.source,
                "metadata_version": release.metadata_version,
                "build_meta_version": release.build_meta_version,
                "module_version": release.module_version,
                "notes": list(release.notes),
            },
            "flashinfer_imported": core is not None,
            "adapter": None if selection is None else selection.adapter_name,
            "outcome": None if selection is None else selection.outcome,
            "reason": None if selection is None else selection.reason,
            "mismatches": [] if selection is None else [m.describe() for m in selection.mismatches],
            "patched": patched,
            "trtllm_workaround": {
                "present": trtllm_present,
                "fi_compat_defers": bool(installation and any("TensorRT-LLM" in n for n in installation.notes)),
            },
            "caches": caches,
            "notes": (list(installation.notes) if installation else []) + list(_state.messages),
            "settings": {name: {"value": s.value, "source": s.source, "env": s.env_var}
                         for name, s in _state.settings.items()},
        }
