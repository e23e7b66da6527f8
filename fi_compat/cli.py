"""``fi-compat`` / ``python -m fi_compat``: the commands, loaded only when run.

Each command lives in its own module under :mod:`fi_compat.commands` and
exposes ``register(subparsers)``, which adds its parser and sets ``func`` (a
callable taking the parsed namespace and returning an exit status).  Only the
module of the command being run is imported: ``fi-compat --version`` and
``fi-compat --help`` import none of them, and no command imports torch or
flashinfer before it needs to.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from ._version import __version__

#: name -> (module, one-line help shown by ``fi-compat --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "soak": ("fi_compat.commands.soak", "host memory and time of the MLA decode host path, with and without fi_compat"),
    "guard": ("fi_compat.commands.guard.cli", "check a flashinfer-python pin bump against fi_compat's bounds"),
    "doctor": ("fi_compat.commands.doctor", "one screen for a bug report: releases, bounds, caches, settings"),
    "audit": ("fi_compat.commands.audit.cli", "every unbounded cache in a flashinfer build, ranked"),
    "run": ("fi_compat.commands.run", "run a command with fi_compat installed in every Python process it starts"),
}


def _top_parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"  {name:8} {summary}" for name, (_, summary) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="fi-compat",
        description="Bounded, version-aware compatibility layer over flashinfer's MLA decode API.",
        epilog=f"commands:\n{listing}\n\n`fi-compat COMMAND --help` for one command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fi-compat {__version__}")
    parser.add_argument("command", nargs="?", choices=list(COMMANDS), metavar="COMMAND")
    return parser


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one command (its module is imported here, and only here)."""
    parser = argparse.ArgumentParser(prog="fi-compat")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    module = importlib.import_module(COMMANDS[command][0])
    module.register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if not arguments or arguments[0] not in COMMANDS:
        top = _top_parser()
        namespace = top.parse_args(arguments)  # --version, --help and unknown options exit here
        if namespace.command is None:
            top.print_help(sys.stderr)
            return 2
    parser = build_parser(arguments[0])
    args = parser.parse_args(arguments)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
