"""Run flashinfer's own tests alone, with ``fi_compat.install()`` and with
``install(transparent=True)``, and compare them test by test.

    python scripts/flashinfer_own_tests.py --tests /tmp/fi_tests/release-v0.6.18 \\
        --commit 3b3e688a5427a057dc9ebf4658fe9e31b9714668 --ref release-v0.6.18 \\
        --results docs/flashinfer-tests/0.6.18.json

``--tests`` is a directory holding flashinfer's ``tests/`` package as its
repository has it (``git archive REF tests/autotuner tests/conftest.py
tests/__init__.py tests/utils_fp8.py tests/test_helpers``, extracted outside
this repository: docs/flashinfer-tests.md); nothing of it is committed here.
``--select`` names what to run inside it (default ``tests/autotuner``).

Each mode runs in a fresh process of this interpreter (the one with torch and
flashinfer-python installed): the CPU-host shim (:func:`fi_compat.workload.cpu_host`,
flashinfer needs it to import without a GPU) entered before pytest imports
flashinfer's conftest, then, for the fi_compat modes, ``fi_compat.install()``
with the mode's settings, then pytest on the selection; a small plugin records
every test's outcome (``passed``, ``failed``, ``skipped``, ``error``).  Tests
that need a GPU fail or skip in every mode alike; what the comparison reads is
the tests that pass alone.

Writes ``--results`` (JSON): the flashinfer release, the repository ref and
commit the tests came from, per mode the counts and duration, the tests whose
outcome differs between modes, ``regressions``: tests that pass alone and
do not with fi_compat, and ``memory_differences``: those among them that fail
only because they assert flashinfer's unbounded growth
(:data:`EXPECTED_MEMORY_DIFFERENCES`, each with the failure message it must
have).  Exit status: 0 no regression, 1 a regression, 2 a mode
that could not run (pytest's own usage or collection errors in every test).
Cost: one pytest run of the selection per mode (tests/autotuner: about a
minute each on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EXPECTED_MEMORY_DIFFERENCES: dict[str, tuple[str, str]] = {
    "tests/autotuner/test_autotuner_core.py::test_find_nearest_profile_cache_grows_with_fresh_callable": (
        "Expected 5000 new cache entries",
        "flashinfer's negative control: it asserts that the nearest-profile memo grows by one entry per "
        "fresh bucket-mapper lambda, 5,000 entries for 5,000 calls (\"the original memory leak\"). fi_compat "
        "bounds that memo and keys it on what the mapper computes (its code and closure values), so the "
        "5,000 equal lambdas share one entry: the growth this test requires is the one fi_compat exists to "
        "remove. It is the only difference allowed, and only with this failure message",
    ),
}
"""Tests that pass alone and fail with fi_compat *because they assert unbounded
memory*, the one thing fi_compat changes: test id -> (a fragment its failure
report must contain, why).  A failure of such a test with any other message
is a regression like any other."""

MODES: dict[str, Any] = {
    "alone": None,
    "install": {},
    "transparent": {"transparent": True},
}
"""Mode -> the keywords of ``fi_compat.install()`` (``None``: fi_compat not installed)."""

RUNNER = r"""
import json, sys

mode_settings, selection, outcomes_path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
import pytest
from fi_compat.workload import cpu_host


class Outcomes:
    '''Each test's outcome: its call phase, or the setup/teardown phase that failed.'''

    def __init__(self):
        self.by_test = {}
        self.failures = {}  # the end of each failure's report, to tell one failure from another

    def pytest_runtest_logreport(self, report):
        previous = self.by_test.get(report.nodeid)
        if report.when == "call":
            outcome = report.outcome
        elif report.failed:
            outcome = "error"  # its setup or teardown failed
        elif report.skipped:
            outcome = "skipped"
        else:
            return  # a setup or teardown that passed says nothing
        if previous in ("failed", "error"):
            return
        self.by_test[report.nodeid] = outcome
        if report.failed:
            self.failures[report.nodeid] = report.longreprtext[-1500:]

    def pytest_collectreport(self, report):
        if report.failed:
            self.by_test[report.nodeid or "<collection>"] = "error"


outcomes = Outcomes()
with cpu_host():
    import fi_compat
    if mode_settings is not None:
        state = fi_compat.install(**mode_settings)
        print("fi_compat:", state["state"], flush=True)
    arguments = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--continue-on-collection-errors", selection]
    status = pytest.main(arguments, plugins=[outcomes])
    if mode_settings is not None:
        print("fi_compat after the tests:", fi_compat.status(walk=False)["state"], flush=True)
with open(outcomes_path, "w") as out:
    json.dump({"exit_status": int(status), "outcomes": outcomes.by_test, "failures": outcomes.failures}, out)
