"""Every script and benchmark entry point imports and answers ``--help``, all in one process.

Scripts and benchmarks import their folder's helper module by its plain name
(a script's own directory is first on ``sys.path``), and some load a script
of the other folder by path (benchmarks/device_figures.py loads
scripts/run_gpu_matrix.py).  Two helpers of one name shadow each other: the
first one imported answers every later ``import``, and the other folder's
script fails with ImportError.  This test loads every ``scripts/*.py`` and
``benchmarks/*.py`` entry point into ONE interpreter, each with its own folder
first on ``sys.path`` as when it runs, and runs its ``main()`` with
``--help``: a shadowed import, an import error or a main that does not parse
its arguments fails it, naming the entry point.  One subprocess importing
only what the entry points import at the top (standard library, argparse):
about a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("benchmarks", "scripts")  # benchmarks first: the order that shadowed scripts' helpers

#: Run in the child: argv[1] is a JSON list of entry-point paths.  Prints one
#: JSON object: path -> "ok" or what went wrong.
CHILD = r'''
import contextlib, importlib.util, io, json, sys, traceback
from pathlib import Path

outcome = {}
for path in json.loads(sys.argv[1]):
    path = Path(path)
    sys.path.insert(0, str(path.parent))  # as when the script runs: its own folder first
    sys.argv = [str(path), "--help"]
    printed = io.StringIO()
    try:
        spec = importlib.util.spec_from_file_location(f"_entry_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        with contextlib.redirect_stdout(printed):
            spec.loader.exec_module(module)
            main = getattr(module, "main", None)
            if main is None:
                raise AssertionError("defines no main()")
            main()
        outcome[str(path)] = "main() returned on --help instead of printing usage and exiting"
    except SystemExit as exit:
        ok = exit.code in (0, None) and "usage:" in printed.getvalue()
        outcome[str(path)] = "ok" if ok else f"exit {exit.code!r}, printed {printed.getvalue()[:300]!r}"
    except BaseException:
        outcome[str(path)] = traceback.format_exc(limit=-4)
    finally:
        sys.path.remove(str(path.parent))
print(json.dumps(outcome))
'''


def entry_points() -> list[Path]:
    """Every script and benchmark; files starting with ``_`` are helpers."""
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).glob("*.py"))
            if not path.name.startswith("_")]


def test_every_entry_point_answers_help_in_one_process():
    paths = entry_points()
    assert len(paths) >= 10, paths  # the glob found the folders
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps([str(p) for p in paths])], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    failed = {str(Path(p).relative_to(ROOT)): why for p, why in outcome.items() if why != "ok"}
    assert failed == {}, "\n\n".join(f"{p}:\n{why}" for p, why in failed.items())
    assert sorted(outcome) == sorted(str(p) for p in paths)
