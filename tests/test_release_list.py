"""The matrix release list against the adapters' verified ranges.

``fi_compat.release_list.MATRIX_RELEASES`` is what ``nox -s matrix`` runs; an
adapter's ``verified`` range is a claim that the matrix ran (and passed) the
releases in it.  Two ways for them to drift apart, each a failure:

* a matrix release that no adapter covers (the matrix runs something that
  fi_compat would refuse or only half-support);
* a published release that a range covers but the matrix never runs (a
  verified claim with no run behind it).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_compat.adapters import ADAPTERS
from fi_compat.release_list import MATRIX_RELEASES, PUBLISHED_RELEASES

ROOT = Path(__file__).resolve().parent.parent


def release_list_problems(matrix, published, adapters) -> list[str]:
    """Everything wrong between a matrix list, the published list and adapters."""
    problems = []
    for release in matrix:
        if not any(a.covers(Version(release)) for a in adapters):
            problems.append(f"matrix release {release} is covered by no adapter's verified range")
    ran = {Version(r) for r in matrix}
    for release in published:
        for adapter in adapters:
            if adapter.covers(Version(release)) and Version(release) not in ran:
                problems.append(
                    f"{adapter.name} claims {release} ({adapter.verified}) but the matrix never runs it"
                )
    if len(set(matrix)) != len(matrix):
        problems.append("the matrix lists a release twice")
    return problems


def fake_adapter(name: str, spec: str):
    verified = SpecifierSet(spec)
    return SimpleNamespace(
        name=name, verified=verified,
        covers=lambda v: v is not None and verified.contains(v, prereleases=False),
    )


def test_matrix_and_ranges_agree():
    assert release_list_problems(MATRIX_RELEASES, PUBLISHED_RELEASES, ADAPTERS) == []


def test_matrix_releases_are_published():
    assert set(MATRIX_RELEASES) <= set(PUBLISHED_RELEASES)
    assert list(MATRIX_RELEASES) == sorted(MATRIX_RELEASES, key=Version), "keep the list in release order"


@pytest.mark.parametrize(
    "matrix, published, ranges, expected",
    [
        # a matrix release outside every range
        (["0.6.13", "0.7.5"], ["0.6.13", "0.7.5"], [">=0.6.13,<=0.7.4"],
         ["matrix release 0.7.5 is covered by no adapter's verified range"]),
        # a range claiming a published release the matrix does not run
        (["0.6.13"], ["0.6.13", "0.6.14"], [">=0.6.13,<0.6.15"],
         ["a claims 0.6.14 (<0.6.15,>=0.6.13) but the matrix never runs it"]),
        # an unpublished pre-release is never claimed, so need not be run
        (["0.6.13"], ["0.6.13", "0.6.14rc1"], [">=0.6.13,<0.6.15"], []),
    ],
)
def test_the_check_can_fail(matrix, published, ranges, expected):
    adapters = [fake_adapter(chr(ord("a") + i), spec) for i, spec in enumerate(ranges)]
    assert release_list_problems(matrix, published, adapters) == expected


def test_noxfile_takes_the_list_from_fi_compat():
    """One place for the list: the noxfile parametrizes over MATRIX_RELEASES and
    spells no release number itself (DEFAULT_FLASHINFER aside)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "MATRIX_RELEASES" in names
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    spelled = [s for s in literals if s.count(".") >= 2 and s.replace(".", "").replace("post", "").isdigit()]
    assert spelled == [], f"release numbers spelled in noxfile.py: {spelled}"
