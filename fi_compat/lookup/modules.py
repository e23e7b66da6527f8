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
from types import FunctionType, ModuleType
from typing import Any, Collection, Iterator, Optional


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


Place = tuple[Any, str, Any]
"""``(owner, attribute, raw)``: ``owner.attribute`` holds ``raw``, which is the object
looked for or the ``staticmethod``/``classmethod`` around it."""


def places(obj: Any, package: Optional[str] = None, deep: bool = False) -> Iterator[Optional[Place]]:
    """Where imported modules hold ``obj`` (the one holder scan of the library): every
    module attribute whose value is ``obj``, in every module or only in ``package``'s;
    ``deep`` also the class attributes of the classes each module defines (under a
    ``staticmethod``/``classmethod`` too), the closure cells and ``__wrapped__`` of the
    functions it defines (a decorator's stack).  ``None`` after each module, so a caller can
    stop on time and resume.

    Cost: one identity test per attribute of each module scanned (tens of milliseconds with
    a serving engine imported; 25-30 ms deep over 0.7.4's 557 modules)."""
    names = loaded_names(package) if package is not None else [n for n in sys.modules.copy() if isinstance(n, str)]
    for module_name in names:
        module = loaded(module_name)
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict):
            for attribute, value in namespace.copy().items():
                if value is obj:
                    yield module, attribute, obj
                elif deep:
                    yield from _inside(obj, module_name, value)
        yield None


def _inside(obj: Any, module_name: str, value: Any) -> Iterator[Place]:
    """``obj`` held by a class or function that ``module_name`` defines."""
    if isinstance(value, type) and getattr(value, "__module__", None) == module_name:
        for member, raw in vars(value).copy().items():
            if raw is obj or (isinstance(raw, (staticmethod, classmethod)) and raw.__func__ is obj):
                yield value, member, raw
    elif isinstance(value, FunctionType) and getattr(value, "__module__", None) == module_name:
        for cell in value.__closure__ or ():
            try:
                if cell.cell_contents is obj:
                    yield cell, "cell_contents", obj
            except ValueError:  # an empty cell
                continue
        if getattr(value, "__wrapped__", None) is obj:
            yield value, "__wrapped__", obj


def holders(obj: Any, skip: Collection[str] = ()) -> tuple[tuple[Any, str], ...]:
    """Every ``(module, attribute)`` of every imported module, flashinfer's or
    not (an engine that did ``from flashinfer.decode import f`` at import holds
    ``f`` too), whose value is ``obj``; modules named in ``skip`` are left out.

    Cost: :func:`places` over every module; install time only."""
    return tuple(
        (owner, attribute)
        for place in places(obj)
        if place is not None
        for owner, attribute, _raw in (place,)
        if getattr(owner, "__name__", None) not in skip
    )


__all__ = ["Place", "every_loaded", "holders", "loaded", "loaded_names", "places"]
