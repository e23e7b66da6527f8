"""max_seq_len policies: properties with hypothesis, errors by example."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fi_compat.calls.policy import MAX_SEQ_LEN_LIMIT, apply_max_seq_len_policy, check_max_seq_len

pages = st.sampled_from([1, 16, 32, 64, 128])
lengths = st.integers(min_value=1, max_value=1 << 22)
widths = st.integers(min_value=1, max_value=1 << 16)
policies = st.sampled_from(["exact", "bucket", "capacity"])


@given(policies, lengths, pages, widths)
def test_never_below_input_and_deterministic(policy, length, page, width):
    capacity = page * width
    result = apply_max_seq_len_policy(length, policy=policy, page_size=page, capacity=capacity)
    assert result >= length
    assert result == apply_max_seq_len_policy(length, policy=policy, page_size=page, capacity=capacity)


@given(policies, lengths, pages, widths)
def test_input_at_or_above_capacity_is_unchanged(policy, length, page, width):
    capacity = page * width
    if length < capacity:
        length = capacity + length % 1000
    assert apply_max_seq_len_policy(length, policy=policy, page_size=page, capacity=capacity) == length


@given(lengths, pages, widths)
def test_bucket_never_exceeds_capacity_and_bounds_overshoot(length, page, width):
    capacity = page * width
    result = apply_max_seq_len_policy(length, policy="bucket", page_size=page, capacity=capacity)
    if length < capacity:
        assert result <= capacity
        assert result % page == 0 or result == capacity
        # stated worst overshoot: below 1.25 * (input + one page)
        assert result < 1.25 * (length + page)


@settings(max_examples=60)
@given(st.integers(min_value=1, max_value=1 << 20), pages)
def test_bucket_gives_at_most_five_values_per_doubling(start, page):
    capacity = 1 << 40
    values = {
        apply_max_seq_len_policy(n, policy="bucket", page_size=page, capacity=capacity)
        for n in range(start, 2 * start, max(1, start // 512))
    }
    assert len(values) <= 5 + 1, sorted(values)  # +1: the sampled range may touch a ladder edge


def test_bucket_values_are_few_over_a_whole_context():
    values = {apply_max_seq_len_policy(n, policy="bucket", page_size=64, capacity=1 << 20) for n in range(1, 1 << 20, 7)}
    assert len(values) <= 4 * 14 + 8  # 4 ladder steps per doubling of the page count (2**14 pages)


def test_capacity_policy():
    assert apply_max_seq_len_policy(100, policy="capacity", page_size=32, capacity=4096) == 4096


@pytest.mark.parametrize("value", [0, -1, MAX_SEQ_LEN_LIMIT + 1, True, False, 3.0, "128", None, [1]])
def test_invalid_max_seq_len(value):
    with pytest.raises(ValueError, match="max_seq_len") as info:
        check_max_seq_len(value)
    assert "accepted" in str(info.value)


def test_unknown_policy():
    with pytest.raises(ValueError, match="accepted: exact, bucket, capacity"):
        apply_max_seq_len_policy(10, policy="round", page_size=16, capacity=10_000)
