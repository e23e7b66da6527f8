"""The guard's exit codes are the ones docs/guard.md documents: the test reads
the table there and runs cases for every row, through ``main`` and through a
real ``python -m fi_compat guard`` process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fi_compat.cli import main
from fi_compat.commands.guard.report import EXIT_ERROR, EXIT_NOT_MEASURED, EXIT_OK, EXIT_UNSUPPORTED
from test_guard_wheels import CORE_0618, make_wheel

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "guard"
DRIFTED = CORE_0618.replace("max_seq_len, device,", "max_seq_len, device, page_table_layout,")


def documented_exit_codes() -> dict[int, str]:
    text = (REPO / "docs" / "guard.md").read_text(encoding="utf-8")
    table = text.split("| exit | meaning |", 1)[1].split("\n\n", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", table, re.MULTILINE)}


def test_the_documented_codes_are_the_codes_of_the_code():
    documented = documented_exit_codes()
    assert sorted(documented) == [EXIT_OK, EXIT_UNSUPPORTED, EXIT_ERROR, EXIT_NOT_MEASURED] == [0, 1, 2, 3]
    assert "leaks" in documented[EXIT_UNSUPPORTED] and "could not be checked" in documented[EXIT_ERROR]
    assert "not measured" in documented[EXIT_NOT_MEASURED]


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def cases(tmp: Path, cache: Path) -> dict[int, list[list[str]]]:
    """Arguments for each exit code (``cache`` holds the real 0.6.18 wheel).  The synthetic wheels
    exit if imported, so they are read with ``--static``; exit 1 is a real census: 0.6.18 measured
    with a fi_compat that bounds neither the tuning config nor the builder (``--census-only-bounds``),
    on one query token and 32 lengths per call."""
    good = make_wheel(tmp, "0.7.5")  # signatures match, outside every range: compatible-unverified
    verified = make_wheel(tmp, "0.6.18", name="verified.whl")
    bad = make_wheel(tmp, "0.6.18", DRIFTED, name="drifted.whl")
    (tmp / "local").mkdir(exist_ok=True)
    bad_named = make_wheel(tmp / "local", "0.6.18", DRIFTED)  # flashinfer_python-0.6.18-py3-none-any.whl
    offline = ["--offline", "--cache-dir", str(cache)]
    leaking = ["--census", "--census-modes", "q1", "--census-lengths", "32", "--census-only-bounds",
               "split-kv,batch-cap", "--pin", "flashinfer-python==0.6.18", *offline]
    return {
        EXIT_OK: [
            [str(DATA / "uv-registry" / "uv.lock"), *offline],
            [_write(tmp / "none.txt", "numpy\n"), *offline],
            ["--static", "--wheel", str(verified)],
        ],
        EXIT_UNSUPPORTED: [leaking],
        EXIT_NOT_MEASURED: [
            ["--static", "--wheel", str(good)],
            ["--static", "--wheel", str(bad)],
            ["--static", _write(tmp / "local.txt", f"{bad_named}\nflashinfer-python==0.6.18\n"), *offline],
        ],
        EXIT_ERROR: [
            [],
            ["--format", "bogus", "x.txt"],
            [_write(tmp / "bad.txt", "flashinfer-python>=0.6,<<0.7\n"), *offline],
            [_write(tmp / "url.txt", "flashinfer-python @ https://example.invalid/flashinfer_python-0.6.18-py3-none-any.whl\n"),
             *offline],
            [_write(tmp / "vcs.txt", "git+https://github.com/flashinfer-ai/flashinfer.git#egg=flashinfer-python\n"), *offline],
            [_write(tmp / "editable.txt", "-e ./flashinfer\n"), *offline],
            ["--static", "--wheel", str(bad), _write(tmp / "vcs2.txt", "-e git+https://x.invalid/flashinfer.git\n"),
             *offline],
            ["--static", "--census", "--wheel", str(good)],
        ],
    }


def _status(argv: list[str], capsys) -> int:
    try:
        status = main(["guard", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    capsys.readouterr()
    return status


def test_every_documented_code_is_what_the_guard_returns(real_wheel, wheel_cache, tmp_path, capsys):
    real_wheel("0.6.18")
    got = {code: [_status(argv, capsys) for argv in argvs] for code, argvs in cases(tmp_path, wheel_cache).items()}
    assert got == {code: [code] * len(argvs) for code, argvs in cases(tmp_path, wheel_cache).items()}
    assert set(got) == set(documented_exit_codes())


@pytest.mark.parametrize("code", [EXIT_OK, EXIT_NOT_MEASURED, EXIT_ERROR])
def test_the_process_exit_status_is_the_same(code, real_wheel, wheel_cache, tmp_path):
    real_wheel("0.6.18")
    argv = cases(tmp_path, wheel_cache)[code][0]
    done = subprocess.run([sys.executable, "-m", "fi_compat", "guard", *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
