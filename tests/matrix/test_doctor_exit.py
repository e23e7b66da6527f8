"""Issue 39: ``fi-compat doctor`` exits non-zero whenever it lists a problem, so CI
that runs it fails on what it reports (exit codes: docs/doctor.md, beside the
guard's in docs/guard.md).

On a release where the builder was renamed (the real wheel edited in the test,
tests/helpers/drift.py) ``doctor --cpu-shim --install`` prints ``installed (partial)``
and the missing row, and exits 1; before, it exited 0.  On the real release
with nothing wrong it exits 0.  Each runs the doctor as a user does, in its own
process.  Tens of seconds.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("needs flashinfer-python", allow_module_level=True)

from helpers import drift  # noqa: E402


def doctor(*paths: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([*paths, *sys.path])
    return subprocess.run([sys.executable, "-m", "fi_compat", "doctor", "--cpu-shim", "--install"],
                          capture_output=True, text=True, timeout=600, env=env)


def test_doctor_exits_1_on_a_partial_install(tmp_path):
    try:
        release = drift.build_site(drift.EDITS_BY_NAME["builder-renamed"], tmp_path / "builder-renamed")
    except ValueError as exc:
        pytest.skip(str(exc))
    done = doctor(str(release.site))
    assert "installed (partial)" in done.stdout and "could not / problems:" in done.stdout, done.stdout[-3000:]
    assert "builder" in done.stdout.split("could not / problems:")[1], done.stdout[-3000:]
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])


def test_doctor_exits_0_when_it_lists_no_problem():
    done = doctor()
    assert "could not / problems:" not in done.stdout, done.stdout[-3000:]
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-2000:])
