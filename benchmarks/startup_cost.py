"""Interpreter start-up cost of fi_compat's start-up hooks.

    python benchmarks/startup_cost.py [--rounds 21] [--python VENV/bin/python]

Without ``--python`` it builds the wheel from this repository (``pip wheel
--no-deps``, needs the package index for setuptools) and installs it into a
throwaway venv whose packaging and wrapt come from this interpreter's
environment.  Then, alternating the variants round by round, it times fresh
interpreters of that venv:

* ``python -c pass`` and a process that imports the standard-library modules a
  serving engine imports anyway (asyncio, ssl, email, importlib.metadata, ...);
* with ``FI_COMPAT_AUTO`` unset (the wheel's .pth hook only), ``FI_COMPAT_AUTO=1``,
  and ``fi-compat run``'s sitecustomize on ``PYTHONPATH``;

and reads ``-X importtime`` for the .pth hook's module with the variable unset.
Prints medians and minimums (the minimum is the steadier figure on a shared
machine) and each variant's difference from the unset one.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITECUSTOMIZE_DIR = ROOT / "fi_compat" / "_sitecustomize"
SERVER_IMPORTS = "import asyncio, ssl, email.message, importlib.metadata, inspect, typing, logging, dataclasses, enum"
HOOK_MODULE = "_fi_compat_autostart"


def build_venv(workdir: Path) -> Path:
    source = workdir / "source"
    source.mkdir()
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "build_autostart_pth.py", f"{HOOK_MODULE}.py"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "fi_compat", source / "fi_compat", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = workdir / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(wheels)], check=True)
    venv = workdir / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    *map(str, wheels.glob("*.whl"))], check=True)
    import packaging
    import wrapt

    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    dirs = sorted({str(Path(m.__file__).resolve().parent.parent) for m in (packaging, wrapt)})
    Path(purelib, "_benchmark_dependencies.pth").write_text("\n".join(dirs) + "\n")
    return python


def hook_import_us(python: Path, env: dict[str, str], rounds: int) -> float:
    """Median ``-X importtime`` self time of the .pth hook's module, in microseconds."""
    values = []
    for _ in range(rounds):
        err = subprocess.run([str(python), "-X", "importtime", "-c", "pass"], env=env, capture_output=True,
                             text=True, check=True).stderr
        match = re.search(rf"import time:\s+(\d+)\s+\|\s+\d+\s+\|\s+{HOOK_MODULE}\b", err)
        if match is None:
            raise SystemExit(f"{HOOK_MODULE} not imported at start-up: is the wheel's .pth installed in {python}?")
        values.append(int(match.group(1)))
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--python", type=Path, help="an interpreter with fi-compat installed from its wheel")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        python = args.python or build_venv(Path(workdir))
        base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("FI_COMPAT_")}
        hooks = {
            "FI_COMPAT_AUTO unset": base,
            "FI_COMPAT_AUTO=1": dict(base, FI_COMPAT_AUTO="1"),
            "fi-compat run": dict(base, PYTHONPATH=str(SITECUSTOMIZE_DIR)),
        }
        programs = {"python -c pass": "pass", "stdlib a server imports": SERVER_IMPORTS}
        times: dict[tuple[str, str], list[float]] = {(h, p): [] for h in hooks for p in programs}
        for _ in range(args.rounds):
            for (hook, program), values in times.items():
                started = time.perf_counter()
                subprocess.run([str(python), "-c", programs[program]], env=hooks[hook], check=True)
                values.append((time.perf_counter() - started) * 1e3)
        print(f"{python}: {args.rounds} rounds, variants alternated")
        print(f"{'program':26s} {'hook':22s} {'median ms':>10s} {'min ms':>8s} {'min - unset':>12s}")
        for program in programs:
            unset_min = min(times[("FI_COMPAT_AUTO unset", program)])
            for hook in hooks:
                values = times[(hook, program)]
                print(f"{program:26s} {hook:22s} {statistics.median(values):10.1f} {min(values):8.1f} "
                      f"{min(values) - unset_min:+12.1f}")
        print(f"-X importtime, {HOOK_MODULE} with FI_COMPAT_AUTO unset: "
              f"{hook_import_us(python, base, args.rounds):.0f} us self (median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
