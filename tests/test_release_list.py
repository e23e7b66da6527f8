"""The matrix release list against the bounded caches' verified ranges.

``fi_compat.model.release_list.MATRIX_RELEASES`` is what ``nox -s matrix`` runs; a
row's ``verified`` range in :data:`fi_compat.verdict.bounds.BOUNDS` is a claim that
the matrix ran (and passed) the releases in it.  Two ways for them to drift
apart, each a failure:

* a matrix release that has a row's function but lies outside that row's
  range (the matrix runs something fi_compat would call unverified);
* a published release that a row's range covers but the matrix never runs (a
  verified claim with no run behind it).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_compat.verdict.bounds import BOUNDS
from fi_compat.model.release_list import MATRIX_RELEASES, PUBLISHED_RELEASES

ROOT = Path(__file__).resolve().parent.parent


def release_list_problems(matrix, published, bounds) -> list[str]:
    """Everything wrong between a matrix list, the published list and the rows' ranges."""
    problems = []
    for release in matrix:
        for bound in bounds:
            if bound.spec.present_in(Version(release)) and not bound.verified.contains(Version(release), prereleases=False):
                problems.append(f"matrix release {release} has {bound.name} but lies outside its verified range")
    ran = {Version(r) for r in matrix}
    for release in published:
        for bound in bounds:
            if bound.verified.contains(Version(release), prereleases=False) and Version(release) not in ran:
                problems.append(f"{bound.name} claims {release} ({bound.verified}) but the matrix never runs it")
    if len(set(matrix)) != len(matrix):
        problems.append("the matrix lists a release twice")
    return problems


def fake_bound(name: str, spec: str, added_in: str = "0.6.13"):
    return SimpleNamespace(name=name, verified=SpecifierSet(spec),
                           spec=SimpleNamespace(present_in=lambda v: v >= Version(added_in)))


def test_matrix_and_ranges_agree():
    assert release_list_problems(MATRIX_RELEASES, PUBLISHED_RELEASES, BOUNDS) == []


def test_matrix_releases_are_published():
    assert set(MATRIX_RELEASES) <= set(PUBLISHED_RELEASES)
    assert list(MATRIX_RELEASES) == sorted(MATRIX_RELEASES, key=Version), "keep the list in release order"


@pytest.mark.parametrize(
    "matrix, published, ranges, expected",
    [
        # a matrix release outside a range whose function it has
        (["0.6.13", "0.7.5"], ["0.6.13", "0.7.5"], [(">=0.6.13,<=0.7.4", "0.6.13")],
         ["matrix release 0.7.5 has a but lies outside its verified range"]),
        # a release that predates the row's function need not be in its range
        (["0.6.13", "0.6.15.post1"], ["0.6.13", "0.6.15.post1"], [(">=0.6.15.post1", "0.6.15.post1")], []),
        # a range claiming a published release the matrix does not run
        (["0.6.13"], ["0.6.13", "0.6.14"], [(">=0.6.13,<0.6.15", "0.6.13")],
         ["a claims 0.6.14 (<0.6.15,>=0.6.13) but the matrix never runs it"]),
        # an unpublished pre-release is never claimed, so need not be run
        (["0.6.13"], ["0.6.13", "0.6.14rc1"], [(">=0.6.13,<0.6.15", "0.6.13")], []),
    ],
)
def test_the_check_can_fail(matrix, published, ranges, expected):
    bounds = [fake_bound(chr(ord("a") + i), spec, added) for i, (spec, added) in enumerate(ranges)]
    assert release_list_problems(matrix, published, bounds) == expected


def test_noxfile_takes_the_list_from_fi_compat():
    """One place for the list: the noxfile parametrizes over MATRIX_RELEASES and
    spells no release number itself (DEFAULT_FLASHINFER aside)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "MATRIX_RELEASES" in names
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    spelled = [s for s in literals if s.count(".") >= 2 and s.replace(".", "").replace("post", "").isdigit()]
    assert spelled == [], f"release numbers spelled in noxfile.py: {spelled}"
