"""Installing fi_compat must never install, upgrade or downgrade torch or flashinfer."""

from __future__ import annotations

import importlib.metadata
import os
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli is the same parser, when installed
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (CI set, as .ci/run's machines and the templates in
    examples/ci/ set it) fail instead, so that a check meant to run there
    cannot pass by not running.  The built wheel's metadata is checked by
    ``nox -s build`` in every case."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this check must run)")
    pytest.skip(reason)


def runtime_requirements(requirements: list[str]) -> list[Requirement]:
    parsed = [Requirement(r) for r in requirements]
    return [r for r in parsed if r.marker is None or "extra" not in str(r.marker)]


def test_pyproject_runtime_dependencies_are_packaging_and_wrapt_only():
    if tomllib is None:
        skip_or_fail("reading pyproject.toml needs Python 3.11 (tomllib) or tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {Requirement(r).name for r in project["dependencies"]}
    assert names == {"packaging", "wrapt"}
    wrapt = next(Requirement(r) for r in project["dependencies"] if Requirement(r).name == "wrapt")
    assert "2.4" in wrapt.specifier and "2.3.9" not in wrapt.specifier  # the floor README.md states
    for extra in project.get("optional-dependencies", {}).values():
        assert not {Requirement(r).name for r in extra} & {"torch", "flashinfer-python"}


def test_installed_metadata_requires_neither_torch_nor_flashinfer():
    try:
        requires = importlib.metadata.requires("fi-compat") or []
    except importlib.metadata.PackageNotFoundError:
        skip_or_fail("fi-compat is not installed in this environment (pip install -e . or the wheel)")
    names = {r.name for r in runtime_requirements(requires)}
    assert names == {"packaging", "wrapt"}


def test_the_guard_extra_is_what_the_guard_imports_and_what_the_hook_installs():
    """fi-compat[guard] holds the guard's three libraries (fi_compat/commands/guard/extra.py),
    and the pre-commit hook, which pre-commit installs without extras, lists the same."""
    if tomllib is None:
        skip_or_fail("reading pyproject.toml needs Python 3.11 (tomllib) or tomli")
    import yaml

    guard = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["guard"]
    assert {Requirement(r).name for r in guard} == {"packaging", "dependency-groups", "tomli"}
    packaging = next(Requirement(r) for r in guard if Requirement(r).name == "packaging")
    assert "26.0" in packaging.specifier and "25.0" not in packaging.specifier  # packaging.pylock is 26.0's
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["additional_dependencies"] == guard
