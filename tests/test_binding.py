"""fi_compat.calls.binding: a call in the newest order reaches each installed
parameter by name, on drifted signatures written as plain functions that
return what they received (``locals()``).  The real releases and the drift
catalogue built from them are tests/matrix/test_call_api.py and
tests/matrix/test_drift_catalogue.py."""

from __future__ import annotations

import pytest

from fi_compat.calls.binding import Binding, is_default, same_default
from fi_compat.errors import SignatureMismatchError, UnsupportedFeatureError
from fi_compat.model.specs import DECODE, FunctionSpec, Param

# The newest signature of a small function: two required, two optional.
SPEC = FunctionSpec("flashinfer.fake", "scaled", (Param("a"), Param("b"), Param("s1", 1.0), Param("s2", 1.0)))


def bind(function, spec=SPEC) -> Binding:
    return Binding(spec, function, api_name="fi_compat.scaled", release="9.9.9")


class Recorder:
    """Counts calls, so a test can prove flashinfer never ran."""

    def __init__(self, function):
        self.function = function
        self.calls = 0
        self.__signature__ = __import__("inspect").signature(function)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


def same(a, b, s1=1.0, s2=1.0):
    return dict(locals())


def swapped(a, b, s2=1.0, s1=1.0):
    return dict(locals())


def test_same_order_passes_everything_positionally_on_the_fast_path():
    binding = bind(same)
    assert (binding.prefix, binding.direct_limit) == (4, 4)
    assert binding.direct_keywords[2] == {"s1", "s2"} and binding.direct_keywords[4] == frozenset()
    assert binding.call((1, 2, 0.1, 0.2), {}) == {"a": 1, "b": 2, "s1": 0.1, "s2": 0.2}


@pytest.mark.parametrize("args,kwargs", [((1, 2, 0.1, 0.2), {}), ((1, 2), {"s1": 0.1, "s2": 0.2}),
                                         ((), {"a": 1, "b": 2, "s2": 0.2, "s1": 0.1}), ((1, 2, 0.1), {"s2": 0.2})])
def test_swapped_parameters_receive_their_own_values(args, kwargs):
    binding = bind(swapped)
    assert binding.prefix == 2  # the order is proven the same for a, b only
    assert binding.call(args, kwargs) == {"a": 1, "b": 2, "s1": 0.1, "s2": 0.2}


def test_required_parameter_inserted_raises_before_the_call():
    def inserted(a, b, stride, s1=1.0, s2=1.0):
        return dict(locals())

    recorder = Recorder(inserted)
    binding = bind(recorder)
    with pytest.raises(SignatureMismatchError, match="gained required parameter 'stride', which fi_compat does not know"):
        binding.call((1, 2, 0.1, 0.2), {})
    assert recorder.calls == 0 and binding.direct_limit == -1


def test_removed_parameter_is_gated():
    def removed(a, b, s2=1.0):
        return dict(locals())

    recorder = Recorder(removed)
    binding = bind(recorder)
    assert binding.call((1, 2, 1.0, 0.2), {}) == {"a": 1, "b": 2, "s2": 0.2}  # s1 at its default: dropped
    with pytest.raises(UnsupportedFeatureError) as info:
        binding.call((1, 2, 0.1, 0.2), {})
    assert "'s1' is not a parameter of flashinfer.fake.scaled in the installed flashinfer-python 9.9.9" in str(info.value)
    assert recorder.calls == 1


def test_renamed_parameter_is_gated_and_its_new_name_is_never_guessed():
    def renamed(a, b, s1=1.0, output_scale=1.0):
        return dict(locals())

    binding = bind(renamed)
    assert binding.call((1, 2, 0.1), {}) == {"a": 1, "b": 2, "s1": 0.1, "output_scale": 1.0}
    with pytest.raises(UnsupportedFeatureError, match="'s2'"):
        binding.call((1, 2), {"s2": 0.2})


def test_keyword_only_parameters_are_passed_by_keyword():
    def keyword_only(a, b, *, s1=1.0, s2=1.0):
        return dict(locals())

    binding = bind(keyword_only)
    assert binding.prefix == 2
    assert binding.call((1, 2, 0.1, 0.2), {}) == {"a": 1, "b": 2, "s1": 0.1, "s2": 0.2}


def test_new_default_is_overridden_by_the_documented_one_and_reported():
    def new_default(a, b, s1=1.0, s2=2.0):
        return dict(locals())

    binding = bind(new_default)
    assert binding.direct_limit == -1  # every call takes the path that fills the default in
    assert binding.call((1, 2), {})["s2"] == 1.0
    assert binding.call((1, 2), {"s2": 3.0})["s2"] == 3.0
    message = binding.difference_message()
    assert "flashinfer-python 9.9.9: flashinfer.fake.scaled: 's2' defaults to 2.0 (the call API documents 1.0)" in message


