"""Driver for tests/matrix/test_install_races.py: install() racing imports of flashinfer's lazy modules.

    python tests/matrix/race_driver.py ROUNDS

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
rounds ran (the test asserts on the lines).  Not collected by pytest.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

IMPORTERS = 3
TIMEOUT_S = 120


def lazy_modules() -> list[str]:
    from fi_compat import bounds

    return sorted({b.spec.module for b in bounds.BOUNDS if b.spec.module.startswith("flashinfer.cute_dsl")})


def check(import_s: float, delay_s: float, decode: Any, inputs: Any) -> dict:
    import fi_compat
    from fi_compat.testing import workload
    from fi_compat import judgement, lookup
    from fi_compat.installer import snapshot

    modules = lazy_modules()
    barrier = threading.Barrier(IMPORTERS + 2)
    errors: list[str] = []
    deadlocks: list[str] = []  # imports Python's own lock refused for a cycle, then imported again

    def importer(offset: int) -> None:
        barrier.wait()
        time.sleep(offset * import_s / (4 * IMPORTERS))  # staggered, in one order: threads importing a
        # package's modules in different orders can deadlock in Python's own import locks (seen here as
        # _DeadlockError, fi_compat or not), which is not the race this checks
        for name in modules:
            for attempt in (1, 2):
                try:
                    importlib.import_module(name)
                except ImportError:
                    pass  # a module this release does not have (its row is not-in-release)
                except Exception as exc:  # noqa: BLE001
                    # the decoder thread's imports run in flashinfer's order, not this one: Python's
                    # import locks can still refuse a cycle between the two (1 round in 50 on 0.6.18);
                    # the import is then failed and undone, and imports again once the other is done
                    if type(exc).__name__ == "_DeadlockError" and attempt == 1:
                        deadlocks.append(name)
                        time.sleep(import_s)
                        continue
                    errors.append(traceback.format_exc())
                break

    def installer() -> None:
        barrier.wait()
        time.sleep(delay_s)
        fi_compat.install()

    def decoder() -> None:  # vLLM's cute-dsl call: flashinfer imports the monolithic kernel module itself
        barrier.wait()
        try:
            for length in (4096, 9000, 20000):
                workload.vllm_call(decode, inputs, length, backend="cute-dsl")
        except Exception:  # noqa: BLE001
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=importer, args=(i,)) for i in range(IMPORTERS)]
    threads += [threading.Thread(target=installer), threading.Thread(target=decoder)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    deadline = time.monotonic() + 10  # a waiter thread may still be finishing an import in flight
    while snapshot().waiting and time.monotonic() < deadline:
        time.sleep(0.01)
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
        "threads_alive": sum(t.is_alive() for t in threads),
    }


def main() -> None:
    rounds = int(sys.argv[1])
    from fi_compat.testing import cpu_host

    with cpu_host():
        import torch
        import flashinfer.mla
        from fi_compat import specs
        from fi_compat.testing import workload

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
            delay_s = import_s * 1.2 * round_index / max(rounds - 1, 1)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                try:
                    result = check(import_s, delay_s, decode, inputs)
                except Exception:  # noqa: BLE001
                    result = {"delay_s": delay_s, "crash": traceback.format_exc()}
                with os.fdopen(write, "w") as out:
                    out.write(json.dumps(result))
                os._exit(0)
            os.close(write)
            with os.fdopen(read) as source:
                text = source.read()
            os.waitpid(pid, 0)
            print(text or json.dumps({"delay_s": delay_s, "crash": "no result"}), flush=True)


if __name__ == "__main__":
    main()
