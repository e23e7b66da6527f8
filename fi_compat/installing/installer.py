"""install(), uninstall(): the process-wide state machine.

Phases (:class:`fi_compat.installing.state.Phase`): ``not-installed`` -> :func:`install`
-> ``pending`` (flashinfer not imported yet: a post-import hook finishes the
job when it is), ``installed``, ``unsupported`` (nothing could be bounded),
``disabled`` (FI_COMPAT_DISABLE) or ``failed`` (an import hook's failure:
strict, the import raises it and nothing stays installed; otherwise it is kept
for the next fi_compat call); :func:`uninstall` returns to ``not-installed``
from any of them.

Installing judges every row of :data:`fi_compat.verdict.bounds.BOUNDS` on its own: a
changed signature affects that row only.  A row whose module is not imported
yet (flashinfer imports the cute-dsl kernels lazily, maybe in another thread
right now) is judged from source, provisionally, and judged again from the
live object when the module is imported (:mod:`fi_compat.installing.lazy_rows`).

One re-entrant lock guards every transition (renewed in a forked child).
Everything else reads the state through :func:`snapshot` only.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Optional

from .. import config, lookup, watch
from ..watch import tick
from . import lazy_rows, plan_providers, runtime_report, tripwire
from ..adapters import Installation, Plan, bounded_memo
from ..verdict import knowledge
from ..verdict.judgement import BOUND, judge_release
from ..errors import FiCompatError, forget_warnings, warn
from .runtime_report import note_effectively_unbounded, strict_error
from ..lookup import PACKAGE, import_hooks
from ..model.release_detection import detect_release
from .state import Phase, Snapshot, State, keeping_earlier_arguments, snapshot_of, values
from .status_view import render, summary_line, walked

logger = logging.getLogger("fi_compat")

_lock = threading.RLock()


_state = State()


def _renew_lock_after_fork() -> None:
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


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
    import_hooks.settle()
    with _lock:
        _raise_kept_error()
        if _state.refusal is not None:  # a fresh traceback: one object raised per call must not grow one
            raise _state.refusal.with_traceback(None)
        watch.take_error()  # strict: growth the runtime watch saw and could not bound
        if _state.phase == Phase.NOT_INSTALLED and not _state.explicit:
            _install(config.resolve_all())
        return snapshot()


def install(
    *,
    strict: Optional[bool] = None,
    cache_size: Optional[int] = None,
    maxsize: Optional[int] = None,
    max_seq_len_policy: Optional[str] = None,
    transparent: Optional[bool] = None,
) -> dict[str, Any]:
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
    ``UnsupportedReleaseWarning`` per process; strict, raises ``SignatureMismatchError`` /
    ``UnsupportedReleaseError`` with nothing installed, and every decode through fi_compat raises
    it until :func:`uninstall` or another ``install()`` (docs/errors.md).  Cost: milliseconds
    (one scan of flashinfer's modules).
    """
    if maxsize is not None:
        warn("install(maxsize=...) is deprecated; use install(cache_size=...)", DeprecationWarning)
        if cache_size is None:
            cache_size = config.check_cache_size(maxsize, "maxsize")
    given = {
        "strict": strict,
        "cache_size": cache_size,
        "max_seq_len_policy": max_seq_len_policy,
        "transparent": transparent,
    }
    import_hooks.settle()
    with _lock:
        # Resolved under the lock: what an omitted argument keeps is the install in force now.
        settings = config.resolve_all(**keeping_earlier_arguments(_state, given))
        _state.explicit = True
        _state.error = _state.refusal = None
        if _state.phase != Phase.NOT_INSTALLED:
            if values(settings) == values(_state.settings):
                logger.debug("fi_compat: install() with the settings already in force; nothing to do")
                return status(walk=False)
            logger.info("fi_compat: install() with new settings %s; re-installing", values(settings))
            _uninstall()
        try:
            _install(settings)
        except FiCompatError as exc:  # refused: nothing stays installed, and fi_compat's decode raises it
            _uninstall()
            _state.refusal = exc
            raise
        return status(walk=False)


def _install(settings: dict[str, config.Setting]) -> None:
    _state.settings = settings
    _state.messages = []
    if settings["disable"].value:
        _set_phase(Phase.DISABLED)
        logger.info("fi_compat: FI_COMPAT_DISABLE is set (%s); flashinfer left untouched", settings["disable"].source)
        return
    _state.release = detect_release()
    # Hooked first, read second: an import that ends in between is seen by one of
    # the two (its hook waits for the lock held here, then finds "pending").
    _hook(PACKAGE, _on_flashinfer_import)
    if lookup.module_loaded(PACKAGE):  # imported, and not half-imported by another thread
        _activate()
        return
    _set_phase(Phase.PENDING)
    logger.debug("fi_compat: %s not imported yet; will install on import", PACKAGE)


