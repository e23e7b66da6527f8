"""When the runtime watch (fi_compat.watch) sees each growing memo of the issue-38 releases.

    python benchmarks/watch_detection.py [--lengths N]    # needs torch + flashinfer >= 0.7.4; CPU shim

For every edit of tests/helpers/watch_releases.py (the real flashinfer with one edit), a
fresh process (tests/matrix/watch_release_driver.py) drives vLLM's call
(backend auto) with N new distinct max_seq_len per phase: watch off (the
control), then on.  Prints, per edit, the container's growth in the control
(its own entry count: flashinfer's memory, not fi_compat's statistics), the
distinct lengths of growth after which the watch reported it, what it did, and
the watch's own time.  No timing is taken under tracemalloc (none is taken at all
but the watch's account of its steps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, default=1500, help="distinct lengths per phase (default 1500)")
    args = parser.parse_args()
    sys.path[:0] = [str(TESTS), str(TESTS / "matrix")]
    from packaging.version import Version

    from helpers import drift
    from helpers import watch_releases

    base = drift.base_version(drift.real_package_dir())
    print(f"flashinfer {base}; {args.lengths} distinct lengths per phase; vLLM's call, backend auto")
    print(f"{'edit':<16} {'control growth':>15} {'reported after':>15}  {'action':<8} {'watch time':>10}")
    for name, edit in sorted(watch_releases.EDITS.items()):
        with tempfile.TemporaryDirectory() as scratch:
            release = drift.build_site(edit, Path(scratch), version=f"{Version(base).base_version}.post0.dev950")
            out = Path(scratch) / "report.json"
            env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
            env.update(PYTHONPATH=os.pathsep.join([str(release.site), str(TESTS / "matrix"), str(TESTS), str(ROOT)]),
                       OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
            done = subprocess.run([sys.executable, str(TESTS / "matrix" / "watch_release_driver.py"), str(out), name,
                                   str(args.lengths)], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                print(f"{name:<16} failed: {done.stderr[-500:]}")
                continue
            report = json.loads(out.read_text())
        control, during = report["control"][-1], report["watched"][-1]
        findings = report["status"]["watch"]["findings"]
        action = ", ".join(sorted({f["action"] for f in findings})) or "none"
        found = during["found_at"]
        print(f"{name:<16} {control['after'] - control['before']:>15,} {found if found else '-':>15}  {action:<8} "
              f"{report['status']['watch']['spent_s'] * 1e3:>8.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
