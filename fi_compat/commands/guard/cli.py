"""``fi-compat guard``: check a flashinfer-python pin bump before it merges.

Each FILE is read by :mod:`.pins` (requirement files, ``pyproject.toml``,
``uv.lock``, ``poetry.lock``, ``pylock.toml``).  Version requirements of one
FILE are combined by :func:`.pins.groups` (what pip would intersect) and
each resulting range is expanded with :mod:`.index`; each ``--pin`` is
checked on its own.  A requirement naming a wheel file checks that wheel; a
wheel URL is checked only with ``--download``; VCS, editable and source-tree
requirements cannot be checked.  Offline, the part of a range outside the
built-in release list is an ``error`` too (:func:`.index.offline_gap`).
Anything not checked is an ``error`` result, so the exit status is 2: the
guard never passes a requirement it did not check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


from . import DISTRIBUTION, extra
from .errors import GuardError
from .fetch import CACHE_ENV
from .index import INDEX_TIMEOUT_S
from .pins import FORMATS, SPECIFIER, groups, parse_pin, read_pins
from .report import EXIT_ERROR, as_json, as_table, exit_status
from .session import Guard as Guard

DEFAULT_MAX_RELEASES = 40


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "guard",
        help="check a flashinfer-python pin bump against fi_compat's bounds (no import, CPU only)",
        description=(
            "Check every flashinfer-python release a requirement file (or --pin, or --wheel) admits. "
            "A release on fi_compat's verified list is read from the wheel with ast (fast); any other "
            "release is measured: installed in a throwaway directory and driven on CPU with the three "
            "engines' calls up to 1M context, fi_compat installed, counting flashinfer's memory by "
            "source line. Exit 0: verified, or measured bounded; 1: a flashinfer line or memo keeps "
            "growing, or an engine's call is refused; 2: something could not be checked (usage, "
            "unreadable file, URL/VCS/editable requirement, index, download, wheel or census errors); "
            "3: --static only: a release outside the verified list was read but not measured. "
            "See docs/guard.md."
        ),
    )
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="requirement/constraint files, pyproject.toml, uv.lock, poetry.lock or pylock*.toml",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="read every FILE as this format (default: from the file name, else its content)",
    )
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        metavar="REQ",
        help=f"a requirement such as {DISTRIBUTION}==0.7.4 (repeatable; ranges work too)",
    )
    parser.add_argument(
        "--wheel",
        action="append",
        default=[],
        metavar="PATH",
        help="check this wheel file instead of downloading (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"wheel cache (default ${CACHE_ENV}, else ~/.cache/fi_compat/wheels)",
    )
    parser.add_argument(
        "--offline", action="store_true", help="use cached wheels and fi_compat's built-in release list only"
    )
    parser.add_argument(
        "--index-timeout",
        type=float,
        default=INDEX_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for the package index's release list (default %(default)s)",
    )
    parser.add_argument(
        "--download",
        action="store_true",
        help="fetch wheels named by URL (flashinfer-python @ https://...whl) into the cache and "
        "check them; without it a URL pin is not checked (exit 2)",
    )
    parser.add_argument(
        "--max-releases",
        type=int,
        default=DEFAULT_MAX_RELEASES,
        metavar="N",
        help="refuse a range admitting more releases than this (default %(default)s)",
    )
    measure = parser.add_mutually_exclusive_group()
    measure.add_argument(
        "--static",
        action="store_true",
        help="read signatures only (about a second per release, nothing installed or run); a release "
        "outside the verified list then exits 3, not measured",
    )
    measure.add_argument(
        "--census",
        action="store_true",
        help="measure verified releases too (every release outside the verified list is measured "
        "without it; 1-3 minutes per release on 2 cores; docs/guard.md)",
    )
    parser.add_argument(
        "--find-links",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="look for flashinfer-python wheels in DIR before the cache (repeatable; never downloads)",
    )
    parser.add_argument(
        "--census-modes",
        default=None,
        metavar="MODE,MODE",
        help="the query modes the census drives (q1, mtp, varq, sparse, dcp, modular; default: q1,mtp, "
        "one and two query tokens); more modes take more time and see more",
    )
    # Internal, for fi_compat's own tests of --census (docs/guard.md): the probe
    # installs only these rows of fi_compat.verdict.bounds.BOUNDS.  Not a way to use fi_compat.
    parser.add_argument("--census-only-bounds", default=None, help=argparse.SUPPRESS)
    # Internal, for fi_compat's own tests: distinct lengths per engine call (default the probe's 256).
    parser.add_argument("--census-lengths", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    absent = extra.missing()
    if absent:
        print(f"fi-compat guard: {extra.message(absent)}", file=sys.stderr)
        return EXIT_ERROR
    if not (args.files or args.pin or args.wheel):
        print("fi-compat guard: give requirement FILEs, --pin REQ or --wheel PATH", file=sys.stderr)
        return EXIT_ERROR
    if args.max_releases < 1:
        print("fi-compat guard: --max-releases must be at least 1", file=sys.stderr)
        return EXIT_ERROR
    if args.census_only_bounds is not None and args.static:
        print("fi-compat guard: --census-only-bounds applies to the census, not --static", file=sys.stderr)
        return EXIT_ERROR
    if args.census_modes is not None:
        if args.static:
            print("fi-compat guard: --census-modes applies to the census, not --static", file=sys.stderr)
            return EXIT_ERROR
        from .census_probe import parse_modes

        try:
            parse_modes(args.census_modes)
        except ValueError as exc:
            print(f"fi-compat guard: --census-modes: {exc}", file=sys.stderr)
            return EXIT_ERROR
    for directory in args.find_links:
        if not directory.is_dir():
            print(f"fi-compat guard: --find-links {directory}: no such directory", file=sys.stderr)
            return EXIT_ERROR
    if args.download and args.offline:
        print("fi-compat guard: --download fetches URLs and --offline forbids it; choose one", file=sys.stderr)
        return EXIT_ERROR
    guard = Guard(args)
    for name in args.files:
        try:
            pins = read_pins(name, args.format)
        except GuardError as exc:
            guard.error(name, str(exc))
            continue
        guard.notes.extend(pins.notes)
        if not pins.found:
            guard.notes.append(f"{name}: no {DISTRIBUTION} requirement; nothing to check")
            continue
        for specifier, lines in groups(pins.found):
            guard.check_specifier(specifier, ", ".join(dict.fromkeys(line.where for line in lines)))
        for found in pins.found:
            if found.kind != SPECIFIER:
                guard.check_found(found)
    for text in args.pin:
        try:
            pin = parse_pin(text)
        except GuardError as exc:
            guard.error(f"--pin {text}", str(exc))
            continue
        if pin.kind == SPECIFIER:
            guard.check_specifier(pin.specifier, pin.where)
        else:
            guard.check_found(pin)
    for path in args.wheel:
        guard.check_wheel_file(path)
    output = as_json(guard.results, guard.notes) if args.json else as_table(guard.results, guard.notes)
    print(output)
    return exit_status(guard.results)
