"""Synthetic releases for issue #22 ("nothing hides"): the real release with one
small edit each, in a shape that fi_compat's runtime, doctor, guard and census
could not see before -- a cache behind a decorator, a memo that is not a
``functools`` cache, a bound that is finite but huge, a bound spelled through a
constant or an alias, a cache moved to a lazily imported module.

A test-support module (no tests here), shared by the census / guard / doctor
tests (tests/matrix/test_drift_shapes.py) and the runtime tests
(tests/test_drift_shapes_bounded.py).  It reuses tests/helpers/drift.py's overlay and
wheel builders; an :class:`drift.Edit`'s ``change`` gets the core module's text
and reads any other module it edits from the real package on ``sys.path``
(:func:`drift.real_package_dir`), so :func:`build_site` must be given that
package (the default).  Names in :data:`SHAPES` are stable: other test files
select shapes by them.

Every shape keeps the release working (the decode call returns what the real
release returns) and adds or keeps one cache that grows by an entry per
distinct ``max_seq_len`` (per distinct K-tile class where fi_compat's builder
memo sits in front of it) and that fi_compat, before #22, did not bound.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Callable, Optional

from helpers import drift
from helpers.drift import CORE_FILE, Edit
from helpers.drift_source import SourceEditor, parameters, prologue, set_decorator

from fi_compat.model.specs import CUTE_DSL_MONOLITHIC_MODULE, CUTE_DSL_SPLIT_KV, DECODE, TUNING_CONFIG

SIZER_FILE = CUTE_DSL_MONOLITHIC_MODULE.replace(".", "/") + ".py"
#: Where the "sizer-moved-lazy" shape puts the sizer (never re-exported by its old module).
MOVED_SIZER_MODULE = CUTE_DSL_MONOLITHIC_MODULE.rsplit(".", 1)[0] + ".mla_workspace"
MOVED_SIZER_FILE = MOVED_SIZER_MODULE.replace(".", "/") + ".py"
#: 0.7.4's BatchMLA backend, which reaches the sizer as an attribute of its old module.
MONOLITHIC_BACKEND_FILE = "flashinfer/mla/_batch_mla/_backends/cute_dsl_monolithic_backend.py"

C, D, S = TUNING_CONFIG.name, DECODE.name, CUTE_DSL_SPLIT_KV.name
#: The names the shapes add to flashinfer's modules (tests look them up).
TRACED = "_drift_traced"
CLASS_MEMO = "_PerLengthMemo"
INSTANCE_HOLDER = "_TUNING_CONFIGS"
NEW_CACHE = "_decode_length_plan"
MTP_CACHE = "_verify_length_plan"
HUGE_MAXSIZE = 1 << 20
SIZE_CONSTANT = "_TUNING_CONFIG_CACHE_SIZE"
ALIAS = "_memo"

# A decorator as flashinfer stacks them (``@flashinfer_api`` and others):
# functools.wraps copies the name and sets __wrapped__, and the live object
# has no cache_info.
_TRACED_SOURCE = (
    f"def {TRACED}(function):\n"
    "    @functools.wraps(function)\n"
    "    def traced(*args, **kwargs):\n"
    "        return function(*args, **kwargs)\n"
    "\n"
    "    return traced\n\n\n"
)

_CLASS_MEMO_SOURCE = (
    f"class {CLASS_MEMO}:\n"
    '    """A small memo that is not a functools cache: a dict per instance."""\n'
    "\n"
    "    def __init__(self, function):\n"
    "        self._function = function\n"
    "        self._entries = {}\n"
    "        functools.update_wrapper(self, function)\n"
    "\n"
    "    def __call__(self, *args, **kwargs):\n"
    "        key = args + tuple(sorted(kwargs.items()))\n"
    "        try:\n"
    "            return self._entries[key]\n"
    "        except KeyError:\n"
    "            value = self._entries[key] = self._function(*args, **kwargs)\n"
    "            return value\n\n\n"
)


def _read(path: str) -> str:
    return (drift.real_package_dir().parent / path).read_text(encoding="utf-8")


def _first_line(node: ast.FunctionDef) -> int:
    return min([d.lineno for d in node.decorator_list] + [node.lineno])


def _before(source: SourceEditor, name: str, text: str) -> None:
    """``text`` (whole lines) just above ``name``'s first decorator."""
    offset = source.at(_first_line(source.function(name)))
    source.replace(offset, offset, text)


def _after(source: SourceEditor, name: str, text: str) -> None:
    node = source.function(name)
    offset = source.at(node.end_lineno + 1)
    source.replace(offset, offset, text)


def _replace_decorator(source: SourceEditor, name: str, old: str, lines: str) -> None:
    """The whole line(s) of decorator ``old`` become ``lines``."""
    node = source.function(name)
    decorator = next(d for d in node.decorator_list if ast.unparse(d) == old)
    source.replace(source.at(decorator.lineno), source.at(decorator.end_lineno + 1), lines)


