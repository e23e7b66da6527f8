"""flashinfer 0.6.13 - 0.6.15: a fresh TuningConfig on every call.

``_build_mla_decode_tuning_config`` builds a new ``TuningConfig`` (with new
initializer closures) per decode call.  Its ``DynamicTensorSpec`` hashes equal
but compares unequal, so the autotuner's ``lru_cache(maxsize=16384)`` behind
``_find_nearest_profile`` fills with colliding keys and every lookup walks the
chain (tens of ms per call after a few thousand calls).

Fix: memoize the builder, bounded, on :func:`~fi_compat.adapters.common.builder_key`,
so equal keys get the *same* config object and the autotuner's caches hit.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Optional

from packaging.specifiers import SpecifierSet

from ..cache import BoundedCache
from ..proxies import MemoizedFunction
from .. import specs
from .base import Adapter, PatchStep, carries_trtllm_marker, probe_tuning_config
from .common import ArgumentBinder, builder_key, call_key, normalized_profile_max_seq_len


class FreshConfigAdapter(Adapter):
    name = "fresh-config-0.6.15"
    # Everything before 0.6.15.post1, which introduced flashinfer's own cache.
    verified = SpecifierSet(">=0.6.13,<0.6.15.post1")
    # 0.6.13-0.6.15 have exactly the nine parameters, and no memo on the builder.
    functions = ((specs.TUNING_CONFIG_BUILDER.at("0.6.15"), False), (specs.DECODE, None))
    summary = "bounded memo on _build_mla_decode_tuning_config (one config object per key)"

    @classmethod
    def probe(cls, module: ModuleType) -> Optional[str]:
        # Shapes are all the builder reads on the trtllm-gen path; no tensors needed.
        return probe_tuning_config(specs.TUNING_CONFIG_BUILDER.qualname, lambda: module._build_mla_decode_tuning_config(
            kv_cache=SimpleNamespace(shape=(8, 32, 576)), block_tables=SimpleNamespace(shape=(1, 4)),
            workspace_buffer=None, runner_names=["trtllm-gen"], q_len=1, num_heads=16, kv_lora_rank=512,
            max_seq_len=64, device=None,
        ))

    @classmethod
    def plan(cls, module: ModuleType, maxsize: int):
        builder = module._build_mla_decode_tuning_config
        if carries_trtllm_marker(builder):
            note = (
                "TensorRT-LLM's builder memo is already installed and bounds this release; "
                "fi_compat adds no second memo on it"
            )
            return [], {}, [note]
        binder = ArgumentBinder(builder)
        cache = BoundedCache("builder", maxsize)

        def compute(args, kwargs):
            values = binder.complete(binder.bind(args, kwargs))
            values["max_seq_len"] = normalized_profile_max_seq_len(values)
            return builder(**values)

        step = PatchStep(
            module,
            "_build_mla_decode_tuning_config",
            lambda original: MemoizedFunction(original, cache, call_key(binder, builder_key), compute, role="builder"),
        )
        return [step], {"builder": cache}, []
