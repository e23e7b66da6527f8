"""Finding a flashinfer function (``fi_compat.lookup``): the same rules live and in source.

One fake package, written to a directory, is read twice: with ``ast``
through :class:`~fi_compat.lookup.DirectoryReader` (``find_in_source``) and,
imported, through :func:`~fi_compat.lookup.find_live`.  Every spec below must
be found alike by both.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from fi_compat.model import specs
from fi_compat.lookup import (
    BOUNDED, NO_MEMO, UNBOUNDED, DirectoryReader, SourceIndex, find_in_source, find_live, source_lookup,
)
from fi_compat.model.specs import FunctionSpec, Param

from helpers import fakes
from helpers.fakes import loaded_files

FILES = {
    "flashinfer/__init__.py": """\
        from . import core, early, elsewhere, tuning
        from .core import reexported as reexported
    """,
    "flashinfer/_impl.py": """\
        def reexported(a, b=1):
            return a

        def renamed(a, b):
            return b
    """,
    "flashinfer/core.py": """\
        import contextlib
        import functools
        from functools import cache, lru_cache

        from ._impl import reexported
        from ._impl import renamed as aliased


        @cache
        def bare_cache(a, b):
            return a


        @functools.cache
        def functools_cache(a, b):
            return a


        @lru_cache(None)
        def lru_none(a):
            return a


        @functools.lru_cache(maxsize=None)
        def lru_maxsize_none(a):
            return a


        @lru_cache(256)
        def lru_256(a):
            return a


        @lru_cache
        def lru_bare(a):
            return a


        def _uncached(a, b):
            return a


        assigned = functools.cache(_uncached)


        def plain(a, b=1):
            return a


        try:
            from an_optional_package_nobody_has import under_try
        except ImportError:
            @functools.cache
            def under_try(a, b, c=None):
                return a

        if True:
            def under_if(a, b):
                return a

        with contextlib.suppress(Exception):
            def under_with(a, b):
                return a

        def redefined(a):
            return a

        def redefined(a, b):
            return a
    """,
    "flashinfer/early.py": """\
        from flashinfer.core import functools_cache as bound_early
        from .core import functools_cache
    """,
    "flashinfer/elsewhere.py": """\
        def moved_away(a, b):
            return a
    """,
    "flashinfer/tuning/__init__.py": """\
        from flashinfer.tuning.impl import Tuner
    """,
    "flashinfer/tuning/impl.py": """\
        import functools


        class Tuner:
            @classmethod
            @functools.lru_cache(maxsize=None)
            def find(cls, shapes, config):
                return shapes

            @classmethod
            @functools.lru_cache(maxsize=16384)
            def find_bounded(cls, shapes):
                return shapes

            @classmethod
            def plain_member(cls, shapes):
                return shapes
    """,
}
FILES = {path: textwrap.dedent(text) for path, text in FILES.items()}


def spec(name: str, params: str, module: str = "flashinfer.core") -> FunctionSpec:
    return FunctionSpec(module, name, tuple(Param(p) for p in params.split()))


# name -> (spec, memo, maxsize, parameters as found, defining module, moved)
CASES = {
    "reexported": (spec("reexported", "a b"), NO_MEMO, None, ["a", "b=…"], "flashinfer._impl", False),
    "reexported-as": (spec("aliased", "a b"), NO_MEMO, None, ["a", "b"], "flashinfer._impl", False),
    "@cache": (spec("bare_cache", "a b"), UNBOUNDED, None, ["a", "b"], "flashinfer.core", False),
    "@functools.cache": (spec("functools_cache", "a b"), UNBOUNDED, None, ["a", "b"], "flashinfer.core", False),
    "@lru_cache(None)": (spec("lru_none", "a"), UNBOUNDED, None, ["a"], "flashinfer.core", False),
    "@lru_cache(maxsize=None)": (spec("lru_maxsize_none", "a"), UNBOUNDED, None, ["a"], "flashinfer.core", False),
    "@lru_cache(256)": (spec("lru_256", "a"), BOUNDED, 256, ["a"], "flashinfer.core", False),
    "@lru_cache": (spec("lru_bare", "a"), BOUNDED, 128, ["a"], "flashinfer.core", False),
    "functools.cache(g)": (spec("assigned", "a b"), UNBOUNDED, None, ["a", "b"], "flashinfer.core", False),
    "plain": (spec("plain", "a b"), NO_MEMO, None, ["a", "b=…"], "flashinfer.core", False),
    "under-try": (spec("under_try", "a b c"), UNBOUNDED, None, ["a", "b", "c=…"], "flashinfer.core", False),
    "under-if": (spec("under_if", "a b"), NO_MEMO, None, ["a", "b"], "flashinfer.core", False),
    "under-with": (spec("under_with", "a b"), NO_MEMO, None, ["a", "b"], "flashinfer.core", False),
    "last-definition": (spec("redefined", "a b"), NO_MEMO, None, ["a", "b"], "flashinfer.core", False),
    "moved": (spec("moved_away", "a b"), NO_MEMO, None, ["a", "b"], "flashinfer.elsewhere", True),
    "classmethod+lru_cache(None)": (spec("Tuner.find", "cls shapes config", "flashinfer.tuning"), UNBOUNDED, None,
                                    ["cls", "shapes", "config"], "flashinfer.tuning.impl", False),
    "classmethod+lru_cache(16384)": (spec("Tuner.find_bounded", "cls shapes", "flashinfer.tuning"), BOUNDED, 16384,
                                     ["cls", "shapes"], "flashinfer.tuning.impl", False),
    "classmethod": (spec("Tuner.plain_member", "cls shapes", "flashinfer.tuning"), NO_MEMO, None,
                    ["cls", "shapes"], "flashinfer.tuning.impl", False),
}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The fake package: its root directory and, while loaded, its modules."""
    root = tmp_path_factory.mktemp("lookup")
    with loaded_files(FILES, root) as loaded:
        yield root, loaded


