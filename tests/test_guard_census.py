"""``fi-compat guard --census`` on real wheels: it catches a leak by running the release.

Each run installs a real flashinfer-python wheel (from the wheel cache the guard
tests share: tests/conftest.py ``real_wheel``) into a throwaway directory over
this interpreter's torch and flashinfer dependencies, and soaks each engine
layout under the CPU-host shim with fi_compat installed.  The history the
census must see: 0.6.16's cute-dsl sizer gained ``max_seq_len``, so a fi_compat
that bounds only the tuning config (and the builder) is flat on 0.6.15.post1
and leaks on 0.6.16; bounding the sizer too makes 0.6.16 flat again.  The
"fi_compat that bounds only ..." is the probe's internal ``--only-bounds``
(``guard --census-only-bounds``), which filters fi_compat.verdict.bounds.BOUNDS in the
probe's own process.

About 20-35 s per release and mode on 2 shared cores (docs/guard.md has the
figures).  The four long runs start together, two at a time, when the first of
their tests runs (``long_runs``): the census is judged on memory, never on
time, so two probes share the two cores without changing a verdict, and the
module takes about half its serial time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from fi_compat.model import specs
from fi_compat.cli import main
from fi_compat.commands.guard.check import Result
from fi_compat.commands.guard.report import as_table

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: The rows of the tuning config's path: the config memo, the builder memo, and the autotuner's
#: nearest-profile memo that is keyed on the config (on 0.6.15.post1-0.6.17 bounded upstream at a
#: size far above fi_compat's: at 128K context each of the 1,024 K-tile classes' configs adds
#: entries there once fi_compat's config memo evicts, so the census counts it as growing).
ONLY_TUNING_CONFIG = "tuning-config,builder,nearest-profile"
CUTE_DSL_LAYOUTS = {("vllm", "auto"), ("vllm", "cute-dsl"), ("sglang", "auto"), ("sglang", "cute-dsl")}


def census(capsys, cache: Path, *pins: str, only: str | None = None) -> tuple[int, dict]:
    """``guard --census`` on q1 in this process, for the short runs."""
    status = main(["guard", *census_argv(cache, *pins, only=only)])
    return status, json.loads(capsys.readouterr().out)


def by_release(data: dict) -> dict[str, dict]:
    return {result["release"]: result for result in data["results"]}


# --------------------------------------------------------------------------- the long runs

#: Long runs at once: CI's two cores.  Each is a ``fi-compat guard`` process whose probes are
#: CPU-bound; a third would only queue behind them.
AT_ONCE = 2


@dataclass
class GuardRun:
    """One ``fi-compat guard --census`` process, as a CI job starts it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=lambda: {
        **os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    cwd: Path = REPO
    #: what the test compares afterwards (the default run's directories and site-packages listing)
    before: dict = field(default_factory=dict)

    def __call__(self) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "fi_compat", "guard", *self.argv], capture_output=True,
                              text=True, env=self.env, cwd=self.cwd, timeout=900)

    def data(self, done: subprocess.CompletedProcess) -> dict:
        try:
            return json.loads(done.stdout)
        except ValueError:
            raise AssertionError(f"guard printed no JSON (exit {done.returncode}):\n{done.stdout}{done.stderr}") from None


def census_argv(cache: Path, *pins: str, only: str | None = None, modes: str | None = "q1") -> list[str]:
    """The tests that judge rows the q1 decode reaches drive q1 alone (a probe of every
    mode takes minutes); the default run drives every mode."""
    argv = ["--census", "--offline", "--json", "--cache-dir", str(cache)]
    if modes is not None:
        argv += ["--census-modes", modes]
    for pin in pins:
        argv += ["--pin", f"flashinfer-python=={pin}"]
    if only is not None:
        argv += ["--census-only-bounds", only]
    return argv


def long_run(name: str) -> Callable:
    """Marks a test as the reader of ``long_runs[name]``: the fixture starts the runs of the
    selected tests only, so ``-k`` one of them costs that run alone."""
    def mark(test: Callable) -> Callable:
        test.long_run = name  # type: ignore[attr-defined]
        return test
    return mark


def _listing(directory: str) -> list[str]:
    return sorted(os.listdir(directory))


def _site_packages() -> list[str]:
    return [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]


def _default_run(real_wheel, tmp: Path) -> GuardRun:
    """The default census (every query mode), offline from --find-links with an empty cache,
    HOME and the temporary directory."""
    links = tmp / "links"
    links.mkdir()
    wheel = real_wheel("0.6.18")
    os.symlink(wheel, links / wheel.name)
    home, scratch, empty_cache = tmp / "home", tmp / "tmp", tmp / "cache"
    for directory in (home, scratch, empty_cache):
        directory.mkdir()
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(scratch),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("XDG_CACHE_HOME", None)
    argv = ["--census", "--offline", "--json", "--cache-dir", str(empty_cache), "--find-links", str(links),
            "--pin", "flashinfer-python==0.6.18"]
    before = {"wheel": links / wheel.name, "home": home, "scratch": scratch, "cache": empty_cache,
              "site_packages": {p: _listing(p) for p in _site_packages()}}
    return GuardRun(argv, env=env, cwd=tmp, before=before)


