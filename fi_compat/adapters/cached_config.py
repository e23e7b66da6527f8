"""flashinfer 0.6.15.post1 - 0.7.4: an unbounded ``functools.cache``.

``_mla_decode_tuning_config`` is memoized by ``functools.cache`` on a key that
contains ``profile_seq_len = min(max_seq_len, block-table capacity)``; a caller
passing the per-batch maximum KV length adds ~1.8 KB per distinct length,
forever.

Fix, two levels:

1. replace the unbounded cache with a bounded LRU that calls the uncached
   original (``__wrapped__``) on a key normalised where the config is provably
   unchanged for inference (see :func:`config_key`), and release what the
   unbounded cache already holds;
2. memoize the builder one level up on a cheap shape-and-scalar key, so a hit
   skips bucket computation and argument plumbing (flashinfer's own path costs
   about 12 us per call).
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any, Hashable, Optional

from packaging.specifiers import SpecifierSet

from ..cache import BoundedCache
from ..proxies import MemoizedFunction
from .. import specs
from .base import Adapter, PatchStep, carries_trtllm_marker, probe_tuning_config
from .common import ArgumentBinder, as_int, builder_key, call_key, profile_ladder

_CONFIG_DEFAULTS = (False, 0, False, 1, 0)  # has_sparse, sparse_top_k_width, enable_dcp, cp_world, cp_rank


def config_key(arity: int, args: tuple, kwargs: dict) -> Optional[tuple]:
    """Normalised arguments of ``_mla_decode_tuning_config`` (also the key).

    * ``profile_seq_len`` -> :func:`profile_ladder`: it only fills the synthetic
      ``seq_lens`` (and the DCP global bound) used while autotuning; the
      buckets, specs and flags that inference reads do not depend on it.
    * ``sparse_top_k_width`` -> 0 when ``has_sparse_mla_top_k_lens`` is false:
      it is read only by the sparse top-k initializer, which exists only when
      the flag is true.

    Returns ``None`` (call passes through unmemoized) for a call shape this
    adapter does not know.
    """
    if kwargs or len(args) < 3 or len(args) > arity:
        return None
    buckets, num_pages, profile = args[0], args[1], as_int(args[2])
    if profile is None:
        return None
    rest = list(args[3:]) + list(_CONFIG_DEFAULTS[len(args) - 3: arity - 3])
    if len(rest) >= 2 and not rest[0]:
        rest[1] = 0
    return (buckets, num_pages, profile_ladder(profile), *rest)


class CachedConfigAdapter(Adapter):
    name = "cached-config-0.6.18"
    # 0.6.15.post1 introduced the functools.cache; 0.7.4 is the newest verified.
    verified = SpecifierSet(">=0.6.15.post1,<=0.7.4")
    functions = ((specs.TUNING_CONFIG, True), (specs.TUNING_CONFIG_BUILDER, False), (specs.DECODE, None))
    summary = (
        "bounded LRU replaces the functools.cache on _mla_decode_tuning_config; "
        "bounded memo on _build_mla_decode_tuning_config"
    )

    @classmethod
    def probe(cls, module: ModuleType) -> Optional[str]:
        original = getattr(module._mla_decode_tuning_config, "__wrapped__", None)
        if original is None:
            return f"{specs.TUNING_CONFIG.qualname} has no __wrapped__ (cache decorator changed)"
        return probe_tuning_config(specs.TUNING_CONFIG.qualname, lambda: original((1, 2, 4), 8, 16))

    @classmethod
    def plan(cls, module: ModuleType, maxsize: int):
        cached = module._mla_decode_tuning_config
        uncached = cached.__wrapped__
        arity = len(inspect.signature(uncached).parameters)
        config_cache = BoundedCache("config", maxsize)

        def key(args: tuple, kwargs: dict) -> Optional[Hashable]:
            return config_key(arity, args, kwargs)

        def compute(args: tuple, kwargs: dict) -> Any:
            return uncached(*config_key(arity, args, kwargs))

        def release_unbounded(original: Any) -> None:
            # What flashinfer's cache already holds would otherwise stay for
            # the life of the process (it is unreachable once replaced).
            original.cache_clear()

        steps = [
            PatchStep(
                module,
                "_mla_decode_tuning_config",
                lambda original: MemoizedFunction(original, config_cache, key, compute, role="config"),
                before_wrap=release_unbounded,
            )
        ]
        caches = {"config": config_cache}
        notes: list[str] = []
        builder = module._build_mla_decode_tuning_config
        if carries_trtllm_marker(builder):
            notes.append(
                "TensorRT-LLM's builder memo is installed: fi_compat bounds the inner "
                "_mla_decode_tuning_config cache but adds no second memo on the builder"
            )
        else:
            binder = ArgumentBinder(builder)
            builder_cache = BoundedCache("builder", maxsize)

            def build(args: tuple, kwargs: dict) -> Any:
                # The original builder calls the (now bounded) config cache,
                # which applies the same profile ladder as builder_key.
                return builder(*args, **kwargs)

            steps.append(
                PatchStep(
                    module,
                    "_build_mla_decode_tuning_config",
                    lambda original: MemoizedFunction(original, builder_cache, call_key(binder, builder_key), build, role="builder"),
                )
            )
            caches["builder"] = builder_cache
        return steps, caches, notes