def _redirect_calls(source: SourceEditor, caller: str, callee: str, new: str) -> int:
    """Calls of ``callee`` inside ``caller`` call ``new`` (an expression) instead."""
    changed = 0
    for call in ast.walk(source.function(caller)):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == callee:
            start = source.at(call.func.lineno, call.func.col_offset)
            source.replace(start, start + len(callee), new)
            changed += 1
    if not changed:
        raise ValueError(f"{caller} does not call {callee}")
    return changed


def _caller_of(source: SourceEditor, callee: str) -> str:
    """The module-level function that calls ``callee`` (the builder, for the config memo)."""
    for node in source.tree.body:
        if isinstance(node, ast.FunctionDef) and node.name != callee:
            if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == callee
                   for c in ast.walk(node)):
                return node.name
    raise ValueError(f"nothing calls {callee}")


def _core(step: Callable[[SourceEditor], None]) -> Callable[[str], dict[str, str]]:
    def change(text: str) -> dict[str, str]:
        source = SourceEditor(text)
        step(source)
        return {CORE_FILE: source.result()}

    return change


def _sizer(step: Callable[[SourceEditor], None]) -> Callable[[str], dict[str, str]]:
    def change(_core_text: str) -> dict[str, str]:
        source = SourceEditor(_read(SIZER_FILE))
        step(source)
        return {SIZER_FILE: source.result()}

    return change


def _config_cached(text: str) -> bool:
    node = SourceEditor(text).function(C)
    return node is not None and "functools.cache" in [ast.unparse(d) for d in node.decorator_list]


def _sizer_cached(_core_text: str) -> bool:
    try:
        node = SourceEditor(_read(SIZER_FILE)).function(S)
    except (OSError, ImportError):
        return False
    return node is not None and "functools.cache" in [ast.unparse(d) for d in node.decorator_list] \
        and "max_seq_len" in {p.name for p in parameters(node)}


def _decode_has(*names: str) -> Callable[[str], bool]:
    def applies(text: str) -> bool:
        node = SourceEditor(text).function(D)
        return node is not None and set(names) <= {p.name for p in parameters(node)}

    return applies


# --------------------------------------------------------------------------- the edits


def _config_decorated(source: SourceEditor) -> None:
    # one insertion: two at the same offset would land in reverse order
    _before(source, C, _TRACED_SOURCE + f"@{TRACED}\n")


def _sizer_decorated(source: SourceEditor) -> None:
    _before(source, S, _TRACED_SOURCE + f"@{TRACED}\n")


def _config_class_memo(source: SourceEditor) -> None:
    _before(source, C, _CLASS_MEMO_SOURCE)
    set_decorator(source, C, "functools.cache", CLASS_MEMO)


def _config_instance_lru(source: SourceEditor) -> None:
    builder = _caller_of(source, C)
    set_decorator(source, C, "functools.cache", None)
    _after(source, C, (
        "\n\nclass _TuningConfigMemo:\n"
        '    """Holds the memo of TuningConfigs as an instance attribute."""\n'
        "\n"
        "    def __init__(self, build):\n"
        "        self.lookup = functools.lru_cache(maxsize=None)(build)\n"
        f"\n\n{INSTANCE_HOLDER} = _TuningConfigMemo({C})\n"
    ))
    _redirect_calls(source, builder, C, f"{INSTANCE_HOLDER}.lookup")


def _decode_new_cache_decorated(source: SourceEditor) -> None:
    _before(source, D, _TRACED_SOURCE + (
        f"@{TRACED}\n"
        "@functools.cache\n"
        f"def {NEW_CACHE}(max_seq_len: int) -> tuple:\n"
        "    return max_seq_len, -(-max_seq_len // 128)\n\n\n"
    ))
    prologue(source, D, f"{NEW_CACHE}(int(max_seq_len))")


def _decode_new_cache_mtp(source: SourceEditor) -> None:
    _before(source, D, (
        "@functools.cache\n"
        f"def {MTP_CACHE}(q_len: int, max_seq_len: int) -> tuple:\n"
        "    return q_len, max_seq_len, -(-max_seq_len // q_len)\n\n\n"
    ))
    prologue(source, D,
             "_drift_q_len = max_q_len if max_q_len is not None else (query.shape[1] if query.dim() == 4 else 1)",
             "if _drift_q_len > 1:",
             f"    {MTP_CACHE}(int(_drift_q_len), int(max_seq_len))")


def _config_huge_maxsize(source: SourceEditor) -> None:
    set_decorator(source, C, "functools.cache", "functools.lru_cache(maxsize=1 << 20)")


