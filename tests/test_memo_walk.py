"""fi_compat.counting.memo_walk finds a memo however it is written: under a stack of
``functools.wraps`` decorators, held by an instance or a closure, written by
hand as a dict, or as a fi_compat proxy around flashinfer's cache.  Modules
built here stand in for flashinfer's (the walk is handed them by name); the
real releases are walked by tests/matrix/test_drift_shapes.py."""

from __future__ import annotations

import functools
import time
import types

from fi_compat.counting import memo_walk


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = f"/fake/{name.replace('.', '/')}.py"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


SOURCE = '''
import functools

def traced(function):
    @functools.wraps(function)
    def inner(*args):
        return function(*args)
    return inner

@traced
@traced
@functools.cache
def decorated(n):
    return n

class Holder:
    def __init__(self):
        self.lookup = functools.lru_cache(maxsize=None)(lambda n: n)
        self.table = {}

HOLDER = Holder()

def _make():
    seen = {}
    def remember(n):
        return seen.setdefault(n, n)
    return remember

remember = _make()

@functools.lru_cache(maxsize=1 << 20)
def huge(n):
    return n
'''


def test_every_shape_of_memo_is_found_with_its_size_and_where():
    module = _module("flashinfer.fake_shapes", SOURCE)
    for function in (module.decorated, module.huge, module.remember, module.HOLDER.lookup):
        for n in range(5):
            function(n)
    module.HOLDER.table.update(a=1, b=2)
    memos = memo_walk.walk({"flashinfer.fake_shapes": module})
    by_path = {path: memo for path, memo in memos.items()}
    decorated = by_path["flashinfer.fake_shapes.decorated.__wrapped__.__wrapped__"]
    assert (decorated.kind, decorated.size, decorated.maxsize) == ("functools", 5, None)
    assert decorated.where.startswith("/fake/flashinfer/fake_shapes.py:")
    assert by_path["flashinfer.fake_shapes.HOLDER.lookup"].size == 5
    assert by_path["flashinfer.fake_shapes.HOLDER.table"].size == 2
    assert by_path["flashinfer.fake_shapes.remember.<closure seen>"].size == 5
    assert by_path["flashinfer.fake_shapes.huge"].maxsize == 1 << 20


def test_growth_between_two_walks_names_only_what_grew():
    module = _module("flashinfer.fake_growth", SOURCE)
    before = memo_walk.walk({"flashinfer.fake_growth": module})
    for n in range(7):
        module.remember(n)
    grown = memo_walk.grown(before, memo_walk.walk({"flashinfer.fake_growth": module}))
    assert [(g.after.path, g.gained) for g in grown] == [("flashinfer.fake_growth.remember.<closure seen>", 7)]


def test_a_fi_compat_proxy_is_fi_compat_and_the_cache_it_replaced_stays_flashinfer():
    module = _module("flashinfer.fake_proxy", SOURCE)
    original = module.huge

    @functools.wraps(original)
    def proxy(n):
        return n

    proxy._fi_compat_wrapper = True
    proxy._fi_compat_original = original
    proxy.cache_info = original.cache_info
    proxy.cache_clear = original.cache_clear
    module.huge = proxy
    memos = memo_walk.walk({"flashinfer.fake_proxy": module})
    assert memos["flashinfer.fake_proxy.huge"].owner == "fi_compat"
    inner = [m for path, m in memos.items() if path.startswith("flashinfer.fake_proxy.huge.")]
    assert [(m.owner, m.maxsize) for m in inner] == [("flashinfer", 1 << 20)]  # reached once, however linked


def test_other_packages_are_not_walked():
    module = _module("flashinfer.fake_outside", "import collections\nfrom collections import OrderedDict\n")
    module.elsewhere = types.SimpleNamespace(memo={})  # not a flashinfer object: not followed
    assert memo_walk.walk({"flashinfer.fake_outside": module}) == {}


def test_a_walk_of_a_thousand_modules_is_quick():
    modules = {f"flashinfer.fake{i}": _module(f"flashinfer.fake{i}", SOURCE) for i in range(200)}
    started = time.perf_counter()
    memos = memo_walk.walk(modules)
    assert len(memos) >= 200 * 5
    assert time.perf_counter() - started < 5.0  # generous: a shared core; benchmarks/ prints the real figure