"""


def run_mode(mode: str, tests: Path, selection: str, timeout: int) -> dict[str, Any]:
    """One pytest run of ``selection`` under ``tests`` in a fresh process; its outcomes and duration."""
    with tempfile.TemporaryDirectory() as scratch:
        outcomes_path = Path(scratch) / "outcomes.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONPATH"] = os.pathsep.join([str(tests), str(Path(__file__).resolve().parents[1])])
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, json.dumps(MODES[mode]), selection, str(outcomes_path)],
            cwd=tests, env=env, capture_output=True, text=True, timeout=timeout,
        )
        seconds = round(time.perf_counter() - started, 1)
        if not outcomes_path.exists():
            raise SystemExit(f"mode {mode}: no outcomes (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
        recorded = json.loads(outcomes_path.read_text())
    counts: dict[str, int] = {}
    for outcome in recorded["outcomes"].values():
        counts[outcome] = counts.get(outcome, 0) + 1
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return {"seconds": seconds, "pytest_exit_status": recorded["exit_status"], "counts": counts,
            "summary": summary, "outcomes": recorded["outcomes"], "failures": recorded["failures"]}


def compare(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per test, the outcomes that differ between modes, and the regressions."""
    alone = runs["alone"]["outcomes"]
    names = sorted(set().union(*(run["outcomes"] for run in runs.values())))
    differing = {}
    for name in names:
        outcomes = {mode: run["outcomes"].get(name, "absent") for mode, run in runs.items()}
        if len(set(outcomes.values())) > 1:
            differing[name] = outcomes
    regressions, memory = [], []
    for name, outcome in alone.items():
        if outcome != "passed":
            continue
        for mode, run in runs.items():
            got = run["outcomes"].get(name, "absent")
            if mode == "alone" or got == "passed":
                continue
            expected = EXPECTED_MEMORY_DIFFERENCES.get(name)
            failure = run["failures"].get(name, "")
            if expected is not None and got == "failed" and expected[0] in failure:
                said = [line[1:].strip() for line in failure.splitlines() if line.startswith("E ")]
                memory.append({"test": name, "mode": mode, "failure": " ".join(said[:2]) or failure[-200:],
                               "why": expected[1]})
            else:
                regressions.append(f"{name} ({mode}: {got})")
    return {"differing": differing, "regressions": sorted(regressions), "memory_differences": memory}


def fi_compat_commit() -> str:
    """This checkout's commit, with ``+dirty`` when the library differs from it; ``unknown`` without git."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "fi_compat"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, required=True, help="directory holding flashinfer's tests/ package")
    parser.add_argument("--select", default="tests/autotuner", help="what to run inside --tests")
    parser.add_argument("--commit", required=True, help="the flashinfer commit the tests came from")
    parser.add_argument("--ref", default="", help="the branch or tag of that commit")
    parser.add_argument("--results", type=Path, required=True, help="the results JSON to write")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, from: " + ", ".join(MODES))
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per mode")
    args = parser.parse_args(argv)
    tests = args.tests.resolve()
    if not (tests / args.select).exists():
        parser.error(f"{tests / args.select} does not exist: extract flashinfer's tests there first "
                     "(docs/flashinfer-tests.md)")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "alone" not in modes or any(m not in MODES for m in modes):
        parser.error(f"--modes must include alone and be among {', '.join(MODES)}")
    from fi_compat.model.release_detection import detect_release  # no flashinfer import: package metadata

    runs = {}
    for mode in modes:
        runs[mode] = run_mode(mode, tests, args.select, args.timeout)
        print(f"{mode}: {runs[mode]['counts']} in {runs[mode]['seconds']} s", flush=True)
    compared = compare(runs)
    result = {
        "flashinfer_release": str(detect_release().version),
        "tests_from": {"repository": "https://github.com/flashinfer-ai/flashinfer", "ref": args.ref,
                       "commit": args.commit, "selection": args.select},
        "fi_compat_commit": fi_compat_commit(),
        "python": platform.python_version(),
        "host": "CPU, fi_compat.workload.cpu_host() (kernel launches recorded, not run)",
        "command": "python scripts/flashinfer_own_tests.py " + " ".join(
            a if not a.startswith("/") else "<" + Path(a).name + ">" for a in (argv or sys.argv[1:])),
        "modes": {mode: {k: v for k, v in run.items() if k not in ("outcomes", "failures")}
                  for mode, run in runs.items()},
        "passed_alone": sum(1 for o in runs["alone"]["outcomes"].values() if o == "passed"),
        "differing": compared["differing"],
        "regressions": compared["regressions"],
        "memory_differences": compared["memory_differences"],
        "tests": {name: [runs[mode]["outcomes"].get(name, "absent") for mode in modes]
                  for name in sorted(set().union(*(run["outcomes"] for run in runs.values())))},
        "tests_columns": modes,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    print(f"passed alone: {result['passed_alone']}; differing: {len(compared['differing'])}; "
          f"regressions: {len(compared['regressions'])}; "
          f"memory differences (EXPECTED_MEMORY_DIFFERENCES): {len(compared['memory_differences'])}")
    for line in compared["regressions"]:
        print("  REGRESSION", line)
    if all(not run["outcomes"] for run in runs.values()):
        return 2
    return 1 if compared["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main())
