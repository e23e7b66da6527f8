"""Whether this process installed fi_compat at start-up, and how a strict failure then ends it.

``fi-compat run`` and ``FI_COMPAT_AUTO`` install before the program's own code
runs (:mod:`fi_compat.startup`); there a strict failure must stop the program
rather than let it serve unbounded (:mod:`fi_compat.installing.tripwire`).  Elsewhere a
strict error is the program's to handle.  Imports nothing of fi_compat's.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

logger = logging.getLogger("fi_compat")

_startup_origin: Optional[str] = None


def mark_startup(origin: str) -> None:
    """Say that this process installs at start-up (``fi-compat run``, ``FI_COMPAT_AUTO``):
    a strict failure with no import to raise into then ends the process, and one
    raised into an import arms :mod:`fi_compat.installing.tripwire`."""
    global _startup_origin
    _startup_origin = origin


def startup_origin() -> Optional[str]:
    """The hook :func:`mark_startup` named, or ``None`` when this process did not install at start-up."""
    return _startup_origin


def end_strict_process(exc: BaseException, cause: str = "") -> None:
    """A strict failure that must not be served past: one found off any import (an
    import that finished in another thread), or ``cause`` (the tripwire: the decode
    function called after the program caught the error).  The message, and at
    start-up the end of the process, status 1."""
    message = (
        f"fi_compat ERROR: {cause + ': ' if cause else ''}{type(exc).__name__}: {' '.join(str(exc).split())}; "
        "exiting because FI_COMPAT_STRICT is set"
    )
    if _startup_origin is None:
        logger.error("%s (no import to raise it into: kept for the next fi_compat call)", message)
        return
    sys.stderr.write(f"{message} ({_startup_origin}, pid {os.getpid()})\n")
    sys.stderr.flush()
    try:
        sys.stdout.flush()  # what the program printed before: _exit would drop it
    except (OSError, ValueError, AttributeError):  # closed, or replaced by something without flush
        pass
    # not SystemExit: this may be a daemon thread, or an engine thread whose SystemExit
    # would end only that thread, and the engine would serve on unbounded
    os._exit(1)
