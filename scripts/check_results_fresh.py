#!/usr/bin/env python3
"""Fail when the committed matrix results are older than the code they vouch for.

Each ``docs/compat-results/<platform>/<release>.json`` records the fingerprint
of the fi_compat package it ran (``scripts/_matrix_common.py``: ``fingerprint()``).
This compares every result with the checkout and with
``fi_compat.release_list.MATRIX_RELEASES``, and exits 1 naming each release
that is

* stale: its ``code`` fingerprint differs from the checkout's, or it has none;
* missing: in the matrix, with no result (the release list is newer);
* not in the matrix: a result for a release the list no longer has;
* not verified: the committed run failed;

with the command that refreshes them.  A result whose ``suite`` fingerprint
differs (tests/matrix, the growth script or pyproject.toml changed since) is
listed as a note and does not fail: the results still describe the code.
Reads a few dozen files: well under a second.

    python3 scripts/check_results_fresh.py                   # CPU results (what .ci/run checks)
    python3 scripts/check_results_fresh.py --platform gpu    # GPU results: missing ones are notes
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _matrix_common import RESULTS, ROOT, fingerprint, matrix_command, read_results, release_list


def findings(results: dict[str, dict[str, Any]], matrix: tuple[str, ...], current: dict[str, str],
             missing_fails: bool = True) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(problems, notes): each a mapping from a reason to the releases it names."""
    problems: dict[str, list[str]] = {}
    notes: dict[str, list[str]] = {}
    for release in matrix:
        if release not in results:
            (problems if missing_fails else notes).setdefault("missing (no result)", []).append(release)
    for release, result in results.items():
        if release not in matrix:
            problems.setdefault("not in MATRIX_RELEASES (delete the file or add the release back)", []).append(release)
            continue
        recorded = result.get("fingerprint") or {}
        if recorded.get("code") != current["code"]:
            reason = "stale (ran older fi_compat code)" if recorded else "stale (no fingerprint recorded)"
            problems.setdefault(reason, []).append(release)
        elif not result.get("verified"):
            problems.setdefault("not verified (the committed run failed)", []).append(release)
        if recorded and recorded.get("suite") != current["suite"]:
            notes.setdefault("ran an older tests/matrix or growth script", []).append(release)
    return problems, notes


def refresh_commands(platform: str, releases: list[str], matrix: tuple[str, ...]) -> list[str]:
    if platform == "gpu":
        run = "python3 scripts/run_gpu_matrix.py --wheelhouse DIR --releases " + " ".join(releases)
    elif set(releases) == set(matrix):
        run = "python3 scripts/run_cpu_matrix.py --jobs 2            # the whole matrix"
    elif len(releases) == 1:
        run = matrix_command(releases[0])
    else:
        run = "python3 scripts/run_cpu_matrix.py --jobs 2 --releases " + " ".join(releases)
    return [run, "python3 scripts/generate_compatibility.py"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--results", default=str(RESULTS),
                        help="directory holding cpu/ and gpu/ (default: %(default)s)")
    args = parser.parse_args(argv)
    folder = Path(args.results).resolve() / args.platform
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    try:
        results = read_results(folder)
    except ValueError as exc:
        print(f"check_results_fresh: {exc}", file=sys.stderr)
        return 2
    matrix = tuple(release_list().MATRIX_RELEASES)
    problems, notes = findings(results, matrix, fingerprint(), missing_fails=args.platform == "cpu")
    for reason, releases in notes.items():
        print(f"note: {args.platform} results {reason}: {', '.join(releases)}")
    if not problems:
        print(f"check_results_fresh: {len(results)} {args.platform} results in {shown} match the code "
              f"and the {len(matrix)}-release matrix")
        return 0
    print(f"check_results_fresh: the committed {args.platform} results in {shown} do not vouch for this code:",
          file=sys.stderr)
    for reason, releases in problems.items():
        print(f"  {reason}: {', '.join(releases)}", file=sys.stderr)
    rerun = sorted({r for reason, rs in problems.items() if not reason.startswith("not in") for r in rs},
                   key=matrix.index)
    if rerun:
        print("refresh them (then commit docs/compat-results/ and docs/compatibility.md):", file=sys.stderr)
        for command in refresh_commands(args.platform, rerun, matrix):
            print(f"  {command}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
