"""fi_compat beside TensorRT-LLM's builder-memo workaround, in both import orders.

``trtllm_fake`` behaves as TensorRT-LLM's real workaround does (its facts,
and how they were read and measured, are in that module's docstring;
tests/matrix/test_trtllm_fake.py holds the fake to those facts).  These tests
run TensorRT-LLM's decode batches on the installed real release with the workaround imported before
fi_compat (a TensorRT-LLM process: the workaround installs when its module is
imported) and after it.

Batches: ``FI_COMPAT_MATRIX_LENGTHS`` per pass (default 2,000; see
tests/matrix/conftest.py), batch sizes 8-64, per-batch max_seq_len uniform in
[1, 131072], TensorRT-LLM's 16-positional call, through flashinfer's own
function and through ``fi_compat.mla_decode``.  Memory is measured in a traced
pass; time per call (this thread's CPU time, so other processes on a shared
machine count less) in untraced passes, with varying batch sizes and with the
batch fixed at 64.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from array import array

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.workload.growth import traced
from fi_compat.workload.builder import builder_arguments
from fi_compat.counting import census
from fi_compat.workload import workload

from helpers import trtllm_fake
from helpers.support import installed_release


@pytest.fixture(autouse=True)
def rows_only(monkeypatch):
    """The coexistence bounds, measured without the runtime watch: its own one-time
    records of the containers it walks come in its first seconds, at a time that
    depends on the machine's load, and this module's traced growth would count
    them (556 KB over 1,500 batches once on CI's clone, none here).  The watch's
    own memory and verdicts are measured in tests/matrix/test_watch.py and by
    the soak."""
    monkeypatch.setenv("FI_COMPAT_WATCH", "off")


torch = pytest.importorskip("torch")

CONTEXT = 131_072
PAGE_SIZE = 64
GROWTH_LIMIT = 1 << 20          # bytes over the whole traced pass
LATE_GROWTH_PER_BATCH = 256     # bytes per batch over its second half (unbounded: ~1.8-2.4 KB)
TIME_RATIO_LIMIT = 1.3          # last window's mean time per call over the first's
TIME_ATTEMPTS = 3               # timed passes before a miss counts (see timed_within_ratio)
WINDOW = 500
WARMUP = 20

INSTALLS = trtllm_fake.INSTALLED_ON

FIRST, SECOND = "trtllm-first", "fi_compat-first"


# ---------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def core(fi_cpu_host):
    """flashinfer.mla._core; fi_compat reset and the builder restored after the test."""
    with trtllm_fake.builder_restored() as core:
        yield core


workaround_of = trtllm_fake.workaround_of


# ---------------------------------------------------------------------------- installing and uninstalling


def test_install_line_names_the_workaround_it_found(core, caplog):
    trtllm_fake.import_tensorrt_llm()
    with caplog.at_level(logging.INFO, logger="fi_compat"):
        fi_compat.install()
    lines = [r.getMessage() for r in caplog.records if r.name == "fi_compat" and r.levelno == logging.INFO]
    assert len(lines) == 1 and f"flashinfer {installed_release()}" in lines[0]
    named = "TensorRT-LLM's workaround: inside fi_compat's builder memo" in lines[0]
    assert named == (installed_release() in INSTALLS), lines[0]


@pytest.mark.parametrize("order", [FIRST, SECOND])
def test_uninstall_in_each_order(order, core, caplog):
    if installed_release() not in INSTALLS:
        pytest.skip("the workaround installs on 0.6.15 and 0.6.15.post1 only")
    set_up(order, core)
    workaround = workaround_of(core)
    with caplog.at_level(logging.WARNING, logger="fi_compat"):
        state = fi_compat.uninstall()
    assert core._build_mla_decode_tuning_config is workaround  # TensorRT-LLM's function stays or comes back
    if order == FIRST:
        assert state["notes"] == []
    else:
        # fi_compat's proxy is inside TensorRT-LLM's function: it cannot be taken out, so it passes through
        assert any("pass-through" in note for note in state["notes"])
        assert any("pass-through" in r.getMessage() for r in caplog.records)
    assert state["trtllm_workaround"] == {"present": True, "position": "alone"}
    config = core._build_mla_decode_tuning_config(
        **builder_arguments(page_size=PAGE_SIZE, tables=(2, 2, 512), max_seq_len=4096))
    assert type(config).__name__ == "TuningConfig"  # what remains still builds, through flashinfer's builder


# ---------------------------------------------------------------------------- TensorRT-LLM's batches


@dataclasses.dataclass
class Workload:
    """Tensors for a batch of 64 and, per pass, its own batch sizes and lengths
    (fresh lengths every pass: a repeated length could hit a cache that a
    new one would grow)."""

    inputs: workload.Inputs
    batches: int

    def batch(self, size: int) -> workload.Inputs:
        """Views of the first ``size`` rows: the host path reads shapes, and views
        allocate no tensor storage (nothing the memory pass would count)."""
        t = self.inputs
        return dataclasses.replace(t, query=t.query[:size], block_tables=t.block_tables[:size],
                                   seq_lens=t.seq_lens[:size], out=t.out[:size])

    def draws(self, seed: int, count: int = 0) -> tuple[array, array]:
        count = count or self.batches
        return (array("q", workload.batch_sizes(count, seed=seed)),
                array("q", workload.lengths("uniform", CONTEXT, count, seed=seed)))


def make_workload(batches: int, counter_buffer: bool) -> Workload:
    inputs = workload.make_inputs(torch, "trtllm", batch=64, width=CONTEXT // PAGE_SIZE, page_size=PAGE_SIZE)
    if not counter_buffer:
        inputs = dataclasses.replace(inputs, counter_buffer=None)
    return Workload(inputs, batches)


def decode_function(path: str):
    import flashinfer.mla

    return fi_compat.mla_decode if path == "mla_decode" else flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla


def set_up(order: str, core) -> dict:
    if order == FIRST:
        trtllm_fake.import_tensorrt_llm()
        return fi_compat.install()
    fi_compat.install()
    trtllm_fake.import_tensorrt_llm()
    return fi_compat.status()


def run_traced(decode, work: Workload, launches, seed: int) -> tuple[int, int, int]:
    """(growth over the pass, growth over its second half, batches whose kernel got another max_seq_len)."""
    sizes, lengths = work.draws(seed)
    mismatched = 0
    half = 0
    with traced() as memory:
        for index, length in enumerate(lengths):
            if index == len(lengths) // 2:
                half = memory.grown()
            workload.trtllm_call(decode, work.batch(sizes[index]), length)
            mismatched += launches.launches[-1].max_seq_len != length
            launches.clear()  # the recorder keeps launches (and their tensors) otherwise
        end = memory.grown()
    return end, end - half, mismatched


def run_timed(decode, work: Workload, launches, seed: int, fixed: int = 0) -> tuple[float, float]:
    """Mean CPU time per call of this thread (ns) over the first and the last window."""
    sizes, lengths = work.draws(seed)
    window = min(WINDOW, len(lengths) // 4)
    times = array("q", bytes(8 * len(lengths)))
    gc.collect()
    for index, length in enumerate(lengths):
        inputs = work.batch(fixed or sizes[index])
        started = time.thread_time_ns()
        workload.trtllm_call(decode, inputs, length)
        times[index] = time.thread_time_ns() - started
        launches.clear()
    return sum(times[:window]) / window, sum(times[-window:]) / window


def timed_within_ratio(decode, work: Workload, launches, seed: int, fixed: int = 0) -> tuple[bool, list]:
    """Whether the last window's mean stays within :data:`TIME_RATIO_LIMIT` of the
    first's, and the (first, last) means measured.  A pass that misses is run again
    on fresh lengths, up to :data:`TIME_ATTEMPTS` passes: on a shared or virtual
    machine a burst of contention lands in one window now and then (even a
    thread's CPU clock counts time the hypervisor takes), and it does not repeat;
    a cache that slows every call down does (it keeps growing in the next pass)."""
    measured = []
    for attempt in range(TIME_ATTEMPTS):
        first, last = run_timed(decode, work, launches, seed + 100 * attempt, fixed)
        measured.append((first, last))
        if last <= TIME_RATIO_LIMIT * first:
            return True, measured
    return False, measured


def warm_up(decode, work: Workload, launches) -> None:
    sizes, lengths = work.draws(seed=0, count=WARMUP)
    for size, length in zip(sizes, lengths):
        workload.trtllm_call(decode, work.batch(size), length)
    launches.clear()


@pytest.mark.parametrize("path", ["flashinfer", "mla_decode"])
@pytest.mark.parametrize("order", [FIRST, SECOND])
def test_trtllm_batches_stay_bounded_and_flat(order, path, core, fi_launches, fi_matrix_lengths):
    release = installed_release()
    state = set_up(order, core)
    present = release in INSTALLS
    assert state["state"] == "installed", state
    position = {FIRST: "inside fi_compat's builder memo", SECOND: "around fi_compat's builder memo"}[order]
    assert state["trtllm_workaround"] == {"present": present, "position": position if present else None}

    # TensorRT-LLM's call passes the counter buffer; flashinfer before 0.6.15 has no such
    # parameter (TensorRT-LLM's call cannot run there), so those releases run without it.
    import flashinfer.mla

    has_counter = "multi_ctas_kv_counter_buffer" in workload.accepted(
        flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla)
    decode = decode_function(path)
    batches = fi_matrix_lengths
    work = make_workload(batches, counter_buffer=has_counter)
    warm_up(decode, work, fi_launches)
    before = census.take()

    growth, late_growth, mismatched = run_traced(decode, work, fi_launches, seed=1)
    varying_flat, varying = timed_within_ratio(decode, work, fi_launches, seed=2)
    fixed_flat, fixed = timed_within_ratio(decode, work, fi_launches, seed=3, fixed=64)

    def shown(passes: list) -> str:
        return ", ".join(f"{first / 1e3:.0f} -> {last / 1e3:.0f} us" for first, last in passes)

    summary = (f"flashinfer {release}, {order}, through {path}, {batches} batches: growth {growth} B "
               f"(second half {late_growth} B); CPU time per call, first -> last {min(WINDOW, batches // 4)}: "
               f"batch 8-64 {shown(varying)}; batch 64 {shown(fixed)}")
    print(summary)
    assert mismatched == 0, summary  # the kernel receives TensorRT-LLM's exact max_seq_len
    assert growth < GROWTH_LIMIT, summary
    assert late_growth < LATE_GROWTH_PER_BATCH * (batches - batches // 2), summary
    assert varying_flat and fixed_flat, summary
    assert census.over_bound(census.take(), before, fi_compat.status()["settings"]["cache_size"]["value"]) == []
    after = fi_compat.status()
    assert after["state"] == "installed"
    memo = workaround_of(core)
    assert (memo is not None) == present
    if present:
        assert len(trtllm_fake.memo_entries(memo)) <= trtllm_fake.MAX_ENTRIES


CONTROL_BATCHES = 400
LEAK_FREE_FOR_TRTLLM_CALL = Version("0.7.4")  # explicit backend="trtllm-gen" skips the builder there


def test_without_fi_compat_the_same_measurement_sees_the_leak(core, fi_launches):
    """The control: TensorRT-LLM's workaround alone, the same traced pass.  Every
    release before 0.7.4 grows by kilobytes per batch for TensorRT-LLM's call
    (0.6.13 - 0.6.15 in the nearest-profile cache, 0.6.15.post1 on in the tuning
    config's); 0.7.4 skips the builder for an explicit trtllm-gen call and holds nothing."""
    release = installed_release()
    trtllm_fake.import_tensorrt_llm()
    import flashinfer.mla

    decode = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla
    work = make_workload(CONTROL_BATCHES, counter_buffer="multi_ctas_kv_counter_buffer" in workload.accepted(decode))
    warm_up(decode, work, fi_launches)
    growth, late_growth, mismatched = run_traced(decode, work, fi_launches, seed=4)
    late_per_batch = late_growth / (CONTROL_BATCHES - CONTROL_BATCHES // 2)
    print(f"flashinfer {release}, workaround alone, {CONTROL_BATCHES} batches: growth {growth} B, "
          f"second half {late_per_batch:.0f} B per batch")
    assert mismatched == 0
    if release < LEAK_FREE_FOR_TRTLLM_CALL:
        assert late_per_batch > 4 * LATE_GROWTH_PER_BATCH
    else:
        assert late_per_batch < LATE_GROWTH_PER_BATCH and growth < GROWTH_LIMIT
