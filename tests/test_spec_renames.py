"""A parameter renamed or removed, declared in the spec (``FunctionSpec.renamed`` /
``.removed``): the binding, the signature comparison and the key layouts read
the declaration; without it the difference is still an error or a mismatch.
The same on a real release's decode function: tests/matrix/test_drift_renames.py."""

from __future__ import annotations

import pytest
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
