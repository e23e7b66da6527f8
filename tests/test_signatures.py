"""The shared signature description: ast and live views agree, conditional
definitions are found, and each kind of difference is named."""

from __future__ import annotations

import functools
import inspect
import textwrap

from fi_compat.specs import TUNING_CONFIG as CONFIG_CACHE
from fi_compat.signatures import compare, find_function_in_source, found_from_callable

SOURCE = textwrap.dedent(
    """
    import functools
    try:
        import something_optional
    except ImportError:
        @functools.cache
        def _mla_decode_tuning_config(buckets, num_pages, profile_seq_len, has_sparse_mla_top_k_lens=False):
            return None
    """
)


def test_definition_under_try_except_is_found_like_at_import():
    found = find_function_in_source(SOURCE, "_mla_decode_tuning_config", "core.py")
    assert found is not None and found.where == "core.py:7" and found.memoized
    assert compare(CONFIG_CACHE, found, memoized=True) is None


def test_ast_and_live_views_describe_the_same_function():
    namespace: dict = {}
    exec(compile(SOURCE.replace("import something_optional", "raise ImportError"), "core.py", "exec"), namespace)
    live = found_from_callable(CONFIG_CACHE.qualname, namespace["_mla_decode_tuning_config"])
    static = find_function_in_source(SOURCE, "_mla_decode_tuning_config")
    assert live.params == static.params and live.memoized == static.memoized


def test_later_definition_wins():
    source = "def f(a):\n    pass\nif True:\n    def f(a, b):\n        pass\n"
    assert [p.name for p in find_function_in_source(source, "f").params] == ["a", "b"]


def test_missing_function():
    mismatch = compare(CONFIG_CACHE, None)
    assert mismatch is not None and mismatch.difference == "is missing (moved or removed)"


def test_order_change_is_named():
    @functools.cache
    def swapped(num_pages, buckets, profile_seq_len):
        return None

    mismatch = compare(CONFIG_CACHE, found_from_callable("x", swapped))
    assert mismatch is not None and "different order" in mismatch.difference
    assert inspect.signature(swapped)  # the live function is untouched
