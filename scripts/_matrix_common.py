"""What the matrix scripts and the noxfile share: where things are, the
release lists, the result files, and the fingerprints that say which code a
result vouches for.

Standard library only.  Scripts import it as a sibling module (a script's own
directory is first on ``sys.path``); the noxfile and the tests load it by path.
Its name is unique across scripts/ and benchmarks/ (benchmarks have
``_bench_common``): a benchmark that loads a script by path shares one
``sys.modules`` with it, and two helpers of one name would shadow each other
(tests/test_entry_points.py checks).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fi_compat"
RESULTS = ROOT / "docs" / "compat-results"
#: Where ``.ci/run`` writes the representative run's results (never committed).
CI_RESULTS = ROOT / ".nox" / "ci-results"
#: Written by ``scripts/run_cpu_matrix.py`` after a run of every matrix release.
MATRIX_RUN_FILE = "matrix-run.json"


@functools.lru_cache(maxsize=None)
def release_list() -> ModuleType:
    """``fi_compat/model/release_list.py``, loaded by path: the interpreters running
    nox and the scripts do not have fi_compat installed, and the module
    imports nothing."""
    spec = importlib.util.spec_from_file_location("_fi_compat_release_list", PACKAGE / "model" / "release_list.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------
# Fingerprints
#
# A committed matrix result says "this release passed tests/matrix with this
# fi_compat".  ``code`` covers every file of the package that can change what
# fi_compat does at run time or what the suite exercises, the CPU shim in
# fi_compat/workload included: new modules are covered without a list to update.
# Left out, each because no covered module imports it (tests/test_results_fresh.py
# checks that), so no change to it alters a result:
#   commands/, cli.py, __main__.py  the CLI tools (soak, guard, doctor, audit);
#   diagnosis/                      the doctor's report (reads the state, changes nothing);
#   model/release_list.py           which releases need a result: checked by
#                                    membership instead (a new release needs
#                                    its own run, not a re-run of all 18).
NOT_IN_CODE_FINGERPRINT = ("commands/", "diagnosis/", "cli.py", "__main__.py", "model/release_list.py")

#: What decides a result besides the library: the suite, its helpers, the
#: growth measurement, pytest's settings and the dependency bounds.  A change
#: here is reported, not failed on: the results still describe the code.
SUITE_PATHS = ("tests/matrix", "tests/helpers/support.py", "tests/conftest.py", "scripts/measure_growth.py",
               "scripts/run_release_suite.py", "pyproject.toml")


def _files(base: Path, entries: Iterable[str]) -> list[Path]:
    found = []
    for entry in entries:
        path = base / entry
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        found += [p for p in candidates if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return found


def _digest(files: Iterable[Path], base: Path) -> str:
    """sha256 over (relative path, length, contents) of each file, sorted by
    path; line endings normalised so a CRLF checkout hashes the same."""
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(base).as_posix()):
        data = path.read_bytes().replace(b"\r\n", b"\n")
        digest.update(path.relative_to(base).as_posix().encode() + b"\0" + str(len(data)).encode() + b"\0")
        digest.update(data)
    return digest.hexdigest()


def code_files(package_dir: Path = PACKAGE) -> list[Path]:
    """The package files the ``code`` fingerprint covers."""
    def left_out(path: Path) -> bool:
        relative = path.relative_to(package_dir).as_posix()
        return any(relative == entry or (entry.endswith("/") and relative.startswith(entry))
                   for entry in NOT_IN_CODE_FINGERPRINT)

    return [p for p in _files(package_dir, ["."]) if not left_out(p)]


def fingerprint(package_dir: Path = PACKAGE, root: Path = ROOT) -> dict[str, str]:
    """``{"code": sha256, "suite": sha256}`` of the fi_compat package at
    ``package_dir`` (the writer passes the imported package's directory: what
    actually ran) and of the suite under ``root``.  Reads about 60 small
    files: milliseconds.  Raises OSError when a directory is unreadable."""
    package_dir = Path(package_dir).resolve()
    return {
        "code": _digest(code_files(package_dir), package_dir),
        "suite": _digest(_files(Path(root), SUITE_PATHS), Path(root)),
    }


def cpu_model(default: str) -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``default`` where there is
    none, as off Linux), for the machine descriptions of results and figures."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


# --------------------------------------------------------------------------
# Result files: one JSON per release, written by scripts/run_release_suite.py


def result_path(results_dir: Path, release: str) -> Path:
    return Path(results_dir) / f"{release}.json"


def write_result(results_dir: Path, result: dict[str, Any]) -> Path:
    """Write ``result`` as ``<results_dir>/<release>.json``; returns the path."""
    target = result_path(results_dir, result["release"])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return target


def read_results(results_dir: Path) -> dict[str, dict[str, Any]]:
    """Every ``<release>.json`` in ``results_dir`` by release (``{}`` when the
    directory does not exist).  Raises ValueError naming a file that is not a
    result (invalid JSON or no ``release``)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(results_dir).glob("*.json")):
        if path.name == MATRIX_RUN_FILE:
            continue
        try:
            data = json.loads(path.read_text())
            release = data["release"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a matrix result: {exc!r}") from exc
        out[release] = data
    return out


def source_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit (12 hex digits), ``+changes`` appended when
    fi_compat/ differs from it, or ``None`` outside a git checkout.  Two git
    calls: tens of milliseconds."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "fi_compat"],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def code_label(result: dict[str, Any]) -> str:
    """Which fi_compat code a result ran, for a reader: its commit where the
    run recorded one, else the start of its ``code`` fingerprint."""
    if result.get("commit"):
        return f"commit {result['commit']}"
    code = (result.get("fingerprint") or {}).get("code")
    return f"fingerprint {code[:12]}" if code else "no fingerprint recorded"


def matrix_command(release: str) -> str:
    """The command that refreshes one release's CPU result."""
    return f"python3 -m nox -s \"matrix(flashinfer='{release}')\""
