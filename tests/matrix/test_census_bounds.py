"""Bounded on every path, proven by census on the installed real release.

For every (layout, backend, query mode) the release accepts, the real MLA
decode host path runs thousands of distinct max_seq_len values with varying
batch sizes (and, for SGLang, block-table widths), first without fi_compat and
then with it.  The evidence is flashinfer's own caches, counted by
:func:`fi_compat.counting.census.take`, and tracemalloc; never fi_compat's statistics.

Design, for CI's budget (``FI_COMPAT_MATRIX_LENGTHS``, fixture ``fi_matrix_lengths``:
2,000 distinct lengths by default, more for a longer run, and never fewer than
leave ``STEADY`` lengths between the sweep's settling and the traced end:
2,351 at 128K):

* the lengths start with a sweep that reaches every K-tile class and every
  step of the profile ladder (``decode_driver.schedule``), so the
  normalised keys are all in the caches early; the rest is random and distinct;
* fi_compat is installed with ``cache_size=4``: its LRUs are full after a few
  dozen batches, so the end of the run is the steady state at any N (the LRU
  code is the same at every size; the default size's footprint is measured in
  the full run by ``test_default_size_footprint``);
* Python memory blocks are counted over the steady stretch, less what the
  same calls keep when repeated (kept per call, not per distinct length);
* tracemalloc runs only over the end: a turnover stretch (so what the LRUs
  evict in the window was allocated while tracing) and a measured window;
  growth there, extrapolated to 20,000 lengths, must stay under 1 MiB;
* flashinfer alone runs only ``UNPATCHED`` lengths: its growth is linear, so
  64 lengths show it as clearly as 20,000 (counted in census entries and
  Python memory blocks; docs/compatibility.md's bytes come from
  scripts/measure_growth.py).

Caches the census sees growing a little with fi_compat installed are bounded by
construction (read from the wheels): the device queries (one entry per
device), the autotuner's bucket mapper (per tuning config shape), cute-dsl's
``_check_can_implement`` / ``_get_compiled_mla_kernel`` (keyed by dtypes,
head counts, page size, q_len, DCP flags and, from 0.7.2, the reducer's split
cap, itself ``_get_reducer_max_splits(split_kv)`` with ``split_kv <= 128``:
at most 7 values), and the modular wrapper's ``_compile_mla_kernel`` /
``_check_can_implement`` (same kind of key).  None of them takes a length or a
batch size, so the window check below would catch one that did.
"""

from __future__ import annotations

import gc
import inspect
import sys
import time
from typing import Any

import pytest

import fi_compat
from fi_compat.workload import growth
from fi_compat.counting import census
from fi_compat.verdict.bounds import by_name
from fi_compat.model.specs import NEAREST_PROFILE, NEAREST_PROFILE_CACHED, TUNING_CONFIG

import decode_driver
from decode_driver import Driver
from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal

torch = pytest.importorskip("torch")

UNPATCHED = 64
TURNOVER, WINDOW = 64, 128
#: Lengths after the sweep before Python blocks are counted: where flashinfer's
#: nearest-profile keys hold configs (0.6.15.post1 - 0.6.17), the configs they
#: keep alive, and fi_compat's identity map of them, settle within ~250.
SETTLE = 300
CACHE_SIZE = 4
DEFAULT_CACHE_SIZE = 256
MIB = 1 << 20
#: 20,000 distinct lengths must grow less than 1 MiB: at most this many bytes per length.
BYTES_PER_LENGTH = MIB / 20_000
#: Distinct lengths of the steady stretch whose Python blocks are counted, at the
#: least: the collector's and the free lists' noise (about 100 blocks either way)
#: then stays near 0.25 a length, well under :data:`BLOCKS_PER_LENGTH`.
STEADY = 400
#: Python memory blocks kept per distinct length in the steady state (a stretch of
#: new lengths, less the same calls repeated): a leaked cache entry keeps several
#: (key tuple, value, dict slot); flashinfer alone keeps 20-60.
BLOCKS_PER_LENGTH = 2.0
#: A traced window this long measures bytes per length to better than 50 B.
PRECISE_WINDOW = 1000
#: New entries a flashinfer cache may gain over the traced stretch at the end
#: (TURNOVER + window lengths; the reducer's split cap meets a new split count
#: now and then); a per-length leak gains one per length, 224 or more.
WINDOW_SLACK = 16
#: Rows whose key holds a length where the release's function takes one.
LENGTH_PARAMETERS = ("max_seq_len", "profile_seq_len")

COMBINATIONS = decode_driver.combinations()


def _message(error: BaseException) -> str:
    return describe_error(error)


