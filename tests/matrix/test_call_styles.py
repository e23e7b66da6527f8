"""Positional, keyword and mixed calls of every patched function: one key, one result.

A flashinfer refactor that calls a cached function by keyword instead of by
position must not slip past fi_compat into flashinfer's unbounded cache.  For
every row of :data:`fi_compat.verdict.bounds.BOUNDS` the installed release binds, the
test takes real arguments -- recorded from the real decode host path where it
reaches the function, drawn by parameter name where it does not -- and calls
the installed function three ways.  The first call must miss, the other two
hit the same entry (the same object comes back), and flashinfer's own cache
behind the row must stay empty.
"""

from __future__ import annotations

import importlib
import inspect
import random
import sys
from typing import Any, Optional

import pytest

import fi_compat
from fi_compat.installing import installer
from fi_compat.verdict.bounds import BOUNDS, by_name
from fi_compat.lookup import aliases_of

import decode_driver
from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal

torch = pytest.importorskip("torch")

#: Paths that reach every row the decode function can reach.
RECORDED_PATHS = (("vllm", "cute-dsl", "q1"), ("vllm", "cute-dsl", "modular"), ("sglang", "auto", "q1"),
                  ("trtllm", "trtllm-gen", "q1"))
#: Rows whose answer holds the profile length the key moved down the ladder (tests/matrix/test_key_proofs.py).
PROFILE_MOVED = ("tuning-config", "builder")


def live_function(spec) -> Any:
    """The function as callers reach it now (a class member through its class)."""
    owner: Any = sys.modules.get(spec.module)
    for part in spec.name.split("."):
        owner = getattr(owner, part, None)
    return owner


class ArgumentRecorder:
    """``sys.setprofile`` hook: the arguments of the first call of each function
    (the uncached body: with flashinfer's caches empty, a call runs it)."""

    def __init__(self, functions: dict[str, Any]) -> None:
        self.by_code = {inspect.unwrap(getattr(f, "__func__", f)).__code__: qualname
                        for qualname, f in functions.items() if f is not None}
        self.calls: dict[str, dict[str, Any]] = {}
        self.rejections: list[str] = []  # the recorded paths this device cannot run, or flashinfer refused

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        qualname = self.by_code.get(frame.f_code) if event == "call" else None
        if qualname is not None and qualname not in self.calls:
            code = frame.f_code
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            self.calls[qualname] = {name: frame.f_locals[name] for name in names}


@pytest.fixture(scope="module")
def recorded(fi_cpu_host, decode_function, flashinfer_cache_reset) -> ArgumentRecorder:
    fi_compat.uninstall()
    for bound in BOUNDS:  # the lazily imported cute-dsl modules, so their functions can be watched
        if bound.spec.module not in sys.modules:
            try:
                importlib.import_module(bound.spec.module)
            except ImportError:
                pass
    flashinfer_cache_reset.clear()
    recorder = ArgumentRecorder({b.spec.qualname: live_function(b.spec) for b in BOUNDS})
    sys.setprofile(recorder)
    try:
        for layout, backend, mode in RECORDED_PATHS:
            not_here = device_gate.unavailable(backend)
            if not_here is not None:
                recorder.rejections.append(f"{layout}/{backend}/{mode}: {not_here}")
                continue
            driver = decode_driver.Driver(torch, decode_function, layout, backend, mode, context=8192)
            # a path this release or device refuses records nothing; an error that is
            # not flashinfer's (the driver's, fi_compat's) propagates and fails the module
            refusal = flashinfer_refusal(lambda driver=driver: driver.call(8, 3000))
            if refusal is not None:
                recorder.rejections.append(f"{layout}/{backend}/{mode}: {describe_error(refusal)}")
    finally:
        sys.setprofile(None)
        installer.reset()
        flashinfer_cache_reset.clear()
    return recorder


