"""nox sessions.

* ``tests``: the whole suite on CPU, torch 2.13.0 (CPU build) and the default
  flashinfer release.
* ``soak``: the main job (README's first command).

Every session builds its own virtual environment; nothing here touches the
interpreter that runs nox.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
nox.options.sessions = ["tests"]

PYTHON = None  # the interpreter running nox
TORCH = "torch==2.13.0"  # pip finds the CPU build on these machines without a download
DEFAULT_FLASHINFER = "0.6.18"


def install_host_stack(session: nox.Session, flashinfer: str = DEFAULT_FLASHINFER) -> None:
    """torch and flashinfer as a user's host would have them, then fi_compat
    with --no-deps for them (fi_compat must not change either)."""
    session.install(TORCH)
    session.install(f"flashinfer-python=={flashinfer}")
    session.install("-e", ".[test]")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit and integration tests on CPU (the shim runs real flashinfer)."""
    install_host_stack(session)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python=PYTHON)
def soak(session: nox.Session) -> None:
    """The main job: host memory with and without fi_compat on the default release."""
    install_host_stack(session)
    session.install("matplotlib")
    session.run("fi-compat", "soak", *(session.posargs or ["--plot", "soak.png"]))
