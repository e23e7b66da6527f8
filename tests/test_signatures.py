"""``fi_compat.model.signatures.compare``: a function fits its spec, or each difference is named in words."""

from __future__ import annotations

import functools

import pytest

from fi_compat.lookup import describe_callable
from fi_compat.model.signatures import compare
from fi_compat.model.specs import TUNING_CONFIG

TAIL = "has_sparse_mla_top_k_lens=False, sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0"


def described(params: str, cached: bool = True):
    namespace: dict = {}
    exec(f"def config({params}):\n    return None\n", namespace)
    function = namespace["config"]
    return describe_callable(TUNING_CONFIG.qualname, functools.cache(function) if cached else function)


def test_the_release_signature_fits():
    assert compare(TUNING_CONFIG, described(f"buckets, num_pages, profile_seq_len, {TAIL}")) is None
    # a release before 0.6.17, without the optional tail, fits too
    assert compare(TUNING_CONFIG, described("buckets, num_pages, profile_seq_len")) is None


@pytest.mark.parametrize("params,difference", [
    (f"buckets, num_pages, profile_len, {TAIL}", "parameter 'profile_seq_len' was renamed to 'profile_len'"),
    (f"buckets, num_pages, {TAIL}", "lost required parameter 'profile_seq_len'"),
    (f"buckets, num_pages, profile_seq_len, device, {TAIL}", "gained required parameter 'device'"),
    (f"buckets, num_pages, profile_seq_len, {TAIL}, device=None", "gained optional parameter 'device'"),
    ("buckets, num_pages", "lost required parameter 'profile_seq_len'"),
    (f"buckets, num_pages, profile_seq_len, /, {TAIL}", "parameter 'profile_seq_len' became positional-only"),
    (f"buckets, num_pages, *, profile_seq_len, {TAIL}", "parameter 'profile_seq_len' became keyword-only"),
    (f"buckets, num_pages, profile_seq_len, {TAIL}, *extra", "accepts *extra"),
    (f"buckets, num_pages, profile_seq_len, {TAIL}, **extra", "accepts **extra"),
    ("buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens", "parameter 'has_sparse_mla_top_k_lens' has no default"),
    (f"num_pages, buckets, profile_seq_len, {TAIL}", "parameters are in a different order"),
])
def test_each_difference_is_named(params, difference):
    mismatch = compare(TUNING_CONFIG, described(params))
    assert mismatch is not None
    assert difference in mismatch.problems
    assert difference in mismatch.describe()
    assert mismatch.describe().startswith(f"{TUNING_CONFIG.qualname}: ")
    assert f"expected ({', '.join(TUNING_CONFIG.expected_text())})" in mismatch.describe()


def test_two_renames_are_named_as_what_was_lost_and_gained():
    mismatch = compare(TUNING_CONFIG, described("buckets, pages, profile_len"))
    assert set(mismatch.problems) == {
        "lost required parameter 'num_pages'", "lost required parameter 'profile_seq_len'",
        "gained required parameter 'pages'", "gained required parameter 'profile_len'"}


def test_a_missing_function():
    mismatch = compare(TUNING_CONFIG, None)
    assert mismatch is not None and mismatch.difference == "is missing (moved or removed)"
    assert mismatch.found_text is None and mismatch.describe().endswith("found not found")


def test_a_live_cache_is_described_by_the_function_it_caches():
    """``inspect.signature`` follows ``__wrapped__``: the cache shows the original's parameters."""
    cached = described(f"buckets, num_pages, profile_seq_len, {TAIL}")
    plain = described(f"buckets, num_pages, profile_seq_len, {TAIL}", cached=False)
    assert cached.params == plain.params
    assert (cached.memo, plain.memo) == ("unbounded", "none")
    assert cached.text()[:3] == ["buckets", "num_pages", "profile_seq_len"]
    assert cached.text()[3] == "has_sparse_mla_top_k_lens=…"
