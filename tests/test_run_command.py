"""``fi-compat run``: fi_compat installed in every interpreter of a process tree.

Every command here is a real interpreter started through the real
``sitecustomize``; only the process-tree test imports torch and flashinfer
(under the CPU-host shim), once, in a spawned grandchild.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_compat import cli
from fi_compat.commands import run as run_command

TESTS = Path(__file__).resolve().parent
TIMEOUT = 300


def clean_environment(**extra: str) -> dict[str, str]:
    """This test process's environment without FI_COMPAT_* settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def with_path_before(env: dict[str, str], directory: Path) -> dict[str, str]:
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH", "")) if p)
    return env


def fi_compat_run(options: list[str], command: list[str], env: dict[str, str], cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", "fi_compat", "run", *options, "--", *command], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=TIMEOUT)


REPORT = ("import json, os, sys, fi_compat; s = sys.modules.get('sitecustomize'); "
          "print(json.dumps({'state': fi_compat.status()['state'], 'sitecustomize': getattr(s, '__file__', None), "
          "'existing_ran_here': getattr(s, 'RAN_IN_PID', None) == os.getpid(), "
          "'heavy': sorted(m for m in ('torch', 'flashinfer') if m in sys.modules)}))")


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture
def existing_sitecustomize(tmp_path: Path) -> Path:
    """A directory holding a sitecustomize that marks the process it ran in."""
    directory = tmp_path / "existing_site"
    directory.mkdir()
    (directory / "sitecustomize.py").write_text("import os\nRAN_IN_PID = os.getpid()\n")
    return directory


# --------------------------------------------------------------------------- the process tree


def test_child_and_spawned_grandchild_are_installed_and_bounded(tmp_path, existing_sitecustomize):
    env = with_path_before(clean_environment(), existing_sitecustomize)
    out = fi_compat_run([], [sys.executable, str(TESTS / "helpers" / "process_tree_child.py"), str(tmp_path)], env)
    assert out.returncode == 0, out.stderr
    child = json.loads((tmp_path / "child.json").read_text())
    grandchild = json.loads((tmp_path / "grandchild.json").read_text())

    assert child["state"] == "pending"  # installed at start-up, waiting for flashinfer
    assert child["heavy_modules"] == []  # the start-up install imports neither torch nor flashinfer
    assert child["existing_sitecustomize_ran"] and grandchild["existing_sitecustomize_ran"]
    assert child["grandchild_exitcode"] == 0
    assert grandchild["pid"] != child["pid"]
    assert grandchild["state_before"] == "pending"
    assert grandchild["state_after"] == "installed"
    # the decode path ran with every length as given (policy "exact")
    assert grandchild["launched"] == grandchild["lengths"]
    assert grandchild["control_launched"] == grandchild["control_lengths"]
    if grandchild["memo_growth"] is None:
        pytest.skip("this flashinfer release has no functools.cache on the tuning config")
    # flashinfer's memo does not grow per length under fi_compat; uninstalled,
    # the same measurement grows by one entry per new length
    assert grandchild["memo_growth"] <= len(grandchild["lengths"]) // 4, grandchild
    assert grandchild["control_memo_growth"] == len(grandchild["control_lengths"]), grandchild


def test_adoption_forms_python_m_and_console_script(tmp_path):
    """``fi-compat run -- python -m sglang.launch_server ...`` and ``fi-compat run -- vllm serve ...``:
    a module run with -m, and an executable found on PATH."""
    (tmp_path / "fake_launch_server.py").write_text(REPORT + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "fake-serve"
    script.write_text(f"#!{sys.executable}\n{REPORT}\n")
    script.chmod(0o755)
    env = clean_environment()
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])

    as_module = fi_compat_run([], [sys.executable, "-m", "fake_launch_server", "--port", "0"], env, cwd=tmp_path)
    on_path = fi_compat_run([], ["fake-serve", "serve", "model"], env)
    for out in (as_module, on_path):
        assert out.returncode == 0, out.stderr
        report = last_json(out.stdout)
        assert report["state"] == "pending" and report["heavy"] == []
        assert Path(report["sitecustomize"]).parent == Path(run_command.SITECUSTOMIZE_DIR)


