"""Shared fixtures.  The CPU shim fixtures (``fi_cpu_host``, ``fi_launches``)
come from fi_compat's pytest plugin (pytest11 entry point)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _uninstalled_after_each_test():
    """Every test starts and ends as a fresh process would: uninstalled, and
    with no explicit choice made (so mla_decode installs on first use)."""
    from fi_compat import installer

    installer.reset()
    yield
    installer.reset()
