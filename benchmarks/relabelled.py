"""Run a command against the installed flashinfer under another version label: a release fi_compat has not verified.

    python benchmarks/relabelled.py [--label L] -- COMMAND ...

The installed flashinfer's code, unchanged, laid over on a temporary site directory under the label
``L`` (default: the installed release with ``.post0.dev1`` appended, the way a nightly or a source
build is labelled), first on ``PYTHONPATH`` for ``COMMAND`` and every process it starts
(tests/helpers/drift.py's ``build_site``, the overlay the release suite's edited releases use).
fi_compat then does what it does on a release it does not know: it bounds by name what matches,
warns once, and its runtime watch measures flashinfer's memory until it retires.  So

    python benchmarks/relabelled.py -- fi-compat soak

shows fi_compat with its defaults on an unverified release, beside ``fi-compat soak`` on the
verified one.  Exits with ``COMMAND``'s status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", help="the version label (default: the installed release + .post0.dev1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    sys.path[:0] = [str(TESTS), str(TESTS / "matrix")]
    from packaging.version import Version

    from helpers import drift
    from helpers.watch_releases import RELABELLED

    label = args.label or f"{Version(drift.base_version(drift.real_package_dir())).base_version}.post0.dev1"
    with tempfile.TemporaryDirectory() as scratch:
        site = drift.build_site(RELABELLED, Path(scratch), version=label).site
        paths = [str(site), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        print(f"relabelled: flashinfer {drift.base_version(drift.real_package_dir())} as {label} ({site})", flush=True)
        return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
