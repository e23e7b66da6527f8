"""A fake flashinfer package, for what no release has yet: signature drift,
moved, missing or re-decorated functions, releases past the newest one.

The fake is *source on disk*: :func:`release_files` writes, for one release,
every module fi_compat looks in, with each function's parameters as that
release has them (:mod:`fi_compat.model.specs`) and the memo decorators the real
wheels carry (read from ``flashinfer_python-X-py3-none-any.whl``; tests/test_bounds.py
checks that the verdict on each fake release equals the verdict on its real wheel):

=============================================  ===================================================
function                                       real wheels
=============================================  ===================================================
``mla._core._mla_decode_tuning_config``        ``functools.cache`` from 0.6.15.post1, absent before
``mla._core._build_mla_decode_tuning_config``  plain; calls the config memo where there is one
``mla._core._cute_dsl_max_supported_batch``    plain; six parameters before 0.6.16 (no max_seq_len)
``AutoTuner._find_nearest_profile``            classmethod; ``lru_cache(maxsize=None)`` in 0.6.13 and
                                               0.6.14, ``lru_cache(maxsize=16384)`` 0.6.15 - 0.6.17,
                                               plain from 0.6.18 (it calls the cached one)
``AutoTuner._find_nearest_profile_cached``     classmethod, ``lru_cache(maxsize=16384)``, 0.6.18 on
cute-dsl sizers                                ``functools.cache``; monolithic and modular in every
                                               release, HCA from 0.6.18, Rubin MTP from 0.7.4
``flashinfer.autotuner``                       one module before 0.6.15, a package re-exporting
                                               ``autotuner/autotuner.py`` from 0.6.15 on
=============================================  ===================================================

``import flashinfer`` (the fake's ``__init__``) imports ``mla`` and ``autotuner``
and re-exports the decode function; the cute-dsl modules load only when the
decode runs with ``backend="cute-dsl"``, as flashinfer's do.

:func:`loaded_release` writes the fake into a directory, puts that directory
first on ``sys.path`` and imports it with the real import system (so
fi_compat's post-import hooks fire as they would on flashinfer), then puts
``sys.modules`` and ``sys.path`` back exactly as they were.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Sequence

from packaging.version import Version

from fi_compat.model import specs
from fi_compat.model.specs import REQUIRED, FunctionSpec

PACKAGE = "flashinfer"
MOVED_TO = "flashinfer.mla._tuning"
"""Where a moved function goes (a module a future release might split out)."""

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

# ----------------------------------------------------------------------------- the source of each function


def parameters(spec: FunctionSpec, release: str) -> str:
    """``a, b, c=0, ...``: the spec's parameters as ``release`` has them, with their defaults."""
    params = spec.at(release).params
    return ", ".join(p.name if p.default is REQUIRED else f"{p.name}={p.default!r}" for p in params)


