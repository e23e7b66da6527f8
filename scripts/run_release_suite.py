#!/usr/bin/env python3
"""Run the release suite once, in the current environment, and write its result.

The environment must already hold the flashinfer release under test (the nox
sessions ``matrix`` and ``gpu_matrix`` and ``scripts/run_gpu_matrix.py`` set it
up).  This runs ``pytest tests/matrix`` (CPU: under the shim, ``gpu`` tests
skipped; GPU: no shim, ``gpu`` tests included), then
``scripts/measure_growth.py``, and writes ``RESULTS/<release>.json``::

    {"schema": 2, "platform": "cpu"|"gpu", "release": "0.6.18",
     "bounded": ["tuning-config", "builder", ...], "device": "...", "python": "3.11.7",
     "torch": "2.13.0+cpu", "command": "...", "date": "2026-12-02",
     "fingerprint": {"code": "<sha256>", "suite": "<sha256>"}, "commit": "74bf0ef0a1b2",
     "seconds": {"pytest": 81.2, "growth": 30.5},
     "pytest": {"exit_status": 0, "tests": 40, "passed": 38, "failed": 0,
                "errors": 0, "skipped": 2, "skip_reasons": {"needs SM100/SM103": 2}},
     "growth": {... scripts/measure_growth.py output ...},
     "census": [{"layout": "vllm", "backend": "auto", "mode": "q1", ...}, ...],
     "verified": true}

``fingerprint`` (``scripts/_matrix_common.py``) hashes the fi_compat package that ran
and the suite; ``scripts/check_results_fresh.py`` compares it with the
checkout.  ``verified`` is true only when pytest exited 0 having passed at
least one test and the growth measurement ran without error.  The exit status
is 0 exactly when ``verified`` is true.

    python scripts/run_release_suite.py --platform cpu --results docs/compat-results/cpu
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

from _matrix_common import ROOT, cpu_model, fingerprint, source_commit, write_result

SCHEMA = 2  # 2: fingerprint and seconds


def parse_junit(path: Path) -> dict[str, Any]:
    counts = Counter()
    by_file: dict[str, Counter] = {}
    reasons: Counter[str] = Counter()
    failures: list[str] = []
    if not path.exists():
        return {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "skip_reasons": {}, "failures": [],
                "by_file": {}}
    for case in ET.parse(path).getroot().iter("testcase"):
        counts["tests"] += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        per_file = by_file.setdefault(case.get("classname", "").rsplit(".", 1)[-1], Counter())
        if case.find("failure") is not None:
            counts["failed"] += 1
            per_file["failed"] += 1
            failures.append(name)
        elif case.find("error") is not None:
            counts["errors"] += 1
            per_file["failed"] += 1
            failures.append(name)
        elif (skipped := case.find("skipped")) is not None:
            counts["skipped"] += 1
            per_file["skipped"] += 1
            message = (skipped.get("message") or "").strip()
            # pytest writes "Skipped: reason" or "reason"
            reasons[message.removeprefix("Skipped: ").strip() or "(no reason)"] += 1
        else:
            counts["passed"] += 1
            per_file["passed"] += 1
    return {
        "tests": counts["tests"], "passed": counts["passed"], "failed": counts["failed"],
        "errors": counts["errors"], "skipped": counts["skipped"],
        "skip_reasons": dict(sorted(reasons.items())), "failures": failures[:50],
        "by_file": {f: {k: c[k] for k in ("passed", "failed", "skipped")} for f, c in sorted(by_file.items())},
    }


def device_name(platform_name: str) -> str:
    if platform_name == "gpu":
        try:
            import torch
        except ImportError:
            return "no torch"

        if not torch.cuda.is_available():
            return "no CUDA device"
        major, minor = torch.cuda.get_device_capability(0)
        return f"{torch.cuda.get_device_name(0)} (SM{major}{minor})"
    cpu = cpu_model(platform.processor() or platform.machine())
    return f"CPU {cpu}, {os.cpu_count()} cores (fi_compat SM100 shim)"


def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def bounded_rows(release: Any) -> list[str]:
    """The bounds.py rows fi_compat bounds on the installed release, judged from
    its source by the same lookup as the guard (flashinfer is not imported)."""
    import importlib.util

    from fi_compat.verdict.judgement import BOUND, judge_release
    from fi_compat.lookup import DirectoryReader, source_lookup

    spec = importlib.util.find_spec("flashinfer")
    reader = DirectoryReader.for_package_dir(list(spec.submodule_search_locations)[0])
    return [verdict.bound.name for verdict in judge_release(source_lookup(reader), release).rows
            if verdict.kind == BOUND]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", choices=("cpu", "gpu"), required=True)
    parser.add_argument("--results", required=True, help="directory for <release>.json")
    parser.add_argument("--command", default=os.environ.get("FI_COMPAT_MATRIX_COMMAND", ""),
                        help="the command that ran this (recorded as is)")
    parser.add_argument("--skip-growth", action="store_true", help="do not run scripts/measure_growth.py")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    from packaging.version import Version

    import fi_compat

    release = version_of("flashinfer-python")
    if release is None:
        print("run_release_suite: flashinfer-python is not installed here", file=sys.stderr)
        return 2
    bounded = bounded_rows(Version(release))
    if args.platform == "gpu":
        # Never record a GPU result from a machine without a CUDA device.
        try:
            import torch

            cuda = torch.cuda.is_available()
        except ImportError:
            cuda = False
        if not cuda:
            print("run_release_suite: --platform gpu needs torch with a CUDA device; nothing recorded", file=sys.stderr)
            return 2

    env = dict(os.environ, FI_COMPAT_MATRIX_PLATFORM=args.platform, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        census_report = Path(tmp) / "census.json"  # tests/matrix/test_census_bounds.py's rows
        env["FI_COMPAT_MATRIX_REPORT"] = str(census_report)
        cmd = [sys.executable, "-m", "pytest", "tests/matrix", "-p", "no:cacheprovider", "-q", "-rs",
               f"--junitxml={junit}", *args.pytest_args]
        print("+", " ".join(cmd), flush=True)
        started = time.perf_counter()
        status = subprocess.call(cmd, cwd=ROOT, env=env)
        seconds = {"pytest": round(time.perf_counter() - started, 1)}
        tests = parse_junit(junit)
        census = json.loads(census_report.read_text()) if census_report.exists() else None
    tests["exit_status"] = status

    growth: dict[str, Any] | None = None
    if not args.skip_growth:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "growth.json"
            cmd = [sys.executable, str(ROOT / "scripts" / "measure_growth.py"),
                   "--device", "cuda" if args.platform == "gpu" else "cpu", "--json", str(out)]
            print("+", " ".join(cmd), flush=True)
            started = time.perf_counter()
            growth_status = subprocess.call(cmd, cwd=ROOT, env=env)
            seconds["growth"] = round(time.perf_counter() - started, 1)
            if out.exists():
                growth = json.loads(out.read_text())
            else:
                growth = {"errors": {"run": f"measure_growth.py exited {growth_status} without a result"}}

    try:
        import torch  # after the runs: its import is not part of what they measure
    except ImportError:
        torch = None

    result = {
        "schema": SCHEMA,
        "platform": args.platform,
        "release": release,
        "bounded": bounded,
        "device": device_name(args.platform),
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None),
        "fi_compat": version_of("fi-compat"),
        "command": args.command,
        "date": datetime.date.today().isoformat(),
        # the package that ran (an installed copy or the checkout, editable)
        "fingerprint": fingerprint(Path(fi_compat.__file__).parent),
        # for a reader of docs/compatibility.md; the fingerprint decides freshness
        "commit": source_commit(),
        "seconds": seconds,
        "pytest": tests,
        "growth": growth,
        "census": census,
    }
    result["verified"] = bool(
        status == 0 and tests["passed"] > 0 and (growth is None or not growth.get("errors"))
    )
    target = write_result(Path(args.results), result)
    print(f"run_release_suite: flashinfer {release}: {tests['passed']} passed, {tests['failed']} failed, "
          f"{tests['errors']} errors, {tests['skipped']} skipped; verified={result['verified']} -> {target}")
    return 0 if result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
