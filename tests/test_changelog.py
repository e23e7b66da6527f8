"""CHANGELOG.md follows Keep a Changelog and agrees with the one version
source, fi_compat/_version.py: an ``## [Unreleased]`` section first, released
headings ``## [X.Y.Z] - YYYY-MM-DD`` newest first, and the newest of them is
``__version__`` (the release commit renames Unreleased and bumps the version
together).  Reads one file; no cost to speak of."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from packaging.version import Version

import fi_compat
from fi_compat._version import __version__

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"
RELEASED = re.compile(r"## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2})")
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def headings() -> list[str]:
    return [line for line in CHANGELOG.read_text(encoding="utf-8").splitlines() if line.startswith("## ")]


def released(lines: list[str]) -> list[tuple[Version, datetime.date]]:
    """The released headings as (version, date); fails naming a malformed one."""
    out = []
    for line in lines:
        if line == "## [Unreleased]":
            continue
        match = RELEASED.fullmatch(line)
        assert match, f"CHANGELOG.md heading {line!r} is neither '## [Unreleased]' nor '## [X.Y.Z] - YYYY-MM-DD'"
        out.append((Version(match["version"]), datetime.date.fromisoformat(match["date"])))
    return out


def newest_release_error(lines: list[str], version: str) -> str | None:
    """Why ``lines`` (the ``## `` headings) disagree with ``version``, or None."""
    if not lines or lines[0] != "## [Unreleased]":
        return f"the first section must be '## [Unreleased]', found {lines[:1]}"
    if lines.count("## [Unreleased]") != 1:
        return "more than one '## [Unreleased]' section"
    releases = released(lines)
    versions = [v for v, _ in releases]
    if versions != sorted(versions, reverse=True) or len(set(versions)) != len(versions):
        return f"released headings must be newest first, each once: {[str(v) for v in versions]}"
    dates = [d for _, d in releases]
    if dates != sorted(dates, reverse=True):
        return f"released dates must go back in time: {[str(d) for d in dates]}"
    if versions and versions[0] != Version(version):
        return (f"the newest released heading is {versions[0]} but fi_compat/_version.py says {version}: "
                "release by renaming Unreleased and setting __version__ in one commit")
    return None


def test_changelog_agrees_with_the_version_source():
    assert newest_release_error(headings(), __version__) is None, newest_release_error(headings(), __version__)
    assert fi_compat.__version__ == __version__


def test_the_check_catches_a_release_without_a_version_bump():
    # the rule above has teeth: each of these must be refused
    good = ["## [Unreleased]", "## [0.2.0] - 2027-02-01", "## [0.1.0] - 2027-01-01"]
    assert newest_release_error(good, "0.2.0") is None
    assert "0.2.0" in newest_release_error(good, "0.1.0")
    assert newest_release_error(good[1:], "0.2.0")  # no Unreleased section
    assert newest_release_error([good[0], good[2], good[1]], "0.2.0")  # out of order
    assert newest_release_error(["## [Unreleased]", "## [Unreleased]"], "0.1.0")


def test_sections_are_keep_a_changelog_kinds():
    for line in CHANGELOG.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            assert line[4:] in SECTIONS, f"CHANGELOG.md section {line!r}: Keep a Changelog uses {sorted(SECTIONS)}"
