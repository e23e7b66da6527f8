"""The census probe's description of a grown cache: which function it caches, its key, the fi_compat row over it.

One job: :func:`describe_key` (the live object a census qualname names, its
parameters and ``def`` line, and the row of :data:`fi_compat.verdict.bounds.BOUNDS`
that bounds it) and :func:`restrict_bounds` (``--only-bounds``: the rows the
probe's fi_compat knows), for :mod:`.census_probe`.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any, Optional

#: Every row of fi_compat.verdict.bounds.BOUNDS, as shipped (``--only-bounds`` narrows
#: the table the installer reads, not this): a grown cache is named with its row.
_SHIPPED_ROWS: list[Any] = []


def restrict_bounds(names: list[str]) -> None:
    """Keep only the named rows of :data:`fi_compat.verdict.bounds.BOUNDS` (this process only)."""
    from ...verdict import bounds

    known = [bound.name for bound in bounds.BOUNDS]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--only-bounds: unknown row(s) {', '.join(unknown)}; known: {', '.join(known)}")
    _SHIPPED_ROWS[:] = bounds.BOUNDS
    bounds.BOUNDS = tuple(bound for bound in bounds.BOUNDS if bound.name in names)


def _resolve(qualname: str) -> Any:
    """The live object a census qualname names: the longest loaded module prefix,
    then attributes (class members through the class ``__dict__``)."""
    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        value: Any = module
        for name in parts[cut:]:
            value = vars(value).get(name) if isinstance(value, type) else getattr(value, name, None)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if value is None:
                return None
        return value
    return None


def _underlying(obj: Any) -> Any:
    """The plain function under a functools cache or a fi_compat memo."""
    return inspect.unwrap(getattr(obj, "_fi_compat_original", obj)) if obj is not None else None


def describe_key(qualname: str) -> dict[str, Any]:
    """The cached function's parameters (a functools cache keys on all of them)
    and the fi_compat row that bounds it, if any: the row's function is found
    with :func:`fi_compat.lookup.find_live` (re-exports followed) and matched by
    the function it caches, else the object is described with
    :func:`fi_compat.lookup.describe_callable`."""
    from ...verdict import bounds
    from ...lookup import describe_callable, find_live

    obj = _resolve(qualname)
    function, row = None, None
    for bound in _SHIPPED_ROWS or bounds.BOUNDS:
        found = find_live(bound.spec)
        if found is not None and obj is not None and _underlying(found.obj) is _underlying(obj):
            function, row = found.function, bound.name
            break
    if function is None and obj is not None:
        function = describe_callable(qualname, obj, where=qualname)
    installed = row is not None and any(bound.name == row for bound in bounds.BOUNDS)
    return {
        "parameters": None if function is None else [str(p) for p in function.params],
        "where": _def_line(obj) or (None if function is None else function.where),
        "row": row,
        "row_installed": installed,
    }


def _def_line(obj: Any) -> Optional[str]:
    """``FILE:LINE`` of the ``def`` of the function under ``obj`` (past its decorators)."""
    import linecache

    code = getattr(_underlying(obj), "__code__", None)
    if code is None:
        return None
    for number in range(code.co_firstlineno, code.co_firstlineno + 20):
        if linecache.getline(code.co_filename, number).lstrip().startswith(("def ", "async def ")):
            return f"{code.co_filename}:{number}"
    return f"{code.co_filename}:{code.co_firstlineno}"
