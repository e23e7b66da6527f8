"""The one description of the flashinfer functions fi_compat relies on.

Everything else derives from here: the call API's signatures, defaults and
keyword gating (:mod:`fi_compat.calls.call_api`), the signature checks of the
runtime and the guard (:mod:`fi_compat.model.signatures`, :mod:`fi_compat.lookup`),
the bounded caches (:mod:`fi_compat.verdict.bounds`) and the commands.  No other module
spells a flashinfer function name.

Each :class:`Param` carries its default (``REQUIRED`` when it has none) and the
first release that has it (``added_in``; ``None`` when the function always had
it); a renamed one its earlier name (``renamed_from``, one line:
``FunctionSpec.renamed``), a removed one the first release without it
(``removed_in``: ``FunctionSpec.removed``).  Parameter order is the newest release's positional order.
A function's own life is one line each too: renamed (``.renamed_to(name, in_release=...)``),
moved to another module (``.moved_to(module, in_release=..., name=...)``) or removed
(``.retired(in_release)``), appended to its ``FunctionSpec(...)`` below; the runtime, the
doctor and the guard then find it at the new home and judge it as before.  Every fact
was read from the published wheels (``pip download --no-deps
flashinfer-python==X``); docs/compatibility.md lists the releases.
"""

from __future__ import annotations

from typing import Any, Optional

from packaging.specifiers import SpecifierSet

from .spec_model import REQUIRED, FunctionSpec, Home, Param

#: The newest release every row of fi_compat.verdict.bounds was verified on (the
#: matrix results): each row's verified range ends here, written once.
VERIFIED_THROUGH = "0.7.4"


def verified_from(first: str) -> SpecifierSet:
    """``>=first,<=VERIFIED_THROUGH``: a row's verified releases."""
    return SpecifierSet(f">={first},<={VERIFIED_THROUGH}")


def _params(spec: str, added_in: Optional[str] = None, **defaults: Any) -> tuple[Param, ...]:
    """``"a b c"`` -> Params in that order; a name in ``defaults`` gets that default."""
    return tuple(Param(name, defaults.get(name, REQUIRED), added_in) for name in spec.split())


#: flashinfer's import package and its distribution's name (what pip installs).
PACKAGE = "flashinfer"
DISTRIBUTION = "flashinfer-python"
CORE_MODULE = "flashinfer.mla._core"
CUTE_DSL_MONOLITHIC_MODULE = "flashinfer.cute_dsl.attention.monolithic.mla_decode"
CUTE_DSL_BATCH_MLA_MODULE = "flashinfer.cute_dsl.attention.wrappers.batch_mla"
CUTE_DSL_BATCH_HCA_MODULE = "flashinfer.cute_dsl.attention.wrappers.batch_hca"
CUTE_DSL_RUBIN_MTP_MODULE = "flashinfer.cute_dsl.attention.rubin_mtp.mla_decode"
AUTOTUNER_MODULE = "flashinfer.autotuner"
#: The public module that re-exports the decode function (and, before 0.6.8, defines it).
PUBLIC_MLA_MODULE = "flashinfer.mla"