def drawn_arguments(function: Any, names: list[str], seed: int) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """Integers by parameter name for a function the decode path does not reach
    (the sizers of other kernels), redrawn until the function accepts them.
    Returns ``(values, None)`` for the first accepted draw, or ``(None, refusal)``
    with flashinfer's last refusal when none of 2,000 draws is accepted (a
    function that takes more than integers: on SM90 with 0.7.4 the tuning code
    raises AttributeError on an ``int`` where it reads ``.shape``).  An error
    that is not flashinfer's propagates; names the function cannot take are
    ``(None, why)`` at once.  Costs up to 2,000 calls, each refused at its
    first check."""
    try:  # a name the function lacks or needs (a class method's ``cls``): no draw can be passed
        inspect.signature(function).bind(**dict.fromkeys(names))
    except TypeError as exc:
        return None, f"not passable by name: TypeError: {exc}"
    rng = random.Random(seed)
    refusal = None
    for _ in range(2000):
        values = {name: rng.choice((1, 2, 4, 8, 64, 128, 148, 512, 3000)) for name in names}
        values.update({name: rng.choice((2, 4)) for name in names if name == "q_len"})
        values.update({name: 128 for name in names if name in ("H", "num_heads")})
        values.update({name: 512 for name in names if name == "kv_lora_rank"})
        refusal = flashinfer_refusal(lambda values=values: function(**values))
        if refusal is None:
            return values, None
    return None, describe_error(refusal)


@pytest.mark.parametrize("name", [bound.name for bound in BOUNDS])
def test_positional_keyword_and_mixed_calls_share_one_key(name, recorded, release, fi_cpu_host):
    bound = by_name(name)
    original = live_function(bound.spec)
    if original is None:
        pytest.skip(f"flashinfer {release} has no {bound.spec.qualname}")
    uncached = getattr(original, "__wrapped__", original)
    names = [p for p in inspect.signature(original).parameters]
    arguments = recorded.calls.get(bound.spec.qualname)
    drawn_refusal = None
    if arguments is None:
        arguments, drawn_refusal = drawn_arguments(uncached, names, seed=len(name))
    if arguments is None:
        # A skip needs a refusal of a real engine call: drawn integers alone being
        # refused says nothing about the device (the function may take tensors).
        if not recorded.rejections:
            pytest.fail(f"no recorded path reached {bound.spec.qualname} and no drawn arguments were accepted "
                        f"(flashinfer's last answer: {drawn_refusal})")
        # on an SM90 device 0.7.4 reaches the tuning code only on paths the device cannot run
        pytest.skip(f"flashinfer {release} ran no recorded decode path that reaches {bound.spec.qualname} on "
                    f"this device (first: {recorded.rejections[0]}; drawn integers: {drawn_refusal})")
    values = [arguments[p] for p in names]
    expected = original(*values)  # flashinfer's own answer, before fi_compat (install empties its cache)

    state = fi_compat.install()
    row = next(r for r in state["bounds"] if r["name"] == name)
    if row["verdict"] != "bound":
        pytest.skip(f"flashinfer {release}: {row['verdict']} ({row['reason']})")
    function = live_function(bound.spec)
    assert function is not original, f"{bound.spec.qualname} is not patched: {row}"
    half = len(values) // 2
    positional = function(*values)
    by_keyword = function(**dict(zip(names, values)))
    mixed = function(*values[:half], **dict(zip(names[half:], values[half:])))

    assert by_keyword is positional and mixed is positional  # one entry answered all three
    row = next(r for r in fi_compat.status()["bounds"] if r["name"] == name)
    assert (row["fi_compat"]["misses"], row["fi_compat"]["hits"]) == (1, 2), row["fi_compat"]
    if row["flashinfer"] is not None:
        assert row["flashinfer"]["currsize"] == 0, row  # nothing reached flashinfer's own cache
    if name not in PROFILE_MOVED:
        assert positional == expected  # the key normalises arguments, never the answer
    assert not aliases_of(original), "a module attribute still holds flashinfer's function"
