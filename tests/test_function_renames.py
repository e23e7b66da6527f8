"""A flashinfer function renamed or moved upstream is one line in fi_compat/model/specs.py (issue 48).

The real 0.7.4 wheel, edited in the test (helpers/guard_releases.py, helpers/relabel.py): the
tuning-config memo renamed (``_mla_decode_tuning_config`` -> ``_mla_decode_profile_config``, as
the ``_batch_mla`` redesign renames things), and, in the guard's ``moved-renamed`` release, the
memo and its builder moved to ``flashinfer/mla/_batch_mla/_core.py`` as well.  Without a spec
line the row is lost (``missing``: the guard says ``unsupported``, and flashinfer's renamed memo
grows per length on SGLang's call); with the one line (``TUNING_CONFIG.renamed_to(...)``,
``.moved_to(...)``, applied here to the spec object in place, as an edit of specs.py would be)
the guard, the doctor's lookup and the runtime find the memo at its new home and bound it as on
the release, and flashinfer's memory stays bounded, counted by memory."""

from __future__ import annotations

import pytest
from packaging.version import Version

from fi_compat.commands.guard.check import GUARD_UNSUPPORTED, GUARD_UNVERIFIED, GUARD_VERIFIED, check_wheel
from fi_compat.model import specs

from helpers.guard_releases import BATCH_MLA_MODULE, RELEASES, RENAMED_CONFIG, edited_wheel
from helpers.drift_source import SourceEditor, rename_function
from helpers.relabel import bounded_by_memory, declared, relabelled_wheel

CORE = "flashinfer/mla/_core.py"
CONFIG = specs.TUNING_CONFIG.name  # as 0.7.4 names it (the tests below declare other names)
MOVED_TO = f"flashinfer.mla.{BATCH_MLA_MODULE}"  # where the moved-renamed release defines both


def rename_memo(files: dict[str, str]) -> dict[str, str]:
    """The tuning-config memo renamed where it is defined and called (flashinfer/mla/_core.py)."""
    source = SourceEditor(files[CORE])
    rename_function(source, CONFIG, RENAMED_CONFIG)
    return {CORE: source.result()}


def declare(monkeypatch, spec, changed) -> None:
    """The spec line, in this process and undone after the test: the fields it changes,
    written into the one spec object every row holds."""
    for field, value in declared(spec, changed).items():
        monkeypatch.setitem(spec.__dict__, field, value)


@pytest.fixture(scope="module")
def renamed(real_wheel, tmp_path_factory):
    """0.7.4 with its memo renamed, as 0.7.4 (what that release would have been) and as 0.7.5."""
    scratch = tmp_path_factory.mktemp("renamed")
    return {label: relabelled_wheel(real_wheel("0.7.4"), label, scratch / label, edit=rename_memo)
            for label in ("0.7.4", "0.7.5")}


def rows(result) -> dict[str, tuple[str, bool]]:
    return {row["name"]: (str(row["verdict"]), row["verified"]) for row in result.bounds}


def test_without_the_line_the_renamed_memo_is_missing(renamed):
    result = check_wheel(renamed["0.7.4"], "--wheel")
    assert result.verdict == GUARD_UNSUPPORTED
    assert rows(result)["tuning-config"] == ("missing", False)
    assert f"{specs.TUNING_CONFIG.qualname} is missing" in result.reason


def test_one_spec_line_makes_it_verified(renamed, real_wheel, monkeypatch):
    released = rows(check_wheel(real_wheel("0.7.4"), "--wheel"))
    declare(monkeypatch, specs.TUNING_CONFIG, specs.TUNING_CONFIG.renamed_to(RENAMED_CONFIG, in_release="0.7.4"))
    result = check_wheel(renamed["0.7.4"], "--wheel")
    assert result.verdict == GUARD_VERIFIED, result.reason
    assert rows(result) == released  # every row as on the release
    row = next(row for row in result.bounds if row["name"] == "tuning-config")
    assert row["cache"] == f"flashinfer.mla._core.{RENAMED_CONFIG}" and "moved" not in row["reason"]


