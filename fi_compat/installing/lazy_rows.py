"""Rows that wait for their module: the installer's helpers for lazily imported modules.

flashinfer imports its cute-dsl kernels lazily.  A row whose module is not
imported yet is judged from source, provisionally (:func:`waits_for`); when the
module is imported, :func:`rejudge` judges it again from the live object,
whatever the first verdict was.  :func:`register` adds the post-import hook,
which fires even for an import already in flight in another thread.

Everything here works on the installer's :class:`~fi_compat.installing.state.State`,
under the installer's lock; nothing here takes a lock of its own.
Cost: one lookup per waiting row when its module is imported.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from .. import lookup
from ..lookup import import_hooks
from ..adapters import Plan, bounded_memo
from ..verdict.bounds import by_name
from ..verdict.code_release import reached as code_reached
from ..verdict.judgement import BOUND, NOT_IN_RELEASE, Verdict, judge
from .state import State

logger = logging.getLogger("fi_compat")


def register(state: State, module: str, callback: Callable[[Any], None]) -> None:
    """A post-import hook for ``module`` (:func:`fi_compat.lookup.import_hooks.on_import`):
    called when an import of it finishes, one in flight in another thread right
    now included, in the importing thread; nothing waits for it."""
    if module not in state.hooked:
        state.hooked.add(module)
        import_hooks.on_import(module, callback)


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
    # the release the code has reached by what install found, as install judged by it
    reached = code_reached([(v.bound.spec, v.found) for v in state.verdicts.values()])
    for name, waited in list(state.waiting.items()):
        if waited != module_name:
            continue
        bound = by_name(name)
        verdict = judge(bound, find(bound.spec), version, cache_size, reached)
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
