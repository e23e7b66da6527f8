"""``fi-compat guard``: check a flashinfer-python pin bump before it merges.

How requirement lines become releases: within one FILE (with everything it
includes), lines whose environment markers are identical, or absent, are
intersected as pip would intersect them (a ``-c`` constraint narrows a
requirement); lines with different markers apply to different environments
and are checked separately.  Each ``--pin`` is checked on its own.  A pin
names its release; a range is expanded with :mod:`fi_compat.commands.guard.index`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from packaging.specifiers import SpecifierSet

from . import DISTRIBUTION
from .check import GUARD_ERROR, Result, check_wheel
from .errors import GuardError
from .fetch import CACHE_ENV, default_cache_dir, fetch
from .index import INDEX_TIMEOUT_S, ReleaseSource, releases_for
from .report import EXIT_ERROR, as_json, as_table, exit_status
from .requirements import Found, parse_file, parse_pin

DEFAULT_MAX_RELEASES = 40


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "guard",
        help="check a flashinfer-python pin bump against fi_compat's bounds (no import, CPU only)",
        description=(
            "Check that every flashinfer-python release a requirement file (or --pin, or --wheel) "
            "admits is one fi_compat supports, by reading signatures from the wheel with ast. "
            "Exit 0: all verified or compatible-unverified; 1: any unsupported; 2: usage, "
            "requirement-file, index, download or wheel errors."
        ),
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="pip requirement or constraint files")
    parser.add_argument("--pin", action="append", default=[], metavar="REQ",
                        help=f"a requirement such as {DISTRIBUTION}==0.7.4 (repeatable; ranges work too)")
    parser.add_argument("--wheel", action="append", default=[], metavar="PATH",
                        help="check this wheel file instead of downloading (repeatable)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"wheel cache (default ${CACHE_ENV}, else ~/.cache/fi_compat/wheels)")
    parser.add_argument("--offline", action="store_true",
                        help="use cached wheels and fi_compat's built-in release list only")
    parser.add_argument("--index-timeout", type=float, default=INDEX_TIMEOUT_S, metavar="SECONDS",
                        help="how long to wait for the package index's release list (default %(default)s)")
    parser.add_argument("--max-releases", type=int, default=DEFAULT_MAX_RELEASES, metavar="N",
                        help="refuse a range admitting more releases than this (default %(default)s)")
    parser.set_defaults(func=run)


def _groups(found: list[Found]) -> list[tuple[SpecifierSet, list[Found]]]:
    """Lines combined by marker (see the module docstring)."""
    unmarked = [f for f in found if f.requirement.marker is None]
    markers = list(dict.fromkeys(str(f.requirement.marker) for f in found if f.requirement.marker is not None))
    groups: list[list[Found]] = []
    for marker in markers:
        groups.append([f for f in found if f.requirement.marker is not None
                       and str(f.requirement.marker) == marker] + unmarked)
    # Environments matching no marker get the unmarked lines alone, when those
    # install flashinfer (a constraint alone installs nothing).
    if unmarked and (not markers or any(not f.constraint for f in unmarked)):
        groups.insert(0, unmarked)
    out = []
    for lines in groups:
        specifier = SpecifierSet()
        for line in lines:
            specifier &= line.specifier
        out.append((specifier, lines))
    return out


class Guard:
    def __init__(self, args: argparse.Namespace) -> None:
        self.cache_dir: Path = args.cache_dir or default_cache_dir()
        self.offline: bool = args.offline
        self.max_releases: int = args.max_releases
        self.releases = ReleaseSource(offline=args.offline, timeout=args.index_timeout)
        self.results: list[Result] = []
        self.notes: list[str] = []
        self._checked: dict[str, Result] = {}

    def error(self, origin: str, message: str, release: Optional[str] = None) -> None:
        self.results.append(Result(release, origin, GUARD_ERROR, reason=message))

    def check_specifier(self, specifier: SpecifierSet, origin: str) -> None:
        text = f"{DISTRIBUTION}{specifier}" if str(specifier) else f"{DISTRIBUTION} (no version specifier)"
        try:
            releases, note = releases_for(specifier, self.releases)
        except GuardError as exc:
            self.error(origin, str(exc))
            return
        if note and note not in self.notes:
            self.notes.append(note)
        if not releases:
            self.error(origin, f"no release satisfies {text}; pip could not install it either")
            return
        if len(releases) > self.max_releases:
            self.error(origin, f"{text} admits {len(releases)} releases ({releases[0]} .. {releases[-1]}), "
                               f"more than --max-releases {self.max_releases}; bound the range or raise the limit")
            return
        for release in releases:
            self.check_release(release, origin)

    def check_release(self, release: str, origin: str) -> None:
        try:
            wheel = fetch(release, self.cache_dir, offline=self.offline)
            key = str(wheel)
            if key not in self._checked:
                self._checked[key] = check_wheel(wheel, origin, expected_release=release)
            self.results.append(self._again(self._checked[key], origin))
        except GuardError as exc:
            self.error(origin, str(exc), release)

    def check_wheel_file(self, path: str) -> None:
        origin = f"--wheel {path}"
        try:
            self.results.append(check_wheel(Path(path), origin))
        except GuardError as exc:
            self.error(origin, str(exc))

    @staticmethod
    def _again(result: Result, origin: str) -> Result:
        return Result(result.release, origin, result.verdict, list(result.bounds), result.reason, result.wheel,
                      list(result.mismatches), list(result.notes))


def run(args: argparse.Namespace) -> int:
    if not (args.files or args.pin or args.wheel):
        print("fi-compat guard: give requirement FILEs, --pin REQ or --wheel PATH", file=sys.stderr)
        return EXIT_ERROR
    if args.max_releases < 1:
        print("fi-compat guard: --max-releases must be at least 1", file=sys.stderr)
        return EXIT_ERROR
    guard = Guard(args)
    for name in args.files:
        try:
            found = parse_file(name)
        except GuardError as exc:
            guard.error(name, str(exc))
            continue
        if not found:
            guard.notes.append(f"{name}: no {DISTRIBUTION} requirement; nothing to check")
            continue
        for specifier, lines in _groups(found):
            guard.check_specifier(specifier, ", ".join(line.where for line in lines))
    for text in args.pin:
        try:
            requirement = parse_pin(text)
        except GuardError as exc:
            guard.error(f"--pin {text}", str(exc))
            continue
        guard.check_specifier(requirement.specifier, f"--pin {text}")
    for path in args.wheel:
        guard.check_wheel_file(path)
    output = as_json(guard.results, guard.notes) if args.json else as_table(guard.results, guard.notes)
    print(output)
    return exit_status(guard.results)
