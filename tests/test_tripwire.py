"""fi_compat.installing.tripwire on a fake release: a strict error raised into an import at start-up also
replaces flashinfer's decode function with a tripwire; the program's explicit ``uninstall()``
takes it back ``is``-identically.  The process-ending half (exit status 1, the message) runs
for real in tests/matrix/test_strict_startup.py; here ``end_strict_process`` is replaced by
one that raises, so the test process survives the call."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

import fi_compat
from fi_compat.model import specs
from fi_compat.installing import startup_state
from fi_compat.errors import SignatureMismatchError, UnsupportedReleaseWarning
from fi_compat.memo.proxies import Tripwire

from helpers.fakes import DRIFTS, decode_args, loaded_release

DRIFT = DRIFTS["tuning-config"]["renamed"]
HOLDERS = ("flashinfer.mla", specs.CORE_MODULE)  # the fake's re-export and the home module


class Ended(Exception):
    """What the test's end_strict_process raises instead of ending the process."""


@pytest.fixture
def ended(monkeypatch):
    calls = []

    def end(exc, cause=""):
        calls.append((exc, cause))
        raise Ended(cause)

    monkeypatch.setattr(startup_state, "end_strict_process", end)
    return calls


@pytest.fixture
def at_startup(monkeypatch):
    monkeypatch.setattr(startup_state, "_startup_origin", "fi-compat run")


def decode_in(module: str):
    return getattr(sys.modules[module], specs.DECODE.name)


def fail_the_import():
    """``import flashinfer`` under strict, the typed error swallowed as an optional backend would."""
    assert fi_compat.install(strict=True)["state"] == "pending"
    with pytest.raises(SignatureMismatchError, match="renamed to 'profile_len'"):
        importlib.import_module(specs.CORE_MODULE)
    assert "flashinfer.mla" in sys.modules  # only the package left sys.modules: the rest is there to call


def test_at_startup_the_decode_function_trips_and_uninstall_restores_it(tmp_path, at_startup, ended):
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFT,), imported=False):
        fail_the_import()
        proxy = decode_in(specs.CORE_MODULE)
        assert isinstance(proxy, Tripwire) and all(decode_in(m) is proxy for m in HOLDERS)
        original = proxy.__wrapped__
        assert not isinstance(original, Tripwire)
        # the program goes on: a module that takes the name now, and a reference kept outside any module
        engine = types.ModuleType("engine_after_the_error")
        engine.decode = proxy
        sys.modules[engine.__name__] = engine
        kept = proxy
        try:
            with pytest.raises(Ended, match=specs.DECODE.qualname):
                engine.decode(*decode_args())
            ((error, cause),) = ended
            assert isinstance(error, SignatureMismatchError) and "caught" in cause
            assert fi_compat.status()["state"] == "failed"  # still failed: the tripwire is no install

            fi_compat.uninstall()
            assert all(decode_in(m) is original for m in HOLDERS)
            assert engine.decode is original  # taken after arming, restored all the same
            assert kept(*decode_args())[0] == "decoded"  # a pass-through now
            assert len(ended) == 1
        finally:
            del sys.modules[engine.__name__]


def test_at_startup_the_call_api_trips_after_raising_the_kept_error(tmp_path, at_startup, ended):
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFT,), imported=False):
        fail_the_import()
        with pytest.raises(SignatureMismatchError):  # the kept error first, as before
            fi_compat.mla_decode(*decode_args())
        with pytest.raises(Ended):  # then no unbounded decode through fi_compat either
            fi_compat.mla_decode(*decode_args())


def test_an_install_with_other_settings_takes_the_tripwire_back(tmp_path, at_startup, ended):
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFT,), imported=False):
        fail_the_import()
        original = decode_in(specs.CORE_MODULE).__wrapped__
        # the program's explicit choice; the failed import took the package out of sys.modules,
        # so the install waits for the next import of it
        assert fi_compat.install(strict=False)["state"] == "pending"
        assert all(decode_in(m) is original for m in HOLDERS)
        with pytest.warns(UnsupportedReleaseWarning):
            importlib.import_module(specs.PACKAGE)
        assert fi_compat.status()["state"] == "installed"
        assert decode_in(specs.CORE_MODULE)(*decode_args())[0] == "decoded" and ended == []


def test_not_at_startup_nothing_is_armed(tmp_path, ended):
    """A program that calls install(strict=True) itself sees the error and decides."""
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFT,), imported=False):
        assert startup_state.startup_origin() is None
        fail_the_import()
        assert not any(isinstance(decode_in(m), Tripwire) for m in HOLDERS)
        assert decode_in(specs.CORE_MODULE)(*decode_args())[0] == "decoded" and ended == []


def test_not_strict_at_startup_nothing_is_armed(tmp_path, at_startup, ended):
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFT,), imported=False):
        assert fi_compat.install()["state"] == "pending"
        with pytest.warns(UnsupportedReleaseWarning):
            importlib.import_module(specs.CORE_MODULE)  # never breaks: the mismatch is warned about
        assert fi_compat.status()["state"] == "installed"
        assert not any(isinstance(decode_in(m), Tripwire) for m in HOLDERS)
        assert decode_in(specs.CORE_MODULE)(*decode_args())[0] == "decoded" and ended == []
