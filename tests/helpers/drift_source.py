"""Editing a module's source text at positions ``ast`` finds: the primitives
tests/helpers/drift.py builds its synthetic releases from.  Everything outside the
edited spans stays byte-identical."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from typing import Callable, Optional

from fi_compat.model.specs import CORE_MODULE


@functools.lru_cache(maxsize=4)
def _parse(text: str) -> ast.Module:
    # One parse of a 230 KB module is about 0.2 s; every edit of a release
    # starts from the same text.  The tree is never modified.
    return ast.parse(text)


class SourceEditor:
    """Edits of one module's source at positions ``ast`` reports (UTF-8 byte
    offsets, as ``col_offset`` is).  Edits must not overlap; :meth:`result`
    applies them back to front."""

    def __init__(self, text: str) -> None:
        self.data = text.encode()
        self.tree = _parse(text)
        self.starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.edits: list[tuple[int, int, bytes]] = []

    def at(self, lineno: int, col: int = 0) -> int:
        return self.starts[lineno - 1] + col

    def text(self, node: ast.AST) -> str:
        return self.data[self.at(node.lineno, node.col_offset):self.at(node.end_lineno, node.end_col_offset)].decode()

    def replace(self, start: int, end: int, text: str) -> None:
        self.edits.append((start, end, text.encode()))

    def function(self, name: str) -> Optional[ast.FunctionDef]:
        found = None
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                found = node  # the last definition wins, as at import
        return found

    def result(self) -> str:
        data = self.data
        previous_start = len(data) + 1
        for start, end, new in sorted(self.edits, key=lambda e: (e[0], e[1]), reverse=True):
            if end > previous_start:
                raise ValueError("overlapping source edits")
            data = data[:start] + new + data[end:]
            previous_start = start
        return data.decode()  # not re-parsed here: importing the release reports a SyntaxError


@dataclass
class Parameter:
    arg: ast.arg
    default: Optional[ast.expr]
    keyword_only: bool = False

    @property
    def name(self) -> str:
        return self.arg.arg


def parameters(node: ast.FunctionDef) -> list[Parameter]:
    args = node.args
    positional = list(args.posonlyargs) + list(args.args)
    defaults: list[Optional[ast.expr]] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    return ([Parameter(a, d) for a, d in zip(positional, defaults)]
            + [Parameter(a, d, True) for a, d in zip(args.kwonlyargs, args.kw_defaults)])


def set_parameters(source: SourceEditor, name: str, change: Callable[[list[Parameter]], list[Parameter]]) -> None:
    """Rewrite the ``def`` line(s) of ``name`` with ``change(parameters)``."""
    node = source.function(name)
    new = change(parameters(node))
    positional = [p for p in new if not p.keyword_only]
    first_default = next((i for i, p in enumerate(positional) if p.default is not None), len(positional))
    if any(p.default is None for p in positional[first_default:]):
        raise ValueError(f"{name}: a required positional parameter after a default one")
    arguments = ast.arguments(
        posonlyargs=[], args=[p.arg for p in positional], vararg=node.args.vararg,
        kwonlyargs=[p.arg for p in new if p.keyword_only], kw_defaults=[p.default for p in new if p.keyword_only],
        kwarg=node.args.kwarg, defaults=[p.default for p in positional[first_default:]],
    )
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    header = f"def {name}({ast.unparse(arguments)}){returns}:\n"
    source.replace(source.at(node.lineno, node.col_offset), source.at(node.body[0].lineno), header)


def prologue(source: SourceEditor, name: str, *lines: str) -> None:
    """Statements at the top of ``name``'s body (after its docstring)."""
    node = source.function(name)
    first = node.body[0]
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
        and isinstance(first.value.value, str)
    offset = source.at(first.end_lineno + 1) if is_docstring else source.at(first.lineno)
    indent = " " * first.col_offset
    source.replace(offset, offset, "".join(f"{indent}{line}\n" for line in lines))


def _calls_of(source: SourceEditor, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(source.tree) if isinstance(n, ast.Call)
            and ((isinstance(n.func, ast.Name) and n.func.id == name)
                 or (isinstance(n.func, ast.Attribute) and n.func.attr == name))]


