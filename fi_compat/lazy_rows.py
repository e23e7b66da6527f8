"""Rows that wait for their module: the installer's helpers for lazily imported modules.

flashinfer imports its cute-dsl kernels lazily.  A row whose module is not
imported yet is judged from source, provisionally (:func:`waits_for`); when the
module is imported, :func:`rejudge` judges it again from the live object,
whatever the first verdict was.  :func:`register` adds the post-import hook
safely while another thread may be importing the same module.

Everything here works on the installer's :class:`~fi_compat.state.State`,
under the installer's lock; nothing here takes a lock of its own.
Cost: one lookup per waiting row when its module is imported.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable, Optional

import wrapt

from . import lookup
from .lookup import import_wait
from .adapters import Plan, bounded_memo
from .bounds import by_name
from .judgement import BOUND, NOT_IN_RELEASE, Verdict, judge
from .state import State

logger = logging.getLogger("fi_compat")


class _Registering(threading.local):
    active = False


REGISTERING = _Registering()
"""Set while this thread registers a hook: wrapt then calls it at once for a module
already in ``sys.modules``, which may be half-imported by another thread."""


def register(
    state: State, module: str, callback: Callable[[Any], None], finished_elsewhere: Callable[[Any], None]
) -> None:
    """A post-import hook for ``module``, and a wait for an import of it already in
    flight in another thread (its finder ran before the hook existed, so the hook
    would never fire for that import)."""
    if module not in state.hooked:
        state.hooked.add(module)
        REGISTERING.active = True
        try:
            wrapt.register_post_import_hook(callback, module)
        finally:
            REGISTERING.active = False
    if import_wait.importing_elsewhere(module):
        import_wait.when_imported(module, finished_elsewhere)


def waits_for(verdict: Verdict, find: lookup.RuntimeLookup) -> Optional[str]:
    """The module whose import settles ``verdict`` (read from source by ``find``), else ``None`` (read live: final)."""
    if verdict.kind == NOT_IN_RELEASE:
        return None
    return find.waits_for(verdict.bound.spec, verdict.found)


def rejudge(state: State, module_name: str, version: Any, cache_size: int) -> tuple[Plan, list[Verdict], list[Verdict]]:
    """Judge again, live, every row of ``state`` waiting for ``module_name``.

    Returns the plan for the rows to bound, the problems, and the rows bound.
    A row still read from source (moved to yet another module) waits for that one."""
    plan, problems, bound_now = Plan(), [], []
    find = lookup.runtime_lookup(version)
    for name, waited in list(state.waiting.items()):
        if waited != module_name:
            continue
        bound = by_name(name)
        verdict = judge(bound, find(bound.spec), version, cache_size)
        previous, state.verdicts[name] = state.verdicts[name], verdict
        del state.waiting[name]
        again = waits_for(verdict, find)
        if again is not None and again != module_name:
            state.waiting[name] = again
        if verdict.kind != previous.kind:
            logger.info(
                "fi_compat: %s, read from source as %s, is %s now that %s is imported: %s",
                bound.spec.qualname,
                previous.kind,
                verdict.kind,
                module_name,
                verdict.reason,
            )
        if verdict.problem:
            if (verdict.kind, verdict.reason) != (previous.kind, previous.reason):
                problems.append(verdict)  # a problem said at install is not said again
        elif verdict.kind == BOUND and name not in state.waiting and verdict.found is not None:
            plan += bounded_memo.plan(bound, verdict.found, cache_size)
            bound_now.append(verdict)
    return plan, problems, bound_now


_startup_origin: Optional[str] = None


def mark_startup(origin: str) -> None:
    """Say that this process installs at start-up (``fi-compat run``, ``FI_COMPAT_AUTO``):
    a strict failure with no import to raise into then ends the process, and one
    raised into an import arms :mod:`fi_compat.tripwire`."""
    global _startup_origin
    _startup_origin = origin


def startup_origin() -> Optional[str]:
    """The hook :func:`mark_startup` named, or ``None`` when this process did not install at start-up."""
    return _startup_origin


def end_strict_process(exc: BaseException, cause: str = "") -> None:
    """A strict failure that must not be served past: one found off any import (an
    import that finished in another thread), or ``cause`` (the tripwire: the decode
    function called after the program caught the error).  The message, and at
    start-up the end of the process, status 1."""
    message = (
        f"fi_compat ERROR: {cause + ': ' if cause else ''}{type(exc).__name__}: {' '.join(str(exc).split())}; "
        "exiting because FI_COMPAT_STRICT is set"
    )
    if _startup_origin is None:
        logger.error("%s (no import to raise it into: kept for the next fi_compat call)", message)
        return
    sys.stderr.write(f"{message} ({_startup_origin}, pid {os.getpid()})\n")
    sys.stderr.flush()
    try:
        sys.stdout.flush()  # what the program printed before: _exit would drop it
    except (OSError, ValueError, AttributeError):  # closed, or replaced by something without flush
        pass
    # not SystemExit: this may be a daemon thread, or an engine thread whose SystemExit
    # would end only that thread, and the engine would serve on unbounded
    os._exit(1)
