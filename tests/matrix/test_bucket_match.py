"""The nearest-profile memo (``fi_compat.adapters.bucket_match``) against the real search.

fi_compat keys ``AutoTuner._find_nearest_profile`` (0.6.13 - 0.6.17) and
``_find_nearest_profile_cached`` (0.6.18 on) on what the search reads (the
shapes' lengths and the dimensions the dynamic specs name first), asks
flashinfer about shapes with every other dimension 0, and completes the answer
with the call's own dimensions.  Proof, on the installed release:

* on random shapes, specs (negative and overlapping indices included) and
  constraints, every answer through fi_compat equals flashinfer's uncached
  search, element for element and tuple for tuple;
* on the configs the real builder makes for SGLang's call (block table
  ``[batch, pages of the longest request]``), a thousand block-table widths
  and a dozen max_seq_len per batch size take one entry per batch size, and
  the answers still carry each call's width;
* the cases the search itself rejects raise the same error through fi_compat.
"""

from __future__ import annotations

import random

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.adapters import keys
from fi_compat.workload.builder import builder_arguments

from helpers.support import installed_release

torch = pytest.importorskip("torch")

CACHED_FROM = Version("0.6.18")  # flashinfer's own memo of the search: the nearest-profile-cached row
SAMPLES = 2000


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


def uncached_search(autotuner):
    """flashinfer's search without its memo, called as flashinfer calls it: ``(shapes, config)``."""
    if installed_release() >= CACHED_FROM:
        cached = vars(autotuner)["_find_nearest_profile_cached"].__func__.__wrapped__
        return lambda shapes, config: cached(autotuner, shapes, config.dynamic_tensor_specs, config.constraint_specs)
    search = vars(autotuner)["_find_nearest_profile"].__func__.__wrapped__
    return lambda shapes, config: search(autotuner, shapes, config)


def random_config(rng: random.Random, lengths: list[int]):
    from flashinfer.autotuner import ConstraintSpec, DynamicTensorSpec, TuningConfig

    def position() -> tuple[int, int]:
        i = rng.randrange(len(lengths))
        d = rng.randrange(lengths[i]) if lengths[i] else 0
        return (i - len(lengths) if rng.random() < 0.2 else i), (d - lengths[i] if rng.random() < 0.2 else d)

    specs = []
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        linked = [position() for _ in range(rng.randint(1, 4))]
        buckets = tuple(sorted(rng.sample(range(1, 4096), rng.randint(1, 6))))
        specs.append(DynamicTensorSpec(
            input_idx=tuple(i for i, _ in linked), dim_idx=tuple(d for _, d in linked),
            gen_tuning_buckets=buckets, map_to_tuning_buckets=_mapper_closure(buckets, rng.random() < 0.2)))
    constraints = [ConstraintSpec(*position(), lambda shapes: 0) for _ in range(rng.choice((0, 0, 1, 2)))]
    return TuningConfig(dynamic_tensor_specs=tuple(specs), constraint_specs=tuple(constraints))


def outcome(call, *arguments):
    try:
        return "answer", call(*arguments)
    except Exception as error:  # the search's own errors must come through unchanged
        return "raised", type(error)


