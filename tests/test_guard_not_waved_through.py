"""Requirements the guard used to pass (exit 0) without checking them (issue #22):

* a code host's archive URL of the flashinfer repository
  (``https://github.com/flashinfer-ai/flashinfer/archive/refs/tags/v0.7.4.tar.gz``,
  ``.zip``, ``flashinfer @ URL``), whose file name (``v0.7.4.tar.gz``) does
  not say flashinfer: "nothing to check";
* ``flashinfer-python==X @ URL``, which pip refuses: read as an unnamed URL;
* offline, a range reaching past the built-in release list:
  ``>=0.6.12,<0.6.14`` checked 0.6.13 only and passed, though 0.6.12 exists.

Each must now exit 2 and say what was not checked.  Nothing here downloads
from GitHub (the archive URLs must be refused before any download, with or
without ``--download``); the offline cases read real wheels from the guard's
wheel cache (``real_wheel``, tests/conftest.py), filled from PyPI once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from fi_compat.commands.guard.index import ReleaseSource, offline_gap, outside_list
from fi_compat.commands.guard.pins import UNCHECKABLE, read_pins
from fi_compat.model.release_list import PUBLISHED_RELEASES
from test_guard_wheels import run_json

TAG_ARCHIVE = "https://github.com/flashinfer-ai/flashinfer/archive/refs/tags/v0.7.4"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- archive URLs of flashinfer


@pytest.mark.parametrize("line", [
    f"{TAG_ARCHIVE}.tar.gz",
    f"{TAG_ARCHIVE}.zip",
    f"flashinfer @ {TAG_ARCHIVE}.zip",
    f"flashinfer-python @ {TAG_ARCHIVE}.tar.gz",
    "https://codeload.github.com/flashinfer-ai/flashinfer/tar.gz/refs/tags/v0.7.4",
    "https://gitlab.com/mirror/flashinfer/-/archive/v0.7.4/flashinfer-v0.7.4.zip",
])
@pytest.mark.parametrize("download", [False, True])
def test_archive_url_of_flashinfer_exits_2_without_downloading(tmp_path, capsys, line, download):
    req = write(tmp_path / "requirements.txt", f"numpy\n{line}\n")
    cache = tmp_path / "cache"
    flags = ["--download"] if download else ["--offline"]
    status, data = run_json(str(req), *flags, "--cache-dir", str(cache), capsys=capsys)
    assert status == 2, data
    (result,) = data["results"]
    assert (result["verdict"], result["origin"]) == ("error", f"{req}:2")
    reason = result["reason"]
    # Refused for what it is, not after a failed download: no "pip download failed".
    for words in ("source archive of the flashinfer repository", "--download fetches wheels only",
                  "flashinfer-python==0.7.4", "fi-compat guard --wheel"):
        assert words in reason, reason
    assert not cache.exists() or not any(cache.rglob("*")), "nothing may be downloaded for an archive URL"


def test_archive_url_in_pyproject_and_pin_is_flashinfer(tmp_path, capsys):
    pyproject = write(tmp_path / "pyproject.toml",
                      f'[project]\nname = "svc"\nversion = "1"\ndependencies = ["flashinfer @ {TAG_ARCHIVE}.zip"]\n')
    (found,) = read_pins(pyproject).found
    assert found.kind == UNCHECKABLE
    status, data = run_json(str(pyproject), "--pin", f"flashinfer @ {TAG_ARCHIVE}.tar.gz", "--offline",
                            capsys=capsys)
    assert status == 2
    assert [r["verdict"] for r in data["results"]] == ["error", "error"]


def test_archive_of_another_repository_is_still_not_flashinfer(tmp_path, capsys):
    req = write(tmp_path / "requirements.txt",
                "https://github.com/numpy/numpy/archive/refs/tags/v2.0.0.tar.gz\n"
                "numpy @ https://github.com/numpy/numpy/archive/main.zip\n")
    status, data = run_json(str(req), "--offline", capsys=capsys)
    assert (status, data["results"]) == (0, [])
    assert any("nothing to check" in note for note in data["notes"])


# --------------------------------------------------------------------------- flashinfer-python==X @ URL


@pytest.mark.parametrize("url", [f"{TAG_ARCHIVE}.zip",
                                 "https://example.invalid/flashinfer_python-0.7.4-py3-none-any.whl"])
def test_version_and_url_on_one_line_is_refused_as_pip_refuses_it(tmp_path, capsys, url):
    line = f"flashinfer-python==0.7.4 @ {url}"
    req = write(tmp_path / "requirements.txt", f"numpy\n{line}\n")
    pyproject = write(tmp_path / "svc" / "pyproject.toml",
                      f'[project]\nname = "svc"\nversion = "1"\ndependencies = [\n  "{line}",\n]\n')
    status, data = run_json(str(req), str(pyproject), "--pin", line, "--offline", capsys=capsys)
    assert status == 2
    origins = [r["origin"] for r in data["results"]]
    assert origins == [str(req), str(pyproject), f"--pin {line}"]
    for result, where in zip(data["results"], (f"{req}:2", f"{pyproject}:5", "--pin")):
        reason = result["reason"]
        assert result["verdict"] == "error" and reason.startswith(f"{where}: "), reason
        for words in ("takes no version", "pip refuses this line", f"`flashinfer-python @ {url}`",
                      "`flashinfer-python==0.7.4`"):
            assert words in reason, reason


# --------------------------------------------------------------------------- offline ranges past the built-in list


def test_outside_list_names_each_side_a_range_reaches_past():
    listed = PUBLISHED_RELEASES
    oldest, newest = listed[0], listed[-1]
    assert (oldest, newest) == ("0.6.13", "0.7.4")  # the words below assume this list
    cases = {
        ">=0.6.12,<0.6.14": ["releases before 0.6.13"],
        "==0.6.*": ["releases before 0.6.13"],
        "<0.6.15": ["releases before 0.6.13"],
        ">0.6.12": ["releases before 0.6.13", "releases after 0.7.4"],
        "": ["releases before 0.6.13", "releases after 0.7.4"],
        "!=0.6.14": ["releases before 0.6.13", "releases after 0.7.4"],
        ">=0.7": ["releases after 0.7.4"],
        ">=0.7,<0.7.5": ["releases after 0.7.4"],
        "==0.7.*": ["releases after 0.7.4"],
        "~=0.7.4": ["releases after 0.7.4"],
        ">=0.6.13,<=0.7.4": [],
        ">=0.6.14,<0.7": [],
        "~=0.6.13": [],  # >=0.6.13, <0.7
        ">0.6.18,<0.6.18.post1": [],  # empty: "no release satisfies" says it
        ">=0.9,<0.8": [],  # empty
    }
    for text, parts in cases.items():
        assert outside_list(SpecifierSet(text), listed) == parts, text


def test_offline_gap_says_why_and_what_to_do():
    assert offline_gap(SpecifierSet("==0.6.12"), ReleaseSource(offline=True)) is None  # a pin needs no list
    assert offline_gap(SpecifierSet(">=0.6.14,<0.6.16"), ReleaseSource(offline=True)) is None
    gap = offline_gap(SpecifierSet(">=0.6.12,<0.6.14"), ReleaseSource(offline=True))
    for words in ("admits releases before 0.6.13, which were not checked", "--offline",
                  "fi_compat.model.release_list.PUBLISHED_RELEASES", "holds only 0.6.13 .. 0.7.4",
                  "without --offline", ">=0.6.13,<=0.7.4"):
        assert words in gap, gap
    unreachable = offline_gap(SpecifierSet(">=0.7.4"), ReleaseSource(python="/nonexistent/python"))
    assert "releases after 0.7.4" in unreachable and "the package index did not answer" in unreachable


def test_offline_range_reaching_before_the_list_exits_2_and_checks_what_it_lists(real_wheel, wheel_cache, capsys):
    real_wheel("0.6.13")
    status, data = run_json("--pin", "flashinfer-python>=0.6.12,<0.6.14", "--offline", "--cache-dir",
                            str(wheel_cache), capsys=capsys)
    assert status == 2
    errors = [r for r in data["results"] if r["verdict"] == "error"]
    checked = [(r["release"], r["verdict"]) for r in data["results"] if r["verdict"] != "error"]
    assert checked == [("0.6.13", "verified")]
    (error,) = errors
    assert "releases before 0.6.13, which were not checked" in error["reason"], error["reason"]


def test_offline_range_reaching_after_the_list_exits_2(real_wheel, wheel_cache, capsys):
    real_wheel("0.7.4")
    status, data = run_json("--pin", "flashinfer-python>=0.7.4", "--offline", "--cache-dir", str(wheel_cache),
                            capsys=capsys)
    assert status == 2
    assert [(r["release"], r["verdict"]) for r in data["results"] if r["verdict"] != "error"] == [
        ("0.7.4", "verified")]
    assert any("releases after 0.7.4" in r["reason"] for r in data["results"] if r["verdict"] == "error")


def test_offline_range_inside_the_list_is_checked_as_before(real_wheel, wheel_cache, capsys):
    real_wheel("0.6.14")
    status, data = run_json("--pin", "flashinfer-python>=0.6.14,<0.6.15", "--offline", "--cache-dir",
                            str(wheel_cache), capsys=capsys)
    assert status == 0, data
    assert [(r["release"], r["verdict"]) for r in data["results"]] == [("0.6.14", "verified")]
    assert any("built-in list" in note for note in data["notes"])
