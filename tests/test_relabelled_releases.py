"""A real release under another label bounds exactly what the release itself bounds (issue 46).

flashinfer's nightly workflow labels its builds ``X.devYYYYMMDD``, which sorts before ``X``
although the code may hold what ``X`` holds; a source checkout carries whatever its
``version.txt`` says, and may lag its code.  fi_compat used to skip every row whose function
"arrived in" a release the label sorted before: on 0.6.18's code labelled
``0.6.18.dev20260822`` it left the nearest-profile memo unbounded on SGLang's call (435 B per
new length) and said only "unverified".  Now presence decides: each row is judged by the
release the code has reached by what it holds (fi_compat/verdict/code_release.py).

Here the real wheels are written again with only their version changed (helpers/relabel.py):
the guard's static verdict on each matches the release's, row by row, on every release from
0.6.4 to 0.7.4 the wheel cache holds; and fi_compat installed on relabelled 0.6.18 wheels under
the CPU-host shim, driven with SGLang's call over distinct lengths, leaves flashinfer's
memory exactly as bounded as on 0.6.18 itself, by the census of flashinfer's caches and by
memory.  The labels only change what fi_compat says (unverified), never what it bounds."""

from __future__ import annotations

import pytest
from packaging.version import Version

from fi_compat.commands.guard.check import GUARD_UNVERIFIED, GUARD_VERIFIED, check_wheel
from fi_compat.commands.guard.wheel import WheelSources, lookup_for
from fi_compat.model.release_list import OLDER_CHECKED_RELEASES, PUBLISHED_RELEASES
from fi_compat.verdict.judgement import judge_release

from helpers.relabel import bounded_by_memory, relabelled_wheel

NIGHTLY = "0.6.18.dev20260822"  # as flashinfer's nightly workflow labels a build of 0.6.18's code
LAGGING = "0.6.17+gfb28d72"  # a source build whose version.txt still says 0.6.17, with a local git label

#: The first and last release of each form the rows' functions took, the older releases an engine
#: pins, and the newest: each relabelled must be judged as the release.
RELEASES = ("0.6.4", "0.6.12", "0.6.13", "0.6.15", "0.6.15.post1", "0.6.16", "0.6.17", "0.6.18", "0.7.1", "0.7.4")


def test_the_releases_are_real_ones():
    assert set(RELEASES) <= set(PUBLISHED_RELEASES) | set(OLDER_CHECKED_RELEASES)


def kinds(judged) -> list[tuple[str, str]]:
    return [(v.bound.name, str(v.kind)) for v in judged.rows]


@pytest.mark.parametrize("release", RELEASES)
def test_every_label_of_a_release_gets_its_verdicts(release, real_wheel):
    """A nightly's, a pre-release's and a local label on the real wheel's code: every row has
    the release's own verdict.  Only the outcome's words differ: a label that does not name the
    code (the matrix ran the release, not the build) is unverified."""
    with WheelSources.open(real_wheel(release)) as wheel:
        lookup = lookup_for(wheel)
        as_released = judge_release(lookup, Version(release))
        labels = {f"{release}.dev20260822": "unverified", f"{release}+gfb28d72": str(as_released.outcome)}
        if "post" not in release:
            labels[f"{release}rc1"] = "unverified"
        for label, outcome in labels.items():
            judged = judge_release(lookup, Version(label))
            assert kinds(judged) == kinds(as_released), label
            expected = str(as_released.outcome) if as_released.outcome == "predates" else outcome
            assert str(judged.outcome) == expected, (label, judged.reason())


@pytest.mark.parametrize("release", RELEASES)
def test_an_unlabelled_build_is_judged_by_what_its_code_holds(release, real_wheel):
    """No usable label (an editable checkout without its build metadata: release detection and
    the guard read none): from 0.6.13 on the code dates itself, and every row has the release's
    verdict, unverified.  0.6.12's code dates itself 0.6.12 only as a lower bound, so the three
    rows whose functions it has in their form are bounded (free: those memos leak nothing
    there); 0.6.4's holds nothing any spec dates, and the rows it lacks are missing, loudly."""
    with WheelSources.open(real_wheel(release)) as wheel:
        lookup = lookup_for(wheel)
        as_released = judge_release(lookup, Version(release))
        unlabelled = judge_release(lookup, None)
    if release == "0.6.4":
        assert str(unlabelled.outcome) == "partial" and unlabelled.code is None
    elif release == "0.6.12":
        assert str(unlabelled.outcome) == "unverified" and unlabelled.code == Version("0.6.12")
        bound = {v.bound.name for v in unlabelled.rows if str(v.kind) == "bound"}
        assert bound == {"split-kv", "split-kv-modular", "nearest-profile"}
    else:
        assert kinds(unlabelled) == kinds(as_released) and str(unlabelled.outcome) == "unverified"


