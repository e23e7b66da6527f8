"""Fake flashinfer ``mla._core`` modules for what no release has yet:
signature drift, moved or missing functions, a lost cache decorator, another
return type.  Real releases are tested in tests/matrix/ with real wheels."""

from __future__ import annotations

import functools
import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from fi_compat.specs import CORE_MODULE


class TuningConfig:
    """Stands in for flashinfer.autotuner.TuningConfig (the probe checks the name)."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.dynamic_tensor_specs = ()


def _decode(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim,
            block_tables, seq_lens, max_seq_len, sparse_mla_top_k=0, out=None, bmm1_scale=1.0,
            bmm2_scale=1.0, sinks=None, skip_softmax_threshold_scale_factor=None, enable_pdl=None,
            backend="auto", is_var_seq=True, uses_shared_paged_kv_idx=True, lse=None, return_lse=False,
            cute_dsl_impl="auto"):
    return ("decoded", max_seq_len)


def _builder_018(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                 max_seq_len, device, has_sparse_mla_top_k_lens=False, cute_dsl_impl="auto", sinks=None,
                 enable_dcp=False, cp_world=1, cp_rank=0):
    profile = min(max_seq_len, block_tables.shape[-1] * kv_cache.shape[-2])
    return call_by_name(_config_function(), buckets=(1, 2, 4), num_pages=kv_cache.shape[0], profile_seq_len=profile,
                        has_sparse_mla_top_k_lens=has_sparse_mla_top_k_lens,
                        sparse_top_k_width=block_tables.shape[-1], enable_dcp=enable_dcp, cp_world=cp_world,
                        cp_rank=cp_rank)


def _config_function() -> Callable:
    """Where the builder finds the config function: the core module, or the
    module it moved to (as a real builder would import it from there)."""
    module = _current[0]
    if hasattr(module, "_mla_decode_tuning_config"):
        return module._mla_decode_tuning_config
    if _moved[0] is not None and hasattr(_moved[0], "_mla_decode_tuning_config"):
        return _moved[0]._mla_decode_tuning_config
    return _config_018


def call_by_name(function: Callable, **values: Any) -> Any:
    """Call ``function`` positionally with the values its parameters name, so a
    drifted signature (renamed, lost, gained) is still called the way that
    drifted flashinfer itself would call it: unknown names get ``None``,
    missing optional ones their default."""
    args, kwargs = [], {}
    for name, parameter in inspect.signature(function).parameters.items():
        if name in values:
            value = values[name]
        elif parameter.default is not inspect.Parameter.empty:
            value = parameter.default
        else:
            value = None
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    return function(*args, **kwargs)


def _config_018(buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens=False, sparse_top_k_width=0,
                enable_dcp=False, cp_world=1, cp_rank=0):
    return TuningConfig((buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens, sparse_top_k_width))


def _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                 max_seq_len, device):
    return TuningConfig((kv_cache.shape[0], min(max_seq_len, block_tables.shape[-1] * kv_cache.shape[-2])))


_current: list[Any] = [None]
_moved: list[Any] = [None]

#: Where a "moved" function goes (a module a future release might split out).
MOVED_TO = "flashinfer.mla._tuning"


def fake_core(layout: str = "0.6.18", *, replace: Optional[dict[str, Callable]] = None,
              remove: tuple[str, ...] = (), name: str = CORE_MODULE,
              moved: Optional[dict[str, Callable]] = None) -> types.ModuleType:
    """A module with the 0.6.18 or 0.6.15 layout, then ``replace``/``remove`` applied.

    ``moved`` functions go to a second fake module, :data:`MOVED_TO`, which is
    returned as ``module._fake_moved_to`` (the caller puts it in sys.modules)."""
    module = types.ModuleType(name)
    module.trtllm_batch_decode_with_kv_cache_mla = _decode
    if layout == "0.6.18":
        module._build_mla_decode_tuning_config = _builder_018
        module._mla_decode_tuning_config = functools.cache(_config_018)
    elif layout == "0.6.15":
        module._build_mla_decode_tuning_config = _builder_015
    else:
        raise ValueError(layout)
    for attribute, function in (replace or {}).items():
        setattr(module, attribute, function)
    for attribute in remove:
        delattr(module, attribute)
    _moved[0] = None
    if moved:
        elsewhere = types.ModuleType(MOVED_TO)
        for attribute, function in moved.items():
            setattr(elsewhere, attribute, function)
        _moved[0] = elsewhere
    _current[0] = module
    return module


# --- drifted functions (one change each) -----------------------------------------


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



def config_gained_required(buckets, num_pages, profile_seq_len, device_kind, has_sparse_mla_top_k_lens=False,
                           sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0):
    return TuningConfig(())


def config_lost_param(buckets, num_pages):
    return TuningConfig(())


def config_renamed(buckets, num_pages, profile_len, has_sparse_mla_top_k_lens=False, sparse_top_k_width=0,
                   enable_dcp=False, cp_world=1, cp_rank=0):
    return TuningConfig(())


def config_positional_only(buckets, num_pages, profile_seq_len, /, has_sparse_mla_top_k_lens=False,
                           sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0):
    return TuningConfig(())


def config_keyword_only(buckets, num_pages, *, profile_seq_len, has_sparse_mla_top_k_lens=False,
                        sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0):
    return TuningConfig(())


def builder_keyword_only(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                         *, max_seq_len, device):
    return _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                        max_seq_len, device)


def config_returns_dict(buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens=False,
                        sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0):
    return {"buckets": buckets}


def builder_gained_required(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads,
                            kv_lora_rank, max_seq_len, device, device_kind):
    return _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                        max_seq_len, device)


def builder_lost_param(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                       max_seq_len):
    return _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                        max_seq_len, None)


def builder_renamed(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                    max_kv_len, device):
    return _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                        max_kv_len, device)


def builder_positional_only(kv_cache, block_tables, workspace_buffer, /, runner_names, q_len, num_heads,
                            kv_lora_rank, max_seq_len, device):
    return _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                        max_seq_len, device)


def builder_returns_dict(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                         max_seq_len, device):
    return {"num_pages": kv_cache.shape[0]}


def builder_raises(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                   max_seq_len, device):
    # Same parameters, different behaviour: e.g. a release that now reads
    # tensor data (the probe passes shape-only stand-ins).
    raise RuntimeError("builder now needs a CUDA tensor")


def config_raises(buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens=False, sparse_top_k_width=0,
                  enable_dcp=False, cp_world=1, cp_rank=0):
    raise RuntimeError("config now needs a CUDA device")


@dataclass(frozen=True)
class Drift:
    """One change to one function of one layout.

    ``words``: what the WARNING / error must say about it.  ``moved``: the
    function is no longer in the core module but in :data:`MOVED_TO`."""

    layout: str
    function: str
    words: str
    replace: dict = field(default_factory=dict)
    remove: tuple = ()
    moved: dict = field(default_factory=dict)

    def core(self) -> types.ModuleType:
        return fake_core(self.layout, replace=self.replace, remove=self.remove, moved=self.moved)


_CONFIG = "_mla_decode_tuning_config"
_BUILDER = "_build_mla_decode_tuning_config"

#: layout -> case -> Drift.  Every adapter family has one layout and every
#: case below, applied to the function that family depends on most (the
#: functools.cache it replaces; the builder it memoizes).
DRIFTS: dict[str, dict[str, Drift]] = {
    "0.6.18": {
        "gained-required": Drift("0.6.18", _CONFIG, "gained required parameter 'device_kind'",
                                 {_CONFIG: functools.cache(config_gained_required)}),
        "lost-parameter": Drift("0.6.18", _CONFIG, "lost required parameter 'profile_seq_len'",
                                {_CONFIG: functools.cache(config_lost_param)}),
        "renamed": Drift("0.6.18", _CONFIG, "parameter 'profile_seq_len' was renamed to 'profile_len'",
                         {_CONFIG: functools.cache(config_renamed)}),
        "positional-only": Drift("0.6.18", _CONFIG, "became positional-only",
                                 {_CONFIG: functools.cache(config_positional_only)}),
        "keyword-only": Drift("0.6.18", _CONFIG, "'profile_seq_len' became keyword-only",
                              {_CONFIG: functools.cache(config_keyword_only)}),
        "lost-cache": Drift("0.6.18", _CONFIG, "lost its functools.cache decorator", {_CONFIG: _config_018}),
        "vanished": Drift("0.6.18", _CONFIG, "is missing", remove=(_CONFIG,)),
        "moved": Drift("0.6.18", _CONFIG, "is missing (moved or removed)", remove=(_CONFIG,),
                       moved={_CONFIG: functools.cache(_config_018)}),
        "returns-other-type": Drift("0.6.18", _CONFIG, "returns builtins.dict, expected TuningConfig",
                                    {_CONFIG: functools.cache(config_returns_dict)}),
        "raises": Drift("0.6.18", _CONFIG, "raised RuntimeError: config now needs a CUDA device",
                        {_CONFIG: functools.cache(config_raises)}),
    },
    "0.6.15": {
        "gained-required": Drift("0.6.15", _BUILDER, "gained required parameter 'device_kind'",
                                 {_BUILDER: builder_gained_required}),
        "lost-parameter": Drift("0.6.15", _BUILDER, "lost required parameter 'device'",
                                {_BUILDER: builder_lost_param}),
        "renamed": Drift("0.6.15", _BUILDER, "parameter 'max_seq_len' was renamed to 'max_kv_len'",
                         {_BUILDER: builder_renamed}),
        "positional-only": Drift("0.6.15", _BUILDER, "became positional-only",
                                 {_BUILDER: builder_positional_only}),
        "keyword-only": Drift("0.6.15", _BUILDER, "'max_seq_len' became keyword-only",
                              {_BUILDER: builder_keyword_only}),
        # This family relies on a builder *without* a cache (it memoizes it
        # itself); the mirror image of lost-cache is a builder that gained one.
        "gained-cache": Drift("0.6.15", _BUILDER, "gained a cache decorator",
                              {_BUILDER: functools.cache(_builder_015)}),
        "vanished": Drift("0.6.15", _BUILDER, "is missing", remove=(_BUILDER,)),
        "moved": Drift("0.6.15", _BUILDER, "is missing (moved or removed)", remove=(_BUILDER,),
                       moved={_BUILDER: _builder_015}),
        "returns-other-type": Drift("0.6.15", _BUILDER, "returns builtins.dict, expected TuningConfig",
                                    {_BUILDER: builder_returns_dict}),
        "raises": Drift("0.6.15", _BUILDER, "raised RuntimeError: builder now needs a CUDA tensor",
                        {_BUILDER: builder_raises}),
    },
}

#: Fake arguments for a builder call (shapes are all the fakes read).
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


BUILDER_ARGS = dict(
    kv_cache=Shaped(8, 32, 576), block_tables=Shaped(1, 4),
    workspace_buffer=None, runner_names=("trtllm-gen",), q_len=1, num_heads=16, kv_lora_rank=512,
    max_seq_len=64, device=None,
)