def accepted_or_skip(driver: Driver, release: Any) -> None:
    """Skip what this device cannot run (tests/helpers/device_gate.py), then what
    flashinfer itself rejects, but only if it rejects it the same way with fi_compat."""
    device_gate.require_backend(driver.backend, sparse=driver.mode == "sparse")
    missing = driver.missing_parameter()
    if missing is not None:
        pytest.skip(f"flashinfer {release} has no {missing} parameter")
    refusal = flashinfer_refusal(lambda: driver.call(8, 1000))  # any type, as long as flashinfer raised it
    if refusal is None:
        return
    alone = _message(refusal)
    fi_compat.install(cache_size=CACHE_SIZE)
    try:
        patched = flashinfer_refusal(lambda: driver.call(8, 1000))
        assert patched is not None, f"flashinfer alone rejects the call ({alone[:160]}); through fi_compat it runs"
        assert _message(patched) == alone, "fi_compat changed how flashinfer rejects the call"
    finally:
        fi_compat.uninstall()
    pytest.skip(f"flashinfer {release} rejects it: {alone[:160]}")


def flashinfer_growth(before: dict, after: dict) -> dict[str, int]:
    return {g.qualname: g.gained for g in census.grown(before, after) if g.after.owner == census.FLASHINFER}


def run_alone(driver: Driver, lengths: list[int], batches: list[int]) -> dict[str, Any]:
    """flashinfer without fi_compat, its caches just emptied (so growth counts
    from zero): census entries and Python blocks per length (no tracemalloc:
    what grows here is never freed, so counting is enough)."""
    blocks = blocks_over(driver, lengths, batches)
    growth = flashinfer_growth({}, census.take())
    return {"entries": sum(growth.values()), "growth": growth, "blocks_per_length": blocks / len(lengths)}


