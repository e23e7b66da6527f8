"""Fake flashinfer ``mla._core`` modules for what no release has yet:
signature drift, moved or missing functions, a lost cache decorator, another
return type.  Real releases are tested in tests/matrix/ with real wheels."""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Optional

from fi_compat.adapters.specs import CORE_MODULE


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
    module = _current[0]
    profile = min(max_seq_len, block_tables.shape[-1] * kv_cache.shape[-2])
    return module._mla_decode_tuning_config((1, 2, 4), kv_cache.shape[0], profile, has_sparse_mla_top_k_lens,
                                            block_tables.shape[-1], enable_dcp, cp_world, cp_rank)


def _config_018(buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens=False, sparse_top_k_width=0,
                enable_dcp=False, cp_world=1, cp_rank=0):
    return TuningConfig((buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens, sparse_top_k_width))


def _builder_015(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                 max_seq_len, device):
    return TuningConfig((kv_cache.shape[0], min(max_seq_len, block_tables.shape[-1] * kv_cache.shape[-2])))


_current: list[Any] = [None]


def fake_core(layout: str = "0.6.18", *, replace: Optional[dict[str, Callable]] = None,
              remove: tuple[str, ...] = (), name: str = CORE_MODULE) -> types.ModuleType:
    """A module with the 0.6.18 or 0.6.15 layout, then ``replace``/``remove`` applied."""
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
    _current[0] = module
    return module


# --- drifted functions (one change each) -----------------------------------------


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


def config_returns_dict(buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens=False,
                        sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0):
    return {"buckets": buckets}


DRIFTS = {
    # case id: (replace, remove, expected words in the difference)
    "gained-required": ({"_mla_decode_tuning_config": functools.cache(config_gained_required)}, (),
                        "gained required parameter 'device_kind'"),
    "lost-parameter": ({"_mla_decode_tuning_config": functools.cache(config_lost_param)}, (),
                       "lost required parameter 'profile_seq_len'"),
    "renamed": ({"_mla_decode_tuning_config": functools.cache(config_renamed)}, (),
                "parameter 'profile_seq_len' was renamed to 'profile_len'"),
    "positional-only": ({"_mla_decode_tuning_config": functools.cache(config_positional_only)}, (),
                        "became positional-only"),
    "lost-cache": ({"_mla_decode_tuning_config": _config_018}, (), "lost its functools.cache decorator"),
    "vanished": ({}, ("_mla_decode_tuning_config",), "is missing"),
    "returns-other-type": ({"_mla_decode_tuning_config": functools.cache(config_returns_dict)}, (),
                           "returns builtins.dict, expected TuningConfig"),
}
