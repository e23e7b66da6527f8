"""The public functions, wired together: the one place the layers meet.

The installer knows nothing of the layers above it.  Here the call API's
transparent mode (``install(transparent=True)``, ``FI_COMPAT_TRANSPARENT=1``)
is handed to the installer as a plan provider, so it exists whichever public
function a program touches first: ``fi_compat.install`` and the start-up hooks
both come through this module.  Importing it imports the call API and the
installer (no torch, no flashinfer): a few milliseconds.
"""

from __future__ import annotations

from .calls import call_api
from .installing import installer, plan_providers
from .calls.call_api import build_mla_decode_tuning_config, mla_decode
from .installing.installer import install, status, uninstall

plan_providers.register(
    "transparent",
    lambda settings: bool(settings["transparent"].value),
    lambda: call_api.transparent_plan(installer.settings()),
)

__all__ = ["build_mla_decode_tuning_config", "install", "mla_decode", "status", "uninstall"]