#: The public decode entry point (re-exported as ``flashinfer.mla.X`` and
#: ``flashinfer.decode.X``).  Every release from 0.6.8 appends new parameters at
#: the end.  Up to 0.6.7.post3 ``flashinfer.mla`` is a plain module that defines
#: it (no ``_core``): the lookup finds it there as moved, and the call API
#: falls back to ``flashinfer.mla`` (:data:`PUBLIC_MLA_MODULE`).
DECODE = FunctionSpec(
    CORE_MODULE,
    "trtllm_batch_decode_with_kv_cache_mla",
    _params(
        "query kv_cache workspace_buffer qk_nope_head_dim kv_lora_rank qk_rope_head_dim "
        "block_tables seq_lens max_seq_len"
    )
    + _params(
        "sparse_mla_top_k out bmm1_scale bmm2_scale sinks skip_softmax_threshold_scale_factor enable_pdl backend",
        sparse_mla_top_k=0,
        out=None,
        bmm1_scale=1.0,
        bmm2_scale=1.0,
        sinks=None,
        skip_softmax_threshold_scale_factor=None,
        enable_pdl=None,
        backend="auto",
    )
    # 0.6.7 appended uses_shared_paged_kv_idx after backend; 0.6.8 inserted
    # is_var_seq before it (so 0.6.7's positional order differs: binding by
    # name covers it).  Read from the 0.6.4 - 0.6.12 wheels.
    + _params("is_var_seq", "0.6.8", is_var_seq=True)
    + _params("uses_shared_paged_kv_idx", "0.6.7", uses_shared_paged_kv_idx=True)
    + _params("lse return_lse cute_dsl_impl", "0.6.12", lse=None, return_lse=False, cute_dsl_impl="auto")
    + _params(
        "kv_scale_format cum_seq_lens_q max_q_len",
        "0.6.14",
        kv_scale_format="auto",
        cum_seq_lens_q=None,
        max_q_len=None,
    )
    + _params("multi_ctas_kv_counter_buffer", "0.6.15", multi_ctas_kv_counter_buffer=None)
    + _params(
        "sparse_mla_top_k_lens enable_dcp cp_world cp_rank causal_seqlens_kv_global",
        "0.6.17",
        sparse_mla_top_k_lens=None,
        enable_dcp=False,
        cp_world=1,
        cp_rank=0,
        causal_seqlens_kv_global=None,
    )
    + _params("use_fp16_softmax", "0.6.18", use_fp16_softmax=None)
    + _params("return_lse_base", "0.7.1", return_lse_base=None),
)

#: Builds the autotuner's TuningConfig for one decode call.  0.6.17 inserted
#: ``has_sparse_mla_top_k_lens`` *before* 0.6.16's ``cute_dsl_impl``.
TUNING_CONFIG_BUILDER = FunctionSpec(
    CORE_MODULE,
    "_build_mla_decode_tuning_config",
    _params("kv_cache block_tables workspace_buffer runner_names q_len num_heads kv_lora_rank max_seq_len device")
    + _params("has_sparse_mla_top_k_lens", "0.6.17", has_sparse_mla_top_k_lens=False)
    + _params("cute_dsl_impl sinks", "0.6.16", cute_dsl_impl="auto", sinks=None)
    + _params("enable_dcp cp_world cp_rank", "0.6.17", enable_dcp=False, cp_world=1, cp_rank=0),
    added_in="0.6.13",  # with MLA decode's use of the autotuner; absent from 0.6.12 and older
)

#: flashinfer's memo of the TuningConfig: an unbounded ``functools.cache`` from
#: 0.6.15.post1 on, keyed by ``profile_seq_len`` among others.
TUNING_CONFIG = FunctionSpec(
    CORE_MODULE,
    "_mla_decode_tuning_config",
    _params("buckets num_pages profile_seq_len")
    + _params(
        "has_sparse_mla_top_k_lens sparse_top_k_width enable_dcp cp_world cp_rank",
        "0.6.17",
        has_sparse_mla_top_k_lens=False,
        sparse_top_k_width=0,
        enable_dcp=False,
        cp_world=1,
        cp_rank=0,
    ),
    added_in="0.6.15.post1",
)

#: The cute-dsl MLA decode split-KV / workspace sizer: an unbounded
#: ``functools.cache`` whose key holds the exact max_seq_len from 0.6.16 on.
CUTE_DSL_SPLIT_KV = FunctionSpec(
    CUTE_DSL_MONOLITHIC_MODULE,
    "_get_split_kv_and_workspace_size",
    _params("B q_len H kv_lora_rank max_active_blocks")
    + _params("max_seq_len occupancy_q_tiles", "0.6.16", max_seq_len=None, occupancy_q_tiles=None)
    + _params("num_kv_splits", "0.7.4", num_kv_splits=None),
    added_in="0.6.12",
)

#: The cute-dsl batch cap: a binary search of the batch size over 1..8192
#: that calls the sizer at every step, with the exact max_seq_len from 0.6.16
#: on.  flashinfer keeps no cache on it; its sizer calls fill the sizer's cache
#: with about 13 probe batch sizes per K-tile class.  Its older form (0.6.13 -
#: 0.6.15.post1: six parameters, no max_seq_len) has one answer per model and
#: is not this row's (``added_in``).
CUTE_DSL_BATCH_CAP = FunctionSpec(
    CORE_MODULE,
    "_cute_dsl_max_supported_batch",
    _params("workspace_bytes q_len num_heads kv_lora_rank max_active_blocks")
    + _params("max_seq_len", "0.6.16")
    + _params("candidate_max")
    + _params("cute_dsl_impl sinks", "0.6.16")
    + _params("enable_dcp", "0.6.17", enable_dcp=False),
    added_in="0.6.16",
)

