"""The one description of the flashinfer functions fi_compat relies on.

Both the runtime registry (``inspect.signature`` on live functions) and the
pin-bump guard (``ast`` on a wheel's source, nothing imported) read the
expected parameter lists from here and compare them with :func:`compare`,
so the two can never disagree about what "matches" means.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from .specs import FunctionSpec, Param

POSITIONAL_ONLY = "positional-only"
POSITIONAL_OR_KEYWORD = "positional-or-keyword"
KEYWORD_ONLY = "keyword-only"
VAR_POSITIONAL = "*args"
VAR_KEYWORD = "**kwargs"

_INSPECT_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY: KEYWORD_ONLY,
    inspect.Parameter.VAR_POSITIONAL: VAR_POSITIONAL,
    inspect.Parameter.VAR_KEYWORD: VAR_KEYWORD,
}


@dataclass(frozen=True)
class FoundParam:
    name: str
    kind: str
    has_default: bool

    def __str__(self) -> str:
        prefix = {VAR_POSITIONAL: "*", VAR_KEYWORD: "**"}.get(self.kind, "")
        suffix = "=…" if self.has_default else ""
        marker = "/" if self.kind == POSITIONAL_ONLY else ""
        return f"{prefix}{self.name}{suffix}{marker}"


@dataclass(frozen=True)
class FoundFunction:
    """A function as found: its parameters and whether it carries a memo decorator."""

    qualname: str
    params: tuple[FoundParam, ...]
    memoized: bool
    where: str = ""  # "file:line" for ast, "" for live functions

    def text(self) -> list[str]:
        return [str(p) for p in self.params]


@dataclass(frozen=True)
class Mismatch:
    """How a function differs from its spec; ``found is None`` means it is missing."""

    spec: FunctionSpec
    found: Optional[FoundFunction]
    difference: str
    problems: tuple[str, ...] = field(default=())

    @property
    def expected(self) -> list[str]:
        return self.spec.expected_text()

    @property
    def found_text(self) -> Optional[list[str]]:
        return None if self.found is None else self.found.text()

    def describe(self) -> str:
        found = "not found" if self.found is None else f"({', '.join(self.found.text())})"
        return (
            f"{self.spec.qualname}: {self.difference}; expected "
            f"({', '.join(self.expected)}), found {found}"
        )


# --------------------------------------------------------------------------- live functions


def _is_functools_memo(obj: object) -> bool:
    # functools.cache / lru_cache objects expose both; our own wrapt proxies
    # expose them too but say so with ``_fi_compat_wrapper``.
    return callable(getattr(obj, "cache_clear", None)) and hasattr(obj, "__wrapped__")


def found_from_callable(qualname: str, obj: object) -> FoundFunction:
    """Describe a live callable.  ``inspect.signature`` follows ``__wrapped__``,
    so a ``functools.cache`` or a wrapt proxy reports the original's parameters."""
    if not callable(obj):
        return FoundFunction(qualname, (), False, where=f"not callable: {type(obj).__name__}")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return FoundFunction(qualname, (FoundParam("*args", VAR_POSITIONAL, False),), _is_functools_memo(obj))
    params = tuple(
        FoundParam(p.name, _INSPECT_KINDS[p.kind], p.default is not inspect.Parameter.empty)
        for p in signature.parameters.values()
    )
    original = getattr(obj, "_fi_compat_original", None)
    memoized = _is_functools_memo(original if original is not None else obj)
    return FoundFunction(qualname, params, memoized)


# --------------------------------------------------------------------------- source (ast)

_MEMO_DECORATORS = {"cache", "functools.cache"}
_LRU_DECORATORS = {"lru_cache", "functools.lru_cache"}


def unbounded_memo_decorator(decorator: ast.expr) -> Optional[str]:
    """Return a short description when ``decorator`` is an unbounded memo
    (``functools.cache``, ``@cache``, ``lru_cache(maxsize=None)``, ``lru_cache(None)``)."""
    text = ast.unparse(decorator)
    if text in _MEMO_DECORATORS:
        return text
    if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) in _LRU_DECORATORS:
        size: Optional[ast.expr] = decorator.args[0] if decorator.args else None
        for keyword in decorator.keywords:
            if keyword.arg == "maxsize":
                size = keyword.value
        if size is not None and isinstance(size, ast.Constant) and size.value is None:
            return text
    return None


