#!/usr/bin/env python3
"""Run ``matrix(flashinfer=...)`` nox sessions, ``--jobs`` at a time, and time them.

nox runs sessions one after another; the releases are independent (own thin
venv, own result file), so this keeps ``--jobs`` nox processes busy, one
session each, longest first (by the ``seconds`` its last result recorded).
The shared base environment (``.nox/_matrix_base``) is built by whichever
session needs it first while the others wait for it (a file lock).  Logs go to
``.nox/matrix-logs/<release>.log``; the summary gives each session's outcome
and time and the run's wall time.  A run of every matrix release also writes
``RESULTS/matrix-run.json`` (wall time, jobs, machine), which
``scripts/generate_compatibility.py`` shows.

    python3 scripts/run_cpu_matrix.py --jobs 2                  # all 18 -> docs/compat-results/cpu
    python3 scripts/run_cpu_matrix.py --ci --jobs 1 --results .nox/ci-results/cpu   # what .ci/run does
    python3 scripts/run_cpu_matrix.py --releases 0.6.16 0.7.0   # some of them
    python3 scripts/run_cpu_matrix.py --jobs 2 -- -x            # posargs for pytest in every session
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import queue
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from _matrix_common import MATRIX_RUN_FILE, RESULTS, ROOT, read_results, release_list

#: The noxfile's matrix sessions write their result here (default RESULTS/cpu).
RESULTS_ENV = "FI_COMPAT_MATRIX_RESULTS"


def session_name(release: str) -> str:
    return f"matrix(flashinfer='{release}')"


def longest_first(releases: list[str], results_dir: Path) -> list[str]:
    """Longest previous run first (unknown ones first of all), so the last
    session to start is a short one and the workers finish together.  The
    times come from ``results_dir``, else from the committed results (a fresh
    CI clone writes elsewhere)."""
    previous: dict = {}
    for folder in (RESULTS / "cpu", results_dir):
        try:
            previous.update(read_results(folder))
        except ValueError:  # an unreadable file: order without it
            pass

    def recorded(release: str) -> float:
        seconds = previous.get(release, {}).get("seconds") or {}
        return sum(seconds.values()) if seconds else float("inf")

    return sorted(releases, key=recorded, reverse=True)


def run_session(release: str, posargs: list[str], results_dir: Path, logs: Path) -> tuple[int, float]:
    cmd = [sys.executable, "-m", "nox", "-s", session_name(release)]
    if posargs:
        cmd += ["--", *posargs]
    env = dict(os.environ, **{RESULTS_ENV: str(results_dir)})
    started = time.time()
    with open(logs / f"{release}.log", "w") as log:
        status = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    return status, time.time() - started


def failure_summary(log: Path, limit: int = 40, tail: int = 12) -> str:
    """What CI needs to see of a failed session, indented: pytest's short test
    summary (the failed tests and their messages) and the log's last lines
    (the growth measurement's errors and run_release_suite's verdict, or
    whatever stopped the session before pytest ran)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"    (no log: {exc})"
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), None)
    chosen = set(range(max(len(lines) - tail, 0), len(lines)))
    if start is not None:
        chosen |= set(range(start, min(start + limit, len(lines))))
    shown, previous = [], None
    for index in sorted(chosen):
        if previous is not None and index != previous + 1:
            shown.append("...")
        shown.append(lines[index])
        previous = index
    return "\n".join(f"    {line}" for line in shown)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    posargs: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, posargs = argv[:i], argv[i + 1:]
    releases_module = release_list()
    matrix = tuple(releases_module.MATRIX_RELEASES)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="sessions at a time (default 2: CI has 2 cores)")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--ci", action="store_true",
                        help=f"fi_compat.model.release_list.CI_SESSION_RELEASES: "
                             f"{', '.join(releases_module.CI_SESSION_RELEASES)} (CI's representative set "
                             f"but the default release, which `nox -s tests` runs), without the growth "
                             f"measurement")
    chosen.add_argument("--releases", nargs="+", metavar="X", help="these matrix releases (default: all)")
    parser.add_argument("--results", default=str(RESULTS / "cpu"),
                        help="where the sessions write <release>.json (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    releases = list(releases_module.CI_SESSION_RELEASES if args.ci else args.releases or matrix)
    if args.ci:  # CI keeps no results: the growth figures are for committed runs
        posargs = ["--skip-growth", *posargs]
    unknown = [r for r in releases if r not in matrix]
    if unknown:
        parser.error(f"not in fi_compat.model.release_list.MATRIX_RELEASES: {', '.join(unknown)} "
                     f"(accepted: {', '.join(matrix)})")
    results_dir = Path(args.results).resolve()
    logs = ROOT / ".nox" / "matrix-logs"
    logs.mkdir(parents=True, exist_ok=True)

    pending: queue.Queue[str] = queue.Queue()
    for release in longest_first(releases, results_dir):
        pending.put(release)
    outcomes: dict[str, tuple[int, float]] = {}

    def worker() -> None:
        while True:
            try:
                release = pending.get_nowait()
            except queue.Empty:
                return
            outcomes[release] = run_session(release, posargs, results_dir, logs)
            status, seconds = outcomes[release]
            report = f"  {release:14} {'passed' if status == 0 else f'FAILED ({status})':12} {seconds / 60:5.1f} min"
            if status != 0:  # CI keeps no files: the reason goes to its output
                report += f"\n{failure_summary(logs / f'{release}.log')}"
            print(report, flush=True)

    print(f"matrix: {len(releases)} sessions, {args.jobs} at a time, results -> {results_dir}", flush=True)
    start, load_at_start = time.time(), os.getloadavg()[0]
    workers = [threading.Thread(target=worker) for _ in range(min(args.jobs, len(releases)))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    elapsed = time.time() - start
    failed = [r for r in releases if outcomes[r][0] != 0]
    print(f"matrix: {len(releases)} sessions, {args.jobs} at a time: {elapsed / 60:.1f} min wall; "
          + (f"FAILED: {', '.join(failed)} (logs in {logs.relative_to(ROOT)}/)" if failed else "all passed"))
    if set(releases) == set(matrix) and not posargs:
        record = {
            "command": " ".join(["python3", "scripts/run_cpu_matrix.py", *argv]),
            "date": datetime.date.today().isoformat(), "jobs": args.jobs, "sessions": len(releases),
            "wall_seconds": round(elapsed),
            # user + system time of every session: what the run costs on an idle machine
            "cpu_seconds": round(sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), f)
                                     for f in ("ru_utime", "ru_stime"))),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "session_seconds": {r: round(outcomes[r][1]) for r in releases},
            "failed": failed,
            # other work on the machine stretches the wall time: say how busy it was
            "load_average_1min": {"start": round(load_at_start, 1), "end": round(os.getloadavg()[0], 1)},
        }
        (results_dir / MATRIX_RUN_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