def test_optional_parameter_made_required_gets_the_documented_default():
    def required_now(a, b, s1, s2=1.0):
        return dict(locals())

    binding = bind(required_now)
    assert binding.call((1, 2), {}) == {"a": 1, "b": 2, "s1": 1.0, "s2": 1.0}
    assert "'s1' has no default" in binding.difference_message()


def test_equal_defaults_of_another_numeric_type_are_not_a_difference():
    def int_default(a, b, s1=1, s2=1.0):
        return dict(locals())

    assert bind(int_default).difference_message() is None


def test_positional_only_parameters_inside_the_shared_prefix_are_passed_positionally():
    def positional_only(a, b, /, s2=1.0, s1=1.0):
        return dict(locals())

    binding = bind(positional_only)
    assert binding.call((), {"a": 1, "b": 2, "s1": 0.1}) == {"a": 1, "b": 2, "s2": 1.0, "s1": 0.1}


def test_positional_only_parameter_off_the_shared_prefix_is_a_mismatch():
    def moved_positional_only(a, s1, b, /, s2=1.0):
        return dict(locals())

    with pytest.raises(SignatureMismatchError, match="'s1' became positional-only at position 2"):
        bind(moved_positional_only).call((1, 2, 0.1), {})


def test_lost_required_parameter_and_missing_function_and_no_signature():
    def lost(a, s1=1.0, s2=1.0):
        return dict(locals())

    with pytest.raises(SignatureMismatchError, match="has no parameter 'b', which the call API requires"):
        bind(lost).call((1, 2), {})
    with pytest.raises(SignatureMismatchError, match="is missing"):
        bind(None).call((1, 2), {})
    with pytest.raises(SignatureMismatchError, match="has no signature fi_compat can read"):
        bind(max).call((1, 2), {})


def test_keywords_the_installed_function_collects_in_kwargs_are_still_gated():
    def collects(a, b, **kwargs):
        return dict(a=a, b=b, **kwargs)

    binding = bind(collects)
    assert binding.call((1, 2, 1.0, 1.0), {}) == {"a": 1, "b": 2}
    with pytest.raises(UnsupportedFeatureError, match="'s1'"):
        binding.call((1, 2, 0.5), {})


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        ((1, 2, 0.1), {"s1": 0.2},
         "fi_compat.scaled() got multiple values for argument 's1': positional argument 3 and the keyword s1="),
        ((1, 2, 0.1, 0.2, 5), {}, "fi_compat.scaled() takes at most 4 positional arguments (5 given)"),
        ((1, 2), {"s3": 1}, "fi_compat.scaled() got an unexpected keyword argument 's3'; accepted: a, b, s1, s2"),
        ((1,), {}, "fi_compat.scaled() missing required argument 'b'"),
        ((), {}, "fi_compat.scaled() missing required arguments 'a', 'b'"),
    ],
)
@pytest.mark.parametrize("installed", [same, swapped], ids=["same-order", "swapped"])
def test_argument_errors_are_fi_compats_and_the_same_on_every_layout(installed, args, kwargs, message):
    recorder = Recorder(installed)
    with pytest.raises(TypeError) as info:
        bind(recorder).call(args, kwargs)
    assert str(info.value) == message
    assert recorder.calls == 0


def test_installed_order_becomes_keywords_past_the_shared_prefix():
    def removed_in_the_middle(a, b, s2=1.0):
        return dict(locals())

    binding = bind(removed_in_the_middle)
    # a caller of the installed function writes s2 third
    assert binding.from_installed_order((1, 2, 0.2), {}) == ((1, 2), {"s2": 0.2})
    with pytest.raises(TypeError, match="multiple values for argument 's2'"):
        binding.from_installed_order((1, 2, 0.2), {"s2": 0.3})


def test_decode_spec_on_the_oldest_layout_has_a_22_argument_fast_path():
    names = DECODE.names[:22]  # 0.6.13's parameters: the newest order's first 22
    source = f"def decode({', '.join(n if not DECODE.param(n).required else n for n in names[:9])}, " \
             f"{', '.join(f'{n}={DECODE.param(n).default!r}' for n in names[9:])}):\n    return dict(locals())\n"
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102  (a signature written from the spec itself)
    binding = bind(namespace["decode"], DECODE)
    assert binding.direct_limit == 22 and binding.required_count == 9
    assert binding.direct_keywords[16] == frozenset(names[16:22])
    assert binding.required_after[0] == frozenset(names[:9]) and binding.required_after[9] == frozenset()


@pytest.mark.parametrize("value,default,expected", [(1.0, 1.0, True), (None, None, True), (1, 1.0, False),
                                                    (True, 1, False), ("auto", "auto", True), ([], None, False)])
def test_is_default_compares_plain_scalars_only(value, default, expected):
    assert is_default(value, default) is expected


def test_same_default_treats_int_and_float_alike_but_not_bool():
    assert same_default(1, 1.0) and not same_default(True, 1.0) and not same_default("1", 1)
