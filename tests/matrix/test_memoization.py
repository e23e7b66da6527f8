"""What install() leaves behind, and what status() and the census can see.

* install / uninstall cycles change exactly the attributes ``status()`` lists
  and restore every flashinfer attribute (module attributes and class
  members) to the identical object;
* ``cache_info()`` of a patched function is fi_compat's own, and flashinfer's
  cache behind it stays empty;
* the cute-dsl batch cap keeps one entry per K-tile class, and its binary
  search leaves nothing in the sizer's memo or in flashinfer's cache behind it;
* a call that reaches flashinfer's cache behind fi_compat's back (the
  original's cache called directly) shows in ``status()["bounds"]`` and in the
  census, next to fi_compat's numbers.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from types import ModuleType

import pytest

import fi_compat
from fi_compat.workload.builder import builder_arguments
from fi_compat.counting import census
from fi_compat.verdict.bounds import BOUNDS
from fi_compat.model.specs import CUTE_DSL_BATCH_CAP, CUTE_DSL_SPLIT_KV, TUNING_CONFIG, TUNING_CONFIG_BUILDER

torch = pytest.importorskip("torch")


@pytest.fixture
def every_row_loaded(core, release):
    """The lazily imported modules of every row, so install() patches them at once."""
    for bound in BOUNDS:
        if bound.spec.present_in(release) and bound.spec.module not in sys.modules:
            importlib.import_module(bound.spec.module)


def flashinfer_attributes() -> dict[tuple[str, str], object]:
    """Every attribute of every loaded flashinfer module, and every member of the classes they define."""
    found = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or not (name == "flashinfer" or name.startswith("flashinfer.")):
            continue
        for attribute, value in list(vars(module).items()):
            found[(name, attribute)] = value
            if isinstance(value, type) and value.__module__ == name:
                for member, item in list(vars(value).items()):
                    found[(name, f"{attribute}.{member}")] = item
    return found


def changed(before: dict, after: dict) -> set[str]:
    return {f"{module}.{attribute}" for (module, attribute), value in after.items()
            if before.get((module, attribute), value) is not value}


def test_install_uninstall_cycles_change_what_status_lists_and_restore_every_attribute(every_row_loaded):
    before = flashinfer_attributes()
    for cycle in range(2):
        state = fi_compat.install()
        assert state["state"] == "installed" and not [r for r in state["bounds"] if r["waiting_for"]], state
        listed = {where for row in state["bounds"] for where in row["patched"]}
        listed |= set(state["watch"]["patched"] if state["watch"] else ())  # the runtime watch's decode tick
        assert listed and changed(before, flashinfer_attributes()) == listed, cycle
        fi_compat.uninstall()
        assert not changed(before, flashinfer_attributes()), cycle  # identity, not equality
    assert fi_compat.status()["state"] == "not-installed"


def test_cache_info_is_fi_compats_own(core):
    if not hasattr(core, TUNING_CONFIG.name):
        pytest.skip("no tuning-config memo before 0.6.15.post1")
    fi_compat.install(cache_size=8)
    proxy = getattr(core, TUNING_CONFIG.name)
    lengths = range(100, 2000, 7)
    for length in lengths:
        proxy((1, 2), 8, length)
    info = proxy.cache_info()
    assert info.maxsize == 8 and info.currsize <= 8 and info.hits + info.misses == len(lengths), info
    flashinfers = proxy.__wrapped__.cache_info()
    assert flashinfers.maxsize is None and flashinfers.currsize == 0, flashinfers


def sizer_arguments(function, batch: int) -> tuple:
    """Valid arguments of the cute-dsl sizer (with a max_seq_len where it takes one)."""
    head = (batch, 1, 128, 512, 148)
    return head + (4096,) if "max_seq_len" in inspect.signature(function).parameters else head


def test_growth_behind_fi_compats_back_shows_in_status_and_census(every_row_loaded):
    state = fi_compat.install(cache_size=8)
    assert next(r for r in state["bounds"] if r["name"] == "split-kv")["verdict"] == "bound"
    module = sys.modules[CUTE_DSL_SPLIT_KV.module]
    proxy = getattr(module, CUTE_DSL_SPLIT_KV.name)
    flashinfers = proxy.__wrapped__  # the functools cache fi_compat stands in front of
    before = census.take()
    for batch in range(1, 301):
        flashinfers(*sizer_arguments(flashinfers, batch))  # a caller that kept the original
    proxy(*sizer_arguments(flashinfers, 1))

    row = next(r for r in fi_compat.status()["bounds"] if r["name"] == "split-kv")
    assert row["flashinfer"] == {"currsize": 300, "maxsize": None}, row
    assert row["fi_compat"]["currsize"] == 1, row
    after = census.take()
    grown = {g.qualname: g for g in census.grown(before, after)}
    assert grown[CUTE_DSL_SPLIT_KV.qualname].gained == 300 and grown[CUTE_DSL_SPLIT_KV.qualname].after.owner == "flashinfer"
    assert [g.qualname for g in census.over_bound(after, before, 256)] == [CUTE_DSL_SPLIT_KV.qualname]


def test_batch_cap_search_keeps_one_entry_per_k_tile_class_and_no_probe(every_row_loaded, core, release, fi_device):
    """300 lengths in 100 K-tile classes through the builder with a cute-dsl
    runner: the batch cap holds at most one entry per K-tile class (fewer: the
    builder key asks for the cap at the saturated length first, and at this SM
    count every probe of the search is past its saturation), the sizer none of
    the search's probes, and flashinfer's own sizer cache stays empty (the
    numbers are read from flashinfer's objects, not from fi_compat's statistics)."""
    if not CUTE_DSL_BATCH_CAP.present_in(release):
        pytest.skip(f"flashinfer {release}'s batch cap takes no max_seq_len: one answer per model, not bounded")
    fi_compat.install()
    sizer = getattr(sys.modules[CUTE_DSL_SPLIT_KV.module], CUTE_DSL_SPLIT_KV.name)
    search = getattr(core, CUTE_DSL_BATCH_CAP.name)
    build = getattr(core, TUNING_CONFIG_BUILDER.name)
    parameters = inspect.signature(build).parameters
    classes = range(1, 101)
    for k_tiles in classes:
        for offset in (127, 64, 0):  # three lengths of the same K-tile class
            arguments = builder_arguments(page_size=64, tables=(4, 4096), workspace_bytes=4 << 20,
                                          runner_names=["cute-dsl"], max_seq_len=128 * k_tiles - offset,
                                          device=fi_device)
            build(**{name: value for name, value in arguments.items() if name in parameters})
    assert 1 <= search.cache_info().currsize <= len(classes)
    assert sizer.cache_info().currsize == 0
    assert sizer.__wrapped__.cache_info().currsize == 0
