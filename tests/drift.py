"""Synthetic flashinfer releases: the real release on ``sys.path`` with ONE source edit each.

A test-support module (no tests here), shared by the call-API catalogue
(tests/matrix/test_drift_catalogue.py) and the guard's tests.  For an
:class:`Edit` it produces

* :func:`build_site`: an importable site directory whose ``flashinfer``
  package is the real one with the edited modules replaced: only the
  directories on the way to an edited file are real, everything else is a
  symlink to the real package (a 0.7.4 copy would be about 850 MB with its
  binaries; an overlay is a few hundred links and about 0.3 MB of edited
  source).  ``__pycache__`` directories link the real bytecode of unedited
  modules, so nothing is recompiled and nothing is ever written into the
  real package;
* :func:`build_wheel`: a wheel (zip, ``flashinfer_python-<version>.dist-info``
  with METADATA/WHEEL/RECORD) holding the package's Python sources, edited.

Each synthetic release gets its own version (``<base>.post9NN.dev0``: after
the base release, before any later one, a pre-release, so never "verified").
Edits are made on the source text at positions ``ast`` finds, so everything
outside the edited function is byte-identical to the real release.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import importlib.util
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from fi_compat.specs import CORE_MODULE, DECODE, TUNING_CONFIG, TUNING_CONFIG_BUILDER

PACKAGE = "flashinfer"
DISTRIBUTION = "flashinfer_python"
CORE_FILE = CORE_MODULE.replace(".", "/") + ".py"
MOVED_MODULE = "_decode_impl"  # where the "moved" edit puts the functions: flashinfer.mla._decode_impl
MOVED_FILE = f"{CORE_FILE.rsplit('/', 1)[0]}/{MOVED_MODULE}.py"
BUILD_META_FILE = f"{PACKAGE}/_build_meta.py"


# --------------------------------------------------------------------------- editing source text


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


# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Edit:
    """One change a future release might make.  ``change(core_text)`` returns
    the files it writes (package-relative paths, e.g. ``flashinfer/mla/_core.py``);
    ``applies(core_text)`` says whether this release has what it edits."""

    name: str
    summary: str
    function: str  # the spec qualname it edits
    change: Callable[[str], dict[str, str]]
    applies: Callable[[str], bool]


def _has(spec_name: str, *param_names: str, decorator: Optional[str] = None) -> Callable[[str], bool]:
    def applies(text: str) -> bool:
        node = SourceEditor(text).function(spec_name)
        if node is None:
            return False
        names = {p.name for p in parameters(node)}
        return set(param_names) <= names and (decorator is None or decorator in [ast.unparse(d) for d in node.decorator_list])

    return applies


def _core_edit(step: Callable[[SourceEditor], None]) -> Callable[[str], dict[str, str]]:
    def change(text: str) -> dict[str, str]:
        source = SourceEditor(text)
        step(source)
        return {CORE_FILE: source.result()}

    return change


def _swap(a: str, b: str) -> Callable[[list[Parameter]], list[Parameter]]:
    def change(params: list[Parameter]) -> list[Parameter]:
        i, j = [p.name for p in params].index(a), [p.name for p in params].index(b)
        params[i], params[j] = params[j], params[i]
        return params

    return change


def _insert_after(after: str, name: str, annotation: str) -> Callable[[list[Parameter]], list[Parameter]]:
    def change(params: list[Parameter]) -> list[Parameter]:
        index = [p.name for p in params].index(after) + 1
        return params[:index] + [Parameter(ast.arg(name, ast.parse(annotation, mode="eval").body), None)] + params[index:]

    return change


def _without(name: str) -> Callable[[list[Parameter]], list[Parameter]]:
    return lambda params: [p for p in params if p.name != name]


def _renamed(old: str, new: str) -> Callable[[list[Parameter]], list[Parameter]]:
    def change(params: list[Parameter]) -> list[Parameter]:
        for p in params:
            if p.name == old:
                p.arg = ast.arg(new, p.arg.annotation)
        return params

    return change


def _keyword_only_from(name: str) -> Callable[[list[Parameter]], list[Parameter]]:
    def change(params: list[Parameter]) -> list[Parameter]:
        index = [p.name for p in params].index(name)
        return params[:index] + [Parameter(p.arg, p.default, True) for p in params[index:]]

    return change


def _default(name: str, expression: str) -> Callable[[list[Parameter]], list[Parameter]]:
    def change(params: list[Parameter]) -> list[Parameter]:
        for p in params:
            if p.name == name:
                p.default = ast.parse(expression, mode="eval").body
        return params

    return change


D, B, C = DECODE.name, TUNING_CONFIG_BUILDER.name, TUNING_CONFIG.name
RENAMED_BUILDER = B + "_v2"
NEW_DECODE_BMM2_DEFAULT = 2.0


def _both(*steps: Callable[[SourceEditor], None]) -> Callable[[SourceEditor], None]:
    def step(source: SourceEditor) -> None:
        for one in steps:
            one(source)

    return step


def _moved(text: str) -> dict[str, str]:
    source = SourceEditor(text)
    names = [n for n in (C, B, D) if source.function(n) is not None]
    module_text = move_functions(source, names, MOVED_MODULE)
    return {CORE_FILE: source.result(), MOVED_FILE: module_text}


EDITS: tuple[Edit, ...] = (
    Edit("decode-swap-scales", "decode: bmm1_scale and bmm2_scale swap places", DECODE.qualname,
         _core_edit(lambda s: set_parameters(s, D, _swap("bmm1_scale", "bmm2_scale"))),
         _has(D, "bmm1_scale", "bmm2_scale")),
    Edit("decode-insert-required", "decode: a required parameter after max_seq_len", DECODE.qualname,
         _core_edit(lambda s: set_parameters(s, D, _insert_after("max_seq_len", "kv_block_stride", "int"))),
         _has(D, "max_seq_len")),
    Edit("decode-remove-sinks", "decode: sinks removed", DECODE.qualname,
         _core_edit(_both(lambda s: set_parameters(s, D, _without("sinks")), lambda s: prologue(s, D, "sinks = None"))),
         _has(D, "sinks")),
    Edit("decode-rename-bmm2", "decode: bmm2_scale renamed output_scale", DECODE.qualname,
         _core_edit(_both(lambda s: set_parameters(s, D, _renamed("bmm2_scale", "output_scale")),
                          lambda s: prologue(s, D, "bmm2_scale = output_scale"))),
         _has(D, "bmm2_scale")),
    Edit("decode-keyword-only", "decode: bmm1_scale and everything after it keyword-only", DECODE.qualname,
         _core_edit(lambda s: set_parameters(s, D, _keyword_only_from("bmm1_scale"))), _has(D, "bmm1_scale")),
    Edit("decode-new-default", f"decode: bmm2_scale defaults to {NEW_DECODE_BMM2_DEFAULT}", DECODE.qualname,
         _core_edit(lambda s: set_parameters(s, D, _default("bmm2_scale", repr(NEW_DECODE_BMM2_DEFAULT)))),
         _has(D, "bmm2_scale")),
    Edit("builder-swap", "builder: q_len and num_heads swap places", TUNING_CONFIG_BUILDER.qualname,
         _core_edit(lambda s: set_parameters(s, B, _swap("q_len", "num_heads"))), _has(B, "q_len", "num_heads")),
    Edit("builder-insert-required", "builder: a required page_size after max_seq_len (callers pass it)",
         TUNING_CONFIG_BUILDER.qualname,
         _core_edit(_both(lambda s: set_parameters(s, B, _insert_after("max_seq_len", "page_size", "int")),
                          lambda s: edit_calls(s, B, add={"page_size": "None"}))),
         _has(B, "max_seq_len")),
    Edit("builder-remove-device", "builder: device removed (taken from kv_cache)", TUNING_CONFIG_BUILDER.qualname,
         _core_edit(_both(lambda s: set_parameters(s, B, _without("device")),
                          lambda s: prologue(s, B, "device = kv_cache.device"),
                          lambda s: edit_calls(s, B, remove=("device",)))),
         _has(B, "device")),
    Edit("builder-rename-max-seq-len", "builder: max_seq_len renamed max_kv_len", TUNING_CONFIG_BUILDER.qualname,
         _core_edit(_both(lambda s: set_parameters(s, B, _renamed("max_seq_len", "max_kv_len")),
                          lambda s: prologue(s, B, "max_seq_len = max_kv_len"),
                          lambda s: edit_calls(s, B, rename={"max_seq_len": "max_kv_len"}))),
         _has(B, "max_seq_len")),
    Edit("builder-keyword-only", "builder: max_seq_len and everything after it keyword-only",
         TUNING_CONFIG_BUILDER.qualname,
         _core_edit(lambda s: set_parameters(s, B, _keyword_only_from("max_seq_len"))), _has(B, "max_seq_len")),
    Edit("builder-new-default", "builder: cute_dsl_impl defaults to 'cute-dsl'", TUNING_CONFIG_BUILDER.qualname,
         _core_edit(lambda s: set_parameters(s, B, _default("cute_dsl_impl", "'cute-dsl'"))),
         _has(B, "cute_dsl_impl")),
    Edit("builder-renamed", f"builder renamed {RENAMED_BUILDER}", TUNING_CONFIG_BUILDER.qualname,
         _core_edit(lambda s: rename_function(s, B, RENAMED_BUILDER)), _has(B)),
    Edit("moved", f"decode, builder (and config) moved to {MOVED_MODULE}, re-imported into the core module",
         DECODE.qualname, _moved, _has(D)),
    Edit("config-lru-cache", "config memo: functools.cache -> functools.lru_cache(maxsize=256)", TUNING_CONFIG.qualname,
         _core_edit(lambda s: set_decorator(s, C, "functools.cache", "functools.lru_cache(maxsize=256)")),
         _has(C, decorator="functools.cache")),
    Edit("config-uncached", "config memo: functools.cache removed", TUNING_CONFIG.qualname,
         _core_edit(lambda s: set_decorator(s, C, "functools.cache", None)), _has(C, decorator="functools.cache")),
    Edit("builder-cached", "builder gains functools.cache (its caller passes runner_names as a tuple)",
         TUNING_CONFIG_BUILDER.qualname,
         _core_edit(_both(lambda s: set_decorator(s, B, None, "functools.cache"),
                          lambda s: edit_calls(s, B, wrap={"runner_names": "tuple({})"}))),
         _has(B)),
)

EDITS_BY_NAME = {edit.name: edit for edit in EDITS}


# --------------------------------------------------------------------------- releases on disk


def real_package_dir() -> Path:
    """The real ``flashinfer`` package directory on ``sys.path`` (not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("no flashinfer package on sys.path")
    return Path(list(spec.submodule_search_locations)[0])


def base_version(package: Path) -> str:
    match = re.search(r'^__version__ = "([^"]+)"', (package / "_build_meta.py").read_text(), re.M)
    if match is None:
        raise ValueError(f"{package}/_build_meta.py names no __version__")
    return match.group(1)


def synthetic_version(base: str, edit: Edit) -> str:
    return f"{base.split('+')[0]}.post{901 + EDITS.index(edit)}.dev0"


def edited_files(edit: Edit, package: Path, version: str) -> dict[str, str]:
    """Package-relative path -> text of every file the release changes or adds."""
    files = edit.change((package.parent / CORE_FILE).read_text(encoding="utf-8"))
    meta = (package / "_build_meta.py").read_text(encoding="utf-8")
    files[BUILD_META_FILE] = re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{version}"', meta, flags=re.M)
    return files


def _metadata(version: str) -> str:
    return f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\nSummary: synthetic drift release\n"


@dataclass(frozen=True)
class SyntheticRelease:
    edit: Edit
    version: str
    site: Path  # put first on sys.path / PYTHONPATH
    files: dict  # package-relative path -> edited text


def build_site(edit: Edit, dest: Path, package: Optional[Path] = None, version: Optional[str] = None) -> SyntheticRelease:
    """An importable overlay of the real package with ``edit`` applied, under ``dest``.

    Raises ``ValueError`` when the release lacks what the edit changes
    (``edit.applies``).  Cost: a few hundred symlinks and one edited module
    (about 20 ms)."""
    package = package or real_package_dir()
    core_text = (package.parent / CORE_FILE).read_text(encoding="utf-8")
    if not edit.applies(core_text):
        raise ValueError(f"{edit.name}: flashinfer {base_version(package)} lacks what this edit changes")
    version = version or synthetic_version(base_version(package), edit)
    files = edited_files(edit, package, version)
    site = dest / "site"
    real_dirs = {str(Path(path).parent) for path in files}
    real_dirs |= {str(parent) for path in list(real_dirs) for parent in Path(path).parents if str(parent) != "."}
    _overlay(package.parent, site, PACKAGE, real_dirs, files)
    info = site / f"{DISTRIBUTION}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(_metadata(version))
    (info / "top_level.txt").write_text(f"{PACKAGE}\n")
    return SyntheticRelease(edit, version, site, files)


def _overlay(source_root: Path, target_root: Path, relative: str, real_dirs: set[str], files: dict[str, str]) -> None:
    source, target = source_root / relative, target_root / relative
    target.mkdir(parents=True)
    edited_stems = {Path(p).stem for p in files if str(Path(p).parent) == relative}
    for entry in source.iterdir():
        path = f"{relative}/{entry.name}"
        if path in files:
            continue
        if entry.name == "__pycache__":
            cache = target / "__pycache__"
            cache.mkdir()
            for compiled in entry.iterdir():
                if compiled.name.split(".")[0] not in edited_stems:
                    (cache / compiled.name).symlink_to(compiled)
        elif path in real_dirs and entry.is_dir():
            _overlay(source_root, target_root, path, real_dirs, files)
        else:
            (target / entry.name).symlink_to(entry)
    for path, text in files.items():
        if str(Path(path).parent) == relative:
            (target_root / path).write_text(text, encoding="utf-8")


#: What :func:`build_wheel` packs by default: the top-level modules and the
#: packages holding every function fi_compat's specs name.
DEFAULT_WHEEL_PACKAGES = ("mla", "cute_dsl")


def build_wheel(release: SyntheticRelease, dest: Path, packages: Optional[tuple[str, ...]] = DEFAULT_WHEEL_PACKAGES) -> Path:
    """A wheel of ``release`` in ``dest``: the ``.py`` files of the package's
    top level and of ``packages`` (``None``: every subpackage, about 110 MB on
    0.7.4), edited, plus a dist-info with METADATA, WHEEL and RECORD.
    Nothing is imported.  Cost: about a second for the default selection."""
    package = release.site / PACKAGE
    name = f"{DISTRIBUTION}-{release.version}-py3-none-any.whl"
    path = Path(dest) / name
    records = []

    def add(archive: zipfile.ZipFile, arcname: str, data: bytes) -> None:
        archive.writestr(arcname, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        records.append(f"{arcname},sha256={digest},{len(data)}")

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, dirs, filenames in os.walk(package, followlinks=True):
            relative = Path(root).relative_to(package)
            top = relative.parts[0] if relative.parts else None
            if top == "__pycache__" or (top is not None and packages is not None and top not in packages):
                dirs[:] = []
                continue
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for filename in sorted(filenames):
                if filename.endswith(".py"):
                    arcname = f"{PACKAGE}/{relative.as_posix() + '/' if relative.parts else ''}{filename}"
                    add(archive, arcname, (Path(root) / filename).read_bytes())
        info = f"{DISTRIBUTION}-{release.version}.dist-info"
        add(archive, f"{info}/METADATA", _metadata(release.version).encode())
        add(archive, f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: fi_compat tests/drift.py\nRoot-Is-Purelib: true\n"
                                      b"Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "\n".join(records + [f"{info}/RECORD,,"]) + "\n")
    return path
