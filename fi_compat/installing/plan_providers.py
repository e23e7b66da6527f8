"""Patches that layers above the installer add to an install, all or nothing.

The installer knows nothing of those layers (the call API's transparent mode
is the one today): :mod:`fi_compat.public` registers a provider here, and the
installer applies every enabled one after the bounds, removing them with the
bounds.  Cost: one dictionary walk per install.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping

from .. import config
from ..adapters import Installation, Plan

logger = logging.getLogger("fi_compat")

Enabled = Callable[[Mapping[str, config.Setting]], bool]
_providers: dict[str, tuple[Enabled, Callable[[], Plan]]] = {}


def register(name: str, enabled: Enabled, make_plan: Callable[[], Plan]) -> None:
    """Add (or replace) the provider ``name``; ``enabled(settings)`` decides per install."""
    _providers[name] = (enabled, make_plan)


def apply(settings: Mapping[str, config.Setting]) -> Installation:
    """Every enabled provider's plan, applied; all or nothing: a provider that
    raises leaves none of them in place, and the exception propagates."""
    extras = Installation()
    if settings["transparent"].value and "transparent" not in _providers:
        logger.warning(
            "fi_compat: transparent mode comes with the call API: install through "
            "fi_compat.install(), which loads it; this install has none"
        )
    try:
        for enabled, make_plan in _providers.values():
            if enabled(settings):
                extras.apply(make_plan())
    except BaseException:
        extras.remove()
        raise
    return extras


__all__ = ["apply", "register"]
