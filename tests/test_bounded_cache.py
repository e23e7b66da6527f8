"""BoundedCache: lock-free hits, LRU order, one object per key, exact counters under threads."""

from __future__ import annotations

import random
import threading
import time

import pytest

from fi_compat.memo.cache import MISSING, BoundedCache

THREADS = 12


class Value:
    """A fresh object per compute (weak-referenceable, for keep_identity)."""

    def __init__(self, key: object) -> None:
        self.key = key


def compute(key: object) -> Value:
    # releases the GIL, like flashinfer building a config: other threads miss
    # the same key meanwhile, the race the cache must resolve to one object
    time.sleep(0.0002)
    return Value(key)


def test_evicts_the_least_recently_used_key():
    cache = BoundedCache("t", 3)
    for key in "abc":
        cache.get_or_compute(key, compute, key)
    assert cache.lookup("a") is not MISSING  # a is now the most recent
    cache.get_or_compute("d", compute, "d")
    assert cache.keys_by_recency() == ["c", "a", "d"]  # b was the least recently used
    assert cache.lookup("b") is MISSING


def test_recency_follows_the_latest_hit_not_the_first():
    cache = BoundedCache("t", 3)
    for key in "abc":
        cache.get_or_compute(key, compute, key)
    for key in "abca":  # a, b, c, then a again: b is now the least recent
        cache.lookup(key)
    cache.get_or_compute("d", compute, "d")
    assert cache.keys_by_recency() == ["c", "a", "d"]


def test_hits_take_no_lock():
    cache = BoundedCache("t", 4)
    first = cache.get_or_compute("k", compute, "k")
    seen = []
    with cache._lock:  # a miss elsewhere holding the lock
        reader = threading.Thread(target=lambda: seen.append(cache.lookup("k")))
        reader.start()
        reader.join(timeout=5)
        assert not reader.is_alive(), "a hit waited for the lock"
    assert seen == [first]


def test_hit_counter_can_be_reset():
    cache = BoundedCache("t", 4)
    cache.get_or_compute("k", compute, "k")
    cache.lookup("k")
    assert (cache.hits, cache.misses) == (1, 1)
    cache.hits = 0
    cache.lookup("k")
    assert cache.stats().hits == 1


@pytest.mark.parametrize("keep_identity", [False, True])
def test_threads_get_one_object_per_key_within_the_bound_and_exact_counts(keep_identity, fine_grained_switching):
    maxsize = 8
    keys = range(24)  # three times the bound: constant eviction
    cache = BoundedCache("t", maxsize, keep_identity=keep_identity)
    keep_alive: list[Value] = []  # what flashinfer's identity-keyed caches would hold
    gate = threading.Barrier(THREADS + 1)
    calls_per_thread = 150
    results: list[list[tuple[int, Value]]] = [[] for _ in range(THREADS)]
    problems: list[str] = []
    done = threading.Event()

    def worker(index: int) -> None:
        rng = random.Random(index)
        gate.wait()
        for _ in range(calls_per_thread):
            key = rng.choice(keys)
            value = cache.get_or_compute(key, compute, key)
            assert value.key == key
            results[index].append((key, value))
            if keep_identity:
                keep_alive.append(value)

    def sampler() -> None:
        while not done.is_set():
            if len(cache) > maxsize:
                problems.append(f"len {len(cache)}")
            stats = cache.stats()
            if stats.currsize > stats.maxsize:
                problems.append(f"stats {stats}")

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    watcher = threading.Thread(target=sampler, daemon=True)
    for thread in threads:
        thread.start()
    watcher.start()
    gate.wait()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a worker hung"
    done.set()
    watcher.join(timeout=10)

    assert not problems, problems[:5]
    stats = cache.stats()
    total = THREADS * calls_per_thread
    assert stats.hits + stats.misses == total, stats
    assert stats.misses >= len(keys)  # every key missed at least once
    assert stats.evictions >= len(keys) - maxsize
    assert stats.currsize <= maxsize
    objects_per_key: dict[int, set[int]] = {}
    for per_thread in results:
        for key, value in per_thread:
            objects_per_key.setdefault(key, set()).add(id(value))
    if keep_identity:
        # values kept alive are handed out again after eviction: one object per key, ever
        assert all(len(ids) == 1 for ids in objects_per_key.values()), objects_per_key
    else:
        # a key is recomputed only after it was evicted: never more objects than misses
        assert sum(len(ids) for ids in objects_per_key.values()) <= stats.misses


def test_a_key_present_while_threads_contend_is_one_object(fine_grained_switching):
    cache = BoundedCache("t", 4)
    gate = threading.Barrier(THREADS)
    got: list[Value] = []

    def worker() -> None:
        gate.wait()
        for _ in range(50):
            got.append(cache.get_or_compute("shared", compute, "shared"))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len({id(v) for v in got}) == 1
    stats = cache.stats()
    assert stats.hits + stats.misses == THREADS * 50
    assert 1 <= stats.misses <= THREADS  # at most one concurrent first miss per thread


def test_identities_stay_bounded_when_the_caller_keeps_every_value_alive():
    """keep_identity remembers at most IDENTITY_SCALE x maxsize evicted values,
    however many the caller holds; within that window an evicted key still
    returns its object, past it the key builds a new one."""
    from fi_compat.memo.cache import IDENTITY_SCALE

    cache = BoundedCache("t", 4, keep_identity=True)
    held = [cache.get_or_compute(key, Value, key) for key in range(1_000)]
    assert len(cache._identities) == IDENTITY_SCALE * 4
    oldest_remembered = 1_000 - IDENTITY_SCALE * 4
    assert cache.get_or_compute(oldest_remembered, Value, oldest_remembered) is held[oldest_remembered]
    assert cache.get_or_compute(0, Value, 0) is not held[0]
    assert len(cache._identities) <= IDENTITY_SCALE * 4 and len(cache) <= 4


def test_footprint_counts_what_two_caches_share_once():
    """The builder memo and the tuning-config memo hold the same config objects:
    their footprint together is one copy of those, not two."""
    from fi_compat.memo.cache import approximate_size, footprint

    shared = [list(range(100)) for _ in range(20)]
    builder, configs = BoundedCache("builder", 64), BoundedCache("tuning-config", 64)
    for number, value in enumerate(shared):
        builder.get_or_compute(("b", number), lambda *a, value=value: value)
        configs.get_or_compute(("c", number), lambda *a, value=value: value)
    alone = footprint([builder]), footprint([configs])
    together = footprint([builder, configs])
    # what the two hold in common (the values) is counted once: the difference is one copy of them
    assert max(alone) < together and sum(alone) - together >= 0.95 * approximate_size(shared), (alone, together)
