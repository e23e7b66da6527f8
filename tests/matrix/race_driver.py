"""Driver for tests/matrix/test_install_races.py: install() racing imports of flashinfer's lazy modules.

    python tests/matrix/race_driver.py ROUNDS [--watchdog S] [--phase F]

The root process imports torch, the cute-dsl toolkit (``cutlass``) and
``flashinfer.mla`` under the CPU shim, but none of flashinfer's lazily imported
cute-dsl modules.  Each round runs in a fork of it (a lazy import cannot be
undone): ``IMPORTERS`` threads import those modules while another thread calls
``fi_compat.install()`` and one more makes vLLM's cute-dsl decode calls (which
import the monolithic kernel module through flashinfer's own code).  The installer thread starts after a delay that sweeps,
round by round, from before the first import to after the last one, so every
interleaving of "judge", "register the hook" and "module body runs" is met.

After the threads finish, the round checks that every row ended judged from
its live module: nothing waits, and each row's verdict (and where it was
found) is the verdict a fresh live judgement gives now; every row judged
``bound`` is patched.  One JSON line per round on stdout; exit 0 if all
rounds ran (the test asserts on the lines).  Each round has a hard watchdog
that writes every thread's stack (faulthandler) into the round's line when
it stops making progress; every round's exit status and signal are kept.
Not collected by pytest; ``race_stress.py`` runs several side by side.
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import importlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

IMPORTERS = 3
# A round takes 1-3 s on a shared core; one that has not finished in this
# long has stopped making progress (the hang of issue #40 never ended).
WATCHDOG_S = 60.0


def lazy_modules() -> list[str]:
    from fi_compat.verdict import bounds

    return sorted({b.spec.module for b in bounds.BOUNDS if b.spec.module.startswith("flashinfer.cute_dsl")})


def check(import_s: float, delay_s: float, decode: Any, inputs: Any) -> dict:
    import fi_compat
    from fi_compat.workload import workload
    from fi_compat.verdict import judgement
    from fi_compat import lookup
    from fi_compat.model import specs
    from fi_compat.installing.installer import snapshot

    modules = lazy_modules()
    barrier = threading.Barrier(IMPORTERS + 2)
    errors: list[str] = []
    deadlocks: list[str] = []  # imports Python's own lock refused for a cycle, then imported again

    def once_more_after_a_cycle(call: Any, what: str) -> None:
        """``call``, and once more if Python's import locks refused it as a cycle: the importers
        below import in one order, flashinfer's own imports (in the decoder's calls) in another,
        and the locks can refuse a cycle between the two on either side (1 round in 50 on 0.6.18,
        1 in 60 on 0.7.4, fi_compat or not); the import is then failed and undone, and succeeds
        once the other is done.  That cycle is the test's import order, not the race it checks."""
        for attempt in (1, 2):
            try:
                call()
            except Exception as exc:  # noqa: BLE001
                if type(exc).__name__ == "_DeadlockError" and attempt == 1:
                    deadlocks.append(what)
                    time.sleep(import_s)
                    continue
                raise
            return

    def importer(offset: int) -> None:
        barrier.wait()
        time.sleep(offset * import_s / (4 * IMPORTERS))  # staggered, in one order: threads importing a
        # package's modules in different orders can deadlock in Python's own import locks (seen here as
        # _DeadlockError, fi_compat or not), which is not the race this checks
        for name in modules:
            try:
                once_more_after_a_cycle(functools.partial(importlib.import_module, name), name)
            except ImportError:
                pass  # a module this release does not have (its row is not-in-release)
            except Exception:  # noqa: BLE001
                errors.append(traceback.format_exc())

    def installer() -> None:
        barrier.wait()
        if os.environ.get("FI_COMPAT_RACE_HANG"):  # the watchdog's own test: a round that never ends
            threading.Event().wait()
        time.sleep(delay_s)
        try:
            fi_compat.install()
        except Exception:  # noqa: BLE001  (a thread's exception would reach only stderr)
            errors.append(traceback.format_exc())

    def decoder() -> None:  # vLLM's cute-dsl call: flashinfer imports the monolithic kernel module itself
        barrier.wait()
        for length in (4096, 9000, 20000):
            try:
                call = functools.partial(workload.vllm_call, decode, inputs, length, backend="cute-dsl")
                once_more_after_a_cycle(call, f"decode {length}")
            except Exception:  # noqa: BLE001
                errors.append(traceback.format_exc())

    threads = [threading.Thread(target=importer, args=(i,)) for i in range(IMPORTERS)]
    threads += [threading.Thread(target=installer), threading.Thread(target=decoder)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # the round's watchdog (main) ends a round that hangs, with every thread's stack
    # Every import has ended.  A row's hook fired as its import ended, in the
    # importing thread; one caught in the microseconds before its module entered
    # sys.modules reports at the next decode call at the latest (the installer's
    # late-import tick, or the runtime watch's where it runs).  So: one decode call,
    # as a server's next batch, through the name engines call (the tick stands
    # there), then nothing else of fi_compat's before the snapshot.
    public = getattr(sys.modules["flashinfer.mla"], specs.DECODE.name)
    workload.vllm_call(public, inputs, 30000, backend="cute-dsl")
    snap = snapshot()
    version = None if snap.release is None else snap.release.version
    fresh = judgement.judge_release(lookup.runtime_lookup(version), version)  # the default cache size: install() above
    state = fi_compat.status()
    patched = {row["name"]: row["patched"] for row in state["bounds"]}
    rows = {}
    for verdict in fresh.rows:
        held = snap.verdicts.get(verdict.bound.name)
        rows[verdict.bound.name] = {
            "held": None if held is None else held.kind,
            "live": verdict.kind,
            "held_where": None if held is None or held.found is None else held.found.where,
            "live_where": None if verdict.found is None else verdict.found.where,
            "patched": bool(patched.get(verdict.bound.name)),
        }
    return {
        "delay_s": delay_s,
        "import_s": import_s,
        "state": state["state"],
        "waiting": dict(snap.waiting),
        "rows": rows,
        "errors": errors,
        "import_deadlocks": deadlocks,
        "fi_compat_threads": sorted(t.name for t in threading.enumerate() if t.name.startswith("fi_compat")),
    }


def run_round(round_index: int, delay_s: float, import_s: float, decode: Any, inputs: Any, watchdog_s: float) -> dict:
    """One round in a fork, under a hard watchdog: past ``watchdog_s`` the
    child's faulthandler writes every thread's stack and ends it (status 1),
    and past twice that the parent kills it (SIGKILL).  The child's exit
    status or signal is always part of the result."""
    read, write = os.pipe()
    stacks = tempfile.TemporaryFile()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        faulthandler.dump_traceback_later(watchdog_s, exit=True, file=stacks)
        try:
            result = check(import_s, delay_s, decode, inputs)
        except Exception:  # noqa: BLE001
            result = {"crash": traceback.format_exc()}
        faulthandler.cancel_dump_traceback_later()
        result.update(round=round_index, delay_s=delay_s)
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(result))
        os._exit(0)
    os.close(write)
    os.set_blocking(read, False)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 2 * watchdog_s
    status = None
    while status is None:
        try:
            chunk = os.read(read, 1 << 16)
            if chunk:
                chunks.append(chunk)
        except BlockingIOError:
            pass
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
        else:
            time.sleep(0.01)
    try:
        while True:
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except BlockingIOError:
        pass
    os.close(read)
    text = b"".join(chunks).decode(errors="replace")
    result = json.loads(text) if text.startswith("{") else {"round": round_index, "delay_s": delay_s, "crash": "no result"}
    result["round_s"] = round(time.monotonic() - started, 3)
    code = os.waitstatus_to_exitcode(status)
    result["exit"] = code if code >= 0 else None
    result["signal"] = signal.Signals(-code).name if code < 0 else None
    if code != 0:
        stacks.seek(0)
        result["stacks"] = stacks.read().decode(errors="replace")[-20000:]
        result.setdefault("crash", f"exit status {code}" if code > 0 else f"killed by {result['signal']}")
    stacks.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("--watchdog", type=float, default=WATCHDOG_S,
                        help="seconds a round may take (default %(default)s)")
    parser.add_argument("--phase", type=float, default=0.0,
                        help="shift of the delay sweep, 0-1: drivers side by side meet other interleavings")
    options = parser.parse_args()
    rounds = options.rounds
    from fi_compat.workload import cpu_host

    with cpu_host():
        import torch
        import flashinfer.mla
        from fi_compat.model import specs
        from fi_compat.workload import workload

        decode = getattr(flashinfer.mla, specs.DECODE.name)
        inputs = workload.make_inputs(torch, "vllm", page_size=64, width=512)

        try:
            import cutlass.cute  # noqa: F401  (the toolkit the lazy modules import: each round imports only flashinfer's)
        except ImportError:
            pass
        # how long the lazy imports take, measured in a throwaway fork
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            start = time.perf_counter()
            for name in lazy_modules():
                try:
                    importlib.import_module(name)
                except ImportError:
                    pass
            os.write(write, f"{time.perf_counter() - start}".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        import_s = float(os.read(read, 64).decode())
        for round_index in range(rounds):
            fraction = round_index / max(rounds - 1, 1)
            if options.phase:
                fraction = (fraction + options.phase) % 1.0
            delay_s = import_s * 1.2 * fraction
            result = run_round(round_index, delay_s, import_s, decode, inputs, options.watchdog)
            result["import_s"] = result.get("import_s", import_s)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