@pytest.fixture(scope="module")
def long_runs(request, real_wheel, wheel_cache, tmp_path_factory):
    """``{name: (GuardRun, Future)}`` for the selected tests' long runs, longest first, started at
    the first request; every process has ended when the module does (nothing runs beside the
    timing tests of other modules)."""
    runs: dict[str, Callable[[], GuardRun]] = {
        "default": lambda: _default_run(real_wheel, tmp_path_factory.mktemp("default-census")),
        "pin-bump": lambda: GuardRun(census_argv(wheel_cache, "0.6.15.post1", "0.6.16", only=ONLY_TUNING_CONFIG)),
        "config-unbounded": lambda: GuardRun(census_argv(wheel_cache, "0.6.18", only="split-kv,batch-cap")),
        "sizer-bounded": lambda: GuardRun(census_argv(wheel_cache, "0.6.16", only=f"{ONLY_TUNING_CONFIG},split-kv")),
    }
    wanted = {getattr(item.function, "long_run", None) for item in request.session.items
              if getattr(item, "module", None) is request.module}
    for release in ("0.6.15.post1", "0.6.16", "0.6.18"):
        real_wheel(release)  # downloads, if any, one at a time before the runs start
    started: dict[str, tuple[GuardRun, Future]] = {}
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        for name, make in runs.items():  # longest first
            if name in wanted:
                run = make()
                started[name] = (run, pool.submit(run))
        yield started
        for _, future in started.values():
            future.cancel()


def finished(long_runs, name: str) -> tuple[int, dict, GuardRun]:
    run, future = long_runs[name]
    done = future.result()
    return done.returncode, run.data(done), run


@long_run("pin-bump")
def test_bounding_only_the_tuning_config_passes_06151_and_fails_0616(long_runs):
    status, data, _ = finished(long_runs, "pin-bump")
    assert status == 1, data
    before, after = by_release(data)["0.6.15.post1"], by_release(data)["0.6.16"]

    assert (before["verdict"], before["census"]["verdict"], before["census"]["leaks"]) == ("verified", "flat", [])
    assert after["verdict"] == "leaks" and after["census"]["verdict"] == "grows"
    (leak,) = after["census"]["leaks"]
    assert leak["function"] == specs.CUTE_DSL_SPLIT_KV.qualname
    assert [name.split("=")[0] for name in leak["key"]] == list(specs.CUTE_DSL_SPLIT_KV.at("0.6.16").names)
    assert leak["row"] == "split-kv" and "not installed" in leak["row_state"]
    # the sizer grows on every layout that can reach the cute-dsl kernel, never TensorRT-LLM's: backend
    # cute-dsl sizes each launch with the exact length, and on both auto calls the autotuner profiles the
    # cute-dsl tactic again (sizing it with that batch's length) whenever fi_compat's nearest-profile
    # memo, far smaller than the upstream bound, has evicted the config's profile.  Unbounded, the sizer
    # gains at least an entry per length.
    assert {(row["layout"], row["backend"]) for row in leak["layouts"]} == CUTE_DSL_LAYOUTS
    assert all(row["gained"] >= row["lengths"] for row in leak["layouts"])
    assert specs.CUTE_DSL_SPLIT_KV.qualname in after["reason"] and "max_seq_len" in after["reason"]
    table = as_table([Result(**before), Result(**after)], data["notes"])
    assert f"{specs.CUTE_DSL_SPLIT_KV.qualname}({', '.join(leak['key'])})" in table
    assert "0.6.16 (--pin flashinfer-python==0.6.16): leaks" in table and table.endswith("exit 1")
    # each layout decoded its lengths through the real host path, one recorded launch per decode: both
    # halves, then the second half once more (the census by memory's pass with no new length, whose
    # growth is per call and is taken off the per-length growth)
    for result in (before, after):
        layouts = result["census"]["layouts"]
        assert [first + 2 * second for first, second in (layout["lengths"] for layout in layouts)] == \
            [layout["launches"] for layout in layouts]


@long_run("sizer-bounded")
def test_bounding_the_sizer_too_makes_0616_flat(long_runs):
    status, data, _ = finished(long_runs, "sizer-bounded")
    (result,) = data["results"]
    assert (status, result["verdict"], result["census"]["verdict"], result["census"]["leaks"]) == \
        (0, "verified", "flat", [])
    assert {row["name"] for row in result["census"]["fi_compat"]["bounds"]} == {
        "tuning-config", "builder", "nearest-profile", "split-kv"}


