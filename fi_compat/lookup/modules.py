"""The process's imported modules, looked up in one place.

Every library module that asks "is this flashinfer module imported, and what
is it?" or "which module attributes hold this function?" asks here, so the
rules (a ``None`` placeholder in ``sys.modules`` is no module; a module
without a ``__dict__`` holds nothing) are written once.  Nothing here imports
a module.

Every shared dict fi_compat iterates (``sys.modules``, a module's namespace, a
class's) is copied first, ``d.copy().items()``, never ``list(d.items())``: the
latter makes a tuple per item, a garbage collection can start in the middle and
run Python code (``gc.callbacks``, the runtime watch's among them; finalizers),
the running thread can switch there, and another thread's import then changes
the dict mid-iteration ("dictionary changed size during iteration", seen in the
race driver).  ``dict.copy()`` allocates before it reads.  tests/test_source_rules.py fails on a ``sys.modules`` lookup of
flashinfer outside :mod:`fi_compat.lookup`.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Collection, Optional


def loaded(name: str) -> Optional[ModuleType]:
    """The module imported as ``name``, or ``None`` when it is not (or only a
    ``None`` placeholder is there).  Cost: one dict lookup."""
    module = sys.modules.get(name)
    return module if isinstance(module, ModuleType) else None


def loaded_names(package: str) -> list[str]:
    """The names, sorted, of the imported modules that are ``package`` or lie
    inside it (``package.x``), ``None`` placeholders included.  Cost: one copy
    of ``sys.modules`` and one prefix test per name."""
    prefix = package + "."
    return sorted(n for n in sys.modules.copy() if isinstance(n, str) and (n == package or n.startswith(prefix)))


def every_loaded() -> list[Any]:
    """Every entry of ``sys.modules`` (a copy: a collection or another thread's
    import may change it while the caller iterates)."""
    return list(sys.modules.copy().values())


def holders(obj: Any, skip: Collection[str] = ()) -> tuple[tuple[Any, str], ...]:
    """Every ``(module, attribute)`` of every imported module, flashinfer's or
    not (an engine that did ``from flashinfer.decode import f`` at import holds
    ``f`` too), whose value is ``obj``; modules named in ``skip`` are left out.

    Cost: one identity test per attribute of every loaded module (tens of
    milliseconds with a serving engine imported); install time only."""
    found = []
    for name, module in sys.modules.copy().items():
        if module is None or name in skip:
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attribute, value in namespace.copy().items():
            if value is obj:
                found.append((module, attribute))
    return tuple(found)


__all__ = ["every_loaded", "holders", "loaded", "loaded_names"]