def test_the_command_replaces_the_process(tmp_path):
    """exec, not a wrapper: same PID (signals reach the command), the command's exit status."""
    process = subprocess.Popen(
        [sys.executable, "-m", "fi_compat", "run", "--", sys.executable, "-c",
         "import os, sys; print(os.getpid()); sys.exit(7)"],
        env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 7, stderr
    assert int(stdout.split()[0]) == process.pid


# --------------------------------------------------------------------------- sitecustomize chaining


def test_existing_sitecustomize_still_runs(existing_sitecustomize):
    env = with_path_before(clean_environment(), existing_sitecustomize)
    out = fi_compat_run([], [sys.executable, "-c", REPORT], env)
    assert out.returncode == 0, out.stderr
    report = last_json(out.stdout)
    # the application sees the sitecustomize it would have seen, and it ran here
    assert report["sitecustomize"] == str(existing_sitecustomize / "sitecustomize.py")
    assert report["existing_ran_here"]
    assert report["state"] == "pending"
    assert out.stderr == ""


def test_failing_existing_sitecustomize_is_reported_as_site_does_and_fi_compat_installs(tmp_path):
    broken = tmp_path / "broken_site"
    broken.mkdir()
    (broken / "sitecustomize.py").write_text("raise RuntimeError('broken on purpose')\n")
    env = with_path_before(clean_environment(), broken)
    without_fi_compat = subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, text=True,
                                       timeout=TIMEOUT)
    out = fi_compat_run([], [sys.executable, "-c", REPORT], env)
    assert out.returncode == 0, out.stderr
    assert "RuntimeError: broken on purpose" in without_fi_compat.stderr
    # the interpreter's own report, once from the launcher's interpreter
    # (which has the same PYTHONPATH) and once, identical, from the command's
    assert out.stderr == without_fi_compat.stderr * 2
    assert last_json(out.stdout)["state"] == "pending"


SYSTEM_PYTHON = Path("/usr/bin/python3")


