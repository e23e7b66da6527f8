"""``fi-compat`` / ``python -m fi_compat``: subcommands live in their own modules.

Each subcommand module exposes ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed namespace and returning an
exit status.  Modules are imported only to build the parser; none of them
imports torch or flashinfer at import time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

from ._version import __version__

SUBCOMMANDS = (
    ("soak", "fi_compat.commands.soak"),
    ("guard", "fi_compat.commands.guard.cli"),
    ("doctor", "fi_compat.commands.doctor"),
    ("audit", "fi_compat.commands.audit.cli"),
    ("run", "fi_compat.commands.run"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fi-compat",
        description="Bounded, version-aware compatibility layer over flashinfer's MLA decode API.",
    )
    parser.add_argument("--version", action="version", version=f"fi-compat {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module_name in SUBCOMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name and not module_name.startswith(str(exc.name)):
                raise
            continue  # subcommand not built yet
        module.register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
