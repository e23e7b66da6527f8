"""Complete argument tuples by parameter name, however a call passes them.

:class:`ArgumentLayout` is what every key of :mod:`fi_compat.adapters.keys`
is computed from: a call positional, by keyword or mixed becomes the complete
tuple of the installed function's parameters, in its own order, defaults
filled, or ``None`` when it would not bind.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Optional, Sequence


def as_int(value: Any) -> Optional[int]:
    """``value`` as an ``int`` (ints, numpy and 0-d integer types), else ``None``."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


class ArgumentLayout:
    """Complete argument tuples for one installed function, whatever the call style.

    ``complete(args, kwargs)`` returns every parameter's value in the
    function's positional order (defaults filled), or ``None`` when the call
    would not bind (then flashinfer raises its own ``TypeError`` if the call
    goes through).  Each call shape -- number of positional arguments and the
    keyword names in order -- is compiled once into an ``itemgetter``; a call
    then costs one dict lookup and one C-level gather.

    ``renamed`` (earlier name -> current name, ``FunctionSpec.earlier_names``)
    makes :attr:`index` find a parameter a release calls by its earlier name
    under its current name too, which is what the keys look up.
    ``positional_only``: how many leading parameters are positional-only; a call
    that names one of them by keyword does not bind, as it does not for flashinfer.
    """

    def __init__(
        self,
        names: Sequence[str],
        defaults: Mapping[str, Any],
        renamed: Optional[Mapping[str, str]] = None,
        positional_only: int = 0,
    ) -> None:
        self.names = tuple(names)
        self._positional_only = frozenset(self.names[:positional_only])
        self.defaults = dict(defaults)
        self.index = {name: i for i, name in enumerate(self.names)}
        for earlier, current in (renamed or {}).items():
            if earlier in self.index and current not in self.index:
                self.index[current] = self.index[earlier]
        self._required = frozenset(n for n in self.names if n not in self.defaults)
        self._shapes: dict[tuple, Optional[Callable[[tuple, dict], tuple]]] = {}

    @classmethod
    def of(cls, function: Callable, renamed: Optional[Mapping[str, str]] = None) -> "ArgumentLayout":
        """The layout of ``function``'s named parameters (``*args`` / ``**kwargs``
        name no argument: a call using them does not bind, and takes the fallback).

        Raises ``ValueError`` when the signature names no parameter at all --
        a ``(**kwargs)`` wrapper such as TensorRT-LLM's builder memo -- so the
        caller lays the arguments out by the spec's names instead."""
        import inspect

        named = (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        parameters = [p for p in inspect.signature(function).parameters.values() if p.kind in named]
        if not parameters:
            raise ValueError(f"{function!r} names no parameter (only *args / **kwargs): no layout by name")
        return cls(
            [p.name for p in parameters],
            {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty},
            renamed,
            sum(1 for p in parameters if p.kind is inspect.Parameter.POSITIONAL_ONLY),
        )

    def complete(self, args: tuple, kwargs: dict) -> Optional[tuple]:
        if not kwargs and len(args) == len(self.names):
            return args
        shape = (len(args), *kwargs)
        gather = self._shapes.get(shape, _UNSEEN)
        if gather is _UNSEEN:
            gather = self._compile(len(args), tuple(kwargs))
            if len(self._shapes) < 64:  # a caller with ever-new shapes must not grow this
                self._shapes[shape] = gather
        return None if gather is None else gather(args, kwargs)

    def _compile(self, count: int, keywords: tuple[str, ...]) -> Optional[Callable[[tuple, dict], tuple]]:
        if count > len(self.names):
            return None
        rest = self.names[count:]
        given = set(keywords)
        if not given <= set(rest) or len(given) != len(keywords) or given & self._positional_only:
            return None  # unknown keyword, one already given positionally, or a positional-only one
        if not all(name in given or name in self.defaults for name in rest):
            return None  # a required parameter is missing
        if not rest:
            return lambda args, kwargs: args
        getter = operator.itemgetter(*rest)
        defaults = {name: self.defaults[name] for name in rest if name not in given}
        single = len(rest) == 1
        if not defaults:
            if single:
                return lambda args, kwargs: (*args, getter(kwargs))
            return lambda args, kwargs: (*args, *getter(kwargs))
        if single:
            return lambda args, kwargs: (*args, getter({**defaults, **kwargs}))
        return lambda args, kwargs: (*args, *getter({**defaults, **kwargs}))


_UNSEEN = object()


__all__ = ["ArgumentLayout", "as_int"]
