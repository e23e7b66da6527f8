"""Each key normalisation of fi_compat.verdict.bounds.BOUNDS, proven against the real function.

* the tuning-config builder: configs handed out by fi_compat's memo (and the
  tuning-config memo below it) against flashinfer's own builder, on 2,000
  random shapes, scalars and runner sets (cute-dsl runners with their
  workspace sizes included), every field inference and profiling read; the
  one documented difference is the profile length moving down the ladder;
* the tuning config's ``sparse_top_k_width`` dropped when the sparse flag is off;
* the cute-dsl batch cap: flashinfer's search at ``max_seq_len`` and at its
  K-tile ceiling, on random workspaces and shapes, with the sizer's own cache
  bypassed, and a check that the cap does follow the K-tile count;
* the cute-dsl sizers: the uncached function (``__wrapped__``) at
  ``max_seq_len`` and at ``sizer_keys.k_tile_ceiling(max_seq_len)`` on 2,000 random
  argument tuples, and a check that crossing a K-tile boundary does change
  the output (otherwise the proof would hold for any normalisation).

Builder tensors are on the ``meta`` device: the builder reads shapes only.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import random

import pytest

import fi_compat
from fi_compat.adapters.keys import profile_ladder
from fi_compat.adapters.layout import ArgumentLayout
from fi_compat.adapters.sizer_keys import (
    K_TILE, SEARCH_LOWEST_PROBE, cap_holds_at, k_tile_ceiling, saturated_k_tiles, saturated_length,
)
from fi_compat.adapters.split_counts import STEADY_SPLIT_CAP, split_count_key
from fi_compat.workload.builder import builder_arguments
from fi_compat.model.specs import (
    CUTE_DSL_BATCH_CAP,
    CUTE_DSL_SPLIT_KV,
    CUTE_DSL_SPLIT_KV_RUBIN_MTP,
    TUNING_CONFIG,
    TUNING_CONFIG_BUILDER,
)

torch = pytest.importorskip("torch")

SAMPLES = 2000
SAMPLE_BATCHES = (1, 2, 3, 7, 33, 100, 1000, 5000, 9000)
SEQ_LENS_INPUT, FIFTH_INPUT = 2, 4  # the initializers' input positions: seq_lens, DCP global lengths


def builder(core):
    return getattr(core, TUNING_CONFIG_BUILDER.name)


def random_builder_arguments(rng: random.Random, parameters: set[str], device) -> dict:
    """One builder call as the decode path makes it, on meta tensors; runner
    sets include cute-dsl (its batch cap reads the workspace size, the SM count
    and, from 0.6.16, max_seq_len through the sizer)."""
    page_size = rng.choice((16, 32, 64))
    width = rng.choice((1, 8, 64, 512, 4096))
    # drawn in this order (the seeded samples stay the same)
    pages, batch = rng.choice((1, 64, 4096)), rng.choice((1, 4))
    # small workspaces limit the cute-dsl batch cap, which then follows the K-tile count
    workspace_bytes = rng.choice((1 << 20, 4 << 20, 16 << 20, 128 << 20))
    runner_names = rng.choice((["trtllm-gen"], ["trtllm-gen", "cute-dsl"], ["cute-dsl"], ["cute-dsl"]))
    q_len, num_heads = rng.choice((1, 2, 4)), rng.choice((16, 64, 128))
    max_seq_len = rng.choice((rng.randint(1, 300), rng.randint(2048, 65536), rng.randint(1, 1 << 20),
                              width * page_size, 128 * rng.randint(1, 1024) + rng.choice((-1, 0, 1))))
    arguments = builder_arguments(pages=pages, page_size=page_size, tables=(batch, width),
                                  workspace_bytes=workspace_bytes, runner_names=runner_names, q_len=q_len,
                                  num_heads=num_heads, max_seq_len=max_seq_len, device=device)
    if "cute_dsl_impl" in parameters:
        arguments["cute_dsl_impl"] = rng.choice(("auto", "auto", "monolithic", "modular"))
    if "has_sparse_mla_top_k_lens" in parameters:
        sparse = rng.random() < 0.2
        dcp = not sparse and rng.random() < 0.2
        world = rng.choice((2, 4)) if dcp else 1
        arguments.update(has_sparse_mla_top_k_lens=sparse, enable_dcp=dcp, cp_world=world,
                         cp_rank=rng.randrange(world))
        if dcp and "cute_dsl_impl" in arguments:
            arguments["cute_dsl_impl"] = "auto"  # DCP runs the monolithic kernel only
    arguments["max_seq_len"] = max(1, arguments["max_seq_len"])
    return arguments


def argument_sets(core, device) -> list[dict]:
    """Random calls, each followed by variants that fi_compat's memo may answer
    from its entry: another max_seq_len of the same K-tile class, one of the
    same profile-ladder step (often another K-tile class), and one other
    argument drawn anew.  A key missing a field the config depends on then
    hands out a wrong config, so the comparison covers hits, not just misses."""
    rng = random.Random(20261202)
    parameters = set(inspect.signature(builder(core)).parameters)
    sets = []
    while len(sets) < SAMPLES:
        first = random_builder_arguments(rng, parameters, device)
        length = first["max_seq_len"]
        ceiling, step = k_tile_ceiling(length), profile_ladder(length)
        redrawn = random_builder_arguments(rng, parameters, device)
        field = rng.choice([name for name in redrawn if name not in ("max_seq_len", "device")])
        coupled = {"enable_dcp", "cp_world", "cp_rank", "has_sparse_mla_top_k_lens", "cute_dsl_impl"}  # drawn together
        changed = {name: redrawn[name] for name in (coupled if field in coupled else {field}) if name in redrawn}
        sets += [first, {**first, "max_seq_len": rng.randint(max(1, ceiling - 127), ceiling)},
                 {**first, "max_seq_len": rng.randint(step, step + (1 << max(0, step.bit_length() - 4)) - 1)},
                 {**first, **changed}]
    return sets[:SAMPLES]


def initializers(config) -> dict:
    found = {}
    for spec in config.dynamic_tensor_specs:  # up to 0.6.17 the specs carry them
        for index, function in zip(spec.input_idx, getattr(spec, "tensor_initializers", None) or ()):
            if function is not None:
                found[index] = function
    for index, function in getattr(config, "tensor_initializers", None) or ():  # 0.6.18 on
        found[index] = function
    return found


def fingerprint(config) -> dict:
    """Everything inference and profiling read from a TuningConfig, as values."""
    specs = [(tuple(spec.input_idx), tuple(spec.dim_idx), tuple(spec.gen_tuning_buckets),
              tuple(spec.map_to_tuning_buckets(b) for b in SAMPLE_BATCHES)) for spec in config.dynamic_tensor_specs]
    produced = {}
    for index, function in initializers(config).items():
        torch.manual_seed(1234)
        tensor = function((6,), torch.int32, "cpu")
        produced[index] = (tuple(tensor.shape), str(tensor.dtype), tensor.tolist())
    flags = {field.name: repr(getattr(config, field.name)) for field in dataclasses.fields(config)
             if field.name not in ("dynamic_tensor_specs", "tensor_initializers")}
    return {"specs": specs, "initializers": produced, "flags": flags}


def laddered(unpatched: dict, arguments: dict) -> dict:
    """flashinfer's fingerprint with fi_compat's one documented change: the
    profile length (the seq_lens fill, and DCP's global bound made from it)
    moves down the profile ladder."""
    expected = {**unpatched, "initializers": dict(unpatched["initializers"])}
    shape, dtype, values = unpatched["initializers"][SEQ_LENS_INPUT]
    profile = values[0]
    assert profile == min(arguments["max_seq_len"], arguments["block_tables"].shape[-1]
                          * arguments["kv_cache"].shape[-2])  # what flashinfer fills, read back
    down = profile_ladder(profile)
    assert 0.875 * profile <= down <= profile
    expected["initializers"][SEQ_LENS_INPUT] = (shape, dtype, [down] * len(values))
    if arguments.get("enable_dcp") and FIFTH_INPUT in expected["initializers"]:
        shape, dtype, values = unpatched["initializers"][FIFTH_INPUT]
        world, rank = arguments["cp_world"], arguments["cp_rank"]
        assert values[0] == profile * world + rank
        expected["initializers"][FIFTH_INPUT] = (shape, dtype, [down * world + rank] * len(values))
    return expected


def test_builder_memo_hands_out_flashinfers_configs(core, fi_device, fresh_flashinfer_caches):
    sets = argument_sets(core, fi_device)
    alone = [fingerprint(builder(core)(**arguments)) for arguments in sets]
    fresh_flashinfer_caches.clear()
    state = fi_compat.install(cache_size=64)
    assert {row["name"]: row["verdict"] for row in state["bounds"]}["builder"] == "bound", state["bounds"]
    cute = 0
    for arguments, unpatched in zip(sets, alone):
        assert fingerprint(builder(core)(**arguments)) == laddered(unpatched, arguments), arguments
        cute += "cute-dsl" in arguments["runner_names"]
    stats = fi_compat.status()["caches"]["builder"]
    assert stats["hits"] >= SAMPLES // 4 and cute >= SAMPLES // 4, (stats, cute)


def test_builder_memo_keys_on_the_batch_cap_where_it_follows_the_length(core, fi_device, fresh_flashinfer_caches,
                                                                        monkeypatch):
    """With a real SM count every step of the cute-dsl search needs no
    workspace and the cap is 8,192 at any length, so the proof above cannot
    tell a key holding the cap from one holding the K-tile count.  Here the
    device reports a huge SM count (the builder and fi_compat both read
    ``cute_dsl.utils.get_num_sm``) and the workspaces are small: the cap, and
    so the buckets, change with the K-tile count, and fi_compat's configs must
    still be flashinfer's."""
    utils = importlib.import_module("flashinfer.cute_dsl.utils")
    # 32,768 SMs: enough for the search's probes (B >= 4,097) to split, not so many that a
    # split needs more than 0.7.4's 32-bit workspace indexing allows (it raises past 8 GiB)
    monkeypatch.setattr(utils, "get_num_sm", lambda device: 1 << 15)
    rng = random.Random(5)
    parameters = set(inspect.signature(builder(core)).parameters)
    sets = []
    for _ in range(SAMPLES // 8):
        arguments = random_builder_arguments(rng, parameters, fi_device)
        arguments.update(runner_names=["cute-dsl"],
                         workspace_buffer=torch.empty(rng.choice((1 << 16, 1 << 20)), dtype=torch.uint8,
                                                      device="meta"))
        ceiling = k_tile_ceiling(arguments["max_seq_len"])
        sets += [arguments, {**arguments, "max_seq_len": ceiling}, {**arguments, "max_seq_len": ceiling + 1}]
    alone = [fingerprint(builder(core)(**arguments)) for arguments in sets]
    assert len({repr(f["specs"]) for f in alone}) > 1, "the buckets never changed: the proof would be vacuous"
    fresh_flashinfer_caches.clear()
    fi_compat.install(cache_size=64)
    for arguments, unpatched in zip(sets, alone):
        assert fingerprint(builder(core)(**arguments)) == laddered(unpatched, arguments), arguments
    assert fi_compat.status()["caches"]["builder"]["hits"] > 0


def test_builder_memo_around_tensorrt_llms_memo_hands_out_flashinfers_configs(core, fi_device,
                                                                            fresh_flashinfer_caches, monkeypatch):
    """TensorRT-LLM installs its builder memo (``(**kwargs)``, keyed on the exact
    max_seq_len) before user code runs; fi_compat then memoizes around it, and
    its configs must still be flashinfer's with the profile moved down the ladder
    (never above the caller's max_seq_len, which profiling runs with)."""
    from helpers.support import trtllm_style_memo

    sets = argument_sets(core, fi_device)[:SAMPLES // 4]
    alone = [fingerprint(builder(core)(**arguments)) for arguments in sets]
    monkeypatch.setattr(core, TUNING_CONFIG_BUILDER.name, trtllm_style_memo(builder(core)))
    fresh_flashinfer_caches.clear()
    state = fi_compat.install(cache_size=64)
    assert state["trtllm_workaround"]["position"] == "inside fi_compat's builder memo", state["trtllm_workaround"]
    for arguments, unpatched in zip(sets, alone):
        assert fingerprint(builder(core)(**arguments)) == laddered(unpatched, arguments), arguments
    assert fi_compat.status()["caches"]["builder"]["hits"] >= len(sets) // 4
    fi_compat.uninstall()


def recorded_tuning_config_calls(core, monkeypatch, count: int, device) -> list[tuple]:
    """The real arguments the builder passes to the tuning-config memo
    (``device``: the matrix's; the cute-dsl runners ask it for its SM count)."""
    calls = []
    original = getattr(core, TUNING_CONFIG.name)

    def recorder(*args, **kwargs):
        calls.append(inspect.signature(original).bind(*args, **kwargs).args)
        return original(*args, **kwargs)

    monkeypatch.setattr(core, TUNING_CONFIG.name, recorder)
    for arguments in argument_sets(core, device)[:count]:
        builder(core)(**arguments)
    monkeypatch.undo()
    return calls


def test_tuning_config_ignores_the_sparse_width_without_the_sparse_flag(core, monkeypatch, fi_device):
    if not hasattr(core, TUNING_CONFIG.name) or "sparse_top_k_width" not in inspect.signature(
            getattr(core, TUNING_CONFIG.name)).parameters:
        pytest.skip("this release's tuning config has no sparse_top_k_width")
    uncached = getattr(core, TUNING_CONFIG.name).__wrapped__
    names = list(inspect.signature(uncached).parameters)
    flag, width = names.index("has_sparse_mla_top_k_lens"), names.index("sparse_top_k_width")
    calls = [c for c in recorded_tuning_config_calls(core, monkeypatch, 400, fi_device) if not c[flag]]
    assert len(calls) > 100
    for call in calls:
        zeroed = (*call[:width], 0, *call[width + 1:])
        assert fingerprint(uncached(*zeroed)) == fingerprint(uncached(*call)), call
    # the width is read when the flag is on: the proof is not vacuous
    sparse = (*calls[0][:flag], True, *calls[0][flag + 1:])
    assert fingerprint(uncached(*sparse)) != fingerprint(uncached(*(*sparse[:width], 0, *sparse[width + 1:])))


def random_sizer_arguments(rng: random.Random, names: list[str]) -> dict:
    values = {"B": rng.choice((rng.randint(1, 64), rng.randint(1, 8192))), "q_len": rng.choice((1, 2, 3, 4, 8)),
              "H": rng.choice((16, 64, 128, 128)), "kv_lora_rank": rng.choice((256, 512, 512)),
              "max_active_blocks": rng.choice((148, 132, 160, rng.randint(1, 300))),
              "max_seq_len": rng.choice((rng.randint(1, 4096), rng.randint(1, 1 << 20),
                                         128 * rng.randint(1, 8192) + rng.choice((-1, 0, 1))))}
    if "occupancy_q_tiles" in names:
        values["occupancy_q_tiles"] = rng.choice((None, None, rng.randint(1, values["B"])))
    if "num_kv_splits" in names:
        values["num_kv_splits"] = rng.choice((None, None, -1, rng.randint(1, 48)))
    return values


def max_seq_len_names(function, release, what: str) -> list[str]:
    """``function``'s parameter names; skips the test where it takes no ``max_seq_len``
    (then its key is the arguments as they are: nothing to prove)."""
    names = list(inspect.signature(function).parameters)
    if "max_seq_len" not in names:
        pytest.skip(f"flashinfer {release}'s {what} takes no max_seq_len: its key is the arguments as they are")
    return names


def outcome(function, arguments: dict):
    try:
        return function(**arguments)
    except (ValueError, TypeError) as error:  # both sides must fail alike
        return (type(error).__name__, str(error))


@pytest.mark.parametrize("spec", [CUTE_DSL_SPLIT_KV, CUTE_DSL_SPLIT_KV_RUBIN_MTP], ids=lambda s: s.module)
def test_sizer_depends_on_max_seq_len_only_through_the_k_tile_count(spec, fi_cpu_host, release):
    if not spec.present_in(release):
        pytest.skip(f"flashinfer {release} has no {spec.qualname}")
    uncached = getattr(importlib.import_module(spec.module), spec.name).__wrapped__
    names = max_seq_len_names(uncached, release, "sizer")
    rng = random.Random(7)
    accepted = crossings = attempts = lowered = 0
    while accepted < SAMPLES and attempts < 50 * SAMPLES:  # rejected tuples are compared too, not counted
        attempts += 1
        arguments = random_sizer_arguments(rng, names)
        ceiling = k_tile_ceiling(arguments["max_seq_len"])
        result = outcome(uncached, arguments)
        assert result == outcome(uncached, {**arguments, "max_seq_len": ceiling}), arguments
        if spec is CUTE_DSL_SPLIT_KV:  # the split-kv row's key: saturated past u * (u - 1) + 1 K tiles
            rows = arguments.get("occupancy_q_tiles") or arguments["B"]
            saturated = saturated_length(arguments["max_seq_len"], arguments["max_active_blocks"], rows)
            lowered += saturated != ceiling
            assert result == outcome(uncached, {**arguments, "max_seq_len": saturated}), arguments
        if isinstance(result, tuple) and isinstance(result[0], str):
            continue
        accepted += 1
        crossings += result != outcome(uncached, {**arguments, "max_seq_len": ceiling + 1})
    assert accepted == SAMPLES, f"the sizer accepted only {accepted} of {attempts} random tuples"
    assert crossings >= SAMPLES // 100, f"only {crossings} of {SAMPLES} outputs change with the K-tile count"
    if spec is CUTE_DSL_SPLIT_KV:  # the saturation was exercised, not only the K-tile ceiling
        assert lowered >= SAMPLES // 10, f"only {lowered} of {attempts} lengths were past the saturation"


def test_sizer_depends_on_max_seq_len_only_through_its_nonempty_split_count(fi_cpu_host, release):
    """The split-kv row's key (``split_counts.split_count_key``): the length
    becomes 128 times the nonempty split count where the sizer's saturated
    split count is at most 32, on random arguments (raised reducer caps of
    0.7.2.post1 on included: up to 300 active blocks at batch size 1)."""
    spec = CUTE_DSL_SPLIT_KV
    uncached = getattr(importlib.import_module(spec.module), spec.name).__wrapped__
    names = max_seq_len_names(uncached, release, "sizer")
    key = split_count_key(ArgumentLayout.of(uncached), uncached)
    rng = random.Random(11)
    accepted = lowered = attempts = 0
    classes, keys_used = set(), set()
    while accepted < SAMPLES and attempts < 50 * SAMPLES:
        attempts += 1
        arguments = random_sizer_arguments(rng, names)
        if rng.random() < 0.5:  # engines' batch sizes, where the K-tile classes pile up
            arguments["B"] = rng.randint(1, 4)
            if "occupancy_q_tiles" in names:
                arguments["occupancy_q_tiles"] = None
        values = tuple(arguments.get(n) for n in names)
        keyed = dict(zip(names, key(values)))
        result = outcome(uncached, arguments)
        assert result == outcome(uncached, keyed), arguments
        if isinstance(result, tuple) and isinstance(result[0], str):
            continue
        accepted += 1
        model = tuple(v for n, v in arguments.items() if n != "max_seq_len")
        classes.add((model, k_tile_ceiling(arguments["max_seq_len"])))
        keys_used.add(tuple(keyed.values()))
        # a length keyed on its split count, below the K-tile count the saturated key would keep
        lowered += keyed["max_seq_len"] <= STEADY_SPLIT_CAP * K_TILE < k_tile_ceiling(arguments["max_seq_len"])
    assert accepted == SAMPLES, f"the sizer accepted only {accepted} of {attempts} random tuples"
    assert lowered >= SAMPLES // 4, f"only {lowered} lengths were keyed on their split count"
    if "occupancy_q_tiles" in names:  # one occupancy, many batch sizes: the split count asked once serves them all
        for _ in range(SAMPLES // 4):
            occupancy = rng.randint(1, 8)
            arguments = {"B": rng.randint(occupancy, 64), "q_len": 1, "H": 128, "kv_lora_rank": 512,
                         "max_active_blocks": 148, "max_seq_len": rng.randint(1, 1 << 20),
                         "occupancy_q_tiles": occupancy}
            keyed = dict(zip(names, key(tuple(arguments.get(n) for n in names))))
            assert outcome(uncached, arguments) == outcome(uncached, keyed), arguments
    assert len(keys_used) < len(classes), (len(keys_used), len(classes))  # fewer keys than K-tile classes


def test_batch_cap_depends_on_max_seq_len_only_through_the_k_tile_count(fi_cpu_host, release, core):
    """flashinfer's own search (fi_compat not installed) at a length and at its
    K-tile ceiling; small workspaces make the cap follow the K-tile count, so
    the comparison is not vacuous (``crossings``)."""
    search = getattr(core, CUTE_DSL_BATCH_CAP.name)
    names = max_seq_len_names(search, release, "batch cap")
    rng = random.Random(11)
    crossings = lowered = 0
    samples = SAMPLES // 4  # each search runs about 13 sizer steps
    for _ in range(samples):
        arguments = {"workspace_bytes": rng.choice((1 << 16, 1 << 20, 4 << 20, 16 << 20, 128 << 20)),
                     "q_len": rng.choice((1, 2, 4)), "num_heads": rng.choice((16, 64, 128)), "kv_lora_rank": 512,
                     # with a real SM count every probe of the search (B >= 4097) runs one split and needs
                     # no workspace, so the cap is 8192 at any length; a huge count makes the probes split
                     # the K tiles, and the cap then follows the K-tile count
                     "max_active_blocks": rng.choice((132, 148, rng.randint(1 << 14, 1 << 17))),
                     "max_seq_len": rng.choice((rng.randint(1, 4096), rng.randint(1, 1 << 20),
                                                128 * rng.randint(1, 8192) + rng.choice((-1, 0, 1)))),
                     "candidate_max": 8192, "cute_dsl_impl": rng.choice(("auto", "monolithic")), "sinks": None}
        if "enable_dcp" in names:
            arguments["enable_dcp"] = False
        ceiling = k_tile_ceiling(arguments["max_seq_len"])
        result = outcome(search, arguments)
        assert result == outcome(search, {**arguments, "max_seq_len": ceiling}), arguments
        saturated = saturated_length(arguments["max_seq_len"], arguments["max_active_blocks"], SEARCH_LOWEST_PROBE)
        lowered += saturated != ceiling
        assert result == outcome(search, {**arguments, "max_seq_len": saturated}), arguments
        crossings += result != outcome(search, {**arguments, "max_seq_len": ceiling + 1})
    assert crossings >= samples // 100, f"only {crossings} of {samples} caps change with the K-tile count"
    assert lowered >= samples // 10, f"only {lowered} of {samples} lengths were past the saturation"


def test_batch_cap_at_the_saturated_length_stands_for_every_length_past_its_probes(fi_cpu_host, release, core):
    """The builder key's shortcut (fi_compat.adapters.batch_cap): the cap found at the fully
    saturated length is the cap at any length that ``cap_holds_at`` accepts.  flashinfer's own
    search on both sides; small workspaces and huge SM counts make the probes split the K tiles
    (``accepted`` counts the lengths the shortcut took, ``refused`` those it sent to the search)."""
    search = getattr(core, CUTE_DSL_BATCH_CAP.name)
    names = max_seq_len_names(search, release, "batch cap")
    rng = random.Random(13)
    accepted = refused = 0
    for _ in range(SAMPLES // 4):
        blocks = rng.choice((132, 148, rng.randint(1, 600), rng.randint(1 << 10, 1 << 17)))
        arguments = {"workspace_bytes": rng.choice((1 << 12, 1 << 16, 1 << 20, 16 << 20, 128 << 20)),
                     "q_len": rng.choice((1, 2, 4)), "num_heads": rng.choice((16, 64, 128)), "kv_lora_rank": 512,
                     "max_active_blocks": blocks,
                     "max_seq_len": rng.choice((rng.randint(1, 4096), rng.randint(1, 1 << 20),
                                                128 * rng.randint(1, 8192) + rng.choice((-1, 0, 1)))),
                     "candidate_max": 8192, "cute_dsl_impl": rng.choice(("auto", "monolithic")), "sinks": None}
        if "enable_dcp" in names:
            arguments["enable_dcp"] = False
        full = saturated_k_tiles(blocks, SEARCH_LOWEST_PROBE) * K_TILE
        cap = outcome(search, {**arguments, "max_seq_len": full})
        if not isinstance(cap, int) or not cap_holds_at(arguments["max_seq_len"], blocks, cap, 8192):
            refused += 1
            continue
        accepted += 1
        assert outcome(search, arguments) == cap, arguments
    assert accepted >= SAMPLES // 40 and refused >= SAMPLES // 400, (accepted, refused)
