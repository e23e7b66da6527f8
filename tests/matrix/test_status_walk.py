"""Issue 22: ``status()`` names every flashinfer memo that nothing bounds and that
holds entries, however flashinfer writes it, on the real release: the walk
(``fi_compat.counting.memory_census.walk_report``) sees a cache under a stack of
decorators and one held by an instance, and none of the caches fi_compat
bounds; ``install()`` returns the state without the walk.

The planted memos live in a module registered under ``flashinfer.`` (the walk
starts from flashinfer's loaded modules), beside the real package."""

from __future__ import annotations

import sys
import types
from typing import Any, Iterator

import pytest

import fi_compat

PLANTED = "flashinfer._fi_compat_planted_memos"
SOURCE = '''
import functools

def logged(function):
    @functools.wraps(function)
    def inner(*args):
        return function(*args)
    return inner

@logged
@functools.cache
def per_length_plan(max_seq_len):
    return [max_seq_len]

class Sizer:
    def __init__(self):
        self.size_for = functools.lru_cache(maxsize=None)(lambda max_seq_len: max_seq_len * 2)

SIZER = Sizer()
'''


@pytest.fixture
def planted(fi_cpu_host: Any) -> Iterator[types.ModuleType]:
    module = types.ModuleType(PLANTED)
    module.__file__ = f"/planted/{PLANTED.replace('.', '/')}.py"
    exec(compile(SOURCE, module.__file__, "exec"), module.__dict__)
    sys.modules[PLANTED] = module
    try:
        yield module
    finally:
        del sys.modules[PLANTED]


def _named(walked: dict[str, Any], text: str) -> list[dict[str, Any]]:
    return [memo for memo in walked["unbounded_caches"] if text in memo["path"]]


def test_status_names_unbounded_memos_wherever_they_sit(planted, decode_function, quiet_launches):
    state = fi_compat.install()
    try:
        assert state["walked"] is None  # install() returns the state without the walk (milliseconds)
        for length in range(1000, 1040):
            planted.per_length_plan(length)
            planted.SIZER.size_for(length)
        walked = fi_compat.status()["walked"]
        assert walked is not None and walked["memos"] > 0, walked
        decorated, held = _named(walked, "per_length_plan"), _named(walked, "size_for")
        assert decorated and held, [m for m in walked["unbounded_caches"] if "planted" in str(m)]
        # what each holds is counted from the cache itself: 40 distinct lengths
        assert [decorated[0]["size"], held[0]["size"]] == [40, 40], (decorated, held)
        assert fi_compat.status(walk=False)["walked"] is None
    finally:
        fi_compat.uninstall()


def test_no_cache_fi_compat_bounds_is_named(fi_cpu_host, decode_function, quiet_launches):
    """No false alarm: a row fi_compat bounds is behind its proxy, so the walk
    never reports flashinfer's own cache there, however many calls went through."""
    from fi_compat.workload import builder

    state = fi_compat.install()
    try:
        bounded = [row["cache"].rsplit(".", 1)[-1] for row in state["bounds"] if row["patched"]]
        assert bounded, state["bounds"]
        for length in range(1000, 1064):
            fi_compat.build_mla_decode_tuning_config(**builder.builder_arguments(max_seq_len=length))
        walked = fi_compat.status()["walked"]
        named = [memo for memo in walked["unbounded_caches"] if any(name in str(memo) for name in bounded)]
        assert not named, named
    finally:
        fi_compat.uninstall()

