"""The nearest-profile key (0.6.13 - 0.6.17) against the real search on the installed release.

``keys.nearest_profile_key`` keys ``AutoTuner._find_nearest_profile`` on the
shapes and the parts of the tuning config the search reads, so the configs
the builder makes for different max_seq_len share entries.  Proof: on the
real function, every pair of calls with one key has one answer; and the
configs of one model (many lengths) do share one key per shape.
"""

from __future__ import annotations

import random

import pytest
from packaging.version import Version

from fi_compat.testing.builder import builder_arguments
from fi_compat.adapters import keys

from support import installed_release

torch = pytest.importorskip("torch")

CACHED_FROM = Version("0.6.18")  # flashinfer keys on the specs itself: the nearest-profile-cached row


def _mapper_closure(buckets: tuple, round_map: bool):
    def mapper(x: int) -> int:
        return max([b for b in buckets if b <= x] or [buckets[0]]) if not round_map else buckets[-1]

    return mapper


def test_closure_value_equal_only_for_one_code_over_equal_values():
    a, b = _mapper_closure((1, 8, 64), False), _mapper_closure((1, 8, 64), False)
    assert a is not b and keys.closure_value(a) == keys.closure_value(b)
    assert keys.closure_value(_mapper_closure((1, 8, 32), False)) != keys.closure_value(a)
    assert keys.closure_value(_mapper_closure((1, 8, 64), True)) != keys.closure_value(a)
    captured_list = [1, 8, 64]  # mutable: only the same object is the same mapper

    def over_list(x: int) -> int:
        return captured_list[0]

    assert keys.closure_value(over_list) is over_list
    assert keys.closure_value(abs) is abs  # not a Python function


def build(core, max_seq_len: int, width: int, heads: int, q_len: int):
    return core._build_mla_decode_tuning_config(**builder_arguments(
        pages=4096, page_size=64, tables=(8, 2, width), workspace_bytes=128 << 20, q_len=q_len, num_heads=heads,
        max_seq_len=max_seq_len))


def test_one_key_one_answer_on_the_real_search(fi_cpu_host):
    if installed_release() >= CACHED_FROM:
        pytest.skip("from 0.6.18 flashinfer keys the search on the specs itself (_find_nearest_profile_cached)")
    import flashinfer.mla._core as core
    from flashinfer.autotuner import AutoTuner

    search = vars(AutoTuner)["_find_nearest_profile"].__func__.__wrapped__  # under flashinfer's lru_cache
    key = keys.nearest_profile_key(keys.ArgumentLayout.of(search))
    rng = random.Random(17)
    models = [(width, heads, q_len) for width in (512, 2048) for heads in (16, 128) for q_len in (1, 2)]
    configs = {model: [build(core, rng.randint(1, model[0] * 64), *model) for _ in range(12)] for model in models}
    answers: dict = {}
    for (width, heads, q_len), model_configs in configs.items():
        for batch in rng.sample(range(1, 257), 12):
            shapes = ((batch, q_len, heads, 576), (batch, 2, width), (batch,), (batch, q_len, heads, 512))
            model_keys = set()
            for config in model_configs:
                k = key((AutoTuner, shapes, config))
                assert k is not None
                model_keys.add(k)
                answer = search(AutoTuner, shapes, config)
                assert answers.setdefault(k, answer) == answer
            assert len(model_keys) == 1  # twelve lengths of one model: one entry per shape
    assert len(answers) >= len(models) * 2  # the key still tells models and shapes apart