def _set_phase(phase: Phase) -> None:
    _state.phase = phase
    _state.generation += 1


def _hook(module: str, callback: Any) -> None:
    lazy_rows.register(_state, module, callback)


def _on_flashinfer_import(package: Any) -> None:
    """flashinfer's import has finished (in the importing thread, inside that import)."""
    with _lock:
        _state.hooked.discard(package.__name__)  # a hook fires once: a re-import needs a new one
        if _state.phase != Phase.PENDING:
            return
        _state.release = detect_release()
        _guarded(_activate)


_JUDGED = (Phase.INSTALLED, Phase.UNSUPPORTED)  # phases whose rows may still wait for their modules


def _on_lazy_import(module: Any) -> None:
    """A module some rows wait for has been imported (in the importing thread, inside that import)."""
    with _lock:
        _state.hooked.discard(module.__name__)
        if _state.phase in _JUDGED and module.__name__ in _state.waiting.values():
            _guarded(lambda: _activate_module(module.__name__))


def _guarded(step: Any) -> None:
    """Run an import-hook step.  Not strict: an exception never escapes into the
    user's import (logged, kept for the next fi_compat call).  Strict: nothing stays
    installed, the import raises the typed error, and at start-up the decode tripwire is armed."""
    try:
        step()
    except Exception as exc:  # noqa: BLE001
        _uninstall()
        _state.error = exc
        _set_phase(Phase.FAILED)
        if _strict():
            logger.error("fi_compat: %s; nothing installed, and the import raises it (FI_COMPAT_STRICT)", exc)
            _state.tripwire = tripwire.arm(exc)  # at start-up: a program that swallows it cannot decode unbounded
            if _state.tripwire is None and isinstance(exc, FiCompatError):
                _state.refusal = exc  # not at start-up: fi_compat's own decode refuses instead
            raise
        logger.error(
            "fi_compat: %s; flashinfer imported untouched, the error is raised at the next fi_compat call", exc
        )


def _raise_kept_error() -> None:
    if _state.phase == Phase.FAILED and _state.error is not None:
        error, _state.error = _state.error, None
        _set_phase(Phase.NOT_INSTALLED)
        raise error


def _strict() -> bool:
    return bool(_state.settings["strict"].value)


def _version() -> Any:
    return _state.release.version if _state.release else None


def _cache_size() -> int:
    return int(_state.settings["cache_size"].value)


def _activate() -> None:
    """Judge every row, then patch what is loaded, all or nothing.  Lock held.

    A row judged from source (its module not imported yet) is provisional: it
    waits for its module, which is judged again, live, when it is imported."""
    plan = Plan()
    find = lookup.runtime_lookup(_version())
    judged = judge_release(find, _version(), _cache_size())
    problems = judged.problems
    unknown = knowledge.unknown(judged)
    _state.verdicts, _state.waiting = {v.bound.name: v for v in judged.rows}, {}
    for verdict in judged.rows:
        waited = lazy_rows.waits_for(verdict, find)
        if waited is not None:
            _state.waiting[verdict.bound.name] = waited
        elif verdict.kind == BOUND and verdict.found is not None:
            plan += bounded_memo.plan(verdict.bound, verdict.found, _cache_size())
    if unknown and _strict():
        raise strict_error(problems, _state.release, unknown)
    installation = Installation()
    installation.apply(plan)
    try:
        _state.extras = plan_providers.apply(_state.settings)  # the layers above: transparent mode
    except BaseException:
        installation.remove()
        raise
    _state.installation = installation
    runtime_report.report(problems, _state)
    note_effectively_unbounded(v for v in judged.rows if v.bound.name not in _state.waiting)
    bounded = bool(installation.patched()) or any(_state.verdicts[n].kind == BOUND for n in _state.waiting)
    _set_phase(Phase.INSTALLED if bounded or not problems else Phase.UNSUPPORTED)
    _log_summary()
    _watch_where_unknown(unknown)
    try:
        _settle(set(_state.waiting.values()))
    except BaseException:
        _uninstall()
        raise
    _report_late_imports()


def _report_late_imports() -> None:
    """An import the hooks caught in the microseconds before its module entered ``sys.modules``
    cannot report its end through its spec; the finder adopts it at the next import anywhere, and
    every fi_compat entry point settles it, but a server's decode calls import nothing.  So, only
    while such an import is pending, a tick at every holder of the decode function settles it at
    the next decode call and takes itself out (where the runtime watch runs, its own tick settles
    with each step).  Nothing of it exists otherwise.  Lock held."""
    if _state.late_tick is not None or not import_hooks.pending() or watch.current() is not None:
        return
    installation = Installation()
    seen: set[Any] = set()

    def due() -> None:  # in the decoding thread, outside any import
        import_hooks.settle()
        seen.clear()
        if not import_hooks.pending():
            with _lock:
                _stop_late_tick()

    installation.apply(tick.tick_plan(seen, 1 << 30, due))
    tick.DUE[0] = 0.0
    _state.late_tick = installation


