"""The public functions, wired together.

The installer knows nothing of the layers above it; importing the call API
here registers its transparent mode with the installer, so
``fi_compat.install(transparent=True)`` has it whichever public function a
program touches first.
"""

from __future__ import annotations

from .call_api import build_mla_decode_tuning_config, mla_decode
from .installer import install, status, uninstall

__all__ = ["build_mla_decode_tuning_config", "install", "mla_decode", "status", "uninstall"]
