"""``fi-compat doctor``: one screen for a bug report (the report itself is
:mod:`fi_compat.diagnosis`, shared with :func:`fi_compat.doctor_report`).

What it shows, one section each (:mod:`fi_compat.diagnosis.environment`,
``.verdicts``, ``.sections``): fi_compat, Python, torch; the flashinfer release and how it
was detected; the verdict on every cache fi_compat bounds and the call API's
decode signature, by the lookup ``install()`` uses; what is installed; whether
TensorRT-LLM's workaround is there; the census of flashinfer's unbounded
caches and their sizes; the settings and where each came from.
docs/doctor.md explains each line and what to do about it.

Two ways to run it:

* ``fi-compat doctor`` (:func:`run`) in its own process.  It imports
  ``flashinfer.mla`` as an application would (``--no-import``: reads the
  source with ``ast`` instead; ``--cpu-shim``: imports under the CPU-host
  shim) and patches nothing unless ``--install``, which runs
  :func:`fi_compat.install` in the doctor process only.
* :func:`doctor_report` inside a serving process, where the answer is: what
  is installed *there*, whether TensorRT-LLM's workaround is there, how big
  flashinfer's caches have grown there.  It imports nothing new and changes
  nothing.

:func:`gather` returns the report as a dict with a fixed set of keys
(:data:`SCHEMA_VERSION`, :data:`TOP_LEVEL_KEYS` and each section's ``*_KEYS``);
``--json`` prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ...diagnosis import SCHEMA_VERSION, SECTION_KEYS, SETTING_KEYS, TOP_LEVEL_KEYS, format_text, gather


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="report fi_compat, torch, flashinfer, the verdict on each bounded cache, patches, census, settings",
        description="One screen for a bug report. Patches nothing unless --install. Inside a serving process, "
        "log fi_compat.doctor_report() instead. Exits 1 when the report lists a problem, 2 when it cannot "
        "report. See docs/doctor.md.",
    )
    parser.add_argument("--json", action="store_true", help=f"print JSON (schema_version {SCHEMA_VERSION})")
    parser.add_argument(
        "--install",
        action="store_true",
        help="run fi_compat.install() in the doctor process first and report the result "
        "(shows what install would do; your application is not affected)",
    )
    parser.add_argument(
        "--no-import", action="store_true", help="do not import flashinfer; judge from the source with ast"
    )
    parser.add_argument(
        "--cpu-shim",
        action="store_true",
        help="import flashinfer under fi_compat.workload.cpu_host() (CPU-only CI): live "
        "verdicts and the census on a host without a GPU",
    )
    parser.set_defaults(func=run)


EXIT_CLEAN = 0
"""The report lists no problem."""
EXIT_PROBLEMS = 1
"""The report lists at least one problem (its ``problems``: a cache left unbounded,
``installed (partial)``, an unverified release, an install that failed, ...)."""
EXIT_FAILED = 2
"""No report: a usage error (argparse's own), or gathering it failed."""


def run(args: argparse.Namespace) -> int:
    """Print the report; exit :data:`EXIT_PROBLEMS` when it lists a problem, so CI
    that runs the doctor fails on what the report says (docs/doctor.md).
    An unexpected failure while gathering prints one line on stderr and exits
    :data:`EXIT_FAILED`."""
    try:
        report = gather(import_flashinfer=not args.no_import, install=args.install, cpu_shim=args.cpu_shim)
    except Exception as exc:  # noqa: BLE001  (gather never raises for flashinfer; anything else is a doctor bug)
        print(f"fi-compat doctor: no report: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(report, indent=2, default=str) if args.json else format_text(report))
    return EXIT_PROBLEMS if report["problems"] else EXIT_CLEAN


__all__ = [
    "EXIT_CLEAN",
    "EXIT_FAILED",
    "EXIT_PROBLEMS",
    "SCHEMA_VERSION",
    "SECTION_KEYS",
    "SETTING_KEYS",
    "TOP_LEVEL_KEYS",
    "register",
    "run",
]
