"""Installing fi_compat must never install, upgrade or downgrade torch or flashinfer."""

from __future__ import annotations

import importlib.metadata
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def runtime_requirements(requirements: list[str]) -> list[Requirement]:
    parsed = [Requirement(r) for r in requirements]
    return [r for r in parsed if r.marker is None or "extra" not in str(r.marker)]


def test_pyproject_runtime_dependencies_are_packaging_and_wrapt_only():
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
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
        pytest.skip("fi-compat is not installed in this environment")
    names = {r.name for r in runtime_requirements(requires)}
    assert names == {"packaging", "wrapt"}
