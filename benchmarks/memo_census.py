"""What the census by memory costs, side by side with the functools census.

Prints, for the flashinfer release on ``sys.path`` (imported under the CPU
shim, fi_compat installed): one memo walk (fi_compat.counting.memo_walk.walk, what
``fi-compat doctor`` adds) against one functools census (fi_compat.counting.census.take),
median of ``--repeat`` runs, and their ratio.  No timing is taken under
tracemalloc.  Usage: ``python benchmarks/memo_census.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
import warnings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import fi_compat
    from fi_compat.counting import census, memo_walk
    from fi_compat.workload import cpu_host

    fi_compat.install()
    with cpu_host():
        flashinfer = importlib.import_module("flashinfer")
        importlib.import_module("flashinfer.mla")
        walk_s, take_s = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            memos = memo_walk.walk()
            walk_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            counted = census.take()
            take_s.append(time.perf_counter() - started)
    walk, take = statistics.median(walk_s), statistics.median(take_s)
    print(f"flashinfer {flashinfer.__version__}: {len(memos)} memos walked, {len(counted)} functools caches counted")
    print(f"{'memo walk (s)':>16} {'census.take (s)':>16} {'ratio':>8}")
    print(f"{walk:16.3f} {take:16.3f} {walk / take:8.1f}")


if __name__ == "__main__":
    main()
