"""fi_compat: one stable, bounded MLA decode API over every flashinfer release.

``import fi_compat`` is cheap: it imports neither torch nor flashinfer.  The
public names are loaded on first use.

    import fi_compat
    fi_compat.install()            # bound every cache of flashinfer's MLA decode host path
    fi_compat.status()             # the verdict on each cache, what is patched, cache statistics
    fi_compat.doctor_report()      # the same and more, as text for a log
    from fi_compat import mla_decode

See README.md and docs/ for the full story.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import (
    DefaultMismatchWarning,
    FiCompatError,
    FiCompatWarning,
    SignatureMismatchError,
    UnboundedGrowthError,
    UnboundedGrowthWarning,
    UnsupportedFeatureError,
    UnsupportedReleaseError,
    UnsupportedReleaseWarning,
    UnverifiedReleaseError,
    UnverifiedReleaseWarning,
)

_LAZY = {
    "install": "public",
    "uninstall": "public",
    "status": "public",
    "mla_decode": "public",
    "build_mla_decode_tuning_config": "public",
    "apply_max_seq_len_policy": "calls.policy",
    "detect_release": "model.release_detection",
    "doctor_report": "diagnosis",
}

__all__ = [
    "__version__",
    "install",
    "uninstall",
    "status",
    "mla_decode",
    "build_mla_decode_tuning_config",
    "apply_max_seq_len_policy",
    "detect_release",
    "doctor_report",
    "DefaultMismatchWarning",
    "FiCompatError",
    "FiCompatWarning",
    "SignatureMismatchError",
    "UnboundedGrowthError",
    "UnboundedGrowthWarning",
    "UnsupportedFeatureError",
    "UnsupportedReleaseError",
    "UnsupportedReleaseWarning",
    "UnverifiedReleaseError",
    "UnverifiedReleaseWarning",
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'fi_compat' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module_name}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # pragma: no cover
    from .calls.call_api import build_mla_decode_tuning_config, mla_decode
    from .diagnosis import doctor_report
    from .installing.installer import install, status, uninstall
    from .calls.policy import apply_max_seq_len_policy
    from .model.release_detection import detect_release
