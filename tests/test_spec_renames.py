"""A parameter renamed or removed, declared in the spec (``FunctionSpec.renamed`` /
``.removed``): the binding, the signature comparison and the key layouts read
the declaration; without it the difference is still an error or a mismatch.
The same on a real release's decode function: tests/matrix/test_drift_declared.py.

A function renamed, moved or removed (``FunctionSpec.renamed_to`` / ``.moved_to`` /
``.retired``): the lookups look at every home the spec gives it and the verdict reads
the declaration.  On a real 0.7.4 wheel edited with its memo renamed or moved:
tests/test_function_renames.py."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from fi_compat.adapters.layout import ArgumentLayout
from fi_compat.calls.binding import Binding
from fi_compat.errors import UnsupportedFeatureError
from fi_compat.lookup import describe_callable
from fi_compat.model.signatures import compare
from fi_compat.model.specs import FunctionSpec, Param

BASE = FunctionSpec("flashinfer.fake", "scaled", (Param("a"), Param("b"), Param("s1", 1.0), Param("gain", 1.0)))
RENAMED = BASE.renamed("gain", "scale", in_release="2.0")  # the one line a rename takes
REMOVED = BASE.removed("gain", in_release="2.0")


def old(a, b, s1=1.0, gain=1.0):
    return dict(locals())


def new(a, b, s1=1.0, scale=1.0):
    return dict(locals())


def without(a, b, s1=1.0):
    return dict(locals())


def bind(spec, function, release):
    return Binding(spec, function, api_name="fi_compat.scaled", release=release)


def test_the_declaration_is_data_on_the_param():
    param = RENAMED.param("scale")
    assert param.renamed_from == ("gain", "2.0") and RENAMED.names == ("a", "b", "s1", "scale")
    assert [param.name_in(Version(v)) for v in ("1.9", "2.0", "2.1")] == ["gain", "scale", "scale"]
    assert REMOVED.removed_at(Version("1.9")) == {} and REMOVED.removed_at(Version("2.0")) == {"gain": "2.0"}
    with pytest.raises(KeyError):
        BASE.renamed("nope", "x", in_release="2.0")


@pytest.mark.parametrize("release,function", [("1.5", old), ("2.0", new), ("2.0.post1", new)])
@pytest.mark.parametrize(
    "args,kwargs", [((1, 2, 0.1, 0.5), {}), ((1, 2), {"scale": 0.5, "s1": 0.1}), ((1, 2, 0.1), {"scale": 0.5})]
)
def test_a_renamed_parameter_reaches_the_installed_name(release, function, args, kwargs):
    binding = bind(RENAMED, function, release)
    assert binding.error is None
    received = binding.call(args, kwargs)
    assert received == {"a": 1, "b": 2, "s1": 0.1, ("gain" if function is old else "scale"): 0.5}


def test_without_the_declaration_the_old_behaviour_stays():
    binding = bind(BASE, new, "2.0")  # the spec still says gain: the release's scale is unknown
    with pytest.raises(UnsupportedFeatureError, match="'gain' is not a parameter"):
        binding.call((1, 2), {"gain": 0.5})
    assert compare(BASE, describe_callable("f", new), Version("2.0")).difference == "gained optional parameter 'scale'"


def test_compare_expects_a_declared_rename_and_still_flags_others():
    assert compare(RENAMED, describe_callable("f", old), Version("1.5")) is None
    assert compare(RENAMED, describe_callable("f", new), Version("2.0")) is None
    # the release after the rename still calling it gain, or before it already scale: differences
    assert compare(RENAMED, describe_callable("f", old), Version("2.0")) is not None
    assert compare(RENAMED, describe_callable("f", new), Version("1.5")) is not None

    def other(a, b, s1=1.0, scale=1.0, extra=None):
        return None

    assert (
        "gained optional parameter 'extra'"
        in compare(RENAMED, describe_callable("f", other), Version("2.0")).difference
    )


def test_a_removed_parameter_passes_its_default_only():
    binding = bind(REMOVED, without, "2.0")
    assert binding.call((1, 2, 0.1), {}) == {"a": 1, "b": 2, "s1": 0.1}
    assert binding.call((1, 2, 0.1, 1.0), {}) == {"a": 1, "b": 2, "s1": 0.1}  # the default: not passed
    with pytest.raises(UnsupportedFeatureError) as raised:
        binding.call((1, 2), {"gain": 0.5})
    message = str(raised.value)
    assert "'gain'" in message and "flashinfer.fake.scaled" in message and "2.0" in message and "removed" in message
    # before the removal the parameter still reaches flashinfer
    assert bind(REMOVED, old, "1.9").call((1, 2), {"gain": 0.5})["gain"] == 0.5
    assert compare(REMOVED, describe_callable("f", without), Version("2.0")) is None
    assert compare(REMOVED, describe_callable("f", old), Version("1.9")) is None


def test_transparent_callers_keyword_under_the_installed_name():
    binding = bind(RENAMED, old, "1.5")
    assert binding.from_installed_order((1, 2), {"gain": 0.5}) == ((1, 2), {"scale": 0.5})


def test_the_layout_finds_a_renamed_argument_under_its_current_name():
    layout = ArgumentLayout.of(old, RENAMED.earlier_names())
    assert layout.index["scale"] == layout.index["gain"] == 3
    assert layout.complete((1, 2), {"gain": 0.5})[layout.index["scale"]] == 0.5
    assert "scale" not in ArgumentLayout.of(old).index  # without the declaration: not found


# --------------------------------------------------------------------------- a function renamed, moved or removed

TUNING = FunctionSpec("flashinfer.fake_mla", "tuning", (Param("a"), Param("b", 1)), added_in="1.0")
RENAMED_FUNCTION = TUNING.renamed_to("profile_tuning", in_release="2.0")  # the one line a rename takes
MOVED_FUNCTION = TUNING.moved_to("flashinfer.fake_mla.batch", in_release="2.0")  # the one line a move takes
RETIRED_FUNCTION = TUNING.retired("3.0")


def test_a_function_rename_move_or_removal_is_data_on_the_spec():
    assert (RENAMED_FUNCTION.qualname, MOVED_FUNCTION.qualname) == (
        "flashinfer.fake_mla.profile_tuning", "flashinfer.fake_mla.batch.tuning")
    assert [h.qualname for h in RENAMED_FUNCTION.homes()] == ["flashinfer.fake_mla.profile_tuning",
                                                              "flashinfer.fake_mla.tuning"]
    assert [RENAMED_FUNCTION.home_in(Version(v)).name for v in ("1.9", "2.0", "2.1")] == [
        "tuning", "profile_tuning", "profile_tuning"]
    assert RENAMED_FUNCTION.home_in(None).name == "profile_tuning"  # an unknown release: the newest home
    twice = MOVED_FUNCTION.renamed_to("batch_tuning", in_release="2.5")
    assert [twice.home_in(Version(v)).qualname for v in ("1.0", "2.0", "2.5")] == [
        "flashinfer.fake_mla.tuning", "flashinfer.fake_mla.batch.tuning", "flashinfer.fake_mla.batch.batch_tuning"]
    assert [RETIRED_FUNCTION.present_in(Version(v)) for v in ("0.9", "1.0", "2.9", "3.0")] == [
        False, True, True, False]
    assert RENAMED_FUNCTION.params == TUNING.params  # the parameters are the function's, wherever it lives
    with pytest.raises(ValueError, match="already lives"):
        TUNING.moved_to("flashinfer.fake_mla", in_release="2.0")


def test_forms_are_the_parameter_lists_a_function_had():
    growing = FunctionSpec("m", "f", (Param("a"), Param("b", 1, "1.5"), Param("c", 2, "2.0")), added_in="1.0")
    forms = growing.forms()
    assert [(release, form.names) for release, form in forms] == [
        ("1.0", ("a",)), ("1.5", ("a", "b")), ("2.0", ("a", "b", "c"))]
    renamed = growing.renamed("b", "bb", in_release="3.0")
    assert [form.names for _, form in renamed.forms()][-1] == ("a", "bb", "c")


FAKE_FILES = {
    "flashinfer/__init__.py": "from . import fake_mla\n",
    "flashinfer/fake_mla/__init__.py": "import functools\n\n\n@functools.cache\ndef {name}(a, b=1):\n    return a\n",
}


@pytest.mark.parametrize("lookup", ["live", "source"])
@pytest.mark.parametrize("defined", ["tuning", "profile_tuning"])
def test_lookups_find_a_function_at_each_home_the_spec_gives(lookup, defined, tmp_path):
    from fi_compat.lookup import DirectoryReader, find_live, source_lookup
    from helpers.fakes import loaded_files

    files = {path: text.format(name=defined) for path, text in FAKE_FILES.items()}
    with loaded_files(files, tmp_path):
        for spec, found_at in ((RENAMED_FUNCTION, defined), (TUNING, "tuning" if defined == "tuning" else None)):
            found = find_live(spec) if lookup == "live" else source_lookup(DirectoryReader(str(tmp_path)))(spec)
            if found_at is None:  # undeclared: the release's new name is nowhere the spec looks
                assert found is None
                continue
            assert found is not None and not found.moved
            assert (found.at.module, found.at.name, found.name) == ("flashinfer.fake_mla", found_at, found_at)
            assert found.memo == "unbounded" and found.function.text() == ["a", "b=…"]


def _row(spec):
    from fi_compat.verdict.bounds import Bound

    return Bound("fake", spec, key="tuning-config", grows_with="-", proof="-", verified=SpecifierSet(">=1.0"))


@pytest.mark.parametrize(
    "declared,defined,release,kind,words",
    [
        (TUNING, "profile_tuning", "2.0", "missing", "is missing"),  # without the line: the row is lost
        (RENAMED_FUNCTION, "profile_tuning", "2.0", "bound", "has an unbounded functools cache"),
        (RENAMED_FUNCTION, "tuning", "1.5", "bound", "has an unbounded functools cache"),
        # a build whose label says the new name but whose code has the old one: bound, and said where
        (RENAMED_FUNCTION, "tuning", "2.0", "bound", "found as flashinfer.fake_mla.tuning, its home before 2.0"),
        (RETIRED_FUNCTION, None, "3.0", "not-in-release", "was removed in 3.0"),
        (RETIRED_FUNCTION, None, "2.0", "missing", "is missing"),
    ],
)
def test_the_verdict_reads_the_declaration(declared, defined, release, kind, words, tmp_path):
    from fi_compat.lookup import DirectoryReader, source_lookup
    from fi_compat.verdict.judgement import judge

    from helpers.fakes import write_files

    files = dict(FAKE_FILES) if defined is not None else dict.fromkeys(FAKE_FILES, "")
    write_files(tmp_path, {path: text.format(name=defined) for path, text in files.items()})
    found = source_lookup(DirectoryReader(str(tmp_path)))(declared)
    verdict = judge(_row(declared), found, Version(release))
    assert (verdict.kind, words in verdict.reason) == (kind, True), verdict.reason
    if kind == "bound":
        assert not found.moved and "moved" not in verdict.reason