def _stop_late_tick() -> list[str]:
    installation, _state.late_tick = _state.late_tick, None
    if installation is None:
        return []
    if watch.current() is None:
        tick.DUE[0] = float("inf")
    left: list[str] = installation.remove()
    return left


def _watch_where_unknown(unknown: str) -> None:
    """Start the runtime watch where the setting asks for it: ``auto`` (the default) only where
    fi_compat's knowledge of the release is missing (``unknown`` says why), ``bound`` and
    ``warn`` on every release, ``off`` never.  On a verified release under ``auto`` nothing of
    the watch exists: no tick, no callback.  A watch already running keeps running.  Lock held."""
    mode = _state.settings["watch"].value
    if mode == "off" or (mode == "auto" and not unknown) or watch.current() is not None:
        return
    reason = unknown if mode == "auto" else f"FI_COMPAT_WATCH={mode} ({_state.settings['watch'].source})"
    watch.start(mode, _strict(), _cache_size(), on_error=_watch_kept_error, reason=reason)
    logger.info("fi_compat: the runtime watch measures flashinfer's memory: %s", reason)


def _watch_kept_error() -> None:
    """The runtime watch (fi_compat.watch) kept a strict error: move the generation so the
    call API's next call reaches ensure_installed(), which raises it.  No lock: it runs in a watch step."""
    _state.generation += 1


def _settle(modules: Any) -> None:
    """Hook each waited-for module; one imported since it was judged is judged now.  Lock held."""
    for module in sorted(modules):
        _hook(module, _on_lazy_import)
        if lookup.module_loaded(module) and module in _state.waiting.values():
            _activate_module(module)


def _activate_module(module_name: str) -> None:
    """Judge again, live, every row waiting for ``module_name``, now imported, and
    patch those to bound.  Lock held."""
    plan, problems, bound_now = lazy_rows.rejudge(_state, module_name, _version(), _cache_size())
    if problems and _strict():
        raise strict_error(problems, _state.release)
    assert _state.installation is not None
    _state.installation.apply(plan)
    runtime_report.report(problems, _state)
    note_effectively_unbounded(bound_now)
    _set_phase(
        Phase.INSTALLED if _state.installation.patched() or _state.phase == Phase.INSTALLED else Phase.UNSUPPORTED
    )
    _log_summary()
    if problems:
        _watch_where_unknown("; ".join(v.reason for v in problems))
    _settle({m for m in _state.waiting.values() if m != module_name})
    _report_late_imports()


def _log_summary() -> None:
    logger.info("fi_compat: %s", summary_line(snapshot()))


def uninstall() -> dict[str, Any]:
    """Take back everything install() did, restoring each original object
    exactly.  Safe at any time, any number of times.  Afterwards the call API
    calls flashinfer unpatched and never re-installs on its own."""
    with _lock:
        _state.explicit = True
        _uninstall()
        return status(walk=False)


def _uninstall() -> None:
    leftovers: list[str] = tripwire.disarm(_state.tripwire) + _stop_late_tick() + watch.stop()
    for installation in (_state.extras, _state.installation):
        if installation is not None:
            leftovers += installation.remove()
    _state.extras = _state.installation = _state.tripwire = None
    _state.verdicts, _state.waiting = {}, {}
    _state.messages = leftovers
    _state.error = _state.refusal = None
    _set_phase(Phase.NOT_INSTALLED)


def reset() -> dict[str, Any]:
    """:func:`uninstall`, then forget that the process chose anything, so the
    call API installs on first use again: a fresh process, for test suites."""
    with _lock:
        _uninstall()
        _state.explicit = False
        forget_warnings()  # a fresh process warns again
        return status(walk=False)


def settings() -> dict[str, config.Setting]:
    """The settings of the current (or last) install."""
    return dict(_state.settings)


def status(*, walk: bool = True) -> dict[str, Any]:
    """A JSON-ready snapshot (:func:`fi_compat.installing.status_view.render`, a fraction of a
    millisecond); ``walk``: also ``"walked"``, every flashinfer memo nothing bounds
    that holds entries (:func:`fi_compat.installing.status_view.walked`, tens of milliseconds,
    taken outside the lock).  install(), uninstall() and reset() return it without."""
    import_hooks.settle()
    with _lock:
        view = render(snapshot())
    view["watch"] = watch.report()
    view["walked"] = walked(view) if walk else None
    return view
