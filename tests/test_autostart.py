"""``FI_COMPAT_AUTO``: the wheel's .pth hook, and the engines' plugin entry points.

The wheel is built from this repository with ``pip wheel . --no-deps`` (a copy
of the sources, so the build leaves nothing in the checkout) and installed
into a throwaway virtual environment; each check is a fresh interpreter of
that environment, so ``site`` processes the installed .pth as it would in a
container image.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import fi_compat
from fi_compat import startup

ROOT = Path(__file__).resolve().parent.parent
ENGINE_GROUPS = ("sglang.srt.plugins", "vllm.general_plugins")
TIMEOUT = 600


def plain_environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "build_autostart_pth.py", "_fi_compat_autostart.py"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "fi_compat", source / "fi_compat", ignore=shutil.ignore_patterns("__pycache__"))
    out_dir = tmp_path_factory.mktemp("wheels")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out_dir)],
                           capture_output=True, text=True, timeout=TIMEOUT, env=plain_environment())
    assert built.returncode == 0, built.stderr
    (wheel_path,) = out_dir.glob("fi_compat-*.whl")
    return wheel_path


@pytest.fixture(scope="module")
def venv_python(wheel, tmp_path_factory) -> Path:
    """A throwaway venv with the wheel installed; fi_compat's two dependencies
    come from this test interpreter's environment through a path-only .pth."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    python = venv / "bin" / "python"
    # plain_environment(): a PYTHONPATH reaching the checkout (and an editable
    # install's fi_compat.egg-info there) would make pip call it installed
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=TIMEOUT,
                               env=plain_environment())
    assert installed.returncode == 0, installed.stderr
    assert (venv / "bin" / "fi-compat").exists(), "the wheel did not install into the venv"
    import packaging
    import wrapt

    site_packages = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        check=True, capture_output=True, text=True).stdout.strip())
    dependency_dirs = sorted({str(Path(module.__file__).resolve().parent.parent) for module in (packaging, wrapt)})
    # "_" sorts before "f": on sys.path before fi_compat_autostart.pth runs
    (site_packages / "_test_dependencies.pth").write_text("\n".join(dependency_dirs) + "\n")
    return python


