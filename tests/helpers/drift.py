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

Each synthetic release gets its own version, a development release of the
next post-release: ``0.6.15`` gives ``0.6.15.post0.dev9NN`` and ``0.6.15.post1``
gives ``0.6.15.post2.dev9NN``.  It sorts after its base and before any later
release (``0.6.15.post9`` would pass ``>=0.6.15.post1``; ``0.6.15.post1.post9``
is no version at all), and as a pre-release it is never "verified".
Edits are made on the source text at positions ``ast`` finds, so everything
outside the edited function is byte-identical to the real release.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.util
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from packaging.version import Version

from fi_compat.model.specs import CORE_MODULE, DECODE, TUNING_CONFIG, TUNING_CONFIG_BUILDER

from helpers.drift_source import (Parameter, SourceEditor, edit_calls, move_functions, parameters, prologue,
                          rename_function, set_decorator, set_parameters)

PACKAGE = "flashinfer"
DISTRIBUTION = "flashinfer_python"
CORE_FILE = CORE_MODULE.replace(".", "/") + ".py"
MOVED_MODULE = "_decode_impl"  # where the "moved" edit puts the functions: flashinfer.mla._decode_impl
MOVED_FILE = f"{CORE_FILE.rsplit('/', 1)[0]}/{MOVED_MODULE}.py"
BUILD_META_FILE = f"{PACKAGE}/_build_meta.py"


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
    version = Version(base)
    next_post = 0 if version.post is None else version.post + 1
    return f"{version.base_version}.post{next_post}.dev{901 + EDITS.index(edit)}"


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
        add(archive, f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: fi_compat tests/helpers/drift.py\nRoot-Is-Purelib: true\n"
                                      b"Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "\n".join(records + [f"{info}/RECORD,,"]) + "\n")
    return path
