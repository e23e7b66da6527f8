"""The guard's own dependencies, the ``fi-compat[guard]`` extra.

The runtime (what goes into inference images) needs only packaging and wrapt;
the guard, a CI tool, reads lock and project files with kept libraries:
``tomllib`` (``tomli`` on Python 3.10) for TOML, ``packaging.pylock``
(packaging 26.0 and later) for PEP 751 lock files and ``dependency-groups``
for PEP 735 ``{include-group = ...}``.  :func:`missing` names what is absent;
``fi-compat guard`` refuses to start without all of them (exit 2, naming
``pip install 'fi-compat[guard]'``), so no file is ever half-read.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from .errors import GuardError

INSTALL = "pip install 'fi-compat[guard]'"


class GuardExtraMissing(GuardError):
    """A module of the guard's extra is not installed."""


def _toml_name() -> str:
    return "tomllib" if sys.version_info >= (3, 11) else "tomli"


def _needed() -> dict[str, str]:
    """module -> the distribution that provides it."""
    return {
        _toml_name(): "Python 3.11's standard library" if sys.version_info >= (3, 11) else "tomli",
        "packaging.pylock": "packaging>=26",
        "dependency_groups": "dependency-groups",
    }


def missing() -> list[str]:
    """``module (distribution)`` for each of the extra's modules that does not
    import, in a fixed order; empty when the guard can run.  Cost: three
    imports the first time (milliseconds), dictionary look-ups after."""
    absent = []
    for module, distribution in _needed().items():
        try:
            importlib.import_module(module)
        except ImportError:
            absent.append(f"{module} ({distribution})")
    return absent


def message(absent: list[str]) -> str:
    return f"the guard needs its extra, {INSTALL} ({', '.join(absent)} cannot be imported)"


def module(name: str) -> ModuleType:
    """The extra's module ``name`` (``toml`` for tomllib/tomli).  Raises
    :class:`GuardExtraMissing`, whose message names the extra, when it does
    not import."""
    real = _toml_name() if name == "toml" else name
    try:
        return importlib.import_module(real)
    except ImportError:
        raise GuardExtraMissing(message([f"{real} ({_needed()[real]})"])) from None