def edit_calls(source: SourceEditor, name: str, *, rename: Optional[dict[str, str]] = None,
               remove: tuple[str, ...] = (), add: Optional[dict[str, str]] = None,
               wrap: Optional[dict[str, str]] = None) -> int:
    """Keep ``name``'s own callers in the module consistent with an edit (as
    the release that made it would): rename/remove keywords, add
    ``keyword=expression``, wrap a keyword's value (``"tuple({})"``).  Returns
    the number of calls changed."""
    changed = 0
    for call in _calls_of(source, name):
        for keyword in call.keywords:
            start = source.at(keyword.lineno, keyword.col_offset)
            if keyword.arg in (rename or {}):
                source.replace(start, start + len(keyword.arg), rename[keyword.arg])
            elif keyword.arg in remove:
                # ``**{}`` keeps the commas around it valid
                source.replace(start, source.at(keyword.end_lineno, keyword.end_col_offset), "**{}")
            elif keyword.arg in (wrap or {}):
                value = keyword.value
                source.replace(source.at(value.lineno, value.col_offset),
                               source.at(value.end_lineno, value.end_col_offset),
                               wrap[keyword.arg].format(source.text(value)))
        if add:
            last = max([*call.args, *call.keywords], key=lambda n: (n.end_lineno, n.end_col_offset))
            end = source.at(last.end_lineno, last.end_col_offset)
            source.replace(end, end, "".join(f", {k}={v}" for k, v in add.items()))
        changed += 1
    return changed


def rename_function(source: SourceEditor, old: str, new: str) -> None:
    node = source.function(old)
    start = source.at(node.lineno, node.col_offset) + len("def ")
    source.replace(start, start + len(old), new)
    for name in ast.walk(source.tree):
        if isinstance(name, ast.Name) and name.id == old:
            offset = source.at(name.lineno, name.col_offset)
            source.replace(offset, offset + len(old), new)


def _decorator_text(source: SourceEditor, node: ast.FunctionDef) -> list[str]:
    return [ast.unparse(d) for d in node.decorator_list]


def set_decorator(source: SourceEditor, name: str, old: Optional[str], new: Optional[str]) -> None:
    """Replace decorator ``old`` by ``new``; ``old=None`` adds ``new``, ``new=None`` removes ``old``."""
    node = source.function(name)
    if old is None:
        line = min([d.lineno for d in node.decorator_list] + [node.lineno])
        source.replace(source.at(line), source.at(line), f"@{new}\n")
        return
    decorator = next(d for d in node.decorator_list if ast.unparse(d) == old)
    if new is None:
        source.replace(source.at(decorator.lineno), source.at(decorator.end_lineno + 1), "")
    else:
        source.replace(source.at(decorator.lineno, decorator.col_offset),
                       source.at(decorator.end_lineno, decorator.end_col_offset), new)


def move_functions(source: SourceEditor, names: list[str], module: str) -> str:
    """Cut ``names`` (with their decorators) out of the module and return the
    text of ``module``, which defines them.  The old module imports them back
    where the first of them stood (module-level code after that point may use
    them), and at its end hands the new module every global it defined later,
    as a refactor that split the file would have carried the helpers along.
    The moved functions then look each other up in the new module."""
    spans = []
    for name in names:
        node = source.function(name)
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        spans.append((source.at(first), source.at(node.end_lineno + 1)))
    spans.sort()
    moved = [source.data[start:end].decode() for start, end in spans]
    for index, (start, end) in enumerate(spans):
        source.replace(start, end, f"from .{module} import {', '.join(names)}  # noqa: E402\n" if index == 0 else "")
    end = len(source.data)
    source.replace(end, end, (
        f"\nfrom . import {module} as _drift_moved  # noqa: E402\n"
        "for _drift_name, _drift_value in list(globals().items()):\n"
        "    if not _drift_name.startswith('_drift') and _drift_name not in vars(_drift_moved):\n"
        "        setattr(_drift_moved, _drift_name, _drift_value)\n"
    ))
    core_name = CORE_MODULE.rsplit(".", 1)[1]
    prelude = (
        f'"""Moved out of {core_name} (a synthetic release)."""\n'
        "import sys as _sys\n\n"
        f"globals().update({{k: v for k, v in vars(_sys.modules[__name__.rpartition('.')[0] + '.{core_name}']).items()\n"
        "                   if not (k.startswith('__') and k.endswith('__'))})\n\n\n"
    )
    return prelude + "\n\n".join(moved)
