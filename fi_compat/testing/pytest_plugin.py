"""pytest fixtures: ``fi_cpu_host`` (session-wide shim) and ``fi_launches``.

Loaded automatically through the ``pytest11`` entry point when fi_compat is
installed; importing it imports neither torch nor flashinfer.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def fi_cpu_host() -> Iterator[Any]:
    """The CPU-host shim for the whole session (flashinfer cannot be un-imported).
    Skips the test when torch or flashinfer is not installed."""
    pytest.importorskip("torch")
    from ..workload import cpu_host

    try:
        manager = cpu_host()
        host = manager.__enter__()
    except ModuleNotFoundError as exc:
        pytest.skip(f"fi_cpu_host needs torch and flashinfer-python: {exc}")
    try:
        yield host
    finally:
        manager.__exit__(None, None, None)


@pytest.fixture
def fi_launches(fi_cpu_host: Any) -> Any:
    """The launch recorder, emptied for this test."""
    fi_cpu_host.recorder.clear()
    return fi_cpu_host.recorder
