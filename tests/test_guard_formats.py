"""Every file format the guard reads, each on a file the real tool wrote
(tests/data/guard/README.md says how), checked end to end against the real
flashinfer-python wheels of the guard's wheel cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fi_compat.commands.guard.errors import RequirementsError
from fi_compat.commands.guard.fetch import file_sha256
from fi_compat.commands.guard.pins import (LOCAL_WHEEL, REMOTE_WHEEL, SPECIFIER, UNCHECKABLE, detect_format, groups,
                                           read_pins)
from fi_compat.commands.guard.extra import GuardExtraMissing
from test_guard_wheels import run_guard, run_json

DATA = Path(__file__).resolve().parent / "data" / "guard"
REPO = DATA.parents[2]
WHEEL_0618 = "flashinfer_python-0.6.18-py3-none-any.whl"


def line_of(path: Path, text: str, occurrence: int = 1) -> int:
    """1-based number of the ``occurrence``-th line that equals ``text`` once stripped."""
    hits = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line.strip() == text]
    return hits[occurrence - 1]


def summary(path: Path, **kwargs) -> list[tuple]:
    return [(f.kind, f.line, str(f.specifier), f.scope, f.marker) for f in read_pins(path, **kwargs).found]


@pytest.fixture
def cached_0618(real_wheel, wheel_cache):
    real_wheel("0.6.18")
    return wheel_cache


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("relative, expected", [
    ("uv-registry/uv.lock", "uv-lock"), ("poetry-registry/poetry.lock", "poetry-lock"),
    ("pip-lock/pylock.toml", "pylock"), ("uv-registry/pylock.uv.toml", "pylock"),
    ("sglang-style/pyproject.toml", "pyproject"), ("requirements/requirements.txt", "requirements"),
    ("requirements/requirements.in", "requirements"),
])
def test_format_from_the_file_name(relative, expected):
    assert detect_format(DATA / relative) == expected


def test_format_from_the_content_when_the_name_is_unusual(tmp_path):
    for source, name, expected in [("uv-registry/uv.lock", "deps.lock", "uv-lock"),
                                   ("poetry-registry/poetry.lock", "old-poetry.lock", "poetry-lock"),
                                   ("pip-lock/pylock.toml", "locked.toml", "pylock"),
                                   ("sglang-style/pyproject.toml", "pyproject.gpu.toml", "pyproject")]:
        shutil.copy(DATA / source, tmp_path / name)
        assert detect_format(tmp_path / name) == expected, name
    (tmp_path / "requirements.lock").write_text("flashinfer-python==0.6.18\n")  # rye: not TOML
    assert detect_format(tmp_path / "requirements.lock") == "requirements"
    (tmp_path / "ruff.toml").write_text("line-length = 100\n")
    with pytest.raises(RequirementsError, match=r"ruff\.toml: cannot tell which format .*--format"):
        detect_format(tmp_path / "ruff.toml")
    shutil.copy(DATA / "uv-registry" / "uv.lock", tmp_path / "deps.txt")
    assert read_pins(tmp_path / "deps.txt", "uv-lock").found[0].specifier == read_pins(
        DATA / "uv-registry" / "uv.lock").found[0].specifier  # --format overrides the name


# --------------------------------------------------------------------------- requirement files


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-bom-crlf.txt", "requirements-utf16.txt"])
def test_compiled_requirements_in_every_encoding_windows_writes(name, cached_0618, capsys):
    path = DATA / "requirements" / name
    assert summary(path) == [(SPECIFIER, 3, "==0.6.18", None, None)]
    status, data = run_json(str(path), "--offline", "--cache-dir", str(cached_0618), capsys=capsys)
    assert status == 0
    assert [(r["release"], r["verdict"], r["origin"]) for r in data["results"]] == [("0.6.18", "verified", f"{path}:3")]


# --------------------------------------------------------------------------- pyproject.toml


def test_sglang_style_pyproject(cached_0618, capsys):
    path = DATA / "sglang-style" / "pyproject.toml"
    main = line_of(path, '"flashinfer_python[cu13]==0.6.18",  # the JIT cache image must match this release')
    bench = line_of(path, "bench = [\"flashinfer-python>=0.6.15; sys_platform == 'linux'\", \"matplotlib\"]")
    assert summary(path) == [(SPECIFIER, main, "==0.6.18", None, None),
                             (SPECIFIER, bench, ">=0.6.15", "extra bench", 'sys_platform == "linux"')]
    assert [str(s) for s, _ in groups(read_pins(path).found)] == ["==0.6.18", "==0.6.18,>=0.6.15"]
    status, data = run_json(str(path), "--offline", "--cache-dir", str(cached_0618), capsys=capsys)
    assert status == 0
    assert [(r["release"], r["verdict"]) for r in data["results"]] == [("0.6.18", "verified")] * 2


def test_dependency_groups_with_include_group(real_wheel, wheel_cache, capsys):
    path = DATA / "dependency-groups" / "pyproject.toml"
    kernels = line_of(path, 'kernels = ["flashinfer-python==0.6.18"]')
    gpu = line_of(path, 'gpu = ["flashinfer-python>=0.6.18,<0.7"]')
    assert summary(path) == [(SPECIFIER, gpu, "<0.7,>=0.6.18", "extra gpu", None),
                             (SPECIFIER, kernels, "==0.6.18", "group kernels", None),
                             (SPECIFIER, kernels, "==0.6.18", "group bench", None)]
    checks = groups(read_pins(path).found)
    assert [(str(s), len(lines)) for s, lines in checks] == [("<0.7,>=0.6.18", 1), ("==0.6.18", 2)]
    for release in ("0.6.18", "0.6.18.post1"):
        real_wheel(release)
    status, data = run_json(str(path), "--offline", "--cache-dir", str(wheel_cache), capsys=capsys)
    assert status == 0
    assert [(r["release"], r["verdict"]) for r in data["results"]] == [
        ("0.6.18", "verified"), ("0.6.18.post1", "verified"), ("0.6.18", "verified")]


@pytest.mark.parametrize("groups_toml, message", [
    ('a = [{include-group = "missing"}]', "[dependency-groups] a: Dependency group 'missing' not found"),
    ('a = [{include-group = "b"}]\nb = [{include-group = "a"}]',
     "[dependency-groups] a: Cyclic dependency group include while resolving a"),
    ('a = [{include = "b"}]', "[dependency-groups] a: Invalid dependency group item: {'include': 'b'}"),
    ('a = ["flashinfer-python>=0.6.18"]\nA = []', "[dependency-groups]: Duplicate dependency group names: a (a, A)"),
])
def test_dependency_group_errors(tmp_path, groups_toml, message):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[dependency-groups]\n{groups_toml}\n")
    with pytest.raises(RequirementsError, match=re.escape(message)):
        read_pins(path)


def test_uv_sources_path_replaces_the_version_requirement(real_wheel, tmp_path, capsys):
    shutil.copy(DATA / "uv-path" / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(real_wheel("0.6.18"), tmp_path / WHEEL_0618)
    (found,) = read_pins(tmp_path / "pyproject.toml").found
    assert (found.kind, found.location) == (LOCAL_WHEEL, str(tmp_path / WHEEL_0618))
    assert found.line == line_of(tmp_path / "pyproject.toml", f'flashinfer-python = {{ path = "{WHEEL_0618}" }}')
    status, data = run_json(str(tmp_path / "pyproject.toml"), "--offline", capsys=capsys)
    assert (status, data["results"][0]["verdict"]) == (0, "verified")


@pytest.mark.parametrize("value, kind, specifier", [
    ('"0.6.18"', SPECIFIER, "==0.6.18"), ('">=0.6.15,<0.7"', SPECIFIER, "<0.7,>=0.6.15"),
    ('{ version = "0.6.18", source = "private" }', SPECIFIER, "==0.6.18"),
    ('"^0.6.18"', UNCHECKABLE, ""), ('"~0.6"', UNCHECKABLE, ""),
])
def test_poetry_dependency_table(tmp_path, value, kind, specifier):
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[tool.poetry.dependencies]\npython = "^3.10"\nflashinfer-python = {value}\n')
    (found,) = read_pins(path).found
    assert (found.kind, str(found.specifier), found.line) == (kind, specifier, 3)
    if kind == UNCHECKABLE:
        assert "Poetry's own version syntax" in found.reason and "poetry.lock" in found.reason


def test_uv_override_and_constraint_dependencies(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(textwrap.dedent("""
        [project]
        dependencies = ["flashinfer-python>=0.6.15"]
        [tool.uv]
        constraint-dependencies = ["flashinfer-python<0.7"]
        """))
    assert [(str(f.specifier), f.constraint) for f in read_pins(path).found] == [(">=0.6.15", False), ("<0.7", True)]
    path.write_text(path.read_text() + 'override-dependencies = ["flashinfer-python==0.7.4"]\n')
    assert [str(f.specifier) for f in read_pins(path).found] == ["==0.7.4"]


def test_pyproject_without_flashinfer_and_dynamic_dependencies(tmp_path, capsys):
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\ndynamic = ["dependencies"]\n[tool.black]\nline-length = 100\n')
    status, text = run_guard(str(path), "--offline", capsys=capsys)
    assert status == 0
    assert "dependencies are dynamic" in text and "no flashinfer-python requirement; nothing to check" in text


def test_malformed_requirement_in_pyproject_names_its_line(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\ndependencies = [\n  "numpy",\n  "flashinfer-python>=0.6,<<0.7",\n]\n')
    with pytest.raises(RequirementsError, match=r"pyproject\.toml:5: malformed requirement 'flashinfer-python>=0.6,<<0\.7'"):
        read_pins(path)


# --------------------------------------------------------------------------- lock files


@pytest.mark.parametrize("relative, marker", [
    ("uv-registry/uv.lock", None), ("poetry-registry/poetry.lock", None), ("pip-lock/pylock.toml", None),
    ("uv-registry/pylock.uv.toml", "platform_machine == 'x86_64' and sys_platform == 'linux'"),
])
def test_registry_lock_is_its_locked_release(relative, marker, cached_0618, capsys):
    path = DATA / relative
    name_line = line_of(path, 'name = "flashinfer-python"')
    assert summary(path) == [(SPECIFIER, name_line, "==0.6.18", "lock entry 1", marker)]
    status, data = run_json(str(path), "--offline", "--cache-dir", str(cached_0618), capsys=capsys)
    assert status == 0
    assert [(r["release"], r["verdict"], r["origin"]) for r in data["results"]] == [
        ("0.6.18", "verified", f"{path}:{name_line}")]


@pytest.mark.parametrize("folder, lock, wheel_at", [
    ("uv-path", "uv.lock", WHEEL_0618), ("poetry-file", "poetry.lock", f"wheels/{WHEEL_0618}")])
def test_lock_pointing_at_a_local_wheel_checks_it_and_its_hash(folder, lock, wheel_at, real_wheel, tmp_path,
                                                               capsys):
    shutil.copy(DATA / folder / lock, tmp_path / lock)
    (tmp_path / wheel_at).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(real_wheel("0.6.18"), tmp_path / wheel_at)
    (found,) = read_pins(tmp_path / lock).found
    assert (found.kind, found.location) == (LOCAL_WHEEL, str(tmp_path / wheel_at))
    assert found.sha256 == file_sha256(real_wheel("0.6.18"))  # the lock's hash is the real wheel's
    status, data = run_json(str(tmp_path / lock), "--offline", capsys=capsys)
    assert (status, data["results"][0]["verdict"], data["results"][0]["release"]) == (0, "verified", "0.6.18")
    shutil.copy(real_wheel("0.6.17"), tmp_path / wheel_at)  # another file behind the locked name
    status, data = run_json(str(tmp_path / lock), "--offline", capsys=capsys)
    assert status == 2
    assert "is not the file that was locked" in data["results"][0]["reason"]


@pytest.mark.parametrize("relative", ["uv-url/uv.lock", "pip-lock/pylock.url.toml"])
def test_lock_pointing_at_a_url_needs_download(relative, capsys):
    path = DATA / relative
    (found,) = read_pins(path).found
    assert found.kind == REMOTE_WHEEL and found.location.endswith(WHEEL_0618)
    assert found.sha256 == "d5d26edb48f8def0bf28b2c94415aef7f0754e2cd9e3cb3d6e7081262d068aad"
    status, data = run_json(str(path), "--offline", capsys=capsys)
    assert status == 2
    (result,) = data["results"]
    assert result["release"] == "0.6.18" and "cannot be verified offline" in result["reason"]


def test_pip_lock_of_a_local_wheel_records_an_absolute_file_url():
    absolute = Path("/tmp/lockproj/pip") / WHEEL_0618
    if absolute.exists():
        pytest.skip(f"{absolute} exists on this machine")
    (found,) = read_pins(DATA / "pip-lock" / "pylock.path.toml").found
    assert found.kind == UNCHECKABLE
    assert f"the local wheel file://{absolute} does not exist" in found.reason


@pytest.mark.parametrize("lock, text, expected_kind, words", [
    ("uv.lock", '[[package]]\nname = "flashinfer-python"\nversion = "0.7.4"\n'
                'source = { git = "https://github.com/flashinfer-ai/flashinfer?rev=v0.7.4#abc" }\n',
     UNCHECKABLE, "names a commit"),
    ("uv.lock", '[[package]]\nname = "flashinfer-python"\nversion = "0.7.4"\nsource = { editable = "flashinfer" }\n',
     UNCHECKABLE, "editable install"),
    ("poetry.lock", '[[package]]\nname = "flashinfer-python"\nversion = "0.7.4"\n\n[package.source]\n'
                    'type = "git"\nurl = "https://github.com/flashinfer-ai/flashinfer.git"\n', UNCHECKABLE, "names a commit"),
    ("pylock.toml", 'lock-version = "1.0"\ncreated-by = "pip"\n[[packages]]\nname = "flashinfer-python"\n'
                    '[packages.vcs]\ntype = "git"\n'
                    'url = "https://github.com/flashinfer-ai/flashinfer.git"\ncommit-id = "abc"\n', UNCHECKABLE,
     "names a commit"),
    ("pylock.toml", 'lock-version = "1.0"\ncreated-by = "pip"\n[[packages]]\nname = "flashinfer-python"\n'
                    '[packages.directory]\n'
                    'path = "flashinfer"\neditable = true\n', UNCHECKABLE, "editable install"),
])
def test_lock_sources_that_cannot_be_checked(tmp_path, lock, text, expected_kind, words):
    """Shapes as the uv, Poetry and PEP 751 documentation give them (a git
    source cannot be locked here: the machine cannot reach GitHub)."""
    (tmp_path / lock).write_text(text)
    (found,) = read_pins(tmp_path / lock).found
    assert found.kind == expected_kind and words in found.reason and found.line == 2 + 2 * (lock == "pylock.toml")


def test_two_lock_entries_are_checked_apart(tmp_path):
    text = (DATA / "pip-lock" / "pylock.toml").read_text()
    second = ('\n[[packages]]\nname = "flashinfer-python"\nversion = "0.7.4"\nmarker = "python_version >= \'3.12\'"\n'
              '[[packages.wheels]]\nname = "flashinfer_python-0.7.4-py3-none-any.whl"\nurl = "https://x.invalid/a.whl"\n'
              'hashes = {sha256 = "00"}\n')
    (tmp_path / "pylock.toml").write_text(text + second)
    checks = groups(read_pins(tmp_path / "pylock.toml").found)
    assert [str(s) for s, _ in checks] == ["==0.6.18", "==0.7.4"]  # never intersected into nothing


def test_a_lock_packaging_refuses_is_an_error_naming_why(tmp_path, capsys):
    """packaging.pylock validates the whole lock: PEP 751 requires created-by."""
    path = tmp_path / "pylock.toml"
    path.write_text('lock-version = "1.0"\n[[packages]]\nname = "flashinfer-python"\nversion = "0.6.18"\n')
    with pytest.raises(RequirementsError, match="not a valid PEP 751 lock file: .*created-by"):
        read_pins(path)
    status, data = run_json(str(path), "--offline", capsys=capsys)
    assert status == 2 and "not a valid PEP 751 lock file" in data["results"][0]["reason"]


# --------------------------------------------------------------------------- the guard's extra


@pytest.mark.parametrize("module", ["tomllib" if sys.version_info >= (3, 11) else "tomli", "packaging.pylock",
                                    "dependency_groups"])
def test_without_the_guard_extra_the_guard_refuses_naming_it(monkeypatch, tmp_path, module, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # what an install without fi-compat[guard] looks like
    status, text = run_guard("--pin", "flashinfer-python==0.6.18", "--offline", "--cache-dir", str(tmp_path),
                             capsys=capsys)
    assert status == 2
    assert "pip install 'fi-compat[guard]'" in text and module in text and "Traceback" not in text
    needs_it = {"packaging.pylock": DATA / "pip-lock" / "pylock.toml",
                "dependency_groups": DATA / "dependency-groups" / "pyproject.toml"}
    with pytest.raises(GuardExtraMissing, match=r"fi-compat\[guard\]"):
        read_pins(needs_it.get(module, DATA / "sglang-style" / "pyproject.toml"))


def _python310_with_fi_compat_deps():
    """A python3.10 on PATH that can import fi_compat's guard (packaging, wrapt installed)."""
    python = shutil.which("python3.10")
    if python is None:
        return None
    probe = subprocess.run([python, "-c", "import fi_compat.commands.guard.cli"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    return python if probe.returncode == 0 else None


@pytest.mark.skipif(_python310_with_fi_compat_deps() is None, reason="no python3.10 with fi_compat's dependencies")
def test_on_a_real_python_310(tmp_path):
    """A real 3.10 interpreter (no tomllib): with the guard's extra (tomli
    among it) the guard reads TOML; without it, it refuses naming the extra."""
    python = _python310_with_fi_compat_deps()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    has_extra = subprocess.run([python, "-c", "import tomli, dependency_groups, packaging.pylock"],
                               capture_output=True).returncode == 0
    for path in (DATA / "sglang-style" / "pyproject.toml", DATA / "requirements" / "requirements-utf16.txt"):
        done = subprocess.run([python, "-m", "fi_compat", "guard", "--offline", "--cache-dir", str(tmp_path),
                               str(path)], capture_output=True, text=True, env=env)
        if has_extra:
            assert "no wheel in the cache" in done.stdout  # read, then the (empty) cache misses
        else:
            assert "pip install 'fi-compat[guard]'" in done.stderr
        assert done.returncode == 2