def stretches(count: int) -> tuple[int, int]:
    """(turnover, window) of a run of ``count`` lengths: the traced end of :func:`run_bounded`."""
    window = max(WINDOW, count // 16)
    return max(TURNOVER, window // 2), window


def length_count(requested: int, warm_up: int) -> int:
    """``requested`` lengths, or more where the sweep and the settling (``warm_up``)
    would leave fewer than :data:`STEADY` before the traced end (at 128K the sweep
    alone is 1,432 lengths)."""
    count = requested
    while count - sum(stretches(count)) - warm_up < STEADY:
        count = warm_up + STEADY + sum(stretches(count))
    return count


def run_bounded(driver: Driver, lengths: list[int], batches: list[int], warm_up: int) -> dict[str, Any]:
    """The whole run with fi_compat, flashinfer's caches just emptied (so the
    census counts from zero); memory is read over the steady state after
    ``warm_up`` lengths: Python blocks over the untraced stretch, tracemalloc
    over the window at the end."""
    fi_compat.install(cache_size=CACHE_SIZE)
    turnover, window = stretches(len(lengths))
    traced = len(lengths) - turnover - window
    started = time.process_time()
    driver.run(lengths[:warm_up], iter(batches[:warm_up]))
    measured, measured_batches = lengths[warm_up:traced], batches[warm_up:traced]
    new_blocks = blocks_over(driver, measured, measured_batches)
    cpu_s = time.process_time() - started
    # The same calls again, every length already seen: what they keep is kept
    # per call, not per distinct length (on CUDA the launch path keeps a few
    # blocks per call for a while, with or without fi_compat).
    repeated_blocks = blocks_over(driver, measured, measured_batches)
    steady = census.take()  # outside the traced stretch: what the census allocates is freed late
    with growth.traced() as memory:
        driver.run(lengths[traced:-window], iter(batches[traced:-window]))
        memory.restart()
        driver.run(lengths[-window:], iter(batches[-window:]))
        grown = memory.grown()
    # (a bounded structure that turns over while the calls repeat frees blocks: nothing to subtract then)
    per_length = (new_blocks - max(repeated_blocks, 0)) / len(measured)
    sites = allocation_sites(driver, measured, measured_batches) if per_length >= BLOCKS_PER_LENGTH else []
    return {"before": {}, "steady": steady, "after": census.take(), "window": window,
            "window_bytes": grown, "blocks_per_length": per_length,
            "blocks_per_call": repeated_blocks / len(measured), "sites": sites,
            "us_per_call": cpu_s / traced * 1e6, "status": fi_compat.status()}


def blocks_over(driver: Driver, lengths: list[int], batches: list[int]) -> int:
    """Python memory blocks the calls leave allocated (collected before and after)."""
    gc.collect()
    blocks = sys.getallocatedblocks()
    driver.run(lengths, iter(batches))
    gc.collect()
    return sys.getallocatedblocks() - blocks


def allocation_sites(driver: Driver, lengths: list[int], batches: list[int], top: int = 8) -> list[str]:
    """Where new lengths keep memory, for a failure's message: the source lines
    whose allocations grew most over one more stretch of them, traced."""
    import tracemalloc

    shifted = [length - 1 if length > 1 else length + 1 for length in lengths]  # not seen yet, mostly
    gc.collect()
    tracemalloc.start(8)
    try:
        before = tracemalloc.take_snapshot()
        driver.run(shifted, iter(batches))
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return [str(stat) for stat in after.compare_to(before, "lineno")[:top]]


def per_length_rows(core: Any, status: dict) -> list[str]:
    """Rows this path reached (fi_compat's statistics say only *which* rows; the
    evidence is flashinfer's census) whose flashinfer cache would gain an entry
    per distinct length: the function takes a length, or, on releases without a
    tuning-config memo (a fresh config per call), the nearest-profile memo,
    whose keys then never compare equal."""
    fresh_configs = not hasattr(core, TUNING_CONFIG.name)
    rows = []
    for row in status["bounds"]:
        stats = row["fi_compat"]
        if row["verdict"] != "bound" or not stats or stats["hits"] + stats["misses"] == 0:
            continue
        spec = by_name(row["name"]).spec
        function: Any = sys.modules.get(spec.module)
        for part in spec.name.split("."):
            function = getattr(function, part, None)
        takes_length = function is not None and any(
            name in inspect.signature(function).parameters for name in LENGTH_PARAMETERS)
        if takes_length or (fresh_configs and spec in (NEAREST_PROFILE, NEAREST_PROFILE_CACHED)):
            rows.append(row["name"])
    return rows


@pytest.fixture(autouse=True)
def rows_only(monkeypatch):
    """The rows' bounds, measured alone: the runtime watch (fi_compat.watch) keeps one
    record per container it finds while it walks flashinfer in its first seconds,
    Python blocks this module's per-length count would charge to the rows.  The
    watch's own verdicts are measured in tests/matrix/test_watch.py."""
    monkeypatch.setenv("FI_COMPAT_WATCH", "off")


@pytest.fixture(scope="module", autouse=True)
def frozen_heap():
    """``gc.freeze()`` the imported world (torch, flashinfer, CuTe): the
    collections this module makes before every memory reading then scan only
    what the runs allocate (0.2 s each otherwise)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.mark.census
@pytest.mark.parametrize("layout,backend,mode", COMBINATIONS, ids=["/".join(c) for c in COMBINATIONS])
def test_bounded_on_every_path(layout, backend, mode, core, decode_function, release, fresh_flashinfer_caches,
                               fi_matrix_lengths,
                               quiet_launches, matrix_report):
    context = decode_driver.context_for(fi_matrix_lengths)
    driver = Driver(torch, decode_function, layout, backend, mode, context=context)
    accepted_or_skip(driver, release)
    warm_up = len(decode_driver.sweep(context)) + SETTLE
    lengths, batches = decode_driver.schedule(length_count(fi_matrix_lengths, warm_up), context)

    fresh_flashinfer_caches.clear()
    alone = run_alone(driver, lengths[-UNPATCHED:], batches[-UNPATCHED:])
    fresh_flashinfer_caches.clear()
    bounded = run_bounded(driver, lengths, batches, warm_up=warm_up)
    status = bounded["status"]

    # 1. no flashinfer cache grows past fi_compat's bound over the whole run ...
    over = census.over_bound(bounded["after"], bounded["before"], DEFAULT_CACHE_SIZE)
    assert not over, [g.describe() for g in over]
    # ... nor at all, beyond a few entries, once the caches are in steady state;
    window = flashinfer_growth(bounded["steady"], bounded["after"])
    assert all(gained <= WINDOW_SLACK for gained in window.values()), window
    # flashinfer's cache behind each row stayed empty: no call went around fi_compat;
    behind = {row["name"]: row["flashinfer"]["currsize"] for row in status["bounds"] if row["flashinfer"]}
    assert not any(behind.values()), behind
    # and fi_compat's own caches hold their bound.
    for name, stats in status["caches"].items():
        assert stats["currsize"] <= stats["maxsize"], (name, stats)

    # 2. memory in the steady state: no Python object kept per length, and the
    # traced window under 1 MiB (per length too, where the window is long
    # enough for tracemalloc's free-list noise, tens of KB, not to dominate).
    assert bounded["blocks_per_length"] < BLOCKS_PER_LENGTH, (bounded["blocks_per_length"], alone, bounded["sites"])
    per_length = bounded["window_bytes"] / bounded["window"]
    assert bounded["window_bytes"] < MIB, f"{bounded['window_bytes']} B over {bounded['window']} lengths"
    if bounded["window"] >= PRECISE_WINDOW:
        assert per_length <= BYTES_PER_LENGTH, f"{per_length:.0f} B per distinct length with fi_compat"

    # 3. flashinfer alone grows per length wherever a length-keyed row saw traffic.
    leaking_rows = per_length_rows(core, status)
    if leaking_rows:
        assert alone["entries"] >= 0.9 * UNPATCHED, (leaking_rows, alone["growth"])
        assert alone["blocks_per_length"] > BLOCKS_PER_LENGTH, alone  # the measure that is flat with fi_compat
    else:
        assert alone["entries"] < UNPATCHED // 10, ("flashinfer alone grew per length", alone["growth"])

    matrix_report.append({
        "release": str(release), "layout": layout, "backend": backend, "mode": mode, "lengths": len(lengths),
        "alone_entries_per_length": round(alone["entries"] / UNPATCHED, 2),
        "alone_blocks_per_length": round(alone["blocks_per_length"], 2),
        "bounded_bytes_per_length": round(per_length, 1), "bounded_window": bounded["window"],
        "bounded_blocks_per_length": round(bounded["blocks_per_length"], 3),
        "bounded_blocks_per_call": round(bounded["blocks_per_call"], 3),
        "bounded_cpu_us_per_call": round(bounded["us_per_call"]),
        "rows_with_traffic": leaking_rows,
    })
