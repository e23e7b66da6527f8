"""Many race drivers side by side, under CPU contention: the "never hang" stress run (issue #40).

    python tests/matrix/race_stress.py --rounds 1000 --processes 2 --burn 1 [--json OUT]

Starts ``--processes`` copies of ``race_driver.py`` (the rounds split between
them, each sweeping the installer's start from its own phase) and ``--burn``
CPU-bound processes beside them, reads every round's line, and judges each
round (:func:`bad_rounds`): a round that hung (its watchdog wrote every
thread's stack and ended it), crashed, exited non-zero, left a row judged
from a half-imported module, a row waiting, an error, or a thread of
fi_compat's is bad.  Prints a summary (and with ``--json`` writes it, the bad
rounds' stacks included); exit status 0 when every round ran and none is bad.
The nox session ``races`` runs it on a release; tests/matrix/test_install_races.py
runs a smaller one in the test suite.  Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def bad_rounds(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rounds that hung, crashed or ended with a row not judged from its live module."""
    bad = []
    for result in rounds:
        if "crash" in result or result.get("exit") != 0:
            bad.append({key: result.get(key) for key in ("round", "delay_s", "crash", "exit", "signal", "stacks")})
            continue
        wrong = {
            name: row
            for name, row in result["rows"].items()
            if row["held"] != row["live"]
            or row["held_where"] != row["live_where"]
            or (row["live"] == "bound" and not row["patched"])
        }
        if wrong or result["waiting"] or result["errors"] or result["fi_compat_threads"]:
            bad.append(
                {
                    "round": result.get("round"),
                    "delay_s": result["delay_s"],
                    "wrong": wrong,
                    "waiting": result["waiting"],
                    "errors": result["errors"],
                    "fi_compat_threads": result["fi_compat_threads"],
                }
            )
    return bad


def _burn(stop_at: float) -> None:  # pragma: no cover - a child process
    x = 0
    while time.monotonic() < stop_at:
        x = (x * 1103515245 + 12345) % 2**31


def run(rounds: int, processes: int, burn: int, watchdog: float, env: dict[str, str]) -> dict[str, Any]:
    started = time.monotonic()
    burners = [multiprocessing.Process(target=_burn, args=(started + 24 * 3600,), daemon=True) for _ in range(burn)]
    for burner in burners:
        burner.start()
    shares = [rounds // processes + (1 if i < rounds % processes else 0) for i in range(processes)]
    drivers = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, "race_driver.py"), str(share), "--watchdog", str(watchdog),
             "--phase", str(i / processes)],  # fmt: skip
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i, share in enumerate(shares)
        if share
    ]
    results: list[dict[str, Any]] = []
    driver_status = []
    for driver in drivers:
        out, err = driver.communicate()
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        driver_status.append({"exit": driver.returncode, "stderr_tail": err[-2000:] if driver.returncode else ""})
    for burner in burners:
        burner.terminate()
        burner.join()
    bad = bad_rounds(results)
    seconds = sorted(r.get("round_s", 0.0) for r in results)
    return {
        "rounds_asked": rounds,
        "rounds_run": len(results),
        "processes": processes,
        "burners": burn,
        "watchdog_s": watchdog,
        "wall_s": round(time.monotonic() - started, 1),
        "drivers": driver_status,
        "hung": sum(1 for r in results if r.get("exit") == 1 and "stacks" in r),
        "killed": sum(1 for r in results if r.get("signal")),
        "bad": bad,
        "python_import_deadlocks_retried": sum(len(r.get("import_deadlocks", [])) for r in results),
        "round_s_median": round(statistics.median(seconds), 2) if seconds else None,
        "round_s_max": round(seconds[-1], 2) if seconds else None,
    }


def environment() -> dict[str, str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(HERE)), HERE, *sys.path]),
    }
    for variable in [v for v in env if v.startswith("FI_COMPAT_")]:
        del env[variable]
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--burn", type=int, default=1, help="CPU-bound processes beside the drivers")
    parser.add_argument("--watchdog", type=float, default=60.0, help="seconds a round may take before it counts as hung")
    parser.add_argument("--json", help="write the summary here")
    options = parser.parse_args()
    summary = run(options.rounds, options.processes, options.burn, options.watchdog, environment())
    if options.json:
        with open(options.json, "w") as handle:
            json.dump(summary, handle, indent=1)
    shown = {k: v for k, v in summary.items() if k != "bad"}
    print(json.dumps(shown, indent=1))
    for result in summary["bad"][:5]:
        print(json.dumps(result, indent=1)[:6000])
    ok = summary["rounds_run"] == options.rounds and not summary["bad"] and all(d["exit"] == 0 for d in summary["drivers"])
    print(f"race stress: {summary['rounds_run']} of {options.rounds} rounds, {len(summary['bad'])} bad, "
          f"{summary['hung']} hung, {summary['wall_s']} s")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