def test_the_system_interpreters_own_sitecustomize_is_chained():
    """Debian's python3 ships a real sitecustomize (apport's hook); it must stay the one that runs."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no /usr/bin/python3")
    probe = "import sys; print(getattr(sys.modules.get('sitecustomize'), '__file__', None))"
    own = subprocess.run([str(SYSTEM_PYTHON), "-c", probe], env=clean_environment(PYTHONPATH=""),
                         capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()
    if own == "None":
        pytest.skip(f"{SYSTEM_PYTHON} has no sitecustomize of its own")
    out = fi_compat_run([], [str(SYSTEM_PYTHON), "-c", probe + "; print('fi_compat' in sys.modules)"],
                        clean_environment())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [own, "True"]


# --------------------------------------------------------------------------- failures


def test_failed_install_warns_and_the_command_still_runs():
    env = clean_environment(FI_COMPAT_CACHE_SIZE="bad")
    out = fi_compat_run([], [sys.executable, "-c", "print('started')"], env)
    assert out.returncode == 0
    assert out.stdout.strip() == "started"
    warning = out.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("fi_compat WARNING:"), out.stderr
    assert "FI_COMPAT_CACHE_SIZE='bad'" in warning[0] and "runs without fi_compat" in warning[0]


def test_strict_failed_install_stops_the_interpreter():
    env = clean_environment(FI_COMPAT_CACHE_SIZE="bad")
    out = fi_compat_run(["--strict"], [sys.executable, "-c", "print('started')"], env)
    assert out.returncode != 0
    assert "started" not in out.stdout
    assert "fi_compat ERROR:" in out.stderr and "FI_COMPAT_CACHE_SIZE='bad'" in out.stderr
    assert "FI_COMPAT_STRICT" in out.stderr
    assert "Fatal Python error" not in out.stderr


@pytest.mark.parametrize("argv, message", [
    (["run"], "no command given"),
    (["run", "--"], "no command after --"),
    (["run", "python", "-c", "pass"], "put -- between"),
    (["run", "--strict", "python"], "put -- between"),
    (["run", "--cache-size", "0", "--", "python"], "--cache-size=0 is out of range"),
    (["run", "--cache-size", "many", "--", "python"], "is not an integer"),
    (["run", "--policy", "sometimes", "--", "python"], "invalid choice: 'sometimes'"),
])
def test_argument_errors_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_command_exits_127(tmp_path, capsys):
    missing = str(tmp_path / "no-such-command")
    assert cli.main(["run", "--", missing]) == run_command.COMMAND_NOT_FOUND
    assert f"{missing}: command not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- the environment it passes


def test_child_environment_puts_sitecustomize_first_once_and_keeps_the_rest():
    directory = run_command.SITECUSTOMIZE_DIR
    env = run_command.child_environment({"PYTHONPATH": f"/a{os.pathsep}{os.pathsep}/b", "FI_COMPAT_CACHE_SIZE": "9"})
    assert env["PYTHONPATH"].split(os.pathsep) == [directory, "/a", "", "/b"]  # "" (the cwd) kept
    assert env["FI_COMPAT_CACHE_SIZE"] == "9"  # options not given leave the environment's value
    nested = run_command.child_environment(env, strict=True, cache_size=64, policy="bucket")
    assert nested["PYTHONPATH"] == env["PYTHONPATH"]  # nested `run` adds nothing
    assert (nested["FI_COMPAT_STRICT"], nested["FI_COMPAT_CACHE_SIZE"], nested["FI_COMPAT_MAX_SEQ_LEN_POLICY"]) \
        == ("1", "64", "bucket")
    assert run_command.child_environment({})["PYTHONPATH"] == directory  # no trailing separator (= cwd)


def test_options_reach_the_installer():
    out = fi_compat_run(["--cache-size", "17", "--policy", "bucket"],
                        [sys.executable, "-c", "import json, fi_compat; s = fi_compat.status()['settings']; "
                         "print(json.dumps([s['cache_size'], s['max_seq_len_policy']]))"], clean_environment())
    assert out.returncode == 0, out.stderr
    size, policy = last_json(out.stdout)
    assert (size["value"], size["source"]) == (17, "environment")
    assert (policy["value"], policy["source"]) == ("bucket", "environment")


def test_transparent_mode_reaches_flashinfer_in_a_fresh_process():
    """``--transparent`` (FI_COMPAT_TRANSPARENT=1) through the start-up hook,
    which installs with no fi_compat module imported beforehand: flashinfer's
    decode function, imported afterwards, is routed through the call API."""
    check = ("import json, sys, fi_compat\n"
             "from fi_compat.workload import cpu_host\n"
             "with cpu_host():\n"
             "    import flashinfer.mla\n"
             "from fi_compat.calls import transparent\n"
             "function = flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla  # the engines' name\n"
             "print(json.dumps({'routed': transparent.unwrap(function) is not function, "
             "'setting': fi_compat.status()['settings']['transparent']['value']}))")
    if importlib.util.find_spec("flashinfer") is None:
        pytest.skip("needs flashinfer-python installed")
    for options, routed in ((["--transparent"], True), ([], False)):
        out = fi_compat_run(options, [sys.executable, "-c", check], clean_environment())
        assert out.returncode == 0, out.stderr
        assert last_json(out.stdout) == {"routed": routed, "setting": routed}, (options, out.stderr)
        assert "transparent mode comes with the call API" not in out.stderr


def test_sitecustomize_finds_fi_compat_by_location_when_the_child_cannot_import_it(tmp_path):
    """The launcher found fi_compat through its working directory; the child, a
    script elsewhere (its sys.path has the script's directory, not the working
    directory), still installs the same fi_compat."""
    root = Path(run_command.SITECUSTOMIZE_DIR).parent.parent
    script = tmp_path / "elsewhere.py"
    script.write_text("import fi_compat\nprint(fi_compat.__file__, fi_compat.status()['state'])\n")
    env = clean_environment()
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-m", "fi_compat", "run", "--", sys.executable, str(script)],
                         env=env, cwd=root, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    location, state = out.stdout.split()
    assert Path(location).resolve() == (root / "fi_compat" / "__init__.py").resolve()
    assert state == "pending"
