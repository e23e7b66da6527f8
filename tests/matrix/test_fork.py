"""A process forked after install() has a working bounded cache and usable
locks, even when another thread held them at the moment of the fork.

A lock held by another thread at fork time stays held forever in the child
(the holder does not exist there); fi_compat renews its locks with
``os.register_at_fork``.  The child reports through a pipe and is killed by
``SIGALRM`` if it deadlocks, so a regression fails instead of hanging.

The child never touches CUDA: CUDA cannot be used in a child forked after the
parent initialised it (torch raises "Cannot re-initialize CUDA in forked
subprocess"), and on the GPU matrix the parent has.  So the child works on CPU
tensors under fi_compat's CPU shim, the same host path the CPU matrix runs;
what is under test is fi_compat's own state after the fork (docs/design.md).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import threading
import traceback

import pytest

import fi_compat
from fi_compat.calls import call_api as decode
from fi_compat.installing import installer
from fi_compat.workload import cpu_host, workload

from helpers.support import build_meta_config

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]
CHILD_TIMEOUT_S = 15


@pytest.fixture
def core(fi_cpu_host):
    import flashinfer.mla._core as core

    return core


def build(core, max_seq_len):
    return build_meta_config(core, max_seq_len, width=64)


def child_checks(core, host) -> dict:
    """Everything the child must be able to do; returns what it saw.
    ``host`` is the child's own CPU shim (its launches are recorded there)."""
    seen = {}
    # the bounded cache: misses, hits, the bound and one object per key
    first = build(core, 100)
    assert build(core, 100) is first
    for length in range(16, 2048, 16):
        build(core, length)
    seen["caches"] = fi_compat.status()["caches"]  # takes the installer lock and each cache's lock
    for stats in seen["caches"].values():
        assert stats["currsize"] <= stats["maxsize"] and stats["maxsize"] % 8 == 0, stats  # rows of 16x
    assert seen["caches"]["builder"]["hits"] >= 1
    # the installer lock: a full cycle, then mla_decode (its mapping lock) on the new installation
    seen["uninstall"] = fi_compat.uninstall()["state"]
    seen["install"] = fi_compat.install(cache_size=8)["state"]
    tensors = workload.make_inputs(torch, "trtllm", batch=1, width=64, page_size=32, num_pages=64,
                                   workspace_bytes=1 << 20)
    tensors.counter_buffer = None  # the call API refuses one below 0.6.15; the locks are what is tested
    host.recorder.clear()
    workload.trtllm_call(fi_compat.mla_decode, tensors, 777)
    seen["launch_max_seq_len"] = host.launches[-1].max_seq_len
    seen["final"] = fi_compat.status()["caches"]
    return seen


def run_in_fork(core, hold_locks) -> dict:
    """Fork while a thread holds ``hold_locks``; run :func:`child_checks` in the child."""
    holding, release = threading.Event(), threading.Event()

    def holder():
        for lock in hold_locks:
            lock.acquire()
        holding.set()
        release.wait(CHILD_TIMEOUT_S * 2)
        for lock in reversed(hold_locks):
            lock.release()

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    assert holding.wait(10)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read_end)
        code = 1
        try:
            signal.alarm(CHILD_TIMEOUT_S)
            faulthandler.dump_traceback_later(CHILD_TIMEOUT_S - 2, exit=False)  # where it hung, if it does
            # torch's CPU thread pool (GNU OpenMP) is not fork-safe once the parent
            # used it: keep the child's tensor work on the calling thread.  That is
            # torch's limitation, not the fi_compat behaviour under test.
            torch.set_num_threads(1)
            # torch.device("cpu"): the default device is inherited from the
            # forking thread ("cuda" on the GPU matrix); cpu_host(): flashinfer
            # asks torch.cuda for device properties on the decode path.
            with torch.device("cpu"), cpu_host() as child_host:
                report = {"ok": True, "seen": child_checks(core, child_host)}
            code = 0
        except BaseException:
            report = {"ok": False, "error": traceback.format_exc()}
        try:
            os.write(write_end, json.dumps(report, default=str).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    release.set()
    thread.join(10)
    chunks = []
    while True:
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail(f"forked child killed by signal {os.WTERMSIG(status)} "
                    f"(SIGALRM={int(signal.SIGALRM)}: deadlocked on a lock held at fork time)")
    report = json.loads(b"".join(chunks) or b'{"ok": false, "error": "no report"}')
    assert report["ok"], report["error"]
    assert os.WEXITSTATUS(status) == 0
    return report["seen"]


def installed_locks():
    caches = list(installer.snapshot().installation.caches.values())
    return [installer._lock] + [cache._lock for cache in caches]


def test_fork_after_install_with_no_lock_held(core):
    fi_compat.install(cache_size=8)
    seen = run_in_fork(core, [])
    assert seen["uninstall"] == "not-installed" and seen["install"] == "installed"
    assert seen["launch_max_seq_len"] == 777
    # the parent's cache is unaffected by the child's work
    assert fi_compat.status()["caches"]["builder"]["misses"] == 0


def test_fork_while_another_thread_holds_the_installer_and_cache_locks(core):
    fi_compat.install(cache_size=8)
    seen = run_in_fork(core, installed_locks())
    assert seen["install"] == "installed" and seen["launch_max_seq_len"] == 777
    # and the parent, once the holder let go, still works
    build(core, 100)
    assert fi_compat.status()["caches"]["builder"]["misses"] == 1


def test_fork_while_another_thread_holds_the_call_api_lock(core):
    """``mla_decode`` builds its per-installation mapping under a lock of its own."""
    fi_compat.install(cache_size=8)
    seen = run_in_fork(core, installed_locks() + [decode._lock])
    assert seen["launch_max_seq_len"] == 777
