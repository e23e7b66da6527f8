"""Every memo fi_compat installs behaves as ``functools.lru_cache`` on the same calls.

For each row install() bounds on the installed release, the memo and an
``lru_cache`` of the same ``maxsize`` around flashinfer's uncached function
take the same random call sequence (with a ``cache_clear()`` of both in the
middle): after every call their ``cache_info()`` agree, values (ints, shape
tuples) are equal, and an object answer (a tuning config) is the one answered
before exactly when lru_cache's is.
``cache_parameters()`` agree, and ``__wrapped__`` is the function install()
replaced.  The argument sets differ in what each memo's key reads, so one call
of the sequence is one key of both.

Then the two sequences flashinfer's own tests broke on (tests/autotuner,
``test_find_nearest_profile_cache_ignores_fresh_closure_initializer`` after
another test; docs/flashinfer-tests.md): after ``cache_clear()`` the
nearest-profile memo computes anew and counts from zero, and a bucket mapper
whose behaviour changed gets the new answer, as flashinfer's own memo gives.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import random
import sys
from typing import Any, Callable

import pytest

import fi_compat
from fi_compat.model import specs
from fi_compat.verdict.bounds import BOUNDS
from fi_compat.workload.builder import builder_arguments

torch = pytest.importorskip("torch")

ARGUMENT_SETS = 6
"""Distinct calls per row: more than the 4 entries of cache_size=4, so the sequence evicts."""


def resolve(path: str) -> Any:
    """The object at a dotted ``module.attribute...`` path of a loaded module."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:end]))
        if module is not None:
            value = module
            for part in parts[end:]:
                value = getattr(value, part)
            return value
    raise LookupError(path)


@pytest.fixture
def every_row_loaded(core, release):
    for bound in BOUNDS:
        if bound.spec.present_in(release) and bound.spec.module not in sys.modules:
            importlib.import_module(bound.spec.module)


def nearest_profile_specs(core, device) -> Any:
    """flashinfer's own MLA tuning config (its specs and constraints), built uncached."""
    build = core._build_mla_decode_tuning_config
    build = getattr(build, "__wrapped__", build)
    parameters = inspect.signature(build).parameters
    arguments = builder_arguments(device=device)
    return build(**{name: value for name, value in arguments.items() if name in parameters})


def shapes_reading(config: Any, value: int) -> tuple[tuple[int, ...], ...]:
    """Shapes for ``config``'s inputs whose dimension its first spec reads is ``value``."""
    spec = config.dynamic_tensor_specs[0]
    inputs = 1 + max([*spec.input_idx, *(c.input_idx for c in config.constraint_specs)])
    shapes = [[3, 5, 7] for _ in range(inputs)]
    shapes[spec.input_idx[0]][spec.dim_idx[0]] = value
    return tuple(map(tuple, shapes))


def call_sets(name: str, memo: Callable, core: Any, device: Any) -> list[tuple[tuple, dict]]:
    """``ARGUMENT_SETS`` calls of row ``name`` that differ in what its key reads."""
    parameters = inspect.signature(memo).parameters
    sets = range(ARGUMENT_SETS)
    if name == "tuning-config":
        return [(((1, 2, 4), 8 + i, 1024), {}) for i in sets]
    if name in ("split-kv", "split-kv-modular", "split-kv-rubin-mtp"):
        tail = (4096,) if "max_seq_len" in parameters else ()
        q_len = 2 if name == "split-kv-rubin-mtp" else 1  # Rubin MTP takes 2 or 4 query tokens only
        return [((1 + i, q_len, 128, 512, 148, *tail), {}) for i in sets]
    if name == "split-kv-hca":
        return [((1 + i, 1, 128, 4096, 148), {}) for i in sets]
    if name == "batch-cap":
        candidate = core._TRTLLM_GEN_MLA_MAX_BATCH
        return [((4 << 20, 1, 128, 512, 148, 128 * (1 + i), candidate, "auto", None), {}) for i in sets]
    if name == "nearest-profile-cached":
        config = nearest_profile_specs(core, device)
        return [((shapes_reading(config, 1 + i), config.dynamic_tensor_specs, config.constraint_specs), {})
                for i in sets]
    if name == "nearest-profile":  # 0.6.13 - 0.6.17: (cls, shapes, tuning_config)
        config = nearest_profile_specs(core, device)
        return [((shapes_reading(config, 1 + i), config), {}) for i in sets]
    if name == "builder":
        calls = []
        for i in sets:
            arguments = builder_arguments(pages=64 + i, runner_names=("trtllm-gen",), device=device)
            calls.append(((), {k: v for k, v in arguments.items() if k in parameters}))
        return calls
    raise AssertionError(f"no argument sets for row {name!r}: add them here")


def uncached(memo: Callable) -> Callable:
    """flashinfer's function without any cache: under its functools cache, if it has
    one; bound to the class as the memo is (a classmethod's memo arrives bound)."""
    original = memo.__wrapped__
    inner = getattr(original, "__wrapped__", None)
    function = inner if inner is not None and callable(getattr(original, "cache_info", None)) else original
    return functools.partial(function, memo.__self__) if inspect.ismethod(memo) else function


