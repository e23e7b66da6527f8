"""The guard's one way to run pip: ``python -m pip ARGS`` in a child process, with its errors in words.

The guard asks pip for three things (:mod:`.index`: the published releases;
:mod:`.fetch`: a wheel; :mod:`.census_env`: a wheel installed into a throwaway
directory), and each failure reads the same way: pip could not be started, did
not finish in time, or exited non-zero (its last stderr lines quoted).

Cost: one pip process (0.5-1 s to start, plus what pip does).  Failure: the
caller's :class:`~.errors.GuardError` subclass, never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Optional, Sequence

from .errors import GuardError


def run_pip(
    arguments: Sequence[str],
    *,
    what: str,
    timeout: float,
    error: type[GuardError] = GuardError,
    python: str = sys.executable,
    env: Optional[dict[str, str]] = None,
    tail_lines: int = 2,
) -> "subprocess.CompletedProcess[str]":
    """``python -m pip *arguments``, its stdin closed and its output captured.

    ``what`` names the step in errors (``pip download``); raises ``error`` when pip
    cannot start, runs past ``timeout`` seconds, or exits non-zero (quoting the
    last ``tail_lines`` non-blank lines of its stderr)."""
    command = [python, "-m", "pip", *arguments]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env
        )
    except subprocess.TimeoutExpired:
        raise error(f"`{what}` did not finish within {timeout:.0f} s") from None
    except OSError as exc:
        raise error(f"cannot run pip: {exc}") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise error(f"`{what}` failed: {' / '.join(lines[-tail_lines:]) or '(no output)'}")
    return done


__all__ = ["run_pip"]
