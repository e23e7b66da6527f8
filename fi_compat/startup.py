"""Install fi_compat as a Python interpreter starts, without touching the application.

Three hooks call into this module, each in every process of a process tree
(engines start their tensor-parallel ranks as *spawned* interpreters, which
re-run start-up, so each rank installs for itself):

* ``fi-compat run``'s ``sitecustomize`` (``fi_compat/_sitecustomize``), put
  first on ``PYTHONPATH``: :func:`install_at_startup`;
* ``FI_COMPAT_AUTO=1`` with fi-compat installed from its wheel: the wheel's
  ``fi_compat_autostart.pth`` imports the top-level ``_fi_compat_autostart``,
  which calls :func:`autostart` only when the variable is set;
* the engines' plugin entry points (SGLang ``sglang.srt.plugins``, vLLM
  ``vllm.general_plugins``): :func:`engine_plugin`, also gated on
  ``FI_COMPAT_AUTO``.

Settings come from the ``FI_COMPAT_*`` variables, exactly as a plain
``fi_compat.install()`` reads them.  Installing twice (two hooks in one
process) is a no-op the second time.  The INFO line naming release and what is
bounded is the installer's; nothing here logs at INFO.

Failure behaviour: a failure never stops the interpreter from starting.  It is
reported once: as a WARNING on the ``fi_compat`` logger when the process has
logging handlers, otherwise as one ``fi_compat WARNING: ...`` line on stderr
(at start-up the application has not configured logging yet).  With
``FI_COMPAT_STRICT=1`` (``fi-compat run --strict``) the error is written to
stderr and the interpreter exits with :data:`STRICT_EXIT_STATUS` before the
application runs; an engine plugin re-raises instead, so the engine reports it.
A strict mismatch found when the application imports flashinfer raises the
typed error from that ``import`` (uncaught: a traceback and exit status 1), with
nothing installed; caught, the program's first call of flashinfer's MLA decode
writes the error and ends the process, status 1 (:mod:`fi_compat.installing.tripwire`).
One found where no import can carry it (an import that finished in another
thread) writes the error and ends the process, status 1.

Cost: importing fi_compat's public API (wrapt, packaging; no torch, no
flashinfer) and one ``install()`` that registers a post-import hook, a few
milliseconds per interpreter (docs/run.md has the measured figure).
"""

from __future__ import annotations

import logging
import os
import sys

from . import config

AUTO_ENV = "FI_COMPAT_AUTO"
STRICT_EXIT_STATUS = 1
"""Exit status of an interpreter whose strict start-up install failed (that of
an uncaught exception)."""

logger = logging.getLogger("fi_compat")


def report_warning(message: str) -> None:
    """Report ``message`` exactly once: to logging if the process has handlers
    for the ``fi_compat`` logger, else as one line on stderr."""
    one_line = " ".join(message.split())
    if logger.hasHandlers():
        logger.warning("%s", one_line)
    else:
        sys.stderr.write(f"fi_compat WARNING: {one_line}\n")
        sys.stderr.flush()


def _strict_requested() -> bool:
    try:
        return bool(config.resolve("strict").value)
    except ValueError:
        # An unreadable FI_COMPAT_STRICT is reported by install() itself; it
        # does not count as asking for strict mode.
        return False


def install_at_startup(origin: str, *, exit_on_strict_failure: bool = True) -> None:
    """``fi_compat.install()`` with the environment's settings, never raising
    unless strict.

    ``origin`` names the hook in messages (``fi-compat run``, ``FI_COMPAT_AUTO``,
    ``engine plugin``).  Strict failure: write the error and exit the
    interpreter (``exit_on_strict_failure``), or re-raise it."""
    try:
        # the public install, not the installer's: fi_compat.public also hands
        # the installer the call API's transparent mode (FI_COMPAT_TRANSPARENT=1)
        from .public import install
        from .installing.startup_state import mark_startup

        mark_startup(origin)  # a strict failure found later, off any import, ends the process
        install()
    except Exception as exc:  # noqa: BLE001 - any failure must be reported, none may stop start-up
        where = f"{origin}, pid {os.getpid()}, {sys.executable}"
        if _strict_requested():
            if not exit_on_strict_failure:
                raise
            sys.stderr.write(
                f"fi_compat ERROR: install failed ({where}): {type(exc).__name__}: "
                f"{' '.join(str(exc).split())}; exiting because FI_COMPAT_STRICT is set\n"
            )
            sys.stderr.flush()
            sys.stdout.flush()
            # SystemExit from sitecustomize or a .pth becomes "Fatal Python
            # error: init_import_site"; _exit ends the interpreter cleanly
            # before the application has started anything to clean up.
            os._exit(STRICT_EXIT_STATUS)
        report_warning(
            f"install failed ({where}): {type(exc).__name__}: {exc}; the program runs without "
            f"fi_compat (set FI_COMPAT_STRICT=1 or use `fi-compat run --strict` to make this an error)"
        )


def auto_requested() -> bool:
    """Whether ``FI_COMPAT_AUTO`` asks for an install (unset or empty: no).

    An unreadable value is reported and counts as no."""
    raw = os.environ.get(AUTO_ENV)
    if raw is None or not raw.strip():
        return False
    try:
        return config.parse_bool(raw, AUTO_ENV)
    except ValueError as exc:
        report_warning(f"{exc}; fi_compat not installed")
        return False


def autostart() -> None:
    """Called by ``_fi_compat_autostart`` (the wheel's .pth hook) once it saw ``FI_COMPAT_AUTO`` set."""
    if auto_requested():
        install_at_startup(AUTO_ENV)


def engine_plugin() -> None:
    """Entry point for SGLang's ``sglang.srt.plugins`` and vLLM's
    ``vllm.general_plugins`` groups, which each engine loads and calls with no
    arguments in every worker process.

    Installs only when ``FI_COMPAT_AUTO`` is set, so installing the fi-compat
    wheel alone changes nothing.  Never raises unless strict (vLLM does not
    catch plugin errors; SGLang logs them and goes on)."""
    if auto_requested():
        install_at_startup("engine plugin", exit_on_strict_failure=False)
