"""Post-import hooks that never wait on an import lock.

fi_compat must act when flashinfer imports a module (the package itself, or a
cute-dsl kernel module it imports lazily, maybe from an engine's worker thread)
without ever becoming part of a cycle of import locks.  CPython's import
deadlock detection sees cycles among the per-module locks only; a thread that
waits on one while holding anything else (the global import lock, a lock of
fi_compat's) can hang the process for good.  Issue #40 caught both shapes:

* wrapt's post-import hook finder answers a hooked name by calling
  ``importlib.util.find_spec(name)`` from inside ``find_spec``, where CPython
  (3.11, 3.12) holds the global import lock.  That call imports the parent
  package, and when another thread is running the parent's body it waits on
  the parent's module lock *while holding the global lock*, which the other
  thread needs for its next import.
* a daemon thread of fi_compat's took a module lock from outside any import
  to wait for an import in flight.

So this module keeps its own hooks, built on two rules:

1. :class:`_HookFinder` answers a hooked name by asking the finders after it
   on ``sys.meta_path`` with the path the import system handed it: it imports
   nothing and waits on nothing, and names nobody hooked cost one dict test.
   It wraps the module's loader so that, once the body has run, the hooks are
   called in the importing thread, inside that import (the one place fi_compat
   runs while an import lock is held: the hooks themselves import nothing).
2. An import already in flight when a hook is registered (its finder ran
   before the hook existed) is caught as it ends, not waited for:
   :func:`on_import` makes the module's spec report the moment the import
   system clears its ``_initializing`` flag (the last thing ``_load_unlocked``
   does, in the importing thread), and calls the hook there.  No thread waits,
   no lock is taken.  Where the spec cannot report (another interpreter), the
   hook is kept for :func:`settle`, which runs after every hooked import and
   at the installer's entry points (``install()``, ``status()``, the call
   API).  The same holds for an import caught in the microseconds between its
   finder's turn and its entry into ``sys.modules``: the finder makes its spec
   report at the next import anywhere in the process, or settle() fires it
   (the runtime watch's decode tick calls it with each step it takes).

Cost: one dict membership test per import of a module nobody hooked; a hook's
own cost when it fires.
"""

from __future__ import annotations

import os
import sys
import threading
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Optional

from .modules import loaded

Hook = Callable[[ModuleType], None]

_bootstrap: Any
try:
    from importlib import _bootstrap
except ImportError:  # pragma: no cover - every CPython has it
    _bootstrap = None

# name -> hooks for its next import; fired (and forgotten) once the import succeeds
_hooks: dict[str, list[Hook]] = {}
# top-level package -> hooks for every module of it imported from now on (kept until forgotten)
_package_hooks: dict[str, list[Hook]] = {}
# names whose import was in flight when a hook was registered and whose spec
# cannot report the import's end: settle() fires their hooks once imported
_unreported: set[str] = set()
# Guards the two tables only: never held while calling a hook, importing, or
# asking another finder.  Renewed in a forked child (a fork may copy it held).
_lock = threading.Lock()


def _renew_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


# ---------------------------------------------------------------------------- imports in flight


def _lock_owner(name: str) -> Any:
    locks = getattr(_bootstrap, "_module_locks", None)
    if locks is None:
        return None
    reference = locks.get(name)  # a plain dict read: no lock taken
    lock = reference() if reference is not None else None
    return getattr(lock, "owner", None) if lock is not None else None


def _initializing(name: str) -> bool:
    module = loaded(name)
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def importing_elsewhere(name: str) -> bool:
    """Whether a thread other than this one is importing ``name`` right now.

    Reads CPython's per-module import lock without taking it (where it is
    missing, the module spec's ``_initializing`` flag).  Cost: two dict reads."""
    if _bootstrap is not None and hasattr(_bootstrap, "_module_locks"):
        return _lock_owner(name) not in (None, 0, threading.get_ident())
    return _initializing(name)


def in_flight(name: str) -> bool:
    """Whether any thread, this one included, is importing ``name`` right now."""
    return _initializing(name) or _lock_owner(name) not in (None, 0)


# ---------------------------------------------------------------------------- the finder


class _HookedLoader:
    """The real loader, plus the hooks once the body has run.  The module sees
    its real loader while its body runs and afterwards (``importlib.resources``,
    ``inspect`` and ``linecache`` read it), so the wrapper is visible only to
    the import system's call of :meth:`exec_module`."""

    def __init__(self, loader: Any) -> None:
        self._fi_compat_loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fi_compat_loader, name)

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self._fi_compat_loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        real = self._fi_compat_loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = real
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = real
        real.exec_module(module)  # an exception propagates: the hooks wait for the next attempt
        _fire(module.__name__, module)