def found_from_ast(qualname: str, node: ast.FunctionDef | ast.AsyncFunctionDef, where: str = "") -> FoundFunction:
    args = node.args
    positional = list(args.posonlyargs) + list(args.args)
    first_default = len(positional) - len(args.defaults)
    params: list[FoundParam] = []
    for index, arg in enumerate(positional):
        kind = POSITIONAL_ONLY if index < len(args.posonlyargs) else POSITIONAL_OR_KEYWORD
        params.append(FoundParam(arg.arg, kind, index >= first_default))
    if args.vararg is not None:
        params.append(FoundParam(args.vararg.arg, VAR_POSITIONAL, False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append(FoundParam(arg.arg, KEYWORD_ONLY, default is not None))
    if args.kwarg is not None:
        params.append(FoundParam(args.kwarg.arg, VAR_KEYWORD, False))
    memoized = any(unbounded_memo_decorator(d) is not None for d in node.decorator_list)
    return FoundFunction(qualname, tuple(params), memoized, where)


def _module_level_statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Statements that run at import, including those under module-level
    ``if``/``try``/``with`` (a ``def`` there is as real as one at the top)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _module_level_statements(node.body)
            yield from _module_level_statements(node.orelse)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for block in (node.body, node.orelse, node.finalbody):  # type: ignore[attr-defined]
                yield from _module_level_statements(block)
            for handler in node.handlers:  # type: ignore[attr-defined]
                yield from _module_level_statements(handler.body)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from _module_level_statements(node.body)


def find_function_in_source(source: str, name: str, filename: str = "<source>") -> Optional[FoundFunction]:
    """The last module-level ``def name`` in ``source`` (later definitions win,
    as at import), looking inside module-level ``if``/``try``/``with`` too."""
    tree = ast.parse(source, filename=filename)
    found: Optional[FoundFunction] = None
    for node in _module_level_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = found_from_ast(name, node, where=f"{filename}:{node.lineno}")
    return found


# --------------------------------------------------------------------------- comparison


def compare(spec: FunctionSpec, found: Optional[FoundFunction], memoized: Optional[bool] = None) -> Optional[Mismatch]:
    """``None`` when ``found`` fits ``spec``; otherwise a :class:`Mismatch`
    whose ``difference`` names each problem in words.

    Fits means: every required parameter present; no parameter the spec does
    not know; known parameters in the spec's order; none positional-only or
    keyword-only, no ``*args``/``**kwargs``; optional parameters have defaults; and the memo
    decorator is present or absent as ``memoized`` says (``None``: either).
    """
    if found is None:
        return Mismatch(spec, None, "is missing (moved or removed)", ("missing",))
    problems: list[str] = []
    known = {p.name: p for p in spec.params}
    found_names = [p.name for p in found.params]
    missing = [p.name for p in spec.params if p.required and p.name not in found_names]
    unexpected = [p for p in found.params if p.name not in known and p.kind not in (VAR_POSITIONAL, VAR_KEYWORD)]
    if len(missing) == 1 and len(unexpected) == 1:
        problems.append(f"parameter {missing[0]!r} was renamed to {unexpected[0].name!r}")
    else:
        for name in missing:
            problems.append(f"lost required parameter {name!r}")
        for param in unexpected:
            state = "optional" if param.has_default else "required"
            problems.append(f"gained {state} parameter {param.name!r}")
    for param in found.params:
        if param.kind == POSITIONAL_ONLY:
            problems.append(f"parameter {param.name!r} became positional-only")
        elif param.kind == KEYWORD_ONLY:
            # Callers (TensorRT-LLM passes 16 positional arguments) and the
            # adapters rely on every known parameter being positional too.
            problems.append(f"parameter {param.name!r} became keyword-only")
        elif param.kind in (VAR_POSITIONAL, VAR_KEYWORD):
            problems.append(f"accepts {param}")
        elif param.name in known and not known[param.name].required and not param.has_default:
            problems.append(f"parameter {param.name!r} has no default")
    order = [n for n in found_names if n in known]
    expected_order = [n for n in spec.names if n in order]
    if order != expected_order and not missing and not unexpected:
        problems.append("parameters are in a different order")
    if memoized is True and not found.memoized:
        problems.append("lost its functools.cache decorator")
    elif memoized is False and found.memoized:
        problems.append("gained a cache decorator")
    if not problems:
        return None
    return Mismatch(spec, found, "; ".join(problems), tuple(problems))


Lookup = Callable[[FunctionSpec], Optional[FoundFunction]]


Expectation = tuple[FunctionSpec, Optional[bool]]
"""A function and whether it must (``True``) or must not (``False``) carry a memo decorator."""


def check_all(expectations: Iterable[Expectation], lookup: Lookup) -> list[Mismatch]:
    return [m for m in (compare(spec, lookup(spec), memoized) for spec, memoized in expectations) if m is not None]