def test_a_line_for_the_next_release_changes_nothing_before_it(renamed, real_wheel, monkeypatch):
    """The rename declared for 0.7.5: the real 0.7.4 (the old name) stays verified, and the edited
    wheel as 0.7.5 gets what the unedited 0.7.4 code gets as 0.7.5 (unverified: no matrix run)."""
    declare(monkeypatch, specs.TUNING_CONFIG, specs.TUNING_CONFIG.renamed_to(RENAMED_CONFIG, in_release="0.7.5"))
    assert check_wheel(real_wheel("0.7.4"), "--wheel").verdict == GUARD_VERIFIED
    edited = check_wheel(renamed["0.7.5"], "--wheel")
    unedited = check_wheel(relabelled_wheel(real_wheel("0.7.4"), "0.7.5", renamed["0.7.5"].parent / "unedited"),
                           "--wheel")
    assert (edited.verdict, unedited.verdict) == (GUARD_UNVERIFIED, GUARD_UNVERIFIED)
    assert {name: kind for name, (kind, _) in rows(edited).items()} == {
        name: kind for name, (kind, _) in rows(unedited).items()}
    # a nightly of 0.7.5 with the new name: the name is 0.7.5's, so its code is judged as 0.7.5's
    nightly = check_wheel(relabelled_wheel(real_wheel("0.7.4"), "0.7.5.dev1", renamed["0.7.5"].parent / "dev",
                                           edit=rename_memo), "--wheel")
    row = next(row for row in nightly.bounds if row["name"] == "tuning-config")
    assert row["verdict"] == "bound" and "flashinfer 0.7.5.dev1 holds 0.7.5's code or newer" in row["reason"]
    # and the released 0.7.4 code labelled 0.7.5 (the old name, after the line says it changed): bound, said where
    stale = next(row for row in unedited.bounds if row["name"] == "tuning-config")
    assert stale["verdict"] == "bound" and f"found as {specs.CORE_MODULE}.{CONFIG}, its home before 0.7.5" in (
        stale["reason"])


def test_a_move_and_rename_is_one_line_per_function(real_wheel, tmp_path, monkeypatch):
    """The guard's moved-renamed release: the memo (renamed) and its builder moved into
    flashinfer/mla/_batch_mla/_core.py and imported back.  Without lines the memo is lost; with
    one line each, both are found at their new home, not as a guess of where they moved."""
    wheel, _ = edited_wheel(real_wheel("0.7.4"), RELEASES["moved-renamed"], tmp_path)
    before = check_wheel(wheel, "--wheel")
    assert before.verdict == GUARD_UNSUPPORTED and rows(before)["tuning-config"][0] == "missing"
    declare(monkeypatch, specs.TUNING_CONFIG,
            specs.TUNING_CONFIG.moved_to(MOVED_TO, in_release="0.7.5", name=RENAMED_CONFIG))
    declare(monkeypatch, specs.TUNING_CONFIG_BUILDER, specs.TUNING_CONFIG_BUILDER.moved_to(MOVED_TO, in_release="0.7.5"))
    after = check_wheel(wheel, "--wheel")
    assert after.verdict == GUARD_UNVERIFIED, after.reason  # a 0.7.5 nightly's label: never verified
    assert {name: kind for name, (kind, _) in rows(after).items()} == {
        name: kind for name, (kind, _) in rows(check_wheel(real_wheel("0.7.4"), "--wheel")).items()}
    for name in ("tuning-config", "builder"):
        row = next(row for row in after.bounds if row["name"] == name)
        assert "_batch_mla/_core.py" in row["where"] and "moved from" not in row["reason"], row


# --------------------------------------------------------------------------- the runtime, measured by memory


@pytest.fixture(scope="module")
def measured(renamed, tmp_path_factory):
    """SGLang's call on 0.7.4 with its memo renamed, fi_compat installed without and with the line."""
    line = ("TUNING_CONFIG", "renamed_to", (RENAMED_CONFIG,), {"in_release": "0.7.4"})
    return {
        case: bounded_by_memory(renamed["0.7.4"], tmp_path_factory.mktemp(case), declare=declare_)
        for case, declare_ in (("without", ()), ("with", (line,)))
    }


def test_without_the_line_flashinfers_renamed_memo_grows_per_length(measured):
    seen = measured["without"]
    assert seen["rows"]["tuning-config"] == ["missing", False]
    grown = seen["flashinfer_grown"].get(f"flashinfer.mla._core.{RENAMED_CONFIG}")
    assert grown is not None and min(grown) >= 20, seen["flashinfer_grown"]  # about one entry per new length
    assert any(RENAMED_CONFIG in site[1] for site in seen["sites"]), seen["sites"]


def test_with_the_line_the_runtime_bounds_it_at_its_new_name(measured):
    seen = measured["with"]
    assert (seen["release"], seen["outcome"], seen["rows"]["tuning-config"]) == ("0.7.4", "verified", ["bound", True])
    assert f"flashinfer.mla._core.{RENAMED_CONFIG}" in seen["patched"]
    assert seen["reached"]["tuning-config"] > 0  # SGLang's call reaches it ...
    assert seen["flashinfer_grown"] == {} and seen["sites"] == []  # ... and flashinfer's memory stays bounded
    assert Version(seen["flashinfer"]) == Version("0.7.4")