def _config_const_none(source: SourceEditor) -> None:
    _replace_decorator(source, C, "functools.cache", (
        f"{SIZE_CONSTANT} = None  # unbounded: one config per KV-cache allocation, they said\n\n\n"
        f"@functools.lru_cache(maxsize={SIZE_CONSTANT})\n"
    ))


def _config_aliased(source: SourceEditor) -> None:
    _replace_decorator(source, C, "functools.cache", f"from functools import cache as {ALIAS}  # noqa: E402\n\n\n@{ALIAS}\n")


_CORE_SIZER_IMPORT = re.compile(r"(monolithic\.)mla_decode(\s+import\s+\(\s*" + re.escape(S) + r"\s+as\b)")


def _sizer_moved(core_text: str) -> dict[str, str]:
    """The sizer moves to a module of its own that nothing imports at start-up:
    the core module imports it there lazily (as it imported the old module),
    the old module imports it inside the one function that calls it, and
    nothing re-exports it under the old name."""
    home = SourceEditor(_read(SIZER_FILE))
    node = home.function(S)
    start, end = home.at(_first_line(node)), home.at(node.end_lineno + 1)
    moved = home.data[start:end].decode()
    home.replace(start, end, "")
    callers = [n.name for n in home.tree.body if isinstance(n, ast.FunctionDef) and n.name != S
               and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == S
                       for c in ast.walk(n))]
    for caller in callers:
        prologue(home, caller, f"from .{MOVED_SIZER_MODULE.rsplit('.', 1)[1]} import {S}")
    old_name = CUTE_DSL_MONOLITHIC_MODULE.rsplit(".", 1)[1]
    module_text = (
        f'"""{S} moved out of {old_name} (a synthetic release)."""\n\n'
        "import functools\n"
        "from typing import Optional, Tuple\n\n"
        f"from . import {old_name} as _home\n\n"
        "globals().update({k: v for k, v in vars(_home).items() if not (k.startswith('__') and k.endswith('__'))})\n"
        "\n\n" + moved
    )
    core, count = _CORE_SIZER_IMPORT.subn(r"\1mla_workspace\2", core_text)
    if count != 1:
        raise ValueError(f"the core module imports the monolithic sizer {count} times, not once")
    files = {CORE_FILE: core, SIZER_FILE: home.result(), MOVED_SIZER_FILE: module_text}
    try:
        backend = _read(MONOLITHIC_BACKEND_FILE)
    except OSError:
        backend = None
    if backend is not None and f"implementation.{S}" in backend:
        # imported at start-up (0.7.4's core module imports the backends): reach the moved module lazily
        files[MONOLITHIC_BACKEND_FILE] = backend.replace(
            f"implementation.{S}", f"__import__({MOVED_SIZER_MODULE!r}, fromlist=['_']).{S}")
    return files


def _sizer_movable(core_text: str) -> bool:
    return _sizer_cached(core_text) and len(_CORE_SIZER_IMPORT.findall(core_text)) == 1


#: The shapes, by the issue's "Why".  ``function`` is the spec qualname of the
#: row the shape changes, or the decode function for a cache it adds.
SHAPES: tuple[Edit, ...] = (
    Edit("config-decorated", "config memo: a functools.wraps-style decorator stacked over its functools.cache",
         TUNING_CONFIG.qualname, _core(_config_decorated), _config_cached),
    Edit("sizer-decorated", "cute-dsl sizer: a functools.wraps-style decorator stacked over its functools.cache",
         CUTE_DSL_SPLIT_KV.qualname, _sizer(_sizer_decorated), _sizer_cached),
    Edit("config-class-memo", f"config memo: functools.cache -> {CLASS_MEMO}, a class-based memo (a dict)",
         TUNING_CONFIG.qualname, _core(_config_class_memo), _config_cached),
    Edit("config-instance-lru", f"config memo: an lru_cache(None) held by an instance ({INSTANCE_HOLDER}.lookup)",
         TUNING_CONFIG.qualname, _core(_config_instance_lru), _config_cached),
    Edit("decode-new-cache-decorated", f"decode: a new functools.cache {NEW_CACHE} per max_seq_len, under a decorator",
         DECODE.qualname, _core(_decode_new_cache_decorated), _decode_has("max_seq_len")),
    Edit("decode-new-cache-mtp", f"decode: a new functools.cache {MTP_CACHE}, reached only when q_len > 1",
         DECODE.qualname, _core(_decode_new_cache_mtp), _decode_has("max_seq_len", "max_q_len")),
    Edit("config-huge-maxsize", "config memo: functools.cache -> functools.lru_cache(maxsize=1 << 20)",
         TUNING_CONFIG.qualname, _core(_config_huge_maxsize), _config_cached),
    Edit("config-const-none", f"config memo: functools.lru_cache(maxsize={SIZE_CONSTANT}) with {SIZE_CONSTANT} = None",
         TUNING_CONFIG.qualname, _core(_config_const_none), _config_cached),
    Edit("config-aliased-cache", f"config memo: @{ALIAS} after `from functools import cache as {ALIAS}`",
         TUNING_CONFIG.qualname, _core(_config_aliased), _config_cached),
    Edit("sizer-moved-lazy", f"cute-dsl sizer moved to {MOVED_SIZER_MODULE} (imported lazily), no re-export",
         CUTE_DSL_SPLIT_KV.qualname, _sizer_moved, _sizer_movable),
)

