"""What ``max_seq_len`` fi_compat passes to flashinfer.

``max_seq_len`` is a host-side scheduling bound that must be ``>=
max(seq_lens)``.  trtllm-gen uses it to choose the multi-CTA KV split and
kernel variant, so changing it can change the last bf16 ulp of the output
(flashinfer#4647), and eager and CUDA-graph runs must pass the same value to
be bitwise identical.  The policies:

``exact`` (default)
    pass it through.  Outputs are bit-for-bit what flashinfer alone gives;
    host memory is bounded anyway by the adapters' caches, which normalise the
    profile length internally without touching what the kernel receives.
``bucket``
    round up along a geometric ladder aligned to the page size: at most five
    distinct values while the input stays within one doubling, never more
    than ``1.25 * (max_seq_len + page_size)``, never above the block-table
    capacity unless the input already is.  Fewer distinct values give the
    kernel fewer split decisions and CUDA-graph captures fewer variants.
``capacity``
    the block-table capacity ``block_tables.shape[-1] * page_size``: one
    value per model configuration, the most stable and the most overshoot.
"""

from __future__ import annotations

import numbers

from .. import config

MAX_SEQ_LEN_LIMIT = 2**31 - 1
"""The largest ``max_seq_len`` fi_compat passes on.  flashinfer's host code
accepts any Python ``int`` with an explicit ``backend="trtllm-gen"`` (0, negatives,
bools and values past 2**63 all reach the launch, measured on 0.6.13, 0.6.15,
0.6.18 and 0.7.4), while its ``auto`` and ``cute-dsl`` backends raise
``ValueError`` for ``max_seq_len <= 0`` themselves (0.6.18: "max_seq_len must be
> 0"; tests/test_max_seq_len_range.py).  fi_compat takes the range that every
backend accepts, so a call site does not pass or fail with the backend chosen
(docs/errors.md, "Where fi_compat is stricter than flashinfer").  The launcher
stores it in a 32-bit ``int`` (``mMaxSeqLenKv`` in trtllm's
``fmhaRunnerParams.h``), so a larger value wraps on the device, and 0.7.4's MLA
planner requires ``0 < value <= INT_MAX`` itself (docs/design.md, "max_seq_len
validation")."""
BUCKET_BITS = 3
"""Significant bits of the page count kept by ``bucket``: four ladder values per doubling."""


def check_max_seq_len(value: object, what: str = "max_seq_len") -> int:
    """``value`` as a plain ``int`` if it is an integer in ``1 .. 2**31-1``, else ``ValueError``.

    Integers of other types (``numpy.int64``, anything registered as
    ``numbers.Integral``) are converted: flashinfer's own host code raises an
    ``AttributeError`` on them in every release.  ``bool`` and tensors are
    refused (a tensor would need a device sync; pass ``.item()``)."""
    if type(value) is int and 0 < value <= MAX_SEQ_LEN_LIMIT:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hint = "; for a tensor pass .item()" if hasattr(value, "dim") else ""
        raise ValueError(
            f"{what}={value!r} ({type(value).__name__}) is not an int; accepted: an int from 1 to {MAX_SEQ_LEN_LIMIT} "
            f"(the maximum KV length of the batch){hint}"
        )
    number = int(value)
    if not 0 < number <= MAX_SEQ_LEN_LIMIT:
        raise ValueError(
            f"{what}={number} is out of range; accepted: 1 to {MAX_SEQ_LEN_LIMIT} (flashinfer's kernels keep it in "
            "a 32-bit int, a decode batch holds at least one token, and flashinfer's own auto and cute-dsl "
            "backends refuse 0)"
        )
    return number


def _check_positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}={value!r} ({type(value).__name__}) is not an int; accepted: a positive int")
    if value <= 0:
        raise ValueError(f"{what}={value} is out of range; accepted: a positive int")
    return value


def round_up_pages(pages: int) -> int:
    """Round a page count up to its top :data:`BUCKET_BITS` bits."""
    if pages < (1 << BUCKET_BITS):
        return pages
    shift = pages.bit_length() - BUCKET_BITS
    mask = (1 << shift) - 1
    return (pages + mask) & ~mask


def apply_max_seq_len_policy(max_seq_len: int, *, policy: str, page_size: int, capacity: int) -> int:
    """The ``max_seq_len`` to pass under ``policy``.  Always ``>= max_seq_len``;
    an input ``>= capacity`` is returned unchanged.  Raises ``ValueError`` for
    invalid input (see :func:`check_max_seq_len`) or an unknown policy."""
    max_seq_len = check_max_seq_len(max_seq_len)
    _check_positive(page_size, "page_size")
    _check_positive(capacity, "capacity")
    if policy == "exact" or max_seq_len >= capacity:
        if policy not in config.POLICIES:
            config.check_policy(policy, "max_seq_len_policy")
        return max_seq_len
    if policy == "capacity":
        return capacity
    if policy == "bucket":
        pages = -(-max_seq_len // page_size)
        return min(round_up_pages(pages) * page_size, capacity)
    config.check_policy(policy, "max_seq_len_policy")
    raise AssertionError("unreachable")  # pragma: no cover
