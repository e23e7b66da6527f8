"""Source lookups: a package directory or a wheel, read with ``ast`` (nothing imported)."""

from __future__ import annotations

import ast
import os
from dataclasses import replace
from typing import Callable, Iterable, Iterator, Optional, Protocol

from ..model.signatures import (
    KEYWORD_ONLY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    FoundFunction,
    FoundParam,
    Memo,
)
from ..model.spec_model import Home
from ..model.specs import FunctionSpec, homes
from .model import NO_MEMO, PACKAGE, Found, memo_of_decorator
from .source_names import NO_NAMES, ModuleNames, module_names

MAX_REEXPORT_DEPTH = 4


class SourceReader(Protocol):
    """Where source lookups read from: a package directory or a wheel."""

    def source(self, module: str) -> Optional[tuple[str, str]]:
        """``(path, text)`` of a dotted module, ``None`` when absent."""

    def modules(self) -> Iterable[str]:
        """Every dotted module name available (for the moved-function search)."""


class DirectoryReader:
    """Reads ``<root>/flashinfer/**.py`` (``root`` is the directory that holds the package)."""

    def __init__(self, root: str, package: str = PACKAGE) -> None:
        self.root = root
        self.package = package
        self._texts: dict[str, Optional[tuple[str, str]]] = {}

    @classmethod
    def for_package_dir(cls, package_dir: str) -> "DirectoryReader":
        return cls(os.path.dirname(os.path.abspath(package_dir)), os.path.basename(os.path.normpath(package_dir)))

    def source(self, module: str) -> Optional[tuple[str, str]]:
        if module not in self._texts:
            self._texts[module] = None
            base = os.path.join(self.root, *module.split("."))
            for path in (base + ".py", os.path.join(base, "__init__.py")):
                try:
                    with open(path, encoding="utf-8") as handle:
                        self._texts[module] = (path, handle.read())
                    break
                except (OSError, UnicodeDecodeError):
                    continue
        return self._texts[module]

    def modules(self) -> Iterator[str]:
        top = os.path.join(self.root, self.package)
        for directory, _dirs, files in os.walk(top):
            for file in files:
                if file.endswith(".py"):
                    relative = os.path.relpath(os.path.join(directory, file), self.root)[:-3]
                    parts = relative.split(os.sep)
                    yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements that run at import, including those under module-level
    ``if``/``try``/``with`` (a ``def`` there is as real as one at the top)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from module_level_statements(node.body)
            yield from module_level_statements(node.orelse)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for block in (node.body, node.orelse, node.finalbody):  # type: ignore[attr-defined]
                yield from module_level_statements(block)
            for handler in node.handlers:  # type: ignore[attr-defined]
                yield from module_level_statements(handler.body)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from module_level_statements(node.body)


def describe_def(
    qualname: str,
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    where: str,
    memo: Optional[tuple[Memo, Optional[int]]] = None,
    names: ModuleNames = NO_NAMES,
) -> FoundFunction:
    """A ``def`` as a :class:`FoundFunction`; ``memo`` overrides the decorators
    (for ``name = functools.cache(other)``); ``names``: its module's memo aliases
    and constants, by which the decorators are read."""
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
    if memo is None:
        memo = (NO_MEMO, None)
        for decorator in node.decorator_list:
            kind = memo_of_decorator(decorator, names)
            if kind[0] != NO_MEMO:
                memo = kind
    return FoundFunction(qualname, tuple(params), memo[0], memo[1], where)


class SourceIndex:
    """Parsed modules of one reader, each parsed once."""

    def __init__(self, reader: SourceReader) -> None:
        self.reader = reader
        self._trees: dict[str, Optional[tuple[str, ast.Module]]] = {}
        self._names: dict[str, ModuleNames] = {}

    def tree(self, module: str) -> Optional[tuple[str, ast.Module]]:
        if module not in self._trees:
            located = self.reader.source(module)
            self._trees[module] = None
            if located is not None:
                path, text = located
                self._trees[module] = (path, ast.parse(text, filename=path))
        return self._trees[module]

    def names(self, module: str) -> ModuleNames:
        """The memo aliases and constants ``module`` binds (:mod:`fi_compat.lookup.source_names`)."""
        if module not in self._names:
            parsed = self.tree(module)
            self._names[module] = NO_NAMES if parsed is None else module_names(module_level_statements(parsed[1].body))
        return self._names[module]


def _last_binding(tree: ast.Module, name: str) -> Optional[ast.stmt]:
    binding: Optional[ast.stmt] = None
    for node in module_level_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            binding = node
        elif isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            binding = node
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            binding = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            binding = node
    return binding


