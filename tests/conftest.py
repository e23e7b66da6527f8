"""Shared fixtures.  The CPU shim fixtures (``fi_cpu_host``, ``fi_launches``)
come from fi_compat's pytest plugin (pytest11 entry point)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _uninstalled_after_each_test():
    """Every test starts and ends with fi_compat uninstalled."""
    import fi_compat

    fi_compat.uninstall()
    yield
    fi_compat.uninstall()
