"""Imports in flight in other threads: seen, and waited for without importing anything.

An import sets ``sys.modules[name]`` before the module's body runs, so a thread
that looks while another thread is importing a lazily loaded flashinfer module
(the cute-dsl kernels) sees a module without its functions.  And a post-import
hook registered while that import is in flight never fires for it: the hook's
finder ran before the hook existed.  The installer therefore

* treats a module another thread is importing as not loaded yet
  (:func:`importing_elsewhere`, read by :func:`fi_compat.lookup.module_loaded`);
* after registering its post-import hook, waits for such an import in a
  daemon thread (:func:`when_imported`), which takes the module's import lock
  (held by the importing thread until the module's body has run), lets it go,
  and hands over the module if the import succeeded.  Nothing is imported: a
  failed import leaves nothing to hand over, and the hook stays registered
  for the next attempt.

Both read CPython's per-module import locks (``importlib._bootstrap``), the
same ones ``import`` takes; where they are missing (another interpreter) the
module's ``__spec__._initializing`` flag is read instead and the waiter polls it.

Cost: a dictionary lookup per check; one short-lived thread per import in flight.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any, Callable

from .modules import loaded

_bootstrap: Any
try:
    from importlib import _bootstrap
except ImportError:  # pragma: no cover - every CPython has it
    _bootstrap = None

_POLL_S = 0.001
_POLL_LIMIT_S = 600.0


def _lock_owner(name: str) -> Any:
    locks = getattr(_bootstrap, "_module_locks", None)
    if locks is None:
        return None
    reference = locks.get(name)
    lock = reference() if reference is not None else None
    return getattr(lock, "owner", None) if lock is not None else None


def importing_elsewhere(name: str) -> bool:
    """Whether a thread other than this one is importing ``name`` right now."""
    if _bootstrap is not None and hasattr(_bootstrap, "_module_locks"):
        owner = _lock_owner(name)
        return owner not in (None, 0, threading.get_ident())
    module = loaded(name)
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> threading.Thread:
    """Call ``callback(module)`` from a daemon thread once the import of
    ``name`` now in flight elsewhere has finished, if it succeeded."""

    def wait() -> None:
        manager = getattr(_bootstrap, "_ModuleLockManager", None)
        if manager is not None:
            with manager(name):  # held by the importing thread until the body has run
                pass
        else:  # pragma: no cover - not CPython
            deadline = time.monotonic() + _POLL_LIMIT_S
            while importing_elsewhere(name) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        module = loaded(name)
        if module is not None:
            callback(module)

    thread = threading.Thread(target=wait, name=f"fi_compat waits for {name}", daemon=True)
    thread.start()
    return thread
