"""Strict at start-up: a strict error that a program swallows still stops its first MLA decode.

Under ``fi-compat run --strict`` or ``FI_COMPAT_AUTO=1 FI_COMPAT_STRICT=1`` a
mismatch found when flashinfer (or a lazily imported cute-dsl module) is
imported makes that import raise the typed error, with nothing installed.  An
engine that treats flashinfer as an optional backend catches it (``try: import
flashinfer except Exception: ...``) and goes on: the failed import takes only
the ``flashinfer`` package out of ``sys.modules``, its submodules stay, so a
second ``import flashinfer`` (or ``from flashinfer.mla import ...``) succeeds
and the engine would serve with every cache unbounded and exit 0.

So, when the installer raises a strict error into an import of a process that
installed at start-up (:func:`fi_compat.installing.startup_state.mark_startup`), it also arms
this tripwire: flashinfer's public MLA decode function (:data:`~fi_compat.model.specs.DECODE`)
is replaced at every module attribute that holds it -- its home module, the
``flashinfer.mla`` and ``flashinfer.decode`` re-exports, and any module that
bound it by name earlier, as vLLM does -- by a proxy whose call ends the
process the way a strict failure off any import does
(:func:`fi_compat.installing.startup_state.end_strict_process`: one ``fi_compat ERROR: ...``
line on stderr naming the typed error, exit status 1).  The import still
raises the typed error first; a program that does not catch it never reaches
the tripwire.

Only the decode function carries it: every cache fi_compat bounds on the MLA
decode path -- the tuning-config memo, the cute-dsl batch cap and sizers, the
nearest-profile memos, and the tuning-config builder (flashinfer's or
TensorRT-LLM's memo installed in its place) -- is reached from a decode
through that function, which flashinfer itself never calls, and the builder
is private, called by the decode function through its module global; a
tripwire on the builder would stop nothing the decode tripwire does not, and
would sit where TensorRT-LLM installs its own memo.  Routes into those caches
that do not pass through the decode function (flashinfer's DSV4 sparse decode,
the cute-dsl wrappers called directly, other autotuned operations) are not
MLA decode as fi_compat defines it and are left alone.

Failure behaviour: arming never raises past the error it accompanies (a
failure to arm is logged at ERROR and the import raises the typed error as
before).  The tripwire stays armed until :func:`fi_compat.uninstall`,
:func:`fi_compat.reset` or an ``install()`` with different settings (the
program's explicit choice), which restore every attribute ``is``-identically,
including modules that took the name after the tripwire was armed; a reference
kept elsewhere (a local, a closure) becomes a pass-through.  Not at start-up
(a program that calls ``install(strict=True)`` itself) nothing is armed: the
program sees the error and decides.

Cost: nothing unless a strict start-up install failed; then one identity scan
of every loaded module (tens of milliseconds), once, in a process that is about
to end.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, NoReturn, Optional

from . import startup_state
from ..adapters.base import Installation, Plan, PatchStep
from ..lookup.modules import holders, loaded
from ..memo.proxies import Tripwire
from ..model.specs import DECODE, PUBLIC_MLA_MODULE

logger = logging.getLogger("fi_compat")


@dataclass
class Armed:
    """A tripwire in place: what :func:`disarm` takes back."""

    installation: Installation
    proxy: Tripwire
    original: Callable[..., Any]


def arm(error: BaseException) -> Optional[Armed]:
    """Replace the decode function with a tripwire that ends the process with
    ``error``, when this process installed at start-up; ``None`` otherwise, or
    when flashinfer's MLA module is not imported (nothing to call yet).

    Called by the installer under its lock, with ``error`` about to be raised
    into an import.  Never raises: the typed error must reach the import."""
    if startup_state.startup_origin() is None:
        return None  # install(strict=True) called by the program itself: the error is the program's to handle
    try:
        # releases before 0.6.8 define the function in flashinfer.mla itself (no _core)
        home = loaded(DECODE.module) or loaded(PUBLIC_MLA_MODULE)
        original = getattr(home, DECODE.name, None)
        if original is None:
            return None
        proxy = Tripwire(original, _ender(error))
        # no module skipped, the home module included: the call API (fi_compat.mla_decode) calls it there
        installation = Installation()
        installation.apply(Plan([PatchStep(DECODE.qualname, original, proxy, holders(original))]))
        return Armed(installation, proxy, original)
    except Exception as exc:  # noqa: BLE001  (the import must still raise the typed error)
        logger.error(
            "fi_compat: could not stop %s after a strict failure (%s: %s)", DECODE.qualname, type(exc).__name__, exc
        )
        return None


def _ender(error: BaseException) -> Callable[[], NoReturn]:
    def end() -> NoReturn:
        startup_state.end_strict_process(error, f"{DECODE.qualname} called after the strict error was caught")
        # not reached at start-up (end_strict_process exits); never call flashinfer unbounded instead
        raise error

    return end


def disarm(armed: Optional[Armed]) -> list[str]:
    """Take the tripwire back (``is``-identical originals); the returned list
    names attributes someone else replaced since (left to them, the proxy a
    pass-through inside).  Safe with ``None``."""
    if armed is None:
        return []
    leftovers = armed.installation.remove()
    # a module that took the name after arming (``from flashinfer.mla import ...`` in the program
    # that swallowed the error) holds the proxy too: the plan's targets predate it
    for owner, attribute in holders(armed.proxy):
        setattr(owner, attribute, armed.original)
    armed.proxy.fi_compat_deactivate()  # a reference kept outside any module calls flashinfer again
    return leftovers


__all__ = ["Armed", "arm", "disarm"]
