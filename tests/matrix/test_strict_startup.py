"""Issue 22, "strict under `fi-compat run --strict`": a mismatch found at
``import flashinfer`` stops the program there, with the typed error, and nothing
installed; not strict, the rows that matched stay bounded and the rest is warned
about.  Before #22 the hook logged one ERROR, uninstalled everything and kept
the error for a fi_compat call an unchanged engine never makes: exit status 0.

A program that catches that error (an optional backend) and goes on is stopped at its first MLA
decode call, status 1, the typed error on stderr (fi_compat.installing.tripwire); before, it imported
flashinfer again and served with every cache unbounded, exit status 0.

Run as a user runs it: the ``fi-compat`` console script (the entry point pip
writes, ``fi_compat.cli:main``) with ``run [--strict] -- python -c ...`` against
a synthetic release (tests/helpers/drift.py: the real wheel on ``sys.path`` with the
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


HERE = Path(__file__).resolve().parent
PROGRAM = (
    "import json, fi_compat\n"
    "from fi_compat.workload import cpu_host\n"
    "with cpu_host():\n"
    "    import flashinfer\n"
    "    print('SERVING ' + json.dumps({r['name']: [r['verdict'], bool(r['patched'])]"
    " for r in fi_compat.status()['bounds']}))\n"
)
SWALLOWING = (
    # an engine with flashinfer as an optional backend: the import's error is caught and the engine
    # goes on.  The CPU-host shim in steps: torch's CUDA answers before the import, flashinfer's
    # loader stub (a launch is recorded, not run) after it
    "import torch\n"
    "from fi_compat.workload import CpuHost, workload\n"
    "host = CpuHost()\n"
    "host.patch_torch()\n"
    "try:\n"
    "    import flashinfer\n"
    "except Exception:\n"
    "    pass\n"
    "print('SWALLOWED', flush=True)\n"
    # the failed import took only the package out of sys.modules: this one runs its __init__ again over
    # the submodules already there, and succeeds
    "import flashinfer\n"
    "from flashinfer.mla import trtllm_batch_decode_with_kv_cache_mla\n"
    "host.patch_flashinfer()\n"
    "inputs = workload.make_inputs(torch, 'trtllm', batch=2, width=16, num_pages=64)\n"
    "workload.trtllm_call(trtllm_batch_decode_with_kv_cache_mla, inputs, 1000)\n"
    "print('SERVING', len(host.launches), flush=True)\n"
)


def console_script(directory: Path) -> Path:
    """``fi-compat`` as pip writes it for this interpreter."""
    script = directory / "fi-compat"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom fi_compat.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return script


def run(release, options, tmp_path, program=PROGRAM, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", **extra})
    env["PYTHONPATH"] = os.pathsep.join([str(release.site), *sys.path])
    command = [str(console_script(tmp_path)), "run", *options, "--", sys.executable, "-c", program]
    if extra.get("FI_COMPAT_AUTO"):
        command = [sys.executable, "-c", "import fi_compat.startup as s; s.autostart()\n" + program]
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


STRICT_HOOKS = {  # how a user asks for strict at start-up: (run's options, environment)
    "fi-compat run --strict": (["--strict"], {}),
    "FI_COMPAT_AUTO=1 FI_COMPAT_STRICT=1": ([], {"FI_COMPAT_AUTO": "1", "FI_COMPAT_STRICT": "1"}),
}


@pytest.mark.parametrize("hook", list(STRICT_HOOKS))
def test_strict_a_swallowed_import_error_still_stops_the_first_decode(mismatched, tmp_path, hook):
    """Issue 22's second half: an engine that catches the import's error (an optional backend)
    and imports flashinfer again gets the module, but its first MLA decode call ends the
    process (status 1, the typed error on stderr) instead of serving with every cache unbounded."""
    options, environment = STRICT_HOOKS[hook]
    done = run(mismatched, options, tmp_path, program=SWALLOWING, **environment)
    assert "SWALLOWED" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]  # the engine did go on
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "SERVING" not in done.stdout, done.stdout[-2000:]  # nothing after the call ran
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("fi_compat ERROR:")]
    assert "called after the strict error was caught: SignatureMismatchError" in line and "q_len" in line, line


def test_not_strict_swallowing_program_serves(mismatched, tmp_path):
    """The same program, not strict: nothing to swallow, the decode call runs, status 0."""
    done = run(mismatched, [], tmp_path, program=SWALLOWING)
    assert done.returncode == 0 and "SERVING 1" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]


def test_not_strict_keeps_the_matched_rows_bounded_and_warns(mismatched, tmp_path):
    done = run(mismatched, [], tmp_path, PYTHONWARNINGS="default")  # a warning, not a log line (issue 39)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.split("SERVING ", 1)[1].splitlines()[0])
    assert rows["builder"] == ["mismatch", False]
    # every other row whose module ``import flashinfer`` loaded stays bounded (before 0.6.15.post1
    # there is no tuning-config memo; the cute-dsl sizers' modules load later, on first use)
    if rows["tuning-config"][0] != "not-in-release":
        assert rows["tuning-config"] == ["bound", True], rows
    assert [name for name, (verdict, patched) in rows.items() if verdict == "bound" and patched], rows
    (said,) = [line for line in done.stderr.splitlines() if "UnsupportedReleaseWarning" in line]
    # the function and what changed, in one short line; the parameters themselves are in fi-compat doctor
    assert "_build_mla_decode_tuning_config parameters are in a different order" in said, said
    assert "left unbounded" in said and len(said.split("UnsupportedReleaseWarning: ", 1)[1]) <= 200, said