def describe(found) -> tuple:
    return (found.memo, found.maxsize, found.function.text(), found.defined_in, found.moved)


@pytest.mark.parametrize("case", list(CASES))
def test_live_and_source_lookups_find_the_same_function(case, package):
    root, _ = package
    wanted, memo, maxsize, params, defined_in, moved = CASES[case]
    live = find_live(wanted)
    source = source_lookup(DirectoryReader(str(root)))(wanted)
    assert live is not None and source is not None
    assert describe(live) == describe(source) == (memo, maxsize, params, defined_in, moved)


@pytest.mark.parametrize("case", list(CASES))
def test_source_lookup_says_file_and_line_of_the_def(case, package):
    root, _ = package
    wanted = CASES[case][0]
    found = source_lookup(DirectoryReader(str(root)))(wanted)
    path, line = found.where.rsplit(":", 1)
    definition = open(path, encoding="utf-8").read().splitlines()[int(line) - 1].strip()
    target = {"aliased": "renamed", "assigned": "_uncached"}.get(wanted.name, wanted.name.rsplit(".", 1)[-1])
    assert definition.startswith(f"def {target}(")


def test_live_lookup_returns_every_module_attribute_holding_the_function(package):
    _, loaded = package
    found = find_live(spec("functools_cache", "a b"))
    holders = {(owner.__name__, attribute) for owner, attribute in found.aliases}
    assert holders == {("flashinfer.core", "functools_cache"), ("flashinfer.early", "bound_early"),
                       ("flashinfer.early", "functools_cache")}
    assert all(getattr(owner, attribute) is found.obj for owner, attribute in found.aliases)
    reexported = find_live(spec("reexported", "a b"))
    assert {(o.__name__, a) for o, a in reexported.aliases} == {
        ("flashinfer", "reexported"), ("flashinfer.core", "reexported"), ("flashinfer._impl", "reexported")}


def test_live_class_member_keeps_its_descriptor(package):
    found = find_live(CASES["classmethod+lru_cache(None)"][0])
    tuner = sys.modules["flashinfer.tuning.impl"].Tuner
    assert found.descriptor is classmethod and found.raw is vars(tuner)["find"]
    assert found.obj is vars(tuner)["find"].__func__
    assert found.aliases == ((tuner, "find"),)


def test_nothing_binds_it(package):
    root, _ = package
    absent = spec("nowhere_at_all", "a")
    assert find_live(absent) is None
    assert source_lookup(DirectoryReader(str(root)))(absent) is None
    member = spec("Tuner.nowhere", "cls", "flashinfer.tuning")
    assert find_live(member) is None
    assert source_lookup(DirectoryReader(str(root)))(member) is None


def test_the_moved_search_can_be_turned_off(package):
    root, _ = package
    index = SourceIndex(DirectoryReader(str(root)))
    assert find_in_source(CASES["moved"][0], index, search_moved=False) is None


@pytest.mark.parametrize("lookup", ["live", "source"])
def test_a_missing_sizer_is_not_taken_from_a_sibling_module_of_the_same_name(lookup, tmp_path):
    """Several cute-dsl modules define ``_get_split_kv_and_workspace_size``: a
    release without the monolithic one must not find the modular one instead."""
    gone = fakes.Drift(specs.CUTE_DSL_SPLIT_KV, "is missing", None)
    with fakes.loaded_release("0.6.18", tmp_path, drifts=(gone,)):
        for module in (specs.CUTE_DSL_SPLIT_KV.module, specs.CUTE_DSL_SPLIT_KV_BATCH_MLA.module):
            importlib.import_module(module)
        if lookup == "live":
            found = find_live(specs.CUTE_DSL_SPLIT_KV)
        else:
            found = source_lookup(DirectoryReader(str(tmp_path)))(specs.CUTE_DSL_SPLIT_KV)
    assert found is None