def unbound(value: Any) -> Any:
    return value.__func__ if inspect.ismethod(value) else value


def test_every_memo_matches_lru_cache_on_the_same_calls(every_row_loaded, core, release, fi_device):
    originals: dict[str, Any] = {}
    state = fi_compat.install(cache_size=4)
    paths = {row["name"]: row["patched"][0] for row in state["bounds"] if row["patched"]}
    fi_compat.uninstall()
    for name, path in paths.items():
        originals[name] = resolve(path)
    fi_compat.install(cache_size=4)
    memos = {"builder", "split-kv"} | ({"tuning-config"} if specs.TUNING_CONFIG.present_in(release) else set())
    assert memos <= paths.keys(), paths
    rng = random.Random(39)
    for name, path in paths.items():
        memo = resolve(path)
        assert unbound(memo).__wrapped__ is unbound(originals[name]), name
        maxsize = memo.cache_parameters()["maxsize"]
        assert memo.cache_info().maxsize == maxsize, name
        bound = next(b for b in BOUNDS if b.name == name)
        # an identity-keeping memo hands an evicted value still alive out again (docs/design.md):
        # its sequence stays within the bound, so both keep every answer they give
        count = min(ARGUMENT_SETS, maxsize) if bound.keep_identity else ARGUMENT_SETS
        calls = call_sets(name, memo, core, fi_device)[:count]
        reference = functools.lru_cache(maxsize=maxsize)(uncached(memo))
        assert memo.cache_parameters() == reference.cache_parameters(), name
        memo.cache_clear()
        ours_before: dict[int, Any] = {}
        theirs_before: dict[int, Any] = {}
        for step in range(120):
            if step == 60:
                memo.cache_clear()
                reference.cache_clear()
                assert memo.cache_info() == reference.cache_info() == (0, 0, maxsize, 0), name
                ours_before.clear()
                theirs_before.clear()
            which = rng.randrange(len(calls))
            args, kwargs = calls[which]
            ours, theirs = memo(*args, **kwargs), reference(*args, **kwargs)
            if type(ours) in (int, tuple):  # values: equal (the bucket matcher builds each call's tuple)
                assert ours == theirs, (name, step)
            else:  # objects (tuning configs): the same one again exactly when lru_cache hands out its same one
                if which in ours_before:
                    assert (ours is ours_before[which]) == (theirs is theirs_before[which]), (name, step)
                ours_before[which], theirs_before[which] = ours, theirs
            assert memo.cache_info() == reference.cache_info(), (name, step)
        assert memo.cache_info().hits > 0 and memo.cache_info().misses > 0, name


def nearest_profile_memo(core, fi_device):
    from flashinfer.autotuner import AutoTuner

    if not hasattr(AutoTuner, "_find_nearest_profile_cached"):
        pytest.skip("no _find_nearest_profile_cached before 0.6.18")
    return AutoTuner, nearest_profile_specs(core, fi_device)


@pytest.mark.parametrize("mode", ["flashinfer", "fi_compat"])
def test_nearest_profile_computes_anew_after_cache_clear(mode, core, fi_device):
    """flashinfer's test sequence: another call fills the memo (fi_compat's
    last-answer slot), cache_clear(), then the same shapes under fresh configs:
    one miss, then every call a counted hit."""
    AutoTuner, config = nearest_profile_memo(core, fi_device)
    if mode == "fi_compat":
        fi_compat.install()
    shapes = shapes_reading(config, 7)
    AutoTuner._find_nearest_profile(shapes, config)  # "another test" ran before
    AutoTuner._find_nearest_profile_cached.cache_clear()
    assert AutoTuner._find_nearest_profile_cached.cache_info()[:2] == (0, 0)
    for _ in range(50):
        AutoTuner._find_nearest_profile(shapes, dataclasses.replace(config))
    info = AutoTuner._find_nearest_profile_cached.cache_info()
    assert (info.hits, info.misses, info.currsize) == (49, 1, 1), info
    AutoTuner._find_nearest_profile_cached.cache_clear()


@pytest.mark.parametrize("mode", ["flashinfer", "fi_compat"])
def test_a_mapper_whose_behaviour_changed_gets_the_new_answer_after_cache_clear(mode, core, fi_device):
    AutoTuner, config = nearest_profile_memo(core, fi_device)
    if mode == "fi_compat":
        fi_compat.install()
    bucket = [1024]
    spec = dataclasses.replace(config.dynamic_tensor_specs[0], map_to_tuning_buckets=lambda x: bucket[0])
    specs = (spec, *config.dynamic_tensor_specs[1:])
    shapes = shapes_reading(config, 7)
    memo = AutoTuner._find_nearest_profile_cached
    memo.cache_clear()
    read = spec.input_idx[0], spec.dim_idx[0]
    assert memo(shapes, specs, config.constraint_specs)[read[0]][read[1]] == 1024
    bucket[0] = 8
    assert memo(shapes, specs, config.constraint_specs)[read[0]][read[1]] == 1024  # a hit, as functools gives
    memo.cache_clear()
    assert memo(shapes, specs, config.constraint_specs)[read[0]][read[1]] == 8
    memo.cache_clear()
