"""``fi-compat run [--strict] [--cache-size N] [--policy P] [--transparent] -- COMMAND ARGS...``

Runs COMMAND with fi_compat installed in every Python interpreter of its
process tree, without a change to the command's code: the way
``opentelemetry-instrument`` and ``ddtrace-run`` wrap a command.

How: the directory ``fi_compat/_sitecustomize`` goes first on ``PYTHONPATH``;
its ``sitecustomize`` chains to the one that would otherwise have been
imported, then calls ``fi_compat.install()`` (see :mod:`fi_compat.startup`).
The options become ``FI_COMPAT_STRICT``, ``FI_COMPAT_CACHE_SIZE``,
``FI_COMPAT_MAX_SEQ_LEN_POLICY`` and ``FI_COMPAT_TRANSPARENT`` (flashinfer's
decode function routed through ``fi_compat.mla_decode``); options not given leave the variables as the
environment has them.  Child processes inherit the environment, so
subprocesses and multiprocessing / torch.multiprocessing *spawn* and
*forkserver* workers install for themselves at start-up (forked workers
inherit the parent's installed state).

The command replaces this process (``os.execvpe``): same PID, signals reach
the command directly (a container's SIGTERM is not relayed through a wrapper),
its exit status is the exit status, and no wrapper process stays resident.
(On Windows ``os.exec*`` starts a new process instead; the engines are Linux-only.)

Not reached: interpreters started with ``-E``/``-I`` (they ignore
``PYTHONPATH``) or ``-S`` (no ``site``), and environments that reset
``PYTHONPATH``.  ``FI_COMPAT_AUTO=1`` (docs/run.md) needs no ``PYTHONPATH``.

Failure behaviour: bad options exit 2 with a message before anything runs; a
command that cannot be found exits 127, one that cannot be executed 126.
Cost: one ``exec``; each interpreter then pays fi_compat's start-up install
(docs/run.md).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any, Mapping, Optional, Sequence

from .. import config

SITECUSTOMIZE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_sitecustomize")
COMMAND_NOT_FOUND = 127
COMMAND_NOT_EXECUTABLE = 126


def _cache_size(raw: str) -> int:
    try:
        return config.check_cache_size(raw, "--cache-size")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a command with fi_compat installed in every Python process it starts",
        description=__doc__.split("\n\n")[0],
        usage="fi-compat run [--strict] [--cache-size N] [--policy P] [--transparent] -- COMMAND [ARGS...]",
    )
    parser.add_argument(
        "--strict", action="store_true", help="a failed install stops the interpreter (FI_COMPAT_STRICT=1)"
    )
    parser.add_argument(
        "--cache-size",
        type=_cache_size,
        metavar="N",
        help=f"bounded-cache capacity, 1 to {config.MAX_CACHE_SIZE} (FI_COMPAT_CACHE_SIZE)",
    )
    parser.add_argument(
        "--policy",
        choices=config.POLICIES,
        metavar="P",
        help=f"max_seq_len policy: {', '.join(config.POLICIES)} (FI_COMPAT_MAX_SEQ_LEN_POLICY)",
    )
    parser.add_argument(
        "--transparent",
        action="store_true",
        help="route flashinfer's MLA decode function through fi_compat.mla_decode, which binds "
        "arguments by name on any release (FI_COMPAT_TRANSPARENT=1)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS")
    parser.set_defaults(func=functools.partial(run, parser=parser))


def _same_directory(entry: str, directory: str) -> bool:
    if not entry:
        return False  # an empty entry means "the working directory" and stays as it is
    try:
        return os.path.realpath(entry) == os.path.realpath(directory)
    except (OSError, ValueError):
        return False


def _variable(setting: str) -> str:
    """The FI_COMPAT_* variable of a setting (config.py owns the names)."""
    return config.resolve(setting, environ={}).env_var


def child_environment(
    environ: Mapping[str, str],
    *,
    strict: bool = False,
    cache_size: Optional[int] = None,
    policy: Optional[str] = None,
    transparent: bool = False,
) -> dict[str, str]:
    """The command's environment: ``environ`` with the sitecustomize
    directory first on ``PYTHONPATH`` (once, however often ``run`` is nested)
    and the given options as ``FI_COMPAT_*`` variables."""
    env = dict(environ)
    existing = env.get("PYTHONPATH")
    entries = (
        [] if not existing else [e for e in existing.split(os.pathsep) if not _same_directory(e, SITECUSTOMIZE_DIR)]
    )
    env["PYTHONPATH"] = os.pathsep.join([SITECUSTOMIZE_DIR, *entries])
    if strict:
        env[_variable("strict")] = "1"
    if cache_size is not None:
        env[_variable("cache_size")] = str(cache_size)
    if policy is not None:
        env[_variable("max_seq_len_policy")] = policy
    if transparent:
        env[_variable("transparent")] = "1"
    return env


def command_from(remainder: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """The command after ``--``; a usage error (exit 2) when ``--`` or the command is missing."""
    if not remainder:
        parser.error("no command given: put it after --")
    if remainder[0] != "--":
        parser.error(f"put -- between fi-compat's options and the command (got {remainder[0]!r} first)")
    if len(remainder) == 1:
        parser.error("no command after --")
    return list(remainder[1:])


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = command_from(args.command, parser)
    env = child_environment(
        os.environ, strict=args.strict, cache_size=args.cache_size, policy=args.policy, transparent=args.transparent
    )
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        print(f"fi-compat run: {command[0]}: command not found", file=sys.stderr)
        return COMMAND_NOT_FOUND
    except OSError as exc:
        print(f"fi-compat run: {command[0]}: cannot execute: {exc.strerror or exc}", file=sys.stderr)
        return COMMAND_NOT_EXECUTABLE
    raise AssertionError("os.execvpe returned")  # pragma: no cover - exec never returns
