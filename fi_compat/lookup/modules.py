"""The process's imported modules, looked up in one place.

Every library module that asks "is this flashinfer module imported, and what
is it?" or "which module attributes hold this function?" asks here, so the
rules (a ``None`` placeholder in ``sys.modules`` is no module; a module
without a ``__dict__`` holds nothing) are written once.  Nothing here imports
a module.  tests/test_source_rules.py fails on a ``sys.modules`` lookup of
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


def holders(obj: Any, skip: Collection[str] = ()) -> tuple[tuple[Any, str], ...]:
    """Every ``(module, attribute)`` of every imported module, flashinfer's or
    not (an engine that did ``from flashinfer.decode import f`` at import holds
    ``f`` too), whose value is ``obj``; modules named in ``skip`` are left out.

    Cost: one identity test per attribute of every loaded module (tens of
    milliseconds with a serving engine imported); install time only."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or name in skip:
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attribute, value in list(namespace.items()):
            if value is obj:
                found.append((module, attribute))
    return tuple(found)


__all__ = ["holders", "loaded"]