#: The modular (``cute_dsl_impl="modular"``) MLA decode's sizer: no max_seq_len, keyed by batch size.
CUTE_DSL_SPLIT_KV_BATCH_MLA = FunctionSpec(
    CUTE_DSL_BATCH_MLA_MODULE,
    "_get_split_kv_and_workspace_size",
    _params("B q_len H kv_lora_rank max_active_blocks"),
    added_in="0.6.8",
)

#: The heavily-compressed-attention wrapper's sizer (0.6.18 on): keyed by batch size and HCA length.
CUTE_DSL_SPLIT_KV_BATCH_HCA = FunctionSpec(
    CUTE_DSL_BATCH_HCA_MODULE,
    "_get_split_kv_and_workspace_size",
    _params("batch_size q_len num_heads max_hca_len max_active_blocks"),
    added_in="0.6.18",
)

#: The Rubin multi-token-prediction MLA decode's sizer (0.7.4 on), with the monolithic one's parameters.
CUTE_DSL_SPLIT_KV_RUBIN_MTP = FunctionSpec(
    CUTE_DSL_RUBIN_MTP_MODULE,
    "_get_split_kv_and_workspace_size",
    _params("B q_len H kv_lora_rank max_active_blocks")
    + _params(
        "max_seq_len occupancy_q_tiles num_kv_splits", max_seq_len=None, occupancy_q_tiles=None, num_kv_splits=None
    ),
    added_in="0.7.4",
)

#: The autotuner's bucket matcher, a classmethod memo keyed by the call's tensor
#: shapes (batch size, block-table width) and the config: ``lru_cache(maxsize=None)``
#: in 0.6.13 and 0.6.14, ``lru_cache(maxsize=16384)`` in 0.6.15 - 0.6.17.
NEAREST_PROFILE = FunctionSpec(
    AUTOTUNER_MODULE,
    "AutoTuner._find_nearest_profile",
    _params("cls shapes tuning_config"),
)

#: Its memo from 0.6.18 on (keyed by shapes and the config's specs; 16384 entries).
NEAREST_PROFILE_CACHED = FunctionSpec(
    AUTOTUNER_MODULE,
    "AutoTuner._find_nearest_profile_cached",
    _params("cls shapes dynamic_tensor_specs constraint_specs"),
    added_in="0.6.18",
)

ALL: tuple[FunctionSpec, ...] = (
    DECODE,
    TUNING_CONFIG_BUILDER,
    TUNING_CONFIG,
    CUTE_DSL_SPLIT_KV,
    CUTE_DSL_BATCH_CAP,
    CUTE_DSL_SPLIT_KV_BATCH_MLA,
    CUTE_DSL_SPLIT_KV_BATCH_HCA,
    CUTE_DSL_SPLIT_KV_RUBIN_MTP,
    NEAREST_PROFILE,
    NEAREST_PROFILE_CACHED,
)


def homes(name: str) -> frozenset[str]:
    """Modules where some spec says a function called ``name`` lives or lived: a moved
    function is never looked for there (several cute-dsl modules define a sizer
    of the same name)."""
    return frozenset(home.module for spec in ALL for home in spec.homes() if home.name == name)


__all__ = [
    "ALL",
    "homes",
    "AUTOTUNER_MODULE",
    "NEAREST_PROFILE",
    "NEAREST_PROFILE_CACHED",
    "CORE_MODULE",
    "CUTE_DSL_BATCH_HCA_MODULE",
    "CUTE_DSL_BATCH_MLA_MODULE",
    "CUTE_DSL_MONOLITHIC_MODULE",
    "CUTE_DSL_BATCH_CAP",
    "CUTE_DSL_RUBIN_MTP_MODULE",
    "CUTE_DSL_SPLIT_KV",
    "CUTE_DSL_SPLIT_KV_BATCH_HCA",
    "CUTE_DSL_SPLIT_KV_BATCH_MLA",
    "CUTE_DSL_SPLIT_KV_RUBIN_MTP",
    "DECODE",
    "FunctionSpec",
    "Home",
    "PUBLIC_MLA_MODULE",
    "Param",
    "REQUIRED",
    "TUNING_CONFIG",
    "TUNING_CONFIG_BUILDER",
]
