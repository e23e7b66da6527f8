"""16 threads through the real builder and ``fi_compat.mla_decode`` while
another thread installs and uninstalls in a loop.

Tensors live on the matrix's device (``fi_device``).  torch's default device
is per thread, so the GPU matrix's session-wide ``cuda`` default does not
reach the worker threads: each worker sets it for itself, or its tensors would
be CPU tensors that flashinfer rejects on a CUDA host.

How calls are counted, honestly:

* **Direct builder calls** read ``core._build_mla_decode_tuning_config`` into
  a local and call that object.  When it is a fi_compat proxy (active, and our
  arguments always give a key), that call is exactly one hit or miss *of that
  proxy's cache*; otherwise it went to flashinfer's original and no cache
  counts it.  The test tallies per cache object from what it called, without
  looking inside the cache.
* **mla_decode calls** reach the builder from inside flashinfer, through
  whichever attribute is current at that moment, which the caller cannot see.
  Each one counts at most one builder-cache lookup, so over all builder caches
  ``sum(hits + misses) - direct calls`` must lie in ``[0, decode calls]``;
  and each call must record exactly one kernel launch with the ``max_seq_len``
  it asked for.
* **Steady phase**: the same 16 threads with the installation held steady give
  the exact equation ``hits + misses == direct calls + decode calls`` for the
  builder cache, and, on releases with flashinfer's ``functools.cache``,
  ``hits + misses == builder misses`` for the config cache below it (each
  builder miss calls it once).

The bound (``currsize <= maxsize``) is sampled through ``stats()`` and
``status()`` (which take the cache lock, as a user would see them) by the
installer thread the whole time, and checked on every cache at the end.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time

import pytest

import fi_compat
from fi_compat.workload import builder
from fi_compat.installing import installer
from fi_compat.memo.cache import BoundedCache
from fi_compat.memo.proxies import is_memo

from fi_compat.workload import workload

torch = pytest.importorskip("torch")

THREADS = 16
MAXSIZE = 8
CHURN_ITERATIONS = 60  # per thread at least: one builder call and one mla_decode call each
MIN_TOGGLES = 10  # install/uninstall cycles that must overlap the workers
STEADY_ITERATIONS = 30


@pytest.fixture
def core(fi_cpu_host):
    import flashinfer.mla._core as core

    return core


@pytest.fixture
def every_cache(monkeypatch):
    """Every BoundedCache created during the test (held strongly)."""
    created: list[BoundedCache] = []
    original_init = BoundedCache.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(BoundedCache, "__init__", init)
    return created


@pytest.fixture
def recorded_launches(fi_cpu_host, monkeypatch):
    """An unbounded launch list (deque.append is atomic; LaunchRecorder.total is not)."""
    launches = collections.deque()
    monkeypatch.setattr(fi_cpu_host.recorder, "launches", launches)
    return launches


def decode_inputs(device, batch: int = 1, num_pages: int = 64) -> workload.Inputs:
    """TensorRT-LLM's layout, 64 pages of 32 per table, on the matrix's device."""
    inputs = workload.make_inputs(torch, "trtllm", batch=batch, width=64, page_size=32, num_pages=num_pages,
                                  workspace_bytes=1 << 20, device=device)
    # no counter buffer: the call API refuses one below 0.6.15, and the locks are what is tested here
    return dataclasses.replace(inputs, counter_buffer=None)


def builder_arguments(device) -> dict:
    return builder.builder_arguments(tables=(1, 64), max_seq_len=None, device=device)


class Worker(threading.Thread):
    """Alternates a direct builder call and an mla_decode call; tallies the
    direct calls per cache object it actually called.  Makes ``iterations``
    of them, and goes on until ``until`` is set when one is given."""

    def __init__(self, core, device, seed: int, iterations: int, start_gate: threading.Barrier,
                 until: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.core = core
        self.device = device
        self.rng = random.Random(seed)
        self.iterations = iterations
        self.until = until
        self.start_gate = start_gate
        self.through_cache: collections.Counter = collections.Counter()  # id(cache) -> direct calls
        self.caches: dict[int, BoundedCache] = {}
        self.direct_uncached = 0
        self.decode_calls = 0
        self.requested: list[int] = []
        self.error: BaseException | None = None

    def more(self) -> bool:
        return self.decode_calls < self.iterations or (self.until is not None and not self.until.is_set())

    def run(self) -> None:
        try:
            with torch.device(self.device):  # this thread's default device, as the main thread's
                self.loop()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def loop(self) -> None:
        arguments = builder_arguments(self.device)
        tensors = decode_inputs(self.device)
        self.start_gate.wait()
        while self.more():
            # 24 distinct laddered profile lengths up to 2048: with maxsize 8, constant eviction
            length = self.rng.randint(1, 2047)
            builder = self.core._build_mla_decode_tuning_config
            config = builder(max_seq_len=length, **arguments)
            assert type(config).__name__ == "TuningConfig"
            if is_memo(builder) and builder._self_active:
                cache = builder.fi_compat_cache
                self.through_cache[id(cache)] += 1
                self.caches[id(cache)] = cache
            else:
                self.direct_uncached += 1
            length = self.rng.randint(1, 2047)
            tensors.seq_lens.fill_(length)
            workload.trtllm_call(fi_compat.mla_decode, tensors, length)
            self.requested.append(length)
            self.decode_calls += 1


def run_workers(core, device, iterations: int, during=None, until=None) -> list[Worker]:
    gate = threading.Barrier(THREADS + 1)
    workers = [Worker(core, device, seed, iterations, gate, until) for seed in range(THREADS)]
    for worker in workers:
        worker.start()
    gate.wait()
    if during is not None:
        during(workers)
    for worker in workers:
        worker.join(timeout=120)
        assert not worker.is_alive(), "a worker thread hung"
    errors = [w.error for w in workers if w.error is not None]
    assert not errors, errors[0]
    return workers


def assert_bounded(caches) -> None:
    for cache in caches:
        stats = cache.stats()
        assert stats.currsize <= stats.maxsize and stats.maxsize % MAXSIZE == 0, stats  # rows of 16x


def test_threads_through_builder_and_mla_decode_while_installing_and_uninstalling(
        core, fi_device, every_cache, recorded_launches, fine_grained_switching, monkeypatch):
    # mla_decode installs on first use when fi_compat is not installed: make
    # those installs use the same small bound as the installer thread's.
    monkeypatch.setenv("FI_COMPAT_CACHE_SIZE", str(MAXSIZE))
    toggles = {"install": 0, "uninstall": 0, "samples": 0}
    problems: list[str] = []
    # Workers go on past CHURN_ITERATIONS until this many cycles overlapped
    # them: on a release where a decode is cheap (0.7.4 skips the builder)
    # they would otherwise finish within a handful of cycles.
    enough = threading.Event()

    def churn(workers):
        try:
            cycle(workers)
        finally:
            enough.set()

    def cycle(workers):
        while any(w.is_alive() for w in workers):
            if toggles["uninstall"] >= MIN_TOGGLES:
                enough.set()
            try:
                state = fi_compat.install(cache_size=MAXSIZE)
                toggles["install"] += 1
                for name, stats in state["caches"].items():
                    if stats["currsize"] > stats["maxsize"]:
                        problems.append(f"status() showed {name} {stats}")
                for cache in list(every_cache):
                    stats = cache.stats()
                    toggles["samples"] += 1
                    if stats.currsize > stats.maxsize:
                        problems.append(f"stats() showed {stats}")
                time.sleep(0.0005)
                fi_compat.uninstall()
                toggles["uninstall"] += 1
                time.sleep(0.0002)
            except BaseException as exc:
                problems.append(f"installer thread: {exc!r}")
                return

    def start_churn(workers):
        thread = threading.Thread(target=churn, args=(workers,), daemon=True)
        thread.start()
        thread.join(timeout=180)
        assert not thread.is_alive(), "the installer thread hung"

    workers = run_workers(core, fi_device, CHURN_ITERATIONS, during=start_churn, until=enough)
    fi_compat.uninstall()
    assert not problems, problems[:5]
    assert toggles["install"] >= MIN_TOGGLES and toggles["uninstall"] >= MIN_TOGGLES, toggles

    # Exactly one launch per mla_decode call, each with the max_seq_len asked for.
    decode_calls = sum(w.decode_calls for w in workers)
    assert decode_calls >= THREADS * CHURN_ITERATIONS
    assert all(len(w.requested) == w.decode_calls for w in workers)
    assert len(recorded_launches) == decode_calls
    assert sorted(launch.max_seq_len for launch in recorded_launches) == sorted(n for w in workers for n in w.requested)

    # The bound held for every cache that ever existed.
    builder_caches = [c for c in every_cache if c.name == "builder"]
    assert len(builder_caches) >= 2  # several installations really happened
    assert_bounded(every_cache)

    # Direct calls: exact per cache; decode calls: at most one lookup each.
    direct: collections.Counter = collections.Counter()
    for worker in workers:
        direct.update(worker.through_cache)
    counted = {id(c): c.stats().hits + c.stats().misses for c in builder_caches}
    for cache_id, calls in direct.items():
        assert counted[cache_id] >= calls, (counted[cache_id], calls)
    from_decode = sum(counted.values()) - sum(direct.values())
    assert 0 <= from_decode <= decode_calls, (from_decode, decode_calls)
    assert sum(direct.values()) + sum(w.direct_uncached for w in workers) == decode_calls  # one of each per iteration


def decode_builder_lookups(builder_cache, config_cache, device) -> int:
    """How many builder lookups one TensorRT-LLM-style decode makes on this
    release: 1 up to 0.7.2.post1; 0 on 0.7.4, which skips the tuning-config
    builder for an explicit ``backend="trtllm-gen"`` outside tuning mode.
    Measured, then the stats are reset so the threaded count starts at zero."""
    before = builder_cache.stats()
    workload.trtllm_call(fi_compat.mla_decode, decode_inputs(device, batch=4, num_pages=256), 100)
    after = builder_cache.stats()
    lookups = (after.hits + after.misses) - (before.hits + before.misses)
    assert lookups in (0, 1), lookups
    for cache in (builder_cache, config_cache):
        if cache is not None:
            cache.clear()
            cache.hits = cache.misses = cache.evictions = 0
    return lookups


def test_threads_with_the_installation_held_steady_count_exactly(core, fi_device, every_cache, recorded_launches,
                                                                  fine_grained_switching):
    state = fi_compat.install(cache_size=MAXSIZE)
    assert state["state"] == "installed", state
    caches = installer.snapshot().installation.caches
    builder_cache, config_cache = caches["builder"], caches.get("tuning-config")
    builder_lookups_per_decode = decode_builder_lookups(builder_cache, config_cache, fi_device)
    recorded_launches.clear()  # the probe's launch is not one of the threads'

    def sample(workers):
        while any(w.is_alive() for w in workers):
            for stats in fi_compat.status()["caches"].values():
                assert stats["currsize"] <= stats["maxsize"]
            time.sleep(0.001)

    workers = run_workers(core, fi_device, STEADY_ITERATIONS, during=sample)
    calls = THREADS * STEADY_ITERATIONS
    assert all(set(w.caches.values()) == {builder_cache} for w in workers)
    stats = builder_cache.stats()
    assert stats.hits + stats.misses == calls + builder_lookups_per_decode * calls  # direct + through mla_decode
    # two threads missing on one key both count a miss; only one value is kept. Every
    # insertion is a miss or a hit that revives a config still held elsewhere (keep_identity).
    assert stats.misses > MAXSIZE and 0 < stats.evictions <= stats.misses + stats.hits - stats.currsize
    if config_cache is not None:
        inner = config_cache.stats()
        assert inner.hits + inner.misses == stats.misses  # one config lookup per builder miss
    assert len(recorded_launches) == calls
    assert_bounded(every_cache)
    fi_compat.uninstall()
