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
from typing import Any, Optional

from packaging.specifiers import SpecifierSet

from . import DISTRIBUTION, extra
from .check import GUARD_ERROR, GUARD_NOTHING, GUARD_VERIFIED, Result, check_wheel
from .errors import GuardError
from .fetch import CACHE_ENV, default_cache_dir, fetch, fetch_url, file_sha256, find_cached, wheel_release
from .index import INDEX_TIMEOUT_S, ReleaseSource, offline_gap, releases_for
from .pins import FORMATS, LOCAL_WHEEL, REMOTE_WHEEL, SPECIFIER, Pin, groups, parse_pin, read_pins
from .pins.direct import file_name
from .report import EXIT_ERROR, as_json, as_table, exit_status

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
    # installs only these rows of fi_compat.bounds.BOUNDS.  Not a way to use fi_compat.
    parser.add_argument("--census-only-bounds", default=None, help=argparse.SUPPRESS)
    # Internal, for fi_compat's own tests: distinct lengths per engine call (default the probe's 256).
    parser.add_argument("--census-lengths", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


class Guard:
    def __init__(self, args: argparse.Namespace) -> None:
        self.cache_dir: Path = args.cache_dir or default_cache_dir()
        self.offline: bool = args.offline
        self.max_releases: int = args.max_releases
        self.download: bool = args.download
        self.releases = ReleaseSource(offline=args.offline, timeout=args.index_timeout)
        self.census: bool = args.census
        self.static: bool = args.static
        self.census_only_bounds: Optional[list[str]] = (
            None if args.census_only_bounds is None else [n.strip() for n in args.census_only_bounds.split(",")]
        )
        self.census_lengths: Optional[int] = args.census_lengths
        self.census_modes: Optional[tuple[str, ...]] = None
        if args.census_modes is not None:
            from .census_probe import parse_modes  # the probe's own list; only with --census

            self.census_modes = parse_modes(args.census_modes)
        self.find_links: list[Path] = args.find_links
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
        # Offline, the built-in list starts at 0.6.13 and ends where it was
        # written: the part of the range beyond it is an error (exit 2), not a
        # silent narrowing; the listed releases in the range are still checked.
        gap = offline_gap(specifier, self.releases)
        if gap is not None:
            self.error(origin, gap)
        if not releases:
            if gap is None:
                self.error(origin, f"no release satisfies {text}; pip could not install it either")
            return
        if len(releases) > self.max_releases:
            self.error(
                origin,
                f"{text} admits {len(releases)} releases ({releases[0]} .. {releases[-1]}), "
                f"more than --max-releases {self.max_releases}; bound the range or raise the limit",
            )
            return
        for release in releases:
            self.check_release(release, origin)

    def verdict(self, wheel: Path, origin: str, expected_release: Optional[str] = None) -> Result:
        """The static verdict on one wheel and, unless it is verified (or predates every row) or
        ``--static`` is given, its census, which then gives the verdict (``--census``: always)."""
        result = check_wheel(wheel, origin, expected_release=expected_release)
        fast = result.verdict in (GUARD_VERIFIED, GUARD_NOTHING)
        if not self.static and (self.census or not fast):
            from .census_check import add_census

            add_census(
                result,
                wheel,
                lengths=self.census_lengths,
                only_bounds=self.census_only_bounds,
                modes=self.census_modes,
            )
        return result

    def check_release(self, release: str, origin: str) -> None:
        try:
            found = [w for w in (find_cached(d, release) for d in self.find_links) if w is not None]
            wheel = found[0] if found else fetch(release, self.cache_dir, offline=self.offline)
            key = str(wheel)
            if key not in self._checked:
                self._checked[key] = self.verdict(wheel, origin, expected_release=release)
            self.results.append(self._again(self._checked[key], origin))
        except GuardError as exc:
            self.error(origin, str(exc), release)

    def check_wheel_file(
        self, path: str, origin: Optional[str] = None, sha256: Optional[str] = None, recorded_in: str = ""
    ) -> None:
        origin = origin or f"--wheel {path}"
        try:
            if sha256 is not None:
                actual = file_sha256(Path(path))
                if actual != sha256:
                    self.error(
                        origin,
                        f"{path} has sha256 {actual}, but {recorded_in} records {sha256}: it is "
                        "not the file that was locked; re-lock, or check the wheel you will install",
                    )
                    return
            self.results.append(self.verdict(Path(path), origin))
        except (GuardError, OSError) as exc:
            self.error(origin, str(exc))

    def check_found(self, found: Pin) -> None:
        """A requirement that names no version: a wheel file, a wheel URL, or nothing checkable."""
        named = wheel_release(Path(file_name(found.location or "")))
        release = str(named[1]) if named else None
        if found.kind == LOCAL_WHEEL:
            assert found.location is not None
            self.check_wheel_file(found.location, found.where, found.sha256, found.source)
        elif found.kind == REMOTE_WHEEL and self.download:
            assert found.location is not None
            try:
                wheel = fetch_url(found.location, self.cache_dir)
            except GuardError as exc:
                self.error(found.where, str(exc), release)
                return
            self.check_wheel_file(str(wheel), found.where, found.sha256, found.source)
        elif found.kind == REMOTE_WHEEL:
            self.error(
                found.where,
                (
                    f"{DISTRIBUTION} from a URL ({found.location}) cannot be verified offline: a URL names a file, "
                    "not a release, and the guard downloads nothing it was not asked to. Download it "
                    f"(`pip download --no-deps -d wheels '{DISTRIBUTION} @ {found.location}'`) and run "
                    "`fi-compat guard --wheel wheels/<file>.whl`, or pass --download to fetch it into the "
                    "guard's wheel cache and check it"
                ),
                release,
            )
        else:
            self.error(found.where, found.reason or f"{found.text}: cannot be checked", release)

    @staticmethod
    def _again(result: Result, origin: str) -> Result:
        return Result(
            result.release,
            origin,
            result.verdict,
            list(result.bounds),
            result.reason,
            result.wheel,
            list(result.mismatches),
            list(result.notes),
            result.census,
            result.measured,
            result.static,
        )


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
