"""One ``fi-compat guard`` run's work: every requirement it is given turned into releases, wheels and results.

One job: :class:`Guard`, which :func:`.cli.run` feeds each FILE's, ``--pin``'s and
``--wheel``'s requirements (a version range expanded with :mod:`.index`, a wheel
fetched with :mod:`.fetch`, checked with :func:`.check.check_wheel` and, with
``--census``, :func:`.census_check.add_census`), and which keeps the results and notes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from packaging.specifiers import SpecifierSet

from . import DISTRIBUTION
from .check import GUARD_ERROR, GUARD_NOTHING, GUARD_VERIFIED, Result, check_wheel
from .errors import GuardError
from .fetch import default_cache_dir, fetch, fetch_url, file_sha256, find_cached, wheel_release
from .index import ReleaseSource, offline_gap, releases_for
from .pins import LOCAL_WHEEL, REMOTE_WHEEL, Pin
from .pins.direct import file_name


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