class _HookFinder:
    """First on ``sys.meta_path``: wraps the loader of a hooked module, finds nothing itself."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[ModuleSpec]:
        if _unreported:
            _adopt_unreported()
        if name not in _hooks and not (_package_hooks and name.partition(".")[0] in _package_hooks):
            return None
        meta_path = sys.meta_path
        try:
            after = meta_path[meta_path.index(self) + 1 :]
        except ValueError:  # removed from meta_path by someone else: nothing to ask
            return None
        spec: Optional[ModuleSpec] = None
        for finder in after:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None:
            return None
        if hasattr(spec.loader, "exec_module") and not isinstance(spec.loader, _HookedLoader):
            spec.loader = _HookedLoader(spec.loader)  # type: ignore[assignment]  # a loader by duck typing
        return spec


_FINDER = _HookFinder()


def _ensure_finder() -> None:
    if not any(finder is _FINDER for finder in sys.meta_path):
        sys.meta_path.insert(0, _FINDER)


# ---------------------------------------------------------------------------- the end of an import in flight


class _ReportingSpec(ModuleSpec):
    """A module spec that fires its module's hooks when the import system
    marks the import finished (``spec._initializing = False``: the last step
    of ``_load_unlocked``, in the importing thread, after a failed import has
    already been taken out of ``sys.modules``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "_initializing" and not value:
            object.__setattr__(self, "__class__", ModuleSpec)  # reports once
            _fire_if_loaded(self.name)


def _report_end(name: str) -> bool:
    """Make the spec of ``name``, being imported now, fire its hooks when the
    import ends.  ``False`` where it cannot: no spec yet, a spec of another
    class, or an import that ended between the check and the swap (nobody
    clears the flag twice; the caller, who reads the module after
    registering, finds it loaded)."""
    spec = getattr(loaded(name), "__spec__", None)
    if type(spec) is ModuleSpec:
        try:
            spec.__class__ = _ReportingSpec
        except TypeError:  # pragma: no cover - a ModuleSpec whose layout forbids it
            return False
    elif not isinstance(spec, _ReportingSpec):
        return False
    if not getattr(spec, "_initializing", False):
        spec.__class__ = ModuleSpec
        return False
    return True


def _adopt_unreported() -> None:
    """Make the spec of each unreported import report its end, once the
    module has entered ``sys.modules`` (an import caught between its finder's
    turn and that moment had no spec to make report).  Fires nothing: this
    runs inside ``find_spec``, under the global import lock."""
    for name in list(_unreported):
        spec = getattr(loaded(name), "__spec__", None)
        if type(spec) is ModuleSpec and getattr(spec, "_initializing", False):
            try:
                spec.__class__ = _ReportingSpec
            except TypeError:  # pragma: no cover
                continue
            if getattr(spec, "_initializing", False):
                _unreported.discard(name)
            else:  # ended meanwhile: settle() fires it
                spec.__class__ = ModuleSpec


def _fire_if_loaded(name: str) -> None:
    module = loaded(name)
    if module is not None:  # None: the import failed; the finder hooks the next attempt
        _fire(name, module)


def _fire(name: str, module: ModuleType) -> None:
    """Call (and forget) every hook of ``name``; the pop decides who calls, so
    two paths reporting one import call each hook once."""
    with _lock:
        hooks = _hooks.pop(name, []) + list(_package_hooks.get(name.partition(".")[0], ()))
        _unreported.discard(name)
    for hook in hooks:
        hook(module)
    settle()  # an unreported import that ended before this one


# ---------------------------------------------------------------------------- the API


def on_import(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once, when an import of ``name`` finishes.

    * not imported: when an import of it succeeds, in the importing thread,
      inside that import;
    * being imported now (any thread, this one included): when that import
      ends, in its thread, or where the spec cannot report its end, at the
      first :func:`settle` after it;
    * imported already: not called now.  A caller registers first, then reads
      the module if it is loaded: nothing falls between the two.

    A failed import calls nothing; the hook waits for the next attempt.
    Never blocks.  Cost: microseconds."""
    with _lock:
        _ensure_finder()
        hooks = _hooks.setdefault(name, [])
        if hook not in hooks:
            hooks.append(hook)
    if in_flight(name) and not _report_end(name):
        with _lock:
            _unreported.add(name)


def pending() -> bool:
    """Whether an import hooked while in flight has not reported its end yet (a set test)."""
    return bool(_unreported)


def settle() -> None:
    """Fire the hooks of every module whose import was in flight when they
    were registered, could not report its end, and has finished since.  The
    installer calls it at its entry points; one set test when there is none.
    Never blocks."""
    if not _unreported:
        return
    for name in list(_unreported):
        if not in_flight(name):
            _fire_if_loaded(name)


def on_new_module(package: str, hook: Hook) -> None:
    """Call ``hook(module)`` for every module of the top-level ``package`` imported from now on
    (one that is imported already is not new), in the importing thread, inside that import,
    until :func:`forget_new_module`.  Never blocks.  Cost: one dict test per import."""
    with _lock:
        _ensure_finder()
        hooks = _package_hooks.setdefault(package, [])
        if hook not in hooks:
            hooks.append(hook)


def _take_back(table: dict[str, list[Hook]], key: str, hook: Hook) -> bool:
    """Remove ``hook`` from ``table[key]`` (and the key once empty); ``True`` when the key went.  Lock held."""
    hooks = table.get(key)
    if hooks and hook in hooks:
        hooks.remove(hook)
        if not hooks:
            del table[key]
            return True
    return False


def forget_new_module(package: str, hook: Hook) -> None:
    """Take ``hook`` back from :func:`on_new_module`'s hooks of ``package``."""
    with _lock:
        _take_back(_package_hooks, package, hook)


def forget(name: str, hook: Hook) -> None:
    """Take ``hook`` back from ``name``'s hooks, if it still waits there."""
    with _lock:
        if _take_back(_hooks, name, hook):
            _unreported.discard(name)


__all__ = [
    "forget",
    "forget_new_module",
    "importing_elsewhere",
    "in_flight",
    "on_import",
    "on_new_module",
    "pending",
    "settle",
]
