"""pytest fixtures: ``fi_cpu_host`` (session-wide shim) and ``fi_launches``.

Loaded automatically through the ``pytest11`` entry point when fi_compat is
installed; importing it imports neither torch nor flashinfer.  The shim
presents an SM100, or the device ``FI_COMPAT_SHIM_CAPABILITY`` names (``9.0``:
the SM90 of an H100/H200, where flashinfer resolves backend ``"auto"`` to XQA
and refuses cute-dsl), and the run's header says which when it is set.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Optional

import pytest


def pytest_report_header(config: pytest.Config) -> Optional[str]:
    from ..workload import CAPABILITY_ENV, shim_device

    value = os.environ.get(CAPABILITY_ENV, "").strip()
    if not value:
        return None
    try:
        return f"fi_compat: the CPU-host shim presents {shim_device().name} ({CAPABILITY_ENV}={value})"
    except ValueError as exc:
        return f"fi_compat: {exc}"


@pytest.fixture(scope="session")
def fi_cpu_host() -> Iterator[Any]:
    """The CPU-host shim for the whole session (flashinfer cannot be un-imported),
    presenting the device of ``$FI_COMPAT_SHIM_CAPABILITY`` (default SM100).
    Skips the test when torch or flashinfer is not installed; fails it, naming
    the accepted values, for a capability the shim does not present."""
    pytest.importorskip("torch")
    from ..workload import cpu_host

    try:
        manager = cpu_host()
        host = manager.__enter__()
    except ModuleNotFoundError as exc:
        pytest.skip(f"fi_cpu_host needs torch and flashinfer-python: {exc}")
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield host
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture
def fi_launches(fi_cpu_host: Any) -> Any:
    """The launch recorder, emptied for this test."""
    fi_cpu_host.recorder.clear()
    return fi_cpu_host.recorder