SHAPES_BY_NAME = {shape.name: shape for shape in SHAPES}

#: Where each shape's growing cache lives once the release is imported
#: (module, attribute path); the runtime and census tests look there.
GROWS_AT: dict[str, tuple[str, str]] = {
    "config-decorated": (TUNING_CONFIG.module, f"{C}.__wrapped__"),
    "sizer-decorated": (CUTE_DSL_SPLIT_KV.module, f"{S}.__wrapped__"),
    "config-class-memo": (TUNING_CONFIG.module, f"{C}._entries"),
    "config-instance-lru": (TUNING_CONFIG.module, f"{INSTANCE_HOLDER}.lookup"),
    "decode-new-cache-decorated": (DECODE.module, f"{NEW_CACHE}.__wrapped__"),
    "decode-new-cache-mtp": (DECODE.module, MTP_CACHE),
    "config-huge-maxsize": (TUNING_CONFIG.module, C),
    "config-const-none": (TUNING_CONFIG.module, C),
    "config-aliased-cache": (TUNING_CONFIG.module, C),
    "sizer-moved-lazy": (MOVED_SIZER_MODULE, S),
}


def shape_version(base: str, shape: Edit) -> str:
    """As :func:`drift.synthetic_version`, numbered after the catalogue (dev951 on)."""
    from packaging.version import Version

    version = Version(base)
    next_post = 0 if version.post is None else version.post + 1
    return f"{version.base_version}.post{next_post}.dev{951 + SHAPES.index(shape)}"


def build_site(shape: Edit, dest: Path, version: Optional[str] = None) -> drift.SyntheticRelease:
    """:func:`drift.build_site` for a shape, on the real package on ``sys.path``.
    Raises ``ValueError`` when the release lacks what the shape edits."""
    package = drift.real_package_dir()
    return drift.build_site(shape, dest, package, version or shape_version(drift.base_version(package), shape))


__all__ = ["GROWS_AT", "SHAPES", "SHAPES_BY_NAME", "build_site", "shape_version"]


#: The releases the shapes are built on and judged on in the matrix: the default
#: release and the newest (issue #22 built its shapes on the real 0.7.4).  Each
#: shape costs a synthetic site and a child process, about ten seconds; on the
#: other sixteen releases the shared drift catalogue covers the same code paths.
SHAPE_BASES = ("0.6.18", "0.7.4")
#: ``FI_COMPAT_SHAPE_BASES=default`` (``.ci/run`` sets it) narrows them to the default
#: release, and a comma list of bases to those: the committed full matrix judges every base,
#: and CI's sessions re-run the rest of the suite.  ``default`` keeps release numbers out of
#: ``.ci/run`` (they live in fi_compat/model/release_list.py alone).
SHAPE_BASES_ENV = "FI_COMPAT_SHAPE_BASES"


def shape_bases() -> tuple[str, ...]:
    """:data:`SHAPE_BASES`, or those named in ``$FI_COMPAT_SHAPE_BASES`` (``default`` is
    ``fi_compat.model.release_list.DEFAULT_RELEASE``; ValueError for a name that is not a base)."""
    from fi_compat.model.release_list import DEFAULT_RELEASE

    named = tuple(
        DEFAULT_RELEASE if part.strip() == "default" else part.strip()
        for part in os.environ.get(SHAPE_BASES_ENV, "").split(",")
        if part.strip()
    )
    unknown = [base for base in named if base not in SHAPE_BASES]
    if unknown:
        raise ValueError(
            f"{SHAPE_BASES_ENV}={','.join(unknown)}: not a shape base; accepted: default, {', '.join(SHAPE_BASES)}"
        )
    return named or SHAPE_BASES


def on_a_shape_base() -> bool:
    """True where the installed flashinfer is one of :func:`shape_bases` (read from metadata: no import)."""
    from packaging.version import Version

    from fi_compat.model.release_detection import read_metadata_version

    raw = read_metadata_version()
    return raw is not None and Version(raw) in {Version(base) for base in shape_bases()}


def skip_unless_on_a_shape_base() -> None:
    """Skip the calling test module (module level) off :data:`SHAPE_BASES`."""
    import pytest

    if not on_a_shape_base():
        pytest.skip(f"the drift shapes are judged on flashinfer {' and '.join(shape_bases())}", allow_module_level=True)
