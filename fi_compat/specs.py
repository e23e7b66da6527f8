"""Expected flashinfer signatures, shared by the runtime registry and the guard.

Parameter lists were read from the published wheels (``flashinfer/mla/_core.py``
of each release; see docs/compatibility.md).  ``[name]`` parameters exist in
some releases only.
"""

from __future__ import annotations

from .signatures import FunctionSpec, Param

CORE_MODULE = "flashinfer.mla._core"


def _params(required: str, optional: str = "") -> tuple[Param, ...]:
    return tuple(Param(n) for n in required.split()) + tuple(Param(n, False) for n in optional.split())


# The public decode entry point.  Its first nine parameters are what every
# caller passes; the rest arrived over time (see DECODE_KEYWORD_ADDED_IN).
DECODE = FunctionSpec(
    CORE_MODULE,
    "trtllm_batch_decode_with_kv_cache_mla",
    _params(
        "query kv_cache workspace_buffer qk_nope_head_dim kv_lora_rank qk_rope_head_dim "
        "block_tables seq_lens max_seq_len",
        "sparse_mla_top_k out bmm1_scale bmm2_scale sinks skip_softmax_threshold_scale_factor "
        "enable_pdl backend is_var_seq uses_shared_paged_kv_idx lse return_lse cute_dsl_impl "
        "kv_scale_format cum_seq_lens_q max_q_len multi_ctas_kv_counter_buffer "
        "sparse_mla_top_k_lens enable_dcp cp_world cp_rank causal_seqlens_kv_global "
        "use_fp16_softmax return_lse_base",
    ),
)

# The builder in 0.6.13 - 0.6.15 (and 0.6.15.post1): exactly these nine.
BUILDER_FRESH = FunctionSpec(
    CORE_MODULE,
    "_build_mla_decode_tuning_config",
    _params("kv_cache block_tables workspace_buffer runner_names q_len num_heads kv_lora_rank max_seq_len device"),
    memoized=False,
)

# The builder from 0.6.15.post1 on: nine, then 0.6.16's cute_dsl_impl/sinks,
# then 0.6.17's sparse and DCP parameters.
BUILDER_KEYED = FunctionSpec(
    CORE_MODULE,
    "_build_mla_decode_tuning_config",
    _params(
        "kv_cache block_tables workspace_buffer runner_names q_len num_heads kv_lora_rank max_seq_len device",
        "has_sparse_mla_top_k_lens cute_dsl_impl sinks enable_dcp cp_world cp_rank",
    ),
    memoized=False,
)

# flashinfer's unbounded functools.cache, 0.6.15.post1 on.
CONFIG_CACHE = FunctionSpec(
    CORE_MODULE,
    "_mla_decode_tuning_config",
    _params(
        "buckets num_pages profile_seq_len",
        "has_sparse_mla_top_k_lens sparse_top_k_width enable_dcp cp_world cp_rank",
    ),
    memoized=True,
)

# The release that first accepted each decode keyword beyond 0.6.13's.
DECODE_KEYWORD_ADDED_IN = {
    "kv_scale_format": "0.6.14",
    "cum_seq_lens_q": "0.6.14",
    "max_q_len": "0.6.14",
    "multi_ctas_kv_counter_buffer": "0.6.15",
    "sparse_mla_top_k_lens": "0.6.17",
    "enable_dcp": "0.6.17",
    "cp_world": "0.6.17",
    "cp_rank": "0.6.17",
    "causal_seqlens_kv_global": "0.6.17",
    "use_fp16_softmax": "0.6.18",
    "return_lse_base": "0.7.1",
}
