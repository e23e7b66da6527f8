"""The CI templates in examples/ci/ (docs/ci.md): valid YAML, and the parts
that matter agree with the project: the GPU job matrix is exactly
``fi_compat.model.release_list.MATRIX_RELEASES``, one job per release on self-hosted
GPU runners; the guard triggers on every kind of file the pre-commit hook
reads and filters the changed files with the hook's own pattern.

Cost: parsing two small files, well under a second.  pyyaml comes with the
test extras (pyproject.toml); the GitHub workflow is not run through
actionlint here (docs/ci.md says why).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from fi_compat.model.release_list import MATRIX_RELEASES

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "examples" / "ci"
GITHUB = CI / "github-actions.yml"
GITLAB = CI / "gitlab-ci.yml"

# Paths the hook must read (the must-match list of tests/test_guard_requirements.py).
PIN_PATHS = (
    "requirements.txt", "svc/requirements-gpu.in", "constraints.txt", "requirements/base.txt",
    "requirements-dev.txt", "constraints-cu13.txt", "requirements/gpu/extra.in", "dev.in",
    "pyproject.toml", "python/pyproject.toml", "uv.lock", "svc/uv.lock", "poetry.lock",
    "pylock.toml", "pylock.dev.toml", "deploy/pylock.gpu.toml",
)


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def hook_pattern() -> str:
    (hook,) = load(ROOT / ".pre-commit-hooks.yaml")
    return hook["files"]


def glob_regex(pattern: str) -> re.Pattern[str]:
    """GitHub's and GitLab's path globs (the subset the templates use): ``**/``
    is any number of folders, none included; ``**`` anything; ``*`` anything
    but ``/``."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def uncovered(globs: list[str]) -> list[str]:
    """The pin paths that no glob in ``globs`` matches."""
    regexes = [glob_regex(g) for g in globs]
    return [p for p in PIN_PATHS if not any(r.match(p) for r in regexes)]


def scripts_of(job: dict) -> str:
    """Every command a job runs (GitHub ``steps[].run``, GitLab ``script``), as one text."""
    if "steps" in job:
        return "\n".join(step.get("run", "") for step in job["steps"])
    return "\n".join(job["script"])


def test_every_template_parses():
    files = sorted(p for p in CI.rglob("*") if p.is_file())
    assert {GITHUB, GITLAB} <= set(files), files
    for path in files:
        assert path.suffix in (".yml", ".yaml"), f"{path}: examples/ci holds YAML only (docs/ci.md)"
        assert isinstance(load(path), dict), path


def test_glob_regex_follows_the_ci_glob_rules():
    # the coverage checks below are only as good as this translation
    assert glob_regex("**/pyproject.toml").match("pyproject.toml")
    assert glob_regex("**/pyproject.toml").match("a/b/pyproject.toml")
    assert not glob_regex("**/pyproject.toml").match("my-pyproject.toml")
    assert not glob_regex("requirements*.txt").match("sub/requirements.txt")
    assert glob_regex("**/requirements/**").match("requirements/gpu/extra.in")
    assert uncovered(["**/pyproject.toml"]) and not uncovered(["**"])


def test_github_guard_runs_on_pull_requests_that_touch_pins():
    workflow = load(GITHUB)
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the bare key `on` as True
    paths = triggers["pull_request"]["paths"]
    assert uncovered(paths) == [], "the pull_request paths miss these pin files"
    guard = workflow["jobs"]["guard"]
    assert "fi-compat guard" in scripts_of(guard)
    assert 'grep -P "$PIN_FILES"' in scripts_of(guard)
    assert workflow["env"]["PIN_FILES"] == hook_pattern(), "PIN_FILES must be .pre-commit-hooks.yaml's pattern"


def test_github_gpu_matrix_is_one_self_hosted_job_per_release():
    job = load(GITHUB)["jobs"]["gpu-matrix"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    assert job["strategy"]["matrix"]["flashinfer"] == list(MATRIX_RELEASES), (
        "examples/ci/github-actions.yml's release list must be fi_compat.model.release_list.MATRIX_RELEASES")
    assert job["strategy"]["fail-fast"] is False
    assert "max-parallel" not in job["strategy"]  # every release at once, as runners allow
    assert "nox -s \"gpu_matrix(flashinfer='${{ matrix.flashinfer }}')\"" in scripts_of(job)


def test_gitlab_jobs_match_the_github_ones():
    pipeline = load(GITLAB)
    assert pipeline["variables"]["PIN_FILES"] == hook_pattern()
    guard = pipeline["fi-compat-guard"]
    (rule,) = guard["rules"]
    assert rule["if"] == '$CI_PIPELINE_SOURCE == "merge_request_event"'
    assert uncovered(rule["changes"]) == [], "the merge request rule misses these pin files"
    assert "fi-compat guard" in scripts_of(guard) and 'grep -P "$PIN_FILES"' in scripts_of(guard)
    gpu = pipeline["fi-compat-gpu-matrix"]
    assert "gpu" in gpu["tags"]
    (axis,) = gpu["parallel"]["matrix"]
    assert axis == {"FLASHINFER": list(MATRIX_RELEASES)}, (
        "examples/ci/gitlab-ci.yml's release list must be fi_compat.model.release_list.MATRIX_RELEASES")
    assert rule in gpu["rules"]
    assert "nox -s \"gpu_matrix(flashinfer='$FLASHINFER')\"" in scripts_of(gpu)

