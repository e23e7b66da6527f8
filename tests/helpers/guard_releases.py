"""Releases that do not exist yet, built in the test from the real 0.7.4 wheel with one edit each,
for the guard's measured verdict (tests/test_guard_measured.py).  A test-support module: no tests here.

:func:`edited_wheel` copies the real wheel member by member, replacing the members an edit changes
(its source text edited at positions ``ast`` finds, tests/helpers/drift_source.py), adding the ones it
adds and leaving out the ones it removes, under a new version; ``flashinfer/data`` (452 MB of
kernel sources, which nothing reads on the CPU-host shim) is left out so a release takes seconds
to write and to install.  Nothing here is flashinfer's code: the edits are written here and
applied to the wheel the test downloaded.

Every hand-written memo below is keyed on what the engines vary per request, ``(batch,
max_seq_len)``, as the forms in issue 38 are; each sits in the decode function every engine call
reaches (:data:`DECODE`), and each is marked with its own comment, so a test finds the line the
guard must name with :func:`line_of`.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from fi_compat.model.specs import DECODE, TUNING_CONFIG, TUNING_CONFIG_BUILDER

from helpers.drift_source import SourceEditor, move_functions, prologue, rename_function, set_decorator

CORE = "flashinfer/mla/_core.py"
BATCH_MLA_CORE = "flashinfer/mla/_batch_mla/_core.py"  # where the redesign puts the tuning config
BATCH_MLA_MODULE = "_batch_mla._core"
DATA_PREFIX = "flashinfer/data/"
BASE_RELEASE = "0.7.4"
C, B, D = TUNING_CONFIG.name, TUNING_CONFIG_BUILDER.name, DECODE.name
RENAMED_CONFIG = "_mla_decode_profile_config"


@dataclass(frozen=True)
class Release:
    """One edit of the real 0.7.4 wheel: what it does, under which version."""

    name: str
    version: str
    summary: str
    edit: Callable[[dict[str, str]], dict[str, Optional[str]]]  # files -> {path: new text, or None: removed}
    markers: tuple[str, ...] = ()  # comments that mark the lines the guard must name
    notes: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- the edits


def _core_edit(step: Callable[[SourceEditor], None]) -> Callable[[dict[str, str]], dict[str, Optional[str]]]:
    def edit(files: dict[str, str]) -> dict[str, Optional[str]]:
        source = SourceEditor(files[CORE])
        step(source)
        return {CORE: source.result()}

    return edit


def _moved(names: list[str], after: Optional[Callable[[SourceEditor], None]] = None,
           moved_text: Optional[Callable[[str], str]] = None) -> Callable[[dict[str, str]], dict[str, Optional[str]]]:
    """``names`` cut out of ``flashinfer/mla/_core.py`` into ``flashinfer/mla/_batch_mla/_core.py``
    (where upstream's redesign keeps the tuning config), imported back from there."""

    def edit(files: dict[str, str]) -> dict[str, Optional[str]]:
        source = SourceEditor(files[CORE])
        if after is not None:
            after(source)
            source = SourceEditor(source.result())
        text = move_functions(source, names, BATCH_MLA_MODULE)
        core = source.result().replace(f"from . import {BATCH_MLA_MODULE} as _drift_moved",
                                       "from ._batch_mla import _core as _drift_moved")
        # the moved module takes the old module's globals: name it, not its own package's _core
        text = text.replace("__name__.rpartition('.')[0] + '._core'", "'flashinfer.mla._core'")
        if moved_text is not None:
            text = moved_text(text)
        return {CORE: core, BATCH_MLA_CORE: text}

    return edit


def _handwritten_config(text: str) -> str:
    """The moved tuning config with its ``functools.cache`` replaced by a dict written by hand: the
    function keeps its name and callers, and its body moves to ``<name>_uncached``."""
    source = SourceEditor(text)
    set_decorator(source, C, "functools.cache", None)
    source = SourceEditor(source.result())
    node = source.function(C)
    start = source.at(node.lineno, node.col_offset) + len("def ")
    source.replace(start, start + len(C), f"{C}_uncached")
    end = len(source.data)
    source.replace(end, end, (
        f"\n\n{C}_memo = {{}}\n\n\n"
        f"def {C}(*key):\n"
        f"    if key not in {C}_memo:\n"
        f"        {C}_memo[key] = {C}_uncached(*key)  # MEMO-LINE: moved+hand-written\n"
        f"    return {C}_memo[key]\n"
    ))
    return source.result()


#: The hand-written memos of issue 38, each in the decode function every engine call reaches.
HANDWRITTEN = {
    "instance-dict": "AutoTuner.get().__dict__.setdefault('_seen_decode_shapes', {})"
                     "[(query.shape[0], max_seq_len)] = (query.shape[0], max_seq_len)  # MEMO: instance-dict",
    "module-set": "_SEEN_DECODE_SHAPES.add((query.shape[0], max_seq_len, str(max_seq_len)))  # MEMO: module-set",
    "closure-dict": "_remember_decode_shape((query.shape[0], max_seq_len))  # MEMO: closure-dict",
    "cache-past-128k": "_long_context_plan(query.shape[0], max_seq_len) if max_seq_len > 131072 else None"
                       "  # MEMO: cache-past-128k",
    "thread-local": "_DECODE_LOCAL.__dict__.setdefault('seen', {})[(query.shape[0], max_seq_len)] = "
                    "str(max_seq_len)  # MEMO: thread-local",
    "per-call-list": "_DECODE_CALLS.append((query.shape[0], max_seq_len, str(max_seq_len)))  # MEMO: per-call-list",
}
HANDWRITTEN_HELPERS = (
    "\n\nimport threading as _threading_for_memos  # noqa: E402\n"
    "_SEEN_DECODE_SHAPES = set()\n"
    "_DECODE_CALLS = []\n"
    "_DECODE_LOCAL = _threading_for_memos.local()\n\n\n"
    "def _decode_shape_memo():\n"
    "    seen = {}\n\n"
    "    def remember(key):\n"
    "        seen[key] = str(key)  # MEMO-LINE: closure-dict\n"
    "        return seen[key]\n\n"
    "    return remember\n\n\n"
    "_remember_decode_shape = _decode_shape_memo()\n\n\n"
    "@functools.cache\n"
    "def _long_context_plan(batch, max_seq_len):\n"
    "    return (batch, max_seq_len, str(max_seq_len))  # MEMO-LINE: cache-past-128k\n"
)


def _handwritten(source: SourceEditor) -> None:
    prologue(source, D, *HANDWRITTEN.values())
    end = len(source.data)
    source.replace(end, end, HANDWRITTEN_HELPERS)


def _removed_module(files: dict[str, str]) -> dict[str, Optional[str]]:
    """A module no engine's call reaches and nothing imports at import time: removed."""
    return {UNREACHED_MODULE: None}


UNREACHED_MODULE = "flashinfer/mla/cake_kimi_k3_mla.py"


def _positional_only(source: SourceEditor, name: str) -> None:
    """Every positional parameter of ``name`` positional-only (a ``/`` after the last one)."""
    node = source.function(name)
    last = node.args.args[-1]
    defaults = node.args.defaults
    end_node = defaults[-1] if defaults else last
    end = source.at(end_node.end_lineno, end_node.end_col_offset)
    source.replace(end, end, ", /")


def _in_turn(*steps: Callable[[SourceEditor], None]) -> Callable[[dict[str, str]], dict[str, Optional[str]]]:
    """Each step on the text the one before it left (ast positions are read afresh)."""

    def edit(files: dict[str, str]) -> dict[str, Optional[str]]:
        text = files[CORE]
        for step in steps:
            source = SourceEditor(text)
            step(source)
            text = source.result()
        return {CORE: text}

    return edit


RELEASES: dict[str, Release] = {
    release.name: release
    for release in (
        Release("moved", "0.7.5.dev1", "tuning config and builder moved to flashinfer/mla/_batch_mla/_core.py",
                _moved([C, B])),
        Release("moved-renamed", "0.7.5.dev2", f"moved, and the tuning config renamed {RENAMED_CONFIG}",
                _moved([RENAMED_CONFIG, B], after=lambda s: rename_function(s, C, RENAMED_CONFIG))),
        Release("moved-handwritten", "0.7.5.dev3", "moved, and the tuning config's cache written by hand as a dict",
                _moved([C, B], moved_text=_handwritten_config), markers=("MEMO-LINE: moved+hand-written",)),
        Release("handwritten", "0.7.5.dev4", "six hand-written memos in the decode function",
                _core_edit(_handwritten), markers=tuple(f"MEMO: {name}" for name in HANDWRITTEN)),
        Release("good-upgrades", "0.7.5.dev5",
                f"tuning config renamed {RENAMED_CONFIG}, bounded with lru_cache(maxsize=256) and its parameters "
                f"made positional-only (its one caller passes them positionally); {UNREACHED_MODULE} removed",
                lambda files: {**_in_turn(
                    lambda s: set_decorator(s, C, "functools.cache", "functools.lru_cache(maxsize=256)"),
                    lambda s: rename_function(s, C, RENAMED_CONFIG),
                    lambda s: _positional_only(s, RENAMED_CONFIG))(files), **_removed_module(files)}),
        Release("positional-only", "0.7.5.dev6",
                "tuning config's parameters positional-only (its one caller passes them positionally)",
                _in_turn(lambda s: _positional_only(s, C))),
    )
}


# --------------------------------------------------------------------------- writing the wheel


def edited_wheel(real: Path, release: Release, dest: Path) -> tuple[Path, dict[str, Optional[str]]]:
    """The real wheel ``real`` with ``release``'s edit, as ``dest/flashinfer_python-<version>-py3-none-any.whl``;
    returns its path and the edited files (path -> text, or None where removed).  Cost: 5-15 s
    (every member but ``flashinfer/data`` is decompressed and written again)."""
    with zipfile.ZipFile(real) as archive:
        names = [n for n in archive.namelist() if not n.startswith(DATA_PREFIX)]
        info_dir = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        sources = {n: archive.read(n).decode() for n in (CORE, BATCH_MLA_CORE, UNREACHED_MODULE) if n in names}
        changed = release.edit(dict(sources))
        changed["flashinfer/_build_meta.py"] = _with_version(archive.read("flashinfer/_build_meta.py").decode(),
                                                              release.version)
        path = Path(dest) / f"flashinfer_python-{release.version}-py3-none-any.whl"
        new_info = f"flashinfer_python-{release.version}.dist-info"
        records = []
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
            def add(name: str, data: bytes) -> None:
                out.writestr(name, data)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                records.append(f"{name},sha256={digest},{len(data)}")

            for name in names:
                if name.startswith(info_dir + "/"):
                    continue
                if name in changed:
                    if changed[name] is not None:
                        add(name, changed[name].encode())
                    continue
                add(name, archive.read(name))
            for name, text in changed.items():
                if text is not None and name not in names:
                    add(name, text.encode())
            metadata = archive.read(f"{info_dir}/METADATA").decode()
            add(f"{new_info}/METADATA", _with_metadata_version(metadata, release.version).encode())
            add(f"{new_info}/WHEEL", archive.read(f"{info_dir}/WHEEL"))
            out.writestr(f"{new_info}/RECORD", "\n".join(records + [f"{new_info}/RECORD,,"]) + "\n")
    return path, changed


def _with_version(meta: str, version: str) -> str:
    import re

    return re.sub(r'^__version__ = "[^"]+"', f'__version__ = "{version}"', meta, flags=re.M)


def _with_metadata_version(metadata: str, version: str) -> str:
    import re

    return re.sub(r"^Version: .*$", f"Version: {version}", metadata, count=1, flags=re.M)


def line_of(text: str, marker: str) -> int:
    """The 1-based line of ``text`` that carries ``marker``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)