def in_venv(python: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    # cwd: `python -c` puts the working directory first on sys.path, and the
    # checkout's own fi_compat/ must not stand in for the installed wheel
    return subprocess.run([str(python), "-c", code], env=plain_environment(**env), cwd=python.parent,
                          capture_output=True, text=True, timeout=TIMEOUT)


def test_wheel_ships_the_pth_hook_the_sitecustomize_and_the_entry_points(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert archive.read("fi_compat_autostart.pth").decode() == "import _fi_compat_autostart\n"
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = archive.read(entry_points).decode()
    assert {"_fi_compat_autostart.py", "fi_compat/_sitecustomize/sitecustomize.py", "fi_compat/startup.py",
            "fi_compat/commands/run.py"} <= names
    for group in ENGINE_GROUPS:
        assert f"[{group}]\nfi_compat = fi_compat.startup:engine_plugin" in text


def test_auto_unset_imports_only_the_tiny_module(venv_python):
    out = in_venv(venv_python, "import json, sys; print(json.dumps([m in sys.modules for m in "
                               "('_fi_compat_autostart', 'fi_compat', 'wrapt')]))")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, False, False]  # the hook ran, and did nothing else
    assert out.stderr == ""


def test_auto_installs_at_start_up_from_the_installed_wheel(venv_python):
    code = ("import json, sys, fi_compat; print(json.dumps([fi_compat.__file__, fi_compat.status()['state'], "
            "fi_compat.status()['settings']['cache_size']['value'], 'torch' in sys.modules]))")
    out = in_venv(venv_python, code, FI_COMPAT_AUTO="1", FI_COMPAT_CACHE_SIZE="33")
    assert out.returncode == 0, out.stderr
    location, state, cache_size, torch_imported = json.loads(out.stdout)
    assert Path(location).is_relative_to(venv_python.parent.parent)
    assert (state, cache_size, torch_imported) == ("pending", 33, False)
    off = in_venv(venv_python, "import fi_compat; print(fi_compat.status()['state'])", FI_COMPAT_AUTO="0")
    assert off.stdout.strip() == "not-installed"


def test_auto_failure_warns_and_strict_stops(venv_python):
    lenient = in_venv(venv_python, "print('started')", FI_COMPAT_AUTO="1", FI_COMPAT_CACHE_SIZE="bad")
    assert lenient.returncode == 0 and lenient.stdout.strip() == "started"
    assert lenient.stderr.startswith("fi_compat WARNING:") and "FI_COMPAT_CACHE_SIZE='bad'" in lenient.stderr
    strict = in_venv(venv_python, "print('started')", FI_COMPAT_AUTO="1", FI_COMPAT_CACHE_SIZE="bad",
                     FI_COMPAT_STRICT="1")
    assert strict.returncode == startup.STRICT_EXIT_STATUS and "started" not in strict.stdout
    assert "fi_compat ERROR:" in strict.stderr
    unreadable = in_venv(venv_python, "print('started')", FI_COMPAT_AUTO="perhaps")
    assert unreadable.returncode == 0 and "FI_COMPAT_AUTO='perhaps' is not a boolean" in unreadable.stderr


def test_engines_find_the_plugin_the_way_they_load_it(venv_python):
    """SGLang and vLLM: ``entry_points(group=...)``, ``ep.load()``, then call it with no arguments."""
    code = ("import json; from importlib.metadata import entry_points\n"
            f"groups = {ENGINE_GROUPS!r}\n"
            "found = {}\n"
            "for group in groups:\n"
            "    for ep in entry_points(group=group):\n"
            "        if ep.dist.name.replace('_', '-').lower() == 'fi-compat':\n"
            "            func = ep.load(); func()\n"
            "            found[group] = [ep.name, func.__module__ + '.' + func.__qualname__]\n"
            "import fi_compat; found['state'] = fi_compat.status()['state']\n"
            "print(json.dumps(found))")
    # with FI_COMPAT_AUTO set the .pth installs first; the plugin's install is then a no-op
    out = in_venv(venv_python, code, FI_COMPAT_AUTO="1")
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    for group in ENGINE_GROUPS:
        assert found[group] == ["fi_compat", "fi_compat.startup.engine_plugin"]
    assert found["state"] == "pending"


def adoption_line(doc: str) -> list[str]:
    """The first ``fi-compat run`` command of a doc's "Adoption in one line" block, split as a shell would."""
    text = (ROOT / "docs" / "integration" / doc).read_text(encoding="utf-8")
    block = text.split("## Adoption in one line", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    command = shlex.split(block.replace("\\\n", " "))
    assert command[:3] == ["fi-compat", "run", "--"], command
    return command


@pytest.mark.parametrize("doc, entry", [("sglang.md", "sglang.launch_server"), ("vllm.md", "vllm")])
def test_the_engine_docs_adoption_lines_run_as_written(doc, entry, venv_python, tmp_path):
    """The line each engine doc gives, word for word, through the wheel's ``fi-compat`` console
    script; the engine's entry point (``python -m sglang.launch_server``, the ``vllm`` script) is a
    stand-in that reports its arguments and fi_compat's state."""
    report = ("import json, sys, fi_compat\n"
              "print(json.dumps([sys.argv[1:], fi_compat.status()['state'], fi_compat.__file__]))\n")
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(report)
    scripts = tmp_path / "bin"
    scripts.mkdir()
    (scripts / "vllm").write_text(f"#!{venv_python}\n{report}")
    (scripts / "vllm").chmod(0o755)
    command = adoption_line(doc)
    venv_bin = venv_python.parent
    env = plain_environment(PATH=os.pathsep.join([str(scripts), str(venv_bin), os.environ.get("PATH", "")]))
    out = subprocess.run([str(venv_bin / command[0]), *command[1:]], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    arguments, state, location = json.loads(out.stdout)
    engine_arguments = command[command.index(entry) + 1:]
    assert arguments == engine_arguments  # the engine's own arguments reach it untouched
    assert state == "pending"  # installed at start-up, waiting for flashinfer
    assert Path(location).is_relative_to(venv_bin.parent)


# --------------------------------------------------------------------------- the plugin function itself


def test_engine_plugin_installs_only_with_fi_compat_auto(monkeypatch):
    monkeypatch.delenv("FI_COMPAT_AUTO", raising=False)
    startup.engine_plugin()
    assert fi_compat.status()["state"] == "not-installed"
    monkeypatch.setenv("FI_COMPAT_AUTO", "1")
    startup.engine_plugin()
    # pending, or installed if another test already imported flashinfer here
    assert fi_compat.status()["state"] in ("pending", "installed")


def test_engine_plugin_never_raises_unless_strict(monkeypatch, caplog):
    monkeypatch.setenv("FI_COMPAT_AUTO", "1")
    monkeypatch.setenv("FI_COMPAT_CACHE_SIZE", "bad")
    with caplog.at_level(logging.WARNING, logger="fi_compat"):
        startup.engine_plugin()
    assert fi_compat.status()["state"] == "not-installed"
    warnings = [r for r in caplog.records if r.name == "fi_compat" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "FI_COMPAT_CACHE_SIZE='bad'" in warnings[0].getMessage()
    monkeypatch.setenv("FI_COMPAT_STRICT", "1")
    with pytest.raises(ValueError, match="FI_COMPAT_CACHE_SIZE"):
        startup.engine_plugin()
