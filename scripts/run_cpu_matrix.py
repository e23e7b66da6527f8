#!/usr/bin/env python3
"""Run every ``matrix(flashinfer=...)`` nox session, ``--jobs`` at a time, and time it.

nox runs sessions one after another; the releases are independent (own venv,
own result file), so this runs the first session alone (it builds the shared
base environment, ``.nox/_matrix_base``), then splits the rest over ``--jobs``
nox processes that reuse it.  Logs go to ``.nox/matrix-logs/``; the summary
gives each session's outcome and the whole matrix's wall time.

    python3 scripts/run_cpu_matrix.py --jobs 2            # what .ci/run does
    python3 scripts/run_cpu_matrix.py --jobs 2 -- -x      # posargs for every session
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def matrix_sessions() -> list[str]:
    listing = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-s", "matrix"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    return [s["session"] for s in json.loads(listing) if s["name"] == "matrix"]


def nox(sessions: list[str], posargs: list[str], log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "nox", "-s", *sessions]
    if posargs:
        cmd += ["--", *posargs]
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(cmd, cwd=ROOT, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def outcomes(log: Path) -> list[str]:
    return [line.split("nox > ", 1)[1].strip() for line in log.read_text().splitlines()
            if line.startswith("nox > Session ") and ("was successful" in line or "failed" in line
                                                       or "skipped" in line)]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    posargs: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, posargs = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)

    sessions = matrix_sessions()
    logs = ROOT / ".nox" / "matrix-logs"
    start = time.time()
    first = nox(sessions[:1], posargs, logs / "0.log")
    first.wait()
    base_built = time.time() - start
    groups = [sessions[1 + i::max(1, args.jobs)] for i in range(max(1, args.jobs))]
    procs = [(nox(g, posargs, logs / f"{i + 1}.log"), logs / f"{i + 1}.log") for i, g in enumerate(groups) if g]
    for proc, _ in procs:
        proc.wait()
    elapsed = time.time() - start
    results = outcomes(logs / "0.log") + [o for _, log in procs for o in outcomes(log)]
    print("\n".join(results))
    ok = first.returncode == 0 and all(p.returncode == 0 for p, _ in procs)
    print(f"matrix: {len(sessions)} sessions, {args.jobs} at a time: {elapsed / 60:.1f} min wall "
          f"(first session, incl. the shared base: {base_built / 60:.1f} min); "
          f"{'all passed' if ok else 'FAILURES (logs in .nox/matrix-logs/)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
