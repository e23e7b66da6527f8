"""The watch's decode tick: a pass-through in front of the decode function while the watch runs.

One job: :func:`tick_plan`, the tick at every module attribute that holds the
decode function (an engine's own ``from flashinfer... import`` too), which the
watch takes out again when it retires.  A tick does two things per call: it
notes the call's ``max_seq_len`` in the watch's window of distinct lengths (how
the watch knows it has seen enough to retire), and it takes a step when one is
due.  It is a plain function with the decode function's own parameters (read
through ``__wrapped__``: flashinfer's ``_auto_dump_wrapper(*args, **kwargs)``
stands over the decode function), so Python binds the caller's keywords straight
to its locals.  Cost per call while it stands: one clock read, one list read and
one set test (about 0.3 us on the project's 2-core CPU).
"""

from __future__ import annotations

import inspect
import itertools
import time
from typing import Any, Callable, Optional

from ..adapters.base import PatchStep, Plan
from ..lookup.modules import holders, loaded
from ..model.specs import CORE_MODULE, DECODE

#: When the watch next wants a step, by ``time.perf_counter`` (``inf``: none wanted).
DUE = [float("inf")]

_KINDS = inspect.Parameter


def _signature(decode: Any) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(decode)  # follows __wrapped__: the parameters under a (*args, **kwargs) decorator
    except (TypeError, ValueError):
        return None


def fast_tick(
    decode: Any, name: str, qualname: str, lengths: set[Any], window: int, due: Callable[[], None]
) -> Callable[..., Any]:
    """The tick for ``decode``, named ``name`` (where it stands, so it pickles by reference
    to the same name, which resolves to the original where fi_compat is not installed).
    ``lengths``: the watch's window, which each call's ``max_seq_len`` joins (a call count
    where the decode function has no such parameter); a full window makes a step due.
    ``due()`` takes the step."""
    signature = _signature(decode)
    namespace: dict[str, Any] = {
        "_decode": decode,
        "_due": due,
        "_clock": time.perf_counter,
        "_next": DUE,
        "_lengths": lengths,
        "_window": window,
        "_count": itertools.count(),
    }
    parameters = list(signature.parameters.values()) if signature is not None else []
    simple = signature is not None and all(p.kind not in (_KINDS.VAR_POSITIONAL, _KINDS.VAR_KEYWORD) for p in parameters)
    if simple:
        header, passed = [], []
        for index, parameter in enumerate(parameters):
            text = parameter.name
            if parameter.default is not _KINDS.empty:
                namespace[f"_d{index}"] = parameter.default
                text = f"{parameter.name}=_d{index}"
            if parameter.kind == _KINDS.KEYWORD_ONLY and "*" not in header:
                header.append("*")
            header.append(text)
            if parameter.kind == _KINDS.POSITIONAL_ONLY and (
                index + 1 == len(parameters) or parameters[index + 1].kind != _KINDS.POSITIONAL_ONLY
            ):
                header.append("/")
            passed.append(parameter.name if parameter.kind != _KINDS.KEYWORD_ONLY else f"{parameter.name}={parameter.name}")
        length = "max_seq_len" if "max_seq_len" in signature.parameters else "next(_count)"
    else:
        header, passed, length = ["*args", "**kwargs"], ["*args", "**kwargs"], "next(_count)"
    # inline: no further call while nothing is due and the length was seen
    source = (
        f"def {name}({', '.join(header)}):\n"
        f"    _length = {length}\n"
        f"    if _length not in _lengths:\n"
        f"        _lengths.add(_length)\n"
        f"        if len(_lengths) >= _window:\n"
        f"            _next[0] = 0.0\n"
        f"    if _clock() >= _next[0]:\n"
        f"        _due()\n"
        f"    return _decode({', '.join(passed)})\n"
    )
    exec(compile(source, f"<fi_compat.watch tick for {qualname}>", "exec"), namespace)  # noqa: S102
    tick: Any = namespace[name]
    tick.__qualname__, tick.__doc__ = name, getattr(decode, "__doc__", None)
    tick.__module__ = qualname.rpartition(".")[0]
    tick.__wrapped__ = decode  # inspect.signature shows flashinfer's, annotations included
    tick._fi_compat_wrapper = True
    tick._fi_compat_original = decode
    tick.fi_compat_deactivate = lambda: None  # a pass-through already
    return tick  # type: ignore[no-any-return]


def tick_plan(lengths: set[Any], window: int, due: Callable[[], None]) -> Plan:
    """The decode tick at every module attribute that holds the decode function outside its
    home module (``flashinfer.mla``, ``flashinfer.decode``, an engine's own import): the
    per-batch driver of the watch.  The home module keeps the function, so fi_compat's call
    API calls it directly and it pickles by reference as before.  Empty when the release has no
    such function, or when transparent mode stands there instead (its proxy is not the function)."""
    core = loaded(CORE_MODULE)
    decode = getattr(core, DECODE.name, None) if core is not None else None
    if not callable(decode):
        return Plan()
    targets = holders(decode, skip=(CORE_MODULE,))
    if not targets:
        return Plan()
    # the first flashinfer holder names the tick (flashinfer.mla: what engines import)
    first = sorted(targets, key=lambda t: (not t[0].__name__.startswith("flashinfer"), t[0].__name__, t[1]))[0]
    tick = fast_tick(decode, first[1], f"{first[0].__name__}.{first[1]}", lengths, window, due)
    return Plan([PatchStep(f"watch tick: {DECODE.qualname}", decode, tick, targets)], {}, [])
