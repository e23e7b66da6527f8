"""The host-path figures of docs/benchmarks.md on a CUDA machine, per flashinfer release.

    python3 benchmarks/device_figures.py --wheelhouse /tmp/wh --releases 0.6.18 0.7.4 --out "$OUT"

For each release: a venv that sees the machine's torch (``--system-site-packages``
plus this interpreter's site-packages, as ``scripts/run_gpu_matrix.py`` does),
flashinfer and its import dependencies from the offline wheelhouse
(``--no-index --no-deps``), fi_compat from this checkout; then
``benchmarks/config_path.py --host cuda --breakdown`` and
``benchmarks/decode_host_path.py --host cuda`` in it, then
``benchmarks/watch_overhead.py`` (CPU shim) for each of ``--watch-layouts``.  ``--host cuda`` uses the
real torch, device and CUDA tensors, and records kernel launches instead of
making them (an H200 cannot run the SM100 MLA kernels).

Writes ``OUT/host-figures.txt`` (the machine, then every benchmark's table) and
``OUT/host-figures-RELEASE.json`` (both benchmarks' JSON), three files for two
releases.  Exit status: 1 when a benchmark failed or missed a target.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _gpu_matrix_module():
    """scripts/run_gpu_matrix.py, loaded by path.  It imports its sibling
    ``_matrix_common`` by name, so scripts/ goes on ``sys.path`` (after this
    folder: the helpers' names differ, neither shadows the other)."""
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.append(scripts)
    spec = importlib.util.spec_from_file_location("_run_gpu_matrix", ROOT / "scripts" / "run_gpu_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: Loaded when this module is, not after the arguments are parsed, so that
#: ``--help`` (tests/test_entry_points.py) already fails if its imports break.
#: Standard library only: milliseconds.
GPU_MATRIX = _gpu_matrix_module()


def machine() -> str:
    from _matrix_common import cpu_model  # scripts/ is on sys.path: _gpu_matrix_module() put it there

    cpu = cpu_model("unknown CPU")
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True, check=False).stdout.strip() or "no nvidia-smi"
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} cores, load average {load}; GPU {gpu}; "
            f"Python {platform.python_version()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheelhouse", required=True)
    parser.add_argument("--releases", nargs="+", default=["0.6.18", "0.7.4"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--venvs", default="/tmp/fi_compat_bench_venvs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--config-calls", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=1000, help="decode_host_path's timed calls per combination")
    parser.add_argument("--watch-layouts", nargs="*", default=["vllm:auto", "sglang:auto", "trtllm:trtllm-gen"],
                        help="benchmarks/watch_overhead.py's --layout for each run (CPU shim; none: skip it)")
    args = parser.parse_args()
    gpu_matrix = GPU_MATRIX
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = out / "host-figures.txt"
    failed = False
    with open(text, "w") as log:
        def say(line: str) -> None:
            print(line, flush=True)
            log.write(line + "\n")
            log.flush()

        say(machine())
        for release in args.releases:
            venv = Path(args.venvs) / release
            say(f"\n=== flashinfer {release}")
            try:
                subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--clear", str(venv)],
                               check=True, capture_output=True)
                python = str(venv / "bin" / "python")
                gpu_matrix.inherit_site_packages(python)
                for command in gpu_matrix.install_commands(release, args.wheelhouse, python, str(ROOT)):
                    subprocess.run(command, check=True, capture_output=True, text=True)
            except (FileNotFoundError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", "") or ""
                say(f"install failed: {exc} {detail[-2000:]}")
                failed = True
                continue
            results = {}
            with tempfile.TemporaryDirectory() as scratch:
                runs = {
                    "config_path": [python, str(ROOT / "benchmarks" / "config_path.py"), "--host", "cuda",
                                    "--breakdown", "--rounds", str(args.rounds), "--calls", str(args.config_calls)],
                    "decode_host_path": [python, str(ROOT / "benchmarks" / "decode_host_path.py"), "--host", "cuda",
                                         "--rounds", str(args.rounds), "--steps", str(args.steps)],
                }
                for layout in args.watch_layouts:  # the runtime watch's cost, watch off against on, on this CPU
                    runs[f"watch_overhead {layout}"] = [python, str(ROOT / "benchmarks" / "watch_overhead.py"),
                                                        "--calls", "8000", "--rounds", "11", "--layout", layout]
                for name, command in runs.items():
                    target = os.path.join(scratch, f"{name.replace(' ', '-').replace(':', '-')}.json")
                    say(f"\n$ {' '.join(command[1:])}")
                    process = subprocess.run(command + ["--json", target], capture_output=True, text=True,
                                             cwd=str(ROOT), check=False)
                    say(process.stdout.rstrip())
                    if process.returncode != 0:
                        failed = True
                        say(f"(exit {process.returncode}) {process.stderr[-3000:]}")
                    if os.path.exists(target):
                        with open(target) as handle:
                            results[name] = json.load(handle)
            with open(out / f"host-figures-{release}.json", "w") as handle:
                json.dump(results, handle, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