def resolve_relative(module: str, path: str, node: ast.ImportFrom) -> Optional[str]:
    """The absolute module an ``ImportFrom`` in ``module`` (file ``path``) names."""
    if node.level == 0:
        return node.module
    package = module if os.path.basename(path) == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")
    if node.level - 1 >= len(parts):
        return None
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _find_binding(
    index: SourceIndex, module: str, name: str, qualname: str, depth: int = 0
) -> Optional[tuple[FoundFunction, str]]:
    """``(function, defining module)`` for ``module.name`` following re-exports."""
    parsed = index.tree(module)
    if parsed is None or depth > MAX_REEXPORT_DEPTH:
        return None
    path, tree = parsed
    binding = _last_binding(tree, name)
    if isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return describe_def(qualname, binding, f"{path}:{binding.lineno}", names=index.names(module)), module
    if isinstance(binding, ast.ImportFrom):
        alias = next(a for a in binding.names if (a.asname or a.name) == name)
        target = resolve_relative(module, path, binding)
        return None if target is None else _find_binding(index, target, alias.name, qualname, depth + 1)
    if isinstance(binding, ast.Assign) and isinstance(binding.value, ast.Call):
        # name = functools.cache(other) / lru_cache(maxsize=N)(other)
        call = binding.value
        decorator: ast.expr = call.func
        inner = call.args[0] if call.args else None
        if isinstance(inner, ast.Name):
            found = _find_binding(index, module, inner.id, qualname, depth + 1)
            if found is not None:
                memo = memo_of_decorator(decorator, index.names(module))
                function = found[0]
                if memo[0] != NO_MEMO:
                    function = replace(function, memo=memo[0], maxsize=memo[1])
                return function, found[1]
    if isinstance(binding, ast.Assign) and isinstance(binding.value, ast.Name):
        return _find_binding(index, module, binding.value.id, qualname, depth + 1)
    return None


def _find_class(index: SourceIndex, module: str, name: str, depth: int = 0) -> Optional[tuple[ast.ClassDef, str, str]]:
    """``(class node, defining module, path)`` for ``module.name``, following re-exports."""
    parsed = index.tree(module)
    if parsed is None or depth > MAX_REEXPORT_DEPTH:
        return None
    path, tree = parsed
    binding = _last_binding(tree, name)
    if isinstance(binding, ast.ClassDef):
        return binding, module, path
    if isinstance(binding, ast.ImportFrom):
        alias = next(a for a in binding.names if (a.asname or a.name) == name)
        target = resolve_relative(module, path, binding)
        return None if target is None else _find_class(index, target, alias.name, depth + 1)
    return None


def _find_member(index: SourceIndex, home: Home) -> Optional[Found]:
    """``Class.member``: the last ``def member`` in the class body (``classmethod``
    and ``staticmethod`` decorators are transparent; memo decorators count)."""
    class_name, member = home.name.rsplit(".", 1)
    located = _find_class(index, home.module, class_name)
    if located is None:
        return None
    node, module, path = located
    found: Optional[ast.FunctionDef | ast.AsyncFunctionDef] = None
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == member:
            found = statement
    if found is None:
        return None
    function = describe_def(home.qualname, found, f"{path}:{found.lineno}", names=index.names(module))
    return Found(function, module, at=Home(home.module, home.name))


def find_at_home(index: SourceIndex, home: Home) -> Optional[Found]:
    """The function ``home`` names (one of a spec's homes), following re-exports, or ``None``."""
    if "." in home.name:
        return _find_member(index, home)
    result = _find_binding(index, home.module, home.name, home.qualname)
    return None if result is None else Found(result[0], result[1], at=Home(home.module, home.name))


def find_moved(spec: FunctionSpec, index: SourceIndex) -> Optional[Found]:
    """A function of one of ``spec``'s names defined in a module that is none of any
    spec's homes for that name (a release that moved it without a spec line saying so).
    Cost: reads every source file once (about 0.1 s); members of classes are not searched."""
    for name in dict.fromkeys(home.name for home in spec.homes()):
        if "." in name:
            continue
        needle = f"def {name}("
        elsewhere = homes(name)
        for module in index.reader.modules():
            located = index.reader.source(module) if module not in elsewhere else None
            if located is None or needle not in located[1]:
                continue
            try:
                parsed = index.tree(module)
            except SyntaxError:
                continue
            if parsed is None:
                continue
            binding = _last_binding(parsed[1], name)
            if isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef)):
                result = _find_binding(index, module, name, f"{module}.{name}")
                if result is not None:
                    return Found(result[0], result[1], moved=True, at=Home(module, name))
    return None


def find_in_source(spec: FunctionSpec, index: SourceIndex, search_moved: bool = True) -> Optional[Found]:
    """``spec`` in the sources behind ``index``, following the rules above: at each of
    its homes, the newest first, then (``search_moved``) anywhere else."""
    for home in spec.homes():
        found = find_at_home(index, home)
        if found is not None:
            return found
    return find_moved(spec, index) if search_moved else None


def source_lookup(reader: SourceReader) -> Callable[[FunctionSpec], Optional[Found]]:
    """A :data:`Lookup` over ``reader`` (one parse per module for every spec asked)."""
    index = SourceIndex(reader)
    return lambda spec: find_in_source(spec, index)
