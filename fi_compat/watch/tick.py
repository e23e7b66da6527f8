"""The watch's fast decode tick: a plain function with the decode function's own parameters.

One job: :func:`_fast_tick`, the pass-through the watch puts in front of the
decode function so a due step is taken at a decode call for one clock read and
one list read per call.
"""

from __future__ import annotations

import time
import types
from typing import Any, Callable, Optional

from .state import TICK_DUE

_VARIADIC = 0x04 | 0x08  # CO_VARARGS | CO_VARKEYWORDS


def _fast_tick(decode: Any, module_name: str, attribute: str, due: Callable[[], None]) -> Optional[Callable[..., Any]]:
    """The tick as a plain function with ``decode``'s own parameters and defaults
    (the same default objects), which passes every value on positionally (keyword-only
    ones by keyword): Python binds the caller's keywords straight to its locals, so a
    call costs a fraction of a ``(*args, **kwargs)`` pass-through's repacking.  Named
    ``module_name.attribute`` (where it stands), so it pickles by reference to the same
    name, which resolves to the original where fi_compat is not installed.  ``due()``
    takes the step when one is due (:func:`fi_compat.watch._due_step`).  ``None``
    for a function with ``*args``/``**kwargs`` or one that is not a plain function."""
    code = getattr(decode, "__code__", None)
    if not isinstance(decode, types.FunctionType) or not isinstance(code, types.CodeType) or code.co_flags & _VARIADIC:
        return None
    positional = code.co_varnames[: code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    defaults = decode.__defaults__ or ()
    first_default = len(positional) - len(defaults)
    kwdefaults = decode.__kwdefaults__ or {}
    namespace: dict[str, Any] = {"_decode": decode, "_due": due, "_clock": time.perf_counter, "_next": TICK_DUE}
    header = []
    for index, name in enumerate(positional):
        if index >= first_default:
            namespace[f"_d{index}"] = defaults[index - first_default]
            header.append(f"{name}=_d{index}")
        else:
            header.append(name)
        if index + 1 == code.co_posonlyargcount:
            header.append("/")
    if keyword_only:
        header.append("*")
        for index, name in enumerate(keyword_only):
            if name in kwdefaults:
                namespace[f"_k{index}"] = kwdefaults[name]
                header.append(f"{name}=_k{index}")
            else:
                header.append(name)
    passed = list(positional) + [f"{name}={name}" for name in keyword_only]
    # the comparison inline: one clock read and one list read per call, no further call while nothing is due
    source = (
        f"def {attribute}({', '.join(header)}):\n"
        f"    if _clock() >= _next[0]:\n        _due()\n"
        f"    return _decode({', '.join(passed)})\n"
    )
    exec(compile(source, f"<fi_compat.watch tick for {module_name}.{attribute}>", "exec"), namespace)  # noqa: S102
    tick: Any = namespace[attribute]
    tick.__module__, tick.__qualname__, tick.__doc__ = module_name, attribute, decode.__doc__
    tick.__wrapped__ = decode  # inspect.signature shows flashinfer's, annotations included
    tick._fi_compat_wrapper = True
    tick._fi_compat_original = decode
    tick.fi_compat_deactivate = lambda: None  # a pass-through already
    return tick  # type: ignore[no-any-return]