def test_answers_equal_flashiners_on_random_shapes_specs_and_constraints(fi_cpu_host, fresh_flashinfer_caches):
    from flashinfer.autotuner import AutoTuner

    search = uncached_search(AutoTuner)
    rng = random.Random(23)
    cases = []
    for _ in range(SAMPLES // 10):
        lengths = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
        config = random_config(rng, lengths)
        for _ in range(10):  # one config, many shapes: hits as well as misses
            shapes = tuple(tuple(rng.choice((rng.randint(1, 64), rng.randint(1, 1 << 16))) for _ in range(n))
                           for n in lengths)
            if rng.random() < 0.1:  # the search takes any sequences; flashinfer passes torch.Size tuples
                shapes = [list(shape) for shape in shapes]
            cases.append((shapes, config))
    expected = [outcome(search, shapes, config) for shapes, config in cases]
    fi_compat.install()
    try:
        got = [outcome(AutoTuner._find_nearest_profile, shapes, config) for shapes, config in cases]
        stats = fi_compat.status(walk=False)["caches"]
    finally:
        fi_compat.uninstall()
    answered = sum(kind == "answer" for kind, _ in expected)
    assert answered > 0.8 * len(cases), answered  # mostly answers: the comparison is not of errors alone
    for (shapes, config), want, have in zip(cases, expected, got):
        assert have == want, (shapes, config)
        if want[0] == "answer":
            assert type(have[1]) is tuple and all(type(shape) is tuple for shape in have[1])
    row = "nearest-profile-cached" if installed_release() >= CACHED_FROM else "nearest-profile"
    assert stats[row]["hits"] > 0 and stats[row]["misses"] > 0, stats[row]  # both paths were compared


def sglang_config(core, width: int, max_seq_len: int, q_len: int):
    return core._build_mla_decode_tuning_config(**builder_arguments(
        pages=65536, page_size=64, tables=(8, width), workspace_bytes=128 << 20, q_len=q_len, num_heads=128,
        max_seq_len=max_seq_len))


def test_sglang_widths_share_one_entry_per_batch_size(core, fresh_flashinfer_caches):
    """SGLang's block table is as wide as the batch's longest request: the search
    passes the width through unread, so it must not multiply the memo's entries."""
    from flashinfer.autotuner import AutoTuner

    search = uncached_search(AutoTuner)
    rng = random.Random(5)
    batches = (1, 3, 8, 33, 64)
    calls = []
    for batch in batches:
        for _ in range(1000):
            width = rng.randint(1, 2048)  # up to 128K tokens in 64-token pages
            config = sglang_config(core, width, rng.randint(1, width * 64), q_len=1)
            shapes = ((batch, 1, 128, 576), (batch, width), (batch,), (batch, 1, 128, 512))
            calls.append((shapes, config))
    expected = [search(shapes, config) for shapes, config in calls[:500]]
    fi_compat.install()
    try:
        got = [AutoTuner._find_nearest_profile(shapes, config) for shapes, config in calls]
        stats = fi_compat.status(walk=False)["caches"]
    finally:
        fi_compat.uninstall()
    assert got[:500] == expected
    assert all(profile[1][1] == shapes[1][1] for profile, (shapes, _) in zip(got, calls))  # each call's width
    row = "nearest-profile-cached" if installed_release() >= CACHED_FROM else "nearest-profile"
    assert stats[row]["misses"] == len(batches), stats[row]  # one per batch size, whatever the width and length
    assert stats[row]["currsize"] == len(batches), stats[row]


def test_shapes_changed_in_place_are_answered_anew(fi_cpu_host, fresh_flashinfer_caches):
    """The memo keeps the last call's answer per entry; sequences a caller can
    change in place must never be answered from it."""
    from flashinfer.autotuner import ConstraintSpec, DynamicTensorSpec, TuningConfig, AutoTuner

    config = TuningConfig(dynamic_tensor_specs=(DynamicTensorSpec(
        input_idx=(0, 1), dim_idx=(0, 0), gen_tuning_buckets=(1, 8), map_to_tuning_buckets=_mapper_closure((1, 8), False)),),
        constraint_specs=(ConstraintSpec(0, 2, lambda shapes: 0),))
    shapes = [[9, 1000, 7], [9]]
    fi_compat.install()
    try:
        first = AutoTuner._find_nearest_profile(shapes, config)
        shapes[0][1] = 5
        second = AutoTuner._find_nearest_profile(shapes, config)
        outer = ((9, 1000, 7), (9,))
        third = AutoTuner._find_nearest_profile(outer, config)
        fourth = AutoTuner._find_nearest_profile(outer, config)
    finally:
        fi_compat.uninstall()
    assert first == ((8, 1000, -1), (8,)) and second == ((8, 5, -1), (8,)), (first, second)
    assert third == fourth == ((8, 1000, -1), (8,))
