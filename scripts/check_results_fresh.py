#!/usr/bin/env python3
"""Check the committed matrix results against the release list and the code.

Each ``docs/compat-results/<platform>/<release>.json`` records the fingerprint
of the fi_compat package it ran (``scripts/_matrix_common.py``: ``fingerprint()``).
This compares every result with the checkout and with
``fi_compat.model.release_list.MATRIX_RELEASES``, and exits 1 naming each release
that is

* missing: in the matrix, with no result (the release list is newer);
* not in the matrix: a result for a release the list no longer has;
* not verified: the committed run failed;
* with ``--release-gate`` only, stale: its ``code`` fingerprint differs from
  the checkout's, or it has none;

with the command that refreshes them.  Without ``--release-gate`` (every
change, ``.ci/run``) a stale result is a note: the full matrix is the gate of
a release, not of every change; CI runs the representative releases
(``CI_RELEASES``) on the change itself, and docs/compatibility.md marks each
result that ran older code.  A result whose ``suite`` fingerprint differs
(tests/matrix, the growth script or pyproject.toml changed since) is a note
in both modes.  Reads a few dozen files: well under a second.

    python3 scripts/check_results_fresh.py                   # CPU results (what .ci/run checks)
    python3 scripts/check_results_fresh.py --release-gate    # a release: stale results fail too
    python3 scripts/check_results_fresh.py --platform gpu    # GPU results: missing ones are notes
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _matrix_common import RESULTS, ROOT, code_label, fingerprint, matrix_command, read_results, release_list

#: The reasons a result does not vouch for the checkout's code.
STALE = "stale (ran older fi_compat code)"
NO_FINGERPRINT = "stale (no fingerprint recorded)"


def findings(results: dict[str, dict[str, Any]], matrix: tuple[str, ...], current: dict[str, str],
             missing_fails: bool = True, stale_fails: bool = True) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(problems, notes): each a mapping from a reason to the releases it names.
    A stale result is a problem with ``stale_fails`` (the release gate), else a note."""
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
            reason = STALE if recorded else NO_FINGERPRINT
            (problems if stale_fails else notes).setdefault(reason, []).append(release)
        if not result.get("verified") and (recorded.get("code") == current["code"] or not stale_fails):
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
    parser.add_argument("--release-gate", action="store_true",
                        help="fail on results that ran older fi_compat code too (a release needs the full matrix "
                             "on its own code)")
    args = parser.parse_args(argv)
    folder = Path(args.results).resolve() / args.platform
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    try:
        results = read_results(folder)
    except ValueError as exc:
        print(f"check_results_fresh: {exc}", file=sys.stderr)
        return 2
    matrix = tuple(release_list().MATRIX_RELEASES)
    problems, notes = findings(results, matrix, fingerprint(), missing_fails=args.platform == "cpu",
                               stale_fails=args.release_gate)
    for reason, releases in notes.items():
        named = [f"{r} ({code_label(results[r])})" if reason in (STALE, NO_FINGERPRINT) else r for r in releases]
        print(f"note: {args.platform} results {reason}: {', '.join(named)}")
    stale = [r for reason in (STALE, NO_FINGERPRINT) for r in notes.get(reason, [])]
    if stale:
        print(f"note: docs/compatibility.md marks these {len(stale)} as run on older code; a release re-runs "
              f"them (python3 scripts/check_results_fresh.py --release-gate fails until then)")
    if not problems:
        vouch = "match the code and" if not stale else "cover"
        print(f"check_results_fresh: {len(results)} {args.platform} results in {shown} {vouch} "
              f"the {len(matrix)}-release matrix")
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