def test_a_label_that_lags_the_code_is_judged_by_the_code(real_wheel):
    """0.6.18's code labelled 0.6.17: by label, the HCA sizer and the 0.6.18 nearest-profile memo
    had not arrived and were skipped; by what the code holds (use_fp16_softmax, the memo itself)
    it is 0.6.18's, and they are bounded as on 0.6.18, unverified."""
    with WheelSources.open(real_wheel("0.6.18")) as wheel:
        lookup = lookup_for(wheel)
        as_released = judge_release(lookup, Version("0.6.18"))
        lagging = judge_release(lookup, Version(LAGGING))
    assert kinds(lagging) == kinds(as_released) and lagging.code == Version("0.6.18")
    row = next(v for v in lagging.rows if v.bound.name == "nearest-profile-cached")
    assert str(row.kind) == "bound" and not row.verified
    assert f"flashinfer {LAGGING} holds 0.6.18's code or newer" in row.reason


def test_a_post_release_build_holds_what_its_base_release_holds(real_wheel):
    """A post-release's development build (``0.6.13.post0.dev913``) comes after 0.6.13, so its
    code must hold 0.6.13's: on 0.6.12's code under that label the tuning-config builder (0.6.13)
    is missing, loudly, not skipped as not yet arrived because nothing else dates the code."""
    with WheelSources.open(real_wheel("0.6.12")) as wheel:
        judged = judge_release(lookup_for(wheel), Version("0.6.13.post0.dev913"))
    assert judged.code == Version("0.6.13") and str(judged.outcome) == "partial", judged.reason()
    row = next(v for v in judged.rows if v.bound.name == "builder")
    assert str(row.kind) == "missing", row.reason


def test_the_guard_on_a_relabelled_wheel(real_wheel, tmp_path):
    """The nightly label written into the wheel (METADATA and _build_meta.py): the guard reads
    that version and bounds every row 0.6.18 bounds, unverified; 0.6.18 itself stays verified."""
    wheel = relabelled_wheel(real_wheel("0.6.18"), NIGHTLY, tmp_path)
    nightly = check_wheel(wheel, "--wheel")
    released = check_wheel(real_wheel("0.6.18"), "--wheel")
    assert (nightly.release, nightly.verdict, released.verdict) == (NIGHTLY, GUARD_UNVERIFIED, GUARD_VERIFIED)
    assert [(b["name"], b["verdict"]) for b in nightly.bounds] == [(b["name"], b["verdict"]) for b in released.bounds]
    assert nightly.mismatches == [] and "not-in-release" not in {
        b["verdict"] for b in nightly.bounds if b["name"] in ("nearest-profile-cached", "split-kv-hca")}


# --------------------------------------------------------------------------- measured by memory


@pytest.fixture(scope="module")
def measured(real_wheel, tmp_path_factory):
    """What SGLang's call leaves in flashinfer's memory with fi_compat installed, on 0.6.18 and on
    its code under the nightly's and the lagging source build's labels."""
    results = {}
    for label in ("0.6.18", NIGHTLY, LAGGING):
        scratch = tmp_path_factory.mktemp(f"relabelled-{label}")
        wheel = real_wheel("0.6.18") if label == "0.6.18" else relabelled_wheel(real_wheel("0.6.18"), label, scratch)
        results[label] = bounded_by_memory(wheel, scratch)
    return results


def test_the_children_ran_the_labelled_wheels(measured):
    for label, seen in measured.items():
        assert (seen["flashinfer"], seen["release"], seen["state"]) == (label, label, "installed")


def test_sglangs_call_reaches_the_memos_that_would_leak(measured):
    """The calls reach the 0.6.18 nearest-profile memo and the tuning config on every run: left
    unbounded, both grow per new length (the first 435 B a length, to flashinfer's 16,384 entries)."""
    for label, seen in measured.items():
        assert seen["reached"].get("nearest-profile-cached", 0) > 0, (label, seen["reached"])
        assert seen["reached"].get("tuning-config", 0) > 0, (label, seen["reached"])


@pytest.mark.parametrize("label", [NIGHTLY, LAGGING])
def test_a_relabelled_release_bounds_exactly_what_the_release_bounds(label, measured):
    released, relabelled = measured["0.6.18"], measured[label]
    assert released["outcome"] == "verified" and relabelled["outcome"] == "unverified"
    assert {name: kind for name, (kind, _) in relabelled["rows"].items()} == {
        name: kind for name, (kind, _) in released["rows"].items()}
    assert relabelled["patched"] == released["patched"]
    # flashinfer's own memory: no cache of its grows, and nothing grows per length, on either
    assert relabelled["flashinfer_grown"] == released["flashinfer_grown"] == {}
    assert relabelled["sites"] == released["sites"] == []
