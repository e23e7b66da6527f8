"""fi_compat's pytest plugin (``pytest_plugin``, the ``pytest11`` entry point).

The workload it drives, the CPU-host shim included, is :mod:`fi_compat.workload`;
``from fi_compat.testing import cpu_host`` (its place before issue #41's move, shown in
docs/testing.md then) still works: a name not defined here is looked up there on first use."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from .. import workload

    return getattr(workload, name)
