"""Issue 22, "strict under `fi-compat run --strict`": a mismatch found at
``import flashinfer`` stops the program there, with the typed error, and nothing
installed; not strict, the rows that matched stay bounded and the rest is warned
about.  Before #22 the hook logged one ERROR, uninstalled everything and kept
the error for a fi_compat call an unchanged engine never makes: exit status 0.

Run as a user runs it: the ``fi-compat`` console script (the entry point pip
writes, ``fi_compat.cli:main``) with ``run [--strict] -- python -c ...`` against
a synthetic release (tests/drift.py: the real wheel on ``sys.path`` with the
builder's ``q_len`` and ``num_heads`` swapped).  The program imports flashinfer
the way this machine can: under fi_compat's CPU-host shim.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:  # find, not import: it needs the shim
    pytest.skip("needs flashinfer-python", allow_module_level=True)

import drift  # noqa: E402

HERE = Path(__file__).resolve().parent
PROGRAM = (
    "import json, fi_compat\n"
    "from fi_compat.testing import cpu_host\n"
    "with cpu_host():\n"
    "    import flashinfer\n"
    "    print('SERVING ' + json.dumps({r['name']: [r['verdict'], bool(r['patched'])]"
    " for r in fi_compat.status()['bounds']}))\n"
)


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    try:
        return drift.build_site(drift.EDITS_BY_NAME["builder-swap"], tmp_path_factory.mktemp("builder-swap"))
    except ValueError as exc:
        pytest.skip(str(exc))


def console_script(directory: Path) -> Path:
    """``fi-compat`` as pip writes it for this interpreter."""
    script = directory / "fi-compat"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom fi_compat.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return script


def run(release, options, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(release.site), *sys.path])
    command = [str(console_script(tmp_path)), "run", *options, "--", sys.executable, "-c", PROGRAM]
    if extra.get("FI_COMPAT_AUTO"):
        command = [sys.executable, "-c", "import fi_compat.startup as s; s.autostart()\n" + PROGRAM]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_strict_run_stops_at_import_flashinfer_with_the_typed_error(mismatched, tmp_path):
    done = run(mismatched, ["--strict"], tmp_path)
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "SERVING" not in done.stdout
    assert "SignatureMismatchError" in done.stderr and "q_len" in done.stderr, done.stderr[-3000:]


def test_strict_auto_stops_at_import_flashinfer(mismatched, tmp_path):
    # FI_COMPAT_AUTO=1 FI_COMPAT_STRICT=1: the wheel's .pth calls startup.autostart(); here the program does,
    # first thing, since this checkout is not installed from its wheel
    done = run(mismatched, [], tmp_path, FI_COMPAT_AUTO="1", FI_COMPAT_STRICT="1")
    assert done.returncode != 0 and "SERVING" not in done.stdout
    assert "SignatureMismatchError" in done.stderr, done.stderr[-3000:]


def test_not_strict_keeps_the_matched_rows_bounded_and_warns(mismatched, tmp_path):
    done = run(mismatched, [], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.split("SERVING ", 1)[1].splitlines()[0])
    assert rows["builder"] == ["mismatch", False]
    # every other row whose module ``import flashinfer`` loaded stays bounded (before 0.6.15.post1
    # there is no tuning-config memo; the cute-dsl sizers' modules load later, on first use)
    if rows["tuning-config"][0] != "not-in-release":
        assert rows["tuning-config"] == ["bound", True], rows
    assert [name for name, (verdict, patched) in rows.items() if verdict == "bound" and patched], rows
    assert "q_len" in done.stderr and "left it unbounded" in done.stderr, done.stderr[-3000:]