def _def(name: str, params: str, body: str, decorators: Sequence[str] = ()) -> str:
    lines = [f"@{d}" for d in decorators] + [f"def {name}({params}):", textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")]
    return "\n".join(lines).rstrip() + "\n"


def tuning_config_def(release: str) -> str:
    return _def(specs.TUNING_CONFIG.name, parameters(specs.TUNING_CONFIG, release),
                "return TuningConfig(key=(buckets, num_pages, profile_seq_len))", ["functools.cache"])


def builder_def(release: str) -> str:
    if Version(release) < Version(specs.TUNING_CONFIG.added_in):
        call = "TuningConfig(key=(BUCKETS, kv_cache.shape[0], profile_seq_len))"
    elif Version(release) < Version("0.6.17"):
        call = f"{specs.TUNING_CONFIG.name}(BUCKETS, kv_cache.shape[0], profile_seq_len)"
    else:
        call = (f"{specs.TUNING_CONFIG.name}(BUCKETS, kv_cache.shape[0], profile_seq_len, "
                "has_sparse_mla_top_k_lens, block_tables.shape[-1], enable_dcp, cp_world, cp_rank)")
    body = f"""
        profile_seq_len = min(max_seq_len, block_tables.shape[-1] * kv_cache.shape[-2])
        return {call}
    """
    return _def(specs.TUNING_CONFIG_BUILDER.name, parameters(specs.TUNING_CONFIG_BUILDER, release), body)


def decode_def(release: str) -> str:
    sizer_args = "query.shape[0], query.shape[1], query.shape[2], kv_lora_rank, block_tables.shape[-1]"
    if specs.CUTE_DSL_SPLIT_KV.param("max_seq_len").present_in(Version(release)):
        sizer_args += ", max_seq_len"
    body = f"""
        if backend == "cute-dsl":
            from ..cute_dsl.attention.monolithic import mla_decode as cute_dsl_mla
            split = cute_dsl_mla.{specs.CUTE_DSL_SPLIT_KV.name}({sizer_args})
            return ("cute-dsl", max_seq_len, split)
        config = {specs.TUNING_CONFIG_BUILDER.name}(kv_cache, block_tables, workspace_buffer, ["trtllm-gen"],
                                             query.shape[1], query.shape[2], kv_lora_rank, max_seq_len, None)
        profile = AutoTuner.{specs.NEAREST_PROFILE.name.split(".")[1]}(
            ((query.shape[0],), (block_tables.shape[-1],)), config)
        return ("decoded", max_seq_len, profile)
    """
    return _def(specs.DECODE.name, parameters(specs.DECODE, release), body)


def batch_cap_def(release: str) -> str:
    """The cute-dsl batch cap: plain, like flashinfer's; its older six-parameter form before 0.6.16."""
    spec = specs.CUTE_DSL_BATCH_CAP
    if spec.present_in(Version(release)):
        params = parameters(spec, release)
    else:
        params = "workspace_bytes, q_len, num_heads, kv_lora_rank, max_active_blocks, candidate_max"
    return _def(spec.name, params, "return min(candidate_max, max(1, workspace_bytes // 1024))")


def sizer_def(spec: FunctionSpec, release: str) -> str:
    """A split-KV / workspace sizer: a pure function of its arguments, like flashinfer's."""
    body = """
        values = [v for v in locals().values() if isinstance(v, int)]
        return (1 + sum(values) % 7, 1024 * (1 + len(values)))
    """
    return _def(spec.name, parameters(spec, release), body, ["functools.cache"])


def nearest_profile_defs(release: str) -> str:
    version = Version(release)
    member, cached = specs.NEAREST_PROFILE.name.split(".")[1], specs.NEAREST_PROFILE_CACHED.name.split(".")[1]
    if specs.NEAREST_PROFILE_CACHED.present_in(version):
        first = _def(member, "cls, shapes, tuning_config",
                     f"return cls.{cached}(shapes, tuning_config.dynamic_tensor_specs, tuning_config.constraint_specs)",
                     ["classmethod"])
        second = _def(cached, "cls, shapes, dynamic_tensor_specs, constraint_specs", "return tuple(shapes)",
                      ["classmethod", "functools.lru_cache(maxsize=16384)"])
        return first + "\n" + second
    size = "None" if version < Version("0.6.15") else "16384"
    return _def(member, "cls, shapes, tuning_config", "return tuple(shapes)",
                ["classmethod", f"functools.lru_cache(maxsize={size})"])


AUTOTUNER_SOURCE = '''\
import functools


class TuningConfig:
    def __init__(self, key=(), dynamic_tensor_specs=(), constraint_specs=()):
        self.key = key
        self.dynamic_tensor_specs = dynamic_tensor_specs
        self.constraint_specs = constraint_specs


class AutoTuner:
{members}
'''


def _module(imports: str, *definitions: str) -> str:
    return imports.rstrip() + "\n\n\n" + "\n\n".join(d.rstrip() + "\n" for d in definitions if d)


def decode_gained_required(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim,
                           block_tables, seq_lens, max_seq_len, page_stride, sparse_mla_top_k=0, out=None,
                           bmm1_scale=1.0, bmm2_scale=1.0):
    return ("decoded", max_seq_len)


def decode_renamed_bmm2(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim,
                        block_tables, seq_lens, max_seq_len, sparse_mla_top_k=0, out=None, bmm1_scale=1.0,
                        output_scale=1.0):
    return ("decoded", max_seq_len)


def decode_new_default(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim,
                       block_tables, seq_lens, max_seq_len, sparse_mla_top_k=0, out=None, bmm1_scale=1.0,
                       bmm2_scale=2.0):
    return ("decoded", max_seq_len, bmm2_scale)




@dataclass(frozen=True)
class Drift:
    """One change to one function of a release: its ``def`` replaced (``source``),
    removed (``source=None``), or moved into :data:`MOVED_TO` (``moved=True``;
    ``reimport``: the old module imports it back from there).  ``words``: what
    the verdict, the WARNING and the strict error say about it."""

    spec: FunctionSpec
    words: str
    source: Optional[str] = ""
    moved: bool = False
    reimport: bool = False

    def apply(self, modules: dict[str, list[str]]) -> None:
        defs = modules[self.spec.module]
        index = next(i for i, text in enumerate(defs) if f"def {self.spec.name}(" in text)
        original = defs[index]
        if self.moved:
            del defs[index]
            modules.setdefault(MOVED_TO, ["import functools\nfrom ..autotuner import TuningConfig\n"]).append(original)
            if self.reimport:
                defs.insert(0, f"from ._tuning import {self.spec.name}\n")
            else:
                defs.insert(0, "from . import _tuning\n")  # the builder reaches it through the new module
                for i, text in enumerate(defs):
                    defs[i] = text.replace(f"return {self.spec.name}(", f"return _tuning.{self.spec.name}(")
        elif self.source is None:
            del defs[index]
        else:
            defs[index] = textwrap.dedent(self.source)


CORE_IMPORTS = f"import functools\n\nfrom ..autotuner import AutoTuner, TuningConfig\n\nBUCKETS = {BUCKETS!r}\n"


def release_modules(release: str, drifts: Sequence[Drift] = ()) -> dict[str, list[str]]:
    """Module -> its blocks of source (first block: the imports), for ``release``."""
    version = Version(release)
    core = [CORE_IMPORTS]
    if specs.TUNING_CONFIG.present_in(version):
        core.append(tuning_config_def(release))
    core += [builder_def(release), batch_cap_def(release), decode_def(release)]
    modules: dict[str, list[str]] = {specs.CORE_MODULE: core}
    sizer_imports = "import functools\n"
    for spec in (specs.CUTE_DSL_SPLIT_KV, specs.CUTE_DSL_SPLIT_KV_BATCH_MLA, specs.CUTE_DSL_SPLIT_KV_BATCH_HCA,
                 specs.CUTE_DSL_SPLIT_KV_RUBIN_MTP):
        if spec.present_in(version):
            modules[spec.module] = [sizer_imports, sizer_def(spec, release)]
    modules[specs.AUTOTUNER_MODULE] = [AUTOTUNER_SOURCE.format(
        members=textwrap.indent(nearest_profile_defs(release), "    "))]
    for drift in drifts:
        drift.apply(modules)
    return modules


def release_files(release: str, drifts: Sequence[Drift] = ()) -> dict[str, str]:
    """Relative path -> text of every file of the fake ``release``."""
    modules = release_modules(release, drifts)
    files: dict[str, str] = {}
    for module, blocks in modules.items():
        text = _module(*blocks) if len(blocks) > 1 else blocks[0]
        if module == specs.AUTOTUNER_MODULE and Version(release) >= Version("0.6.15"):
            files["flashinfer/autotuner/autotuner.py"] = text
            files["flashinfer/autotuner/__init__.py"] = (
                "from flashinfer.autotuner.autotuner import AutoTuner, TuningConfig\n")
            continue
        files[module.replace(".", "/") + ".py"] = text
    for path in list(files):  # every package on the way has an __init__.py
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            files.setdefault("/".join(parts[:depth]) + "/__init__.py", "")
    files["flashinfer/__init__.py"] = (
        f"__version__ = {release!r}\n\nfrom . import autotuner as autotuner\nfrom . import mla as mla\n"
        f"from .mla import {specs.DECODE.name} as {specs.DECODE.name}\n")
    files["flashinfer/_build_meta.py"] = f"__version__ = {release!r}\n"
    files["flashinfer/mla/__init__.py"] = "from ._core import *  # noqa: F401,F403\n"
    return files


def write_files(root: Path | str, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; returns ``root``."""
    root = Path(root)
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def write_release(root: Path | str, release: str, drifts: Sequence[Drift] = ()) -> Path:
    """Write the fake ``release`` under ``root`` (``root/flashinfer/...``); returns ``root``."""
    return write_files(root, release_files(release, drifts))


# ----------------------------------------------------------------------------- loading it


@dataclass
class FakeFlashinfer:
    """A loaded fake: its directory, release and imported modules."""

    root: Path
    release: str
    package: ModuleType

    @property
    def core(self) -> ModuleType:
        return sys.modules[specs.CORE_MODULE]

    @property
    def autotuner(self) -> ModuleType:
        return sys.modules[specs.AUTOTUNER_MODULE]


def _flashinfer_entries() -> dict[str, Any]:
    return {name: module for name, module in sys.modules.items()
            if name == PACKAGE or name.startswith(PACKAGE + ".")}


@contextlib.contextmanager
def loaded_files(files: dict[str, str], root: Optional[Path | str] = None, *,
                 imported: bool = True) -> Iterator[ModuleType]:
    """``files`` (relative path -> text) written under ``root`` (a temporary
    directory when ``None``) and importable as the ``flashinfer`` package,
    imported unless ``imported=False``; the release is detected from the
    package's own files (the real flashinfer's dist-info, if any, is ignored).
    Yields the package (a bare module when not imported).  On exit
    ``sys.modules``, ``sys.path`` and release detection are as they were."""
    from fi_compat.installing import installer
    from fi_compat.model import release_detection

    temporary = tempfile.mkdtemp(prefix="fake-flashinfer-") if root is None else None
    root = write_files(temporary or root, files)
    saved_modules = _flashinfer_entries()
    saved_path = list(sys.path)
    saved_detect = installer.detect_release

    def detect() -> Any:
        return release_detection.detect_release(metadata_reader=lambda: None)

    for name in saved_modules:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    installer.detect_release = detect
    # wrapt drops a post-import hook once it fired, but the installer remembers
    # every module it ever hooked: let it hook the fake's modules again.
    installer._state.hooked -= {PACKAGE, *(spec.module for spec in specs.ALL)}
    try:
        yield importlib.import_module(PACKAGE) if imported else ModuleType(PACKAGE)
    finally:
        installer.detect_release = saved_detect
        sys.path[:] = saved_path
        for name in _flashinfer_entries():
            del sys.modules[name]
        sys.modules.update(saved_modules)
        importlib.invalidate_caches()
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


@contextlib.contextmanager
def loaded_release(release: str, root: Optional[Path | str] = None, *, drifts: Sequence[Drift] = (),
                   replace: Optional[dict[str, Callable]] = None, remove: Sequence[str] = (),
                   imported: bool = True) -> Iterator[FakeFlashinfer]:
    """The fake ``release`` as :func:`loaded_files` loads it; ``replace`` and
    ``remove`` change attributes of the imported core module afterwards."""
    with loaded_files(release_files(release, drifts), root, imported=imported) as package:
        fake = FakeFlashinfer(Path(package.__path__[0]).parent if imported else Path(sys.path[0]), release, package)
        if imported:
            for attribute, value in (replace or {}).items():
                setattr(fake.core, attribute, value)
            for attribute in remove:
                delattr(fake.core, attribute)
        yield fake


# ----------------------------------------------------------------------------- drift catalogue

_CONFIG = specs.TUNING_CONFIG.name
_BUILDER = specs.TUNING_CONFIG_BUILDER.name
_CONFIG_TAIL = "has_sparse_mla_top_k_lens=False, sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0"
_CONFIG_BODY = "    return TuningConfig(key=(buckets, num_pages))\n"
_BUILDER_BODY = "    return TuningConfig(key=(kv_cache.shape[0],))\n"
_BUILDER_HEAD = "kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank"


def _config(params: str, decorator: str = "@functools.cache\n") -> str:
    return f"{decorator}def {_CONFIG}({params}):\n{_CONFIG_BODY}"


def _builder(params: str, decorator: str = "") -> str:
    return f"{decorator}def {_BUILDER}({params}):\n{_BUILDER_BODY}"


#: row -> case -> Drift, each one change to the function of that row: the
#: tuning config on a 0.6.18 fake, the builder on a 0.6.15 fake.
DRIFTS: dict[str, dict[str, Drift]] = {
    "tuning-config": {
        "gained-required": Drift(specs.TUNING_CONFIG, "gained required parameter 'device_kind'",
                                 _config(f"buckets, num_pages, profile_seq_len, device_kind, {_CONFIG_TAIL}")),
        "lost-parameter": Drift(specs.TUNING_CONFIG, "lost required parameter 'profile_seq_len'",
                                _config("buckets, num_pages")),
        "renamed": Drift(specs.TUNING_CONFIG, "parameter 'profile_seq_len' was renamed to 'profile_len'",
                         _config(f"buckets, num_pages, profile_len, {_CONFIG_TAIL}")),
        "keyword-only": Drift(specs.TUNING_CONFIG, "parameter 'profile_seq_len' became keyword-only",
                              _config(f"buckets, num_pages, *, profile_seq_len, {_CONFIG_TAIL}")),
        "vanished": Drift(specs.TUNING_CONFIG, "is missing (moved or removed)", None),
    },
    "builder": {
        "gained-required": Drift(specs.TUNING_CONFIG_BUILDER, "gained required parameter 'device_kind'",
                                 _builder(f"{_BUILDER_HEAD}, max_seq_len, device, device_kind")),
        "lost-parameter": Drift(specs.TUNING_CONFIG_BUILDER, "lost required parameter 'device'",
                                _builder(f"{_BUILDER_HEAD}, max_seq_len")),
        "renamed": Drift(specs.TUNING_CONFIG_BUILDER, "parameter 'max_seq_len' was renamed to 'max_kv_len'",
                         _builder(f"{_BUILDER_HEAD}, max_kv_len, device")),
        "positional-only": Drift(specs.TUNING_CONFIG_BUILDER, "parameter 'kv_cache' became positional-only",
                                 _builder(f"{_BUILDER_HEAD}, /, max_seq_len, device")),
        "keyword-only": Drift(specs.TUNING_CONFIG_BUILDER, "parameter 'max_seq_len' became keyword-only",
                              _builder(f"{_BUILDER_HEAD}, *, max_seq_len, device")),
        "vanished": Drift(specs.TUNING_CONFIG_BUILDER, "is missing (moved or removed)", None),
    },
}

#: The fake release each drift row is applied to.
DRIFT_RELEASE = {"tuning-config": "0.6.18", "builder": "0.6.15"}

#: Other changes, one verdict each.
#: The config is a memo flashinfer's builder calls positionally: positional-only parameters change
#: nothing fi_compat's memo does, so it is bounded, with the difference as a note.
CONFIG_POSITIONAL_ONLY = Drift(specs.TUNING_CONFIG, "parameter 'buckets' became positional-only",
                               _config(f"buckets, num_pages, profile_seq_len, /, {_CONFIG_TAIL}"))
CONFIG_BOUNDED_UPSTREAM = Drift(specs.TUNING_CONFIG, "is bounded by flashinfer itself (maxsize 256)",
                                _config(f"buckets, num_pages, profile_seq_len, {_CONFIG_TAIL}",
                                        "@functools.lru_cache(maxsize=256)\n"))
CONFIG_LOST_CACHE = Drift(specs.TUNING_CONFIG, "keeps no cache",
                          _config(f"buckets, num_pages, profile_seq_len, {_CONFIG_TAIL}", ""))
CONFIG_MOVED = Drift(specs.TUNING_CONFIG, "moved from flashinfer.mla._core", moved=True)
CONFIG_MOVED_REIMPORTED = Drift(specs.TUNING_CONFIG, "", moved=True, reimport=True)
BUILDER_GAINED_CACHE = Drift(specs.TUNING_CONFIG_BUILDER, "has an unbounded functools cache",
                             _builder(f"{_BUILDER_HEAD}, max_seq_len, device", "@functools.cache\n"))


# ----------------------------------------------------------------------------- call arguments


class Shaped:
    """A hashable stand-in for a tensor: the fakes read ``.shape`` only."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape


class Scalar:
    """A stand-in for a 0-d integer tensor: ``__index__`` and ``dim()`` as
    torch has them, and (like a tensor) not a ``numbers.Integral``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def dim(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"tensor({self.value})"


#: Builder arguments (shapes are all the fake reads).
BUILDER_ARGS = dict(
    kv_cache=Shaped(8, 32, 576), block_tables=Shaped(1, 4),
    workspace_buffer=None, runner_names=("trtllm-gen",), q_len=1, num_heads=16, kv_lora_rank=512,
    max_seq_len=64, device=None,
)


def decode_args(max_seq_len: Any = 4096) -> list:
    """The nine required decode arguments, TensorRT-LLM-shaped."""
    return [Shaped(4, 1, 128, 576), Shaped(64, 32, 576), Shaped(1 << 20), 128, 512, 64, Shaped(4, 64), Shaped(4),
            max_seq_len]


__all__ = [
    "BUILDER_ARGS", "DRIFTS", "DRIFT_RELEASE", "Drift", "FakeFlashinfer", "MOVED_TO", "Shaped", "decode_args",
    "loaded_files", "loaded_release", "release_files", "release_modules", "write_release",
]
