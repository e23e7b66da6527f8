"""What a module's names mean to a memo decorator, read from its source.

A decorator is read right only with its module's names: ``@_memo`` after
``from functools import cache as _memo`` is ``functools.cache``, and
``lru_cache(maxsize=CONST)`` is as unbounded as ``CONST`` is ``None``
(``CONST = None`` at module level), or as large as ``CONST = 1 << 20`` makes it.
:func:`module_names` collects those names once per parsed module.

Cost: one pass over a module's top-level statements; nothing is imported or run.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.LShift: operator.lshift,
    ast.Pow: operator.pow,
    ast.FloorDiv: operator.floordiv,
}
_LARGEST = 1 << 64  # an evaluated bound above this is "unknown": no arithmetic on absurd numbers

_UNKNOWN = object()


@dataclass(frozen=True)
class ModuleNames:
    """``memo_names``: local name -> ``"cache"`` / ``"lru_cache"`` for names bound
    to functools' memo decorators; ``constants``: module-level names bound to an
    int or ``None`` that the source fixes."""

    memo_names: dict[str, str] = field(default_factory=dict)
    constants: dict[str, Optional[int]] = field(default_factory=dict)

    def memo_name(self, text: str) -> str:
        """The functools memo a decorator's callee text names (its last part,
        or what an alias of one stands for)."""
        return self.memo_names.get(text, text.rsplit(".", 1)[-1])

    def value(self, expression: ast.expr) -> Any:
        """An int or ``None`` the expression fixes, else :data:`_UNKNOWN`."""
        return _evaluate(expression, self.constants)


NO_NAMES = ModuleNames()


def is_unknown(value: Any) -> bool:
    return value is _UNKNOWN


def _evaluate(node: ast.expr, constants: dict[str, Optional[int]]) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) is int):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id, _UNKNOWN)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _evaluate(node.operand, constants)
        return -inner if type(inner) is int else _UNKNOWN
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left, constants), _evaluate(node.right, constants)
        if type(left) is not int or type(right) is not int or abs(left) > _LARGEST or not 0 <= right <= 256:
            return _UNKNOWN
        result = _OPERATORS[type(node.op)](left, right) if right or not isinstance(node.op, ast.FloorDiv) else None
        return result if type(result) is int and abs(result) <= _LARGEST else _UNKNOWN
    return _UNKNOWN


def module_names(statements: Iterable[ast.stmt]) -> ModuleNames:
    """The memo aliases and constants bound by ``statements`` (a module's, in order)."""
    names = ModuleNames()
    for node in statements:
        if isinstance(node, ast.ImportFrom) and node.module == "functools" and node.level == 0:
            for alias in node.names:
                if alias.name in ("cache", "lru_cache"):
                    names.memo_names[alias.asname or alias.name] = alias.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = _evaluate(node.value, names.constants)
            memo = _memo_alias(node.value, names)
            if memo is not None:  # `_memo = functools.cache`: another alias
                for target in targets:
                    if isinstance(target, ast.Name):
                        names.memo_names[target.id] = memo
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    if value is _UNKNOWN:
                        names.constants.pop(target.id, None)  # rebound to something unknown: forget it
                    else:
                        names.constants[target.id] = value
    return names


def _memo_alias(value: ast.expr, names: ModuleNames) -> Optional[str]:
    if isinstance(value, ast.Name):
        return names.memo_names.get(value.id)
    if isinstance(value, ast.Attribute) and value.attr in ("cache", "lru_cache") and isinstance(value.value, ast.Name):
        return value.attr
    return None
