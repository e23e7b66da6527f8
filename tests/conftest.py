"""Shared fixtures.  The CPU shim fixtures (``fi_cpu_host``, ``fi_launches``)
come from fi_compat's pytest plugin (pytest11 entry point)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from fi_compat.commands.guard.errors import FetchError
from fi_compat.commands.guard.fetch import default_cache_dir, fetch


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fine_grained_switching():
    """Switch threads every 10 us instead of every 5 ms: many more interleavings."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@pytest.fixture
def load(monkeypatch):
    """``load(name)``: scripts/<name>.py loaded by path, with scripts/ on
    sys.path for the test as when the script runs (each imports its sibling
    ``_matrix_common``)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))

    def load_script(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load_script


@pytest.fixture(autouse=True)
def _uninstalled_after_each_test():
    """Every test starts and ends as a fresh process would: uninstalled, with
    no explicit choice made (so mla_decode installs on first use), and not
    marked as installed at start-up (a test that calls a start-up hook in this
    process, such as the engine plugin's, marks it; the mark decides whether a
    strict failure ends the process and arms the decode tripwire)."""
    from fi_compat.installing import installer, startup_state

    installer.reset()
    startup_state._startup_origin = None
    yield
    installer.reset()
    startup_state._startup_origin = None


# --------------------------------------------------------------------------- real flashinfer wheels (the guard's tests)


@pytest.fixture(scope="session")
def wheel_cache() -> Path:
    """The shared wheel cache; real wheels land here once and are reused."""
    path = default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def real_wheel(wheel_cache):
    """``real_wheel("0.6.18")`` -> path of that release's wheel, downloaded on first use."""
    got: dict[str, Path] = {}

    def get(release: str) -> Path:
        if release not in got:
            try:
                got[release] = fetch(release, wheel_cache)
            except FetchError as exc:
                pytest.skip(f"cannot download flashinfer-python=={release} into {wheel_cache}: {exc}")
        return got[release]

    return get
