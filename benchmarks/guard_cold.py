"""Cold-run time of the pin-bump guard against a cached wheel.

    python benchmarks/guard_cold.py [--release 0.7.4] [--runs 5]   # fi_compat installed (pip install -e .)

Makes sure the release's wheel is in the wheel cache ($FI_COMPAT_WHEEL_CACHE,
default ~/.cache/fi_compat/wheels; downloaded once if missing), then times
``python -m fi_compat guard --wheel PATH`` in a fresh interpreter, ``--runs``
times: interpreter start, imports, opening the wheel, reading
``flashinfer/mla/_core.py``, ast, selection and the table, everything a CI
step pays.  0.7.4 is the default because its wheel is the largest (about
100 MB, 14,700 members).  Prints the first (coldest) run, the median, and the
verdict against the 5 s target; exits 1 when the median misses it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.7.4")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    from fi_compat.commands.guard.fetch import default_cache_dir, fetch

    wheel = fetch(args.release, default_cache_dir())
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-m", "fi_compat", "guard", "--wheel", str(wheel)]
    times = []
    for _ in range(max(1, args.runs)):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            print(f"guard exited {done.returncode}", file=sys.stderr)
            return 2
    median = statistics.median(times)
    print(f"command: {' '.join(command)}")
    print(f"wheel: {wheel} ({wheel.stat().st_size / 1e6:.0f} MB)")
    print(f"guard cold run: first {times[0]:.2f} s, median {median:.2f} s over {len(times)} fresh processes "
          f"(target < {TARGET_S:.0f} s: {'met' if median < TARGET_S else 'MISSED'})")
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
