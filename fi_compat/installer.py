"""install(), uninstall(): the process-wide state machine.

Phases: ``not-installed`` -> :func:`install` -> ``pending`` (flashinfer not
imported yet: a post-import hook finishes the job when it is), ``installed``,
``unsupported`` (nothing could be bounded), ``disabled`` (FI_COMPAT_DISABLE)
or ``failed`` (a strict failure inside an import hook, kept for the next
fi_compat call to raise, since raising would break the user's ``import``);
:func:`uninstall` returns to ``not-installed`` from any of them.

Installing judges every row of :data:`fi_compat.bounds.BOUNDS` on its own
(``fi_compat.bounds.judge``): a changed signature affects that row only.
Rows whose module flashinfer imports lazily (the cute-dsl kernels) are judged
from source at once and patched by a post-import hook when the module loads.

One re-entrant lock guards every transition (renewed in a forked child).
Everything else reads the state through :func:`snapshot` only
(:mod:`fi_compat.status_view` renders it for :func:`status`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable, Mapping, Optional

import wrapt

from . import config, lookup
from .adapters import Installation, Plan, bounded_memo
from .bounds import BOUND, Verdict, by_name, judge, judge_release, warnings_for
from .errors import (SignatureMismatchError, UnsupportedReleaseError, UnsupportedReleaseWarning,
                     UnverifiedReleaseWarning, warn)
from .lookup import PACKAGE
from .release_detection import detect_release
from .state import Snapshot, State, snapshot_of

logger = logging.getLogger("fi_compat")

_lock = threading.RLock()


_state = State()


def _renew_lock_after_fork() -> None:
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


PlanProvider = tuple[Callable[[Mapping[str, config.Setting]], bool], Callable[[], Plan]]
_providers: dict[str, PlanProvider] = {}


def register_plan_provider(name: str, enabled: Callable[[Mapping[str, config.Setting]], bool],
                           make_plan: Callable[[], Plan]) -> None:
    """Let a layer above add patches that install and uninstall with the bounds,
    all or nothing (the call API's transparent mode); the installer knows
    nothing of those layers.  ``enabled(settings)`` decides per install."""
    _providers[name] = (enabled, make_plan)


def snapshot() -> Snapshot:
    """The current state, read-only."""
    return snapshot_of(_state)


def generation() -> int:
    """The current generation (the call API's hot path reads only this)."""
    return _state.generation


def ensure_installed() -> Snapshot:
    """Install with the environment's settings unless the process already chose
    (called :func:`install` or :func:`uninstall`); raise a strict failure kept
    from an import hook.  What the call API does on every new generation."""
    with _lock:
        _raise_kept_error()
        if _state.phase == "not-installed" and not _state.explicit:
            _install(config.resolve_all())
        return snapshot()


def install(*, strict: Optional[bool] = None, cache_size: Optional[int] = None, maxsize: Optional[int] = None,
            max_seq_len_policy: Optional[str] = None, transparent: Optional[bool] = None) -> dict[str, Any]:
    """Bound every cache of flashinfer's MLA decode host path; returns :func:`status`.

    Arguments win over ``FI_COMPAT_*`` environment variables, which win over
    defaults (``maxsize`` is the deprecated name of ``cache_size``).  Invalid
    settings raise ``ValueError`` before anything changes.

    While an install is in force, an argument an earlier ``install()`` gave and
    this one omits keeps its value (a bare ``install()``, as TensorRT-LLM's patched
    module runs, never undoes ``install(strict=True)``); :func:`uninstall` forgets
    it.  The same settings then: a no-op; different: uninstall and install again
    (INFO).  If flashinfer is not imported yet, a post-import hook installs when it is.

    Failure behaviour: a row whose function changed is left untouched with one
    WARNING naming release, function and difference, or raises
    :class:`~fi_compat.errors.SignatureMismatchError` /
    :class:`~fi_compat.errors.UnsupportedReleaseError` when strict, with
    nothing installed.  Cost: milliseconds (one scan of flashinfer's modules).
    """
    if maxsize is not None:
        warn("install(maxsize=...) is deprecated; use install(cache_size=...)", DeprecationWarning)
        if cache_size is None:
            cache_size = config.check_cache_size(maxsize, "maxsize")
    given = {"strict": strict, "cache_size": cache_size, "max_seq_len_policy": max_seq_len_policy,
             "transparent": transparent}
    with _lock:
        # Resolved under the lock: what an omitted argument keeps is the install in force now.
        settings = config.resolve_all(**_keeping_earlier_arguments(given))
        _state.explicit = True
        _state.error = None
        if _state.phase != "not-installed":
            if _values(settings) == _values(_state.settings):
                logger.debug("fi_compat: install() with the settings already in force; nothing to do")
                return status()
            logger.info("fi_compat: install() with new settings %s; re-installing", _values(settings))
            _uninstall()
        _install(settings)
        return status()


#: Phases in which an install's settings are in force (a failed one left nothing installed).
_IN_FORCE = ("pending", "installed", "unsupported", "disabled")


def _keeping_earlier_arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with each omitted (``None``) argument replaced by the value an
    earlier ``install()`` argument put in force.  Settings that came from the
    environment or the defaults are resolved again, as before; after
    :func:`uninstall` nothing is kept.  Lock held; costs a dict walk."""
    if _state.phase not in _IN_FORCE:
        return dict(given)
    kept = {name: setting.value for name, setting in _state.settings.items()
            if setting.source == "argument" and name in given}
    return {name: kept.get(name) if value is None else value for name, value in given.items()}


def _values(settings: Mapping[str, config.Setting]) -> dict[str, Any]:
    return {name: setting.value for name, setting in settings.items()}


def _install(settings: dict[str, config.Setting]) -> None:
    _state.settings = settings
    _state.messages = []
    if settings["disable"].value:
        _set_phase("disabled")
        logger.info("fi_compat: FI_COMPAT_DISABLE is set (%s); flashinfer left untouched", settings["disable"].source)
        return
    _state.release = detect_release()
    if PACKAGE in sys.modules:
        _activate()
        return
    _set_phase("pending")
    _hook(PACKAGE, _on_flashinfer_import)
    logger.debug("fi_compat: %s not imported yet; will install on import", PACKAGE)


def _set_phase(phase: str) -> None:
    _state.phase = phase
    _state.generation += 1


def _hook(module: str, callback: Any) -> None:
    if module not in _state.hooked:
        _state.hooked.add(module)
        wrapt.register_post_import_hook(callback, module)


def _on_flashinfer_import(package: Any) -> None:
    with _lock:
        _state.hooked.discard(package.__name__)  # wrapt fires a hook once: a re-import needs a new one
        if _state.phase == "pending":
            _state.release = detect_release()
            _guarded(_activate)


def _on_lazy_import(module: Any) -> None:
    with _lock:
        _state.hooked.discard(module.__name__)
        if _state.phase == "installed" and module.__name__ in _state.waiting.values():
            _guarded(lambda: _activate_module(module.__name__))


def _guarded(step: Any) -> None:
    """Run an import-hook step; an exception never escapes into the user's import."""
    try:
        step()
    except Exception as exc:  # noqa: BLE001
        _uninstall()
        _state.error = exc
        _set_phase("failed")
        logger.error("fi_compat: %s; flashinfer imported untouched, the error is raised at the next "
                     "fi_compat call", exc)


def _raise_kept_error() -> None:
    if _state.phase == "failed" and _state.error is not None:
        error, _state.error = _state.error, None
        _set_phase("not-installed")
        raise error


def _strict() -> bool:
    return bool(_state.settings["strict"].value)


def _version() -> Any:
    return _state.release.version if _state.release else None


def runtime_lookup(spec: Any) -> Any:
    """What install() judges by (see :func:`fi_compat.lookup.runtime_lookup`)."""
    return lookup.runtime_lookup(_version())(spec)


def _activate() -> None:
    """Judge every row, then patch what is loaded, all or nothing.  Lock held."""
    plan = Plan()
    judged = judge_release(runtime_lookup, _version())
    problems = judged.problems
    _state.verdicts, _state.waiting = {v.bound.name: v for v in judged.rows}, {}
    for verdict in judged.rows:
        if verdict.kind != BOUND:
            continue
        if verdict.found is not None and verdict.found.obj is not None:
            plan += bounded_memo.plan(verdict.bound, verdict.found, _state.settings["cache_size"].value)
        else:
            _state.waiting[verdict.bound.name] = verdict.found.defined_in if verdict.found else verdict.bound.module
    if problems and _strict():
        _refuse_strict(problems)
    installation = Installation()
    installation.apply(plan)
    try:
        _state.extras = Installation()
        if _state.settings["transparent"].value and "transparent" not in _providers:
            logger.warning("fi_compat: transparent mode comes with the call API: install through "
                           "fi_compat.install(), which loads it; this install has none")
        for enabled, make_plan in _providers.values():
            if enabled(_state.settings):
                _state.extras.apply(make_plan())
    except BaseException:
        installation.remove()
        _state.extras = None
        raise
    _state.installation = installation
    for module in set(_state.waiting.values()):
        _hook(module, _on_lazy_import)
    _report(problems)
    bounded = bool(installation.patched()) or bool(_state.waiting)
    _set_phase("installed" if bounded or not problems else "unsupported")
    _log_summary()


def _activate_module(module_name: str) -> None:
    """Patch the rows waiting for ``module_name``, now imported.  Lock held."""
    plan, problems = Plan(), []
    for name, waited in list(_state.waiting.items()):
        if waited != module_name:
            continue
        bound = by_name(name)
        verdict = judge(bound, runtime_lookup(bound.spec), _version())
        _state.verdicts[name] = verdict
        del _state.waiting[name]
        if verdict.problem:
            problems.append(verdict)
        elif verdict.kind == BOUND:
            plan += bounded_memo.plan(bound, verdict.found, _state.settings["cache_size"].value)
    if problems and _strict():
        _refuse_strict(problems)
    assert _state.installation is not None
    _state.installation.apply(plan)
    _report(problems)
    _state.generation += 1
    _log_summary()


def _log_summary() -> None:
    from .status_view import summary_line

    logger.info("fi_compat: %s", summary_line(snapshot()))


def _refuse_strict(problems: list[Verdict]) -> None:
    release = None if _state.release is None else str(_state.release)
    first = problems[0]
    if first.mismatch is not None:
        m = first.mismatch
        raise SignatureMismatchError(m.spec.qualname, m.expected, m.found_text, release, m.difference)
    raise UnsupportedReleaseError(release, first.reason)


def _report(problems: list[Verdict]) -> None:
    for is_problem, message in warnings_for(problems + [v for v in _state.verdicts.values() if not v.problem],
                                            _state.release):
        if is_problem:
            _state.messages.append(message)
        logger.warning("fi_compat: %s", message)
        warn(message, UnsupportedReleaseWarning if is_problem else UnverifiedReleaseWarning)


def uninstall() -> dict[str, Any]:
    """Take back everything install() did, restoring each original object
    exactly.  Safe at any time, any number of times.  Afterwards the call API
    calls flashinfer unpatched and never re-installs on its own."""
    with _lock:
        _state.explicit = True
        _uninstall()
        return status()


def _uninstall() -> None:
    leftovers: list[str] = []
    for installation in (_state.extras, _state.installation):
        if installation is not None:
            leftovers += installation.remove()
    _state.extras = _state.installation = None
    _state.verdicts, _state.waiting = {}, {}
    _state.messages = leftovers
    _state.error = None
    _set_phase("not-installed")


def reset() -> dict[str, Any]:
    """:func:`uninstall`, then forget that the process chose anything, so the
    call API installs on first use again: a fresh process, for test suites."""
    with _lock:
        _uninstall()
        _state.explicit = False
        return status()


def settings() -> dict[str, config.Setting]:
    """The settings of the current (or last) install."""
    return dict(_state.settings)


def status() -> dict[str, Any]:
    """A JSON-ready snapshot (see :func:`fi_compat.status_view.render`)."""
    from .status_view import render

    with _lock:
        return render(snapshot())