@long_run("config-unbounded")
def test_an_unbounded_tuning_config_is_named_with_its_key(long_runs):
    """The census is not about one function: leave the tuning config (and the builder memo, whose
    ladder-keyed hits would spare it all but one call per profile step) out on 0.6.18 and it is the leak."""
    status, data, _ = finished(long_runs, "config-unbounded")
    (result,) = data["results"]
    assert (status, result["verdict"]) == (1, "leaks")
    (leak,) = [leak for leak in result["census"]["leaks"] if leak["function"] == specs.TUNING_CONFIG.qualname]
    assert leak["row"] == "tuning-config"
    # anything else that grows is keyed on the unbounded config: fi_compat's row for it was left out too
    # (the nearest-profile memo, at SGLang's per-length block-table widths over the 1M context)
    others = [other for other in result["census"]["leaks"] if other is not leak]
    assert all(other["row"] is not None and "not installed" in other["row_state"] for other in others), others
    assert [name.split("=")[0] for name in leak["key"]] == list(specs.TUNING_CONFIG.at("0.6.18").names)
    assert "profile_seq_len" in leak["key"]
    assert {(row["layout"], row["backend"]) for row in leak["layouts"]} >= CUTE_DSL_LAYOUTS


@long_run("default")
def test_default_fi_compat_is_flat_offline_from_find_links_and_leaves_the_environment(long_runs):
    """A real process, as a CI job runs it: the wheel comes from --find-links with an
    empty cache and --offline; HOME and the temporary directory start empty."""
    status, data, run = finished(long_runs, "default")
    before = run.before
    assert status == 0, data
    (result,) = data["results"]
    assert (result["wheel"], result["verdict"], result["census"]["verdict"]) == (str(before["wheel"]), "verified",
                                                                               "flat")
    assert result["census"]["release"] == "0.6.18"
    driven = {layout["mode"] for layout in result["census"]["layouts"]}
    assert "q1" in driven and len(driven) > 1, driven  # the default drives the other query modes too
    rows = result["census"]["fi_compat"]["bounds"]
    assert all(row["verdict"] in ("bound", "not-in-release", "no-cache") for row in rows)
    # nothing left behind: no throwaway directory, no flashinfer or pip cache in HOME,
    # the interpreter's site-packages as they were, the wheel cache still empty
    assert _listing(str(before["scratch"])) == [] and _listing(str(before["cache"])) == []
    assert not (before["home"] / ".cache").exists() and not (before["home"] / ".local").exists()
    assert {p: _listing(p) for p in before["site_packages"]} == before["site_packages"]


def test_missing_torch_and_dependencies_is_exit_2_before_anything_is_installed(real_wheel, wheel_cache, tmp_path):
    """An interpreter with fi_compat[guard] and nothing else (a bare CI runner): the
    census says what it needs and installs nothing."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    needed = tmp_path / "needed"  # what fi_compat and its guard extra import, nothing of flashinfer's or torch
    needed.mkdir()
    for package in ("packaging", "wrapt", "dependency_groups") + (("tomli",) if sys.version_info < (3, 11) else ()):
        module = __import__(package)
        os.symlink(os.path.dirname(module.__file__), needed / package)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    real_wheel("0.6.18")
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "fi_compat", "guard", "--census", "--offline",
                           "--json", "--cache-dir", str(wheel_cache), "--pin", "flashinfer-python==0.6.18"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "TMPDIR": str(scratch),
                               "PYTHONPATH": os.pathsep.join([str(REPO), str(needed)])})
    assert done.returncode == 2, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert result["verdict"] == "error" and result["census"]["verdict"] == "error"
    reason = result["reason"]
    assert "--census needs pip, torch and flashinfer-python 0.6.18's dependencies" in reason
    for absent in ("pip (not importable)", "torch (not importable)", "nvidia-cutlass-dsl", "apache-tvm-ffi"):
        assert absent in reason
    assert _listing(str(scratch)) == []


def test_a_probe_that_fails_is_exit_2_with_its_message(real_wheel, wheel_cache, capsys):
    real_wheel("0.6.15.post1")
    status, data = census(capsys, wheel_cache, "0.6.15.post1", only="tuning-config,no-such-row")
    (result,) = data["results"]
    assert (status, result["verdict"]) == (2, "error")
    assert "census probe of 0.6.15.post1 failed" in result["reason"]
    assert "unknown row(s) no-such-row" in result["reason"]


def test_census_modes_needs_the_census_and_known_modes(capsys):
    assert main(["guard", "--static", "--census-modes", "q1", "--pin", "flashinfer-python==0.6.18"]) == 2
    assert "--census-modes applies to the census, not --static" in capsys.readouterr().err
    assert main(["guard", "--census", "--census-modes", "q1,sprase", "--pin", "flashinfer-python==0.6.18"]) == 2
    assert "sprase not known; accepted: q1, mtp, varq, sparse, dcp, modular" in capsys.readouterr().err


def test_census_only_bounds_needs_the_census(capsys):
    assert main(["guard", "--static", "--census-only-bounds", "builder", "--pin", "flashinfer-python==0.6.18"]) == 2
    assert "--census-only-bounds applies to the census, not --static" in capsys.readouterr().err


def test_static_and_census_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["guard", "--static", "--census", "--pin", "flashinfer-python==0.6.18"])
    assert raised.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_find_links_must_be_a_directory(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert main(["guard", "--find-links", str(missing), "--pin", "flashinfer-python==0.6.18"]) == 2
    assert f"--find-links {missing}: no such directory" in capsys.readouterr().err
