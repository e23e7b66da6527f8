"""The runtime watch's setting and its pure parts (its verdicts on real releases: tests/matrix/test_watch.py)."""

from __future__ import annotations

import functools
import gc

import pytest

from fi_compat import config, watch
from fi_compat.watch.records import functools_keys, parameter_names, varying_positions


def test_the_setting_defaults_to_auto_and_refuses_unknown_modes():
    assert config.resolve("watch", environ={}).value == "auto"
    assert config.resolve("watch", environ={"FI_COMPAT_WATCH": " WARN "}).value == "warn"
    with pytest.raises(ValueError, match="FI_COMPAT_WATCH='sometimes' is not a watch mode; accepted: auto, bound, warn, off"):
        config.resolve("watch", environ={"FI_COMPAT_WATCH": "sometimes"})


def test_off_registers_nothing():
    before = list(gc.callbacks)
    assert watch.start("off", strict=False, cache_size=256) is None
    assert gc.callbacks == before and watch.current() is None


def test_started_and_stopped_it_leaves_no_callback():
    before = list(gc.callbacks)
    try:
        assert watch.start("warn", strict=False, cache_size=256) is not None
        assert len(gc.callbacks) == len(before) + 1
    finally:
        assert watch.stop() == []
    assert gc.callbacks == before and watch.current() is None


@pytest.mark.parametrize(
    ("keys", "names", "expected"),
    [
        ([(4, 100), (4, 200), (4, 300)], ("batch", "max_seq_len"), "1 (max_seq_len)"),
        ([(1, 100), (2, 200)], (), "0, 1"),
        ([100, 200], ("max_seq_len",), "the whole key (max_seq_len)"),
        ([(4, 100), (4, 100, "x")], ("a", "b"), "keyword arguments or key length"),
        ([], (), "unknown"),
    ],
)
def test_varying_positions_names_the_key_positions_that_change(keys, names, expected):
    assert varying_positions(keys, names) == expected


def test_the_keys_of_a_functools_cache_are_read_without_calling_it():
    @functools.cache
    def memo(batch, max_seq_len):
        return batch * max_seq_len

    for length in (10, 20, 30):
        memo(4, length)
    keys = functools_keys(memo)
    assert sorted(keys) == [(4, 10), (4, 20), (4, 30)]
    assert varying_positions(keys, parameter_names(memo)) == "1 (max_seq_len)"



def test_a_collection_at_interpreter_exit_takes_a_step_without_a_frame(tmp_path):
    """Seen on an H100: the collection at interpreter exit calls the callback with
    no Python frame above it, and ``sys._getframe(1)`` raised ValueError ("Exception
    ignored in: <function _on_collection>") in every process that had the watch on."""
    import subprocess
    import sys

    program = """
import gc, sys
from fi_compat import watch

class Due:
    collected_s = collection_started = 0.0
    def clock(self):
        return 1.0
    def due(self, now):
        return True

watch._active = Due()
watch._step = lambda active, frame: sys.stdout.write("step\\n")
gc.callbacks.append(watch._on_collection)
gc.collect()
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "call stack is not deep enough" not in done.stderr
    assert done.stdout.count("step") >= 1


def test_a_step_never_runs_inside_another_and_never_waits():
    """A collection during a step (or a decode tick, or a second thread) finds the step running:
    it is skipped at once (a nested step re-entered the bounding scan's generator: "generator
    already executing" stopped the watch)."""
    import threading

    entered: list[str] = []
    started = watch.start("warn", strict=False, cache_size=256)
    assert started is not None
    try:
        def step(frame):
            entered.append("step")
            watch._step(started, None)  # nested, in the same thread: skipped
            other = threading.Thread(target=watch._step, args=(started, None))
            other.start()
            other.join(5)  # another thread: skipped too, without waiting for this step
            assert not other.is_alive()

        started.step = step
        watch._step(started, None)
        assert entered == ["step"] and started.failed is None
        watch._step(started, None)  # the lock was released: the next step runs
        assert entered == ["step", "step"]
    finally:
        watch.stop()
