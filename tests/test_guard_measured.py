"""The guard's default verdict on releases that do not exist yet: measured, not read by name.

Each release is the real 0.7.4 wheel with one edit, built in the test (tests/helpers/guard_releases.py):
the tuning config moved where flashinfer's redesign puts it (flashinfer/mla/_batch_mla/), moved
and renamed, moved and its cache written by hand; six hand-written memos keyed on what the engines
vary per request; and the good upgrades (the memo renamed and bounded with lru_cache(maxsize=256)
and made positional-only, a module no engine's call reaches removed).  None is on the verified
list, so ``fi-compat guard`` with default flags runs the census on each: the release installed in
a throwaway directory, every engine's call driven on CPU with fi_compat installed, flashinfer's
memory counted by source line.  Each test asserts the verdict (the exit status the release alone
would give, and the flashinfer line it names) against what the census measured in that run.

Cost: the six releases are written once per module (about 5 s each) and measured by two guard
processes of three releases each, started together at the first test (``measured``): one query
token and 128 lengths per engine call (``--census-modes q1 --census-lengths 128``), which reach
every edit here; about 60-100 s per release on 2 shared cores, so 3-5 minutes for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest

from fi_compat.model import specs
from fi_compat.commands.guard.census_probe import probe_lengths
from fi_compat.commands.guard.check import Result
from fi_compat.commands.guard.report import as_table, exit_status

from helpers import guard_releases as releases
from helpers.guard_releases import BATCH_MLA_CORE, CORE, HANDWRITTEN, RELEASES, RENAMED_CONFIG, line_of

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
GROUPS = (("handwritten", "good-upgrades", "positional-only"), ("moved", "moved-renamed", "moved-handwritten"))
CENSUS = ("--census-modes", "q1", "--census-lengths", "128")
AUTO_LAYOUTS = {("vllm", "auto"), ("sglang", "auto")}


@pytest.fixture(scope="module")
def built(real_wheel, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """``{name: (wheel, edited files)}`` for every release of tests/helpers/guard_releases.py."""
    real = real_wheel(releases.BASE_RELEASE)
    dest = tmp_path_factory.mktemp("releases")
    return {name: releases.edited_wheel(real, release, dest) for name, release in RELEASES.items()}


def _guard(wheels: list[Path]) -> dict:
    argv = [sys.executable, "-m", "fi_compat", "guard", "--json", "--offline", *CENSUS]
    for wheel in wheels:
        argv += ["--wheel", str(wheel)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=1500)
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"guard printed no JSON (exit {done.returncode}):\n{done.stdout}{done.stderr}") from None


def uses(*names: str) -> Callable:
    """Marks the releases a test reads, so ``-k`` one test measures only its group."""
    def mark(test: Callable) -> Callable:
        test.releases = names  # type: ignore[attr-defined]
        return test
    return mark


@pytest.fixture(scope="module")
def measured(request, built) -> dict[str, dict]:
    """``{name: result}``: the guard's default verdict on each release the selected tests read,
    one guard process per group, two at once (CI's two cores; the census is judged on memory,
    never on time)."""
    wanted = {name for item in request.session.items if getattr(item, "module", None) is request.module
              for name in getattr(item.function, "releases", ())}
    groups = [group for group in GROUPS if wanted & set(group)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(_guard, [built[name][0] for name in group]) for group in groups]
        data = [run.result() for run in runs]
    by_version = {result["release"]: result for payload in data for result in payload["results"]}
    return {name: by_version[release.version] for name, release in RELEASES.items() if release.version in by_version}


def alone(result: dict) -> int:
    """The exit status the guard gives this release checked alone."""
    return exit_status([Result(**result)])


def leak_text(result: dict) -> str:
    return "\n".join(json.dumps(leak) for leak in result["census"]["leaks"])


def grown_by_census(result: dict) -> bool:
    """What the census measured, read from its own figures: some flashinfer memo or line grew."""
    census = result["census"]
    return any(layout.get("per_length", 0) > 0 or layout.get("bytes_per_length", 0) > 0
               for leak in census["leaks"] for layout in leak["layouts"])


@uses("moved")
def test_moved_as_the_redesign_moves_it_is_measured_bounded(measured, built):
    result = measured["moved"]
    assert result["measured"] and result["census"]["verdict"] == "flat", leak_text(result)
    assert (alone(result), result["verdict"]) == (0, "bounded")
    assert not grown_by_census(result)
    # fi_compat found the moved memo by its name and bounded it there
    assert "fi_compat bounded tuning-config" in result["census"]["bounded"]
    assert BATCH_MLA_CORE in built["moved"][1]


@uses("moved-renamed")
def test_moved_and_renamed_leaks_naming_the_renamed_memo_and_the_calls_that_reach_it(measured, built):
    result = measured["moved-renamed"]
    assert (alone(result), result["verdict"]) == (1, "leaks"), result["reason"]
    assert grown_by_census(result)
    (leak,) = [leak for leak in result["census"]["leaks"] if leak["function"].endswith(RENAMED_CONFIG)]
    assert leak["function"] == f"flashinfer.mla._batch_mla._core.{RENAMED_CONFIG}"
    moved_text = built["moved-renamed"][1][BATCH_MLA_CORE]
    assert leak["where"] == f"{BATCH_MLA_CORE}:{line_of(moved_text, f'def {RENAMED_CONFIG}(')}"  # its def line
    assert "profile_seq_len" in leak["key"] and leak["row"] is None
    # the auto calls of vLLM and SGLang build a config per length; TensorRT-LLM's trtllm-gen does not
    assert {(call["layout"], call["backend"]) for call in leak["layouts"]} >= AUTO_LAYOUTS
    assert all(call["gained"] >= call["lengths"] / 2 for call in leak["layouts"])
    assert leak["where"] in result["reason"] and "vllm/auto/q1" in result["reason"]


@uses("moved-handwritten")
def test_moved_and_hand_written_leaks_naming_the_memo_line(measured, built):
    result = measured["moved-handwritten"]
    assert (alone(result), result["verdict"]) == (1, "leaks"), result["reason"]
    memo = f"flashinfer.mla._batch_mla._core.{specs.TUNING_CONFIG.name}_memo"
    (leak,) = [leak for leak in result["census"]["leaks"] if memo in leak["function"]]
    assert leak["where"].startswith(BATCH_MLA_CORE + ":")
    assert all(call["per_length"] >= 0.25 for call in leak["layouts"])  # entries per new length, counted
    assert {(call["layout"], call["backend"]) for call in leak["layouts"]} >= AUTO_LAYOUTS
    assert memo in result["reason"]


@uses("handwritten")
@pytest.mark.parametrize("memo", sorted(HANDWRITTEN))
def test_each_hand_written_memo_is_named_with_its_line(memo, measured, built):
    """One release holds all six (one census process); each marked line, or the memo it fills,
    must be among the leaks, with the bytes or entries the census counted there."""
    result = measured["handwritten"]
    assert (alone(result), result["verdict"]) == (1, "leaks"), result["reason"]
    line = f"{CORE}:{line_of(built['handwritten'][1][CORE], f'MEMO: {memo}')}"
    named = {
        "instance-dict": "AutoTuner._instance._seen_decode_shapes",
        "closure-dict": "_remember_decode_shape.<closure seen>",
        "cache-past-128k": "flashinfer.mla._core._long_context_plan",
    }.get(memo)
    hits = [leak for leak in result["census"]["leaks"]
            if line in leak["lines"] or (named is not None and named in leak["function"])]
    assert hits, f"{memo} ({line}) not named:\n{leak_text(result)}"
    assert any(call.get("bytes_per_length") or call.get("per_length") for leak in hits for call in leak["layouts"])
    if memo == "cache-past-128k":
        (leak,) = hits
        # reached only past 131,072: one entry per new length above it, none below
        above = sum(1 for length in probe_lengths(128, 0)[1] if length > 131072)
        assert 0 < above < 64 and all(call["gained"] == above for call in leak["layouts"]), leak


@uses("good-upgrades")
def test_good_upgrades_are_bounded_with_the_static_differences_as_notes(measured, built):
    """Renamed and bounded with lru_cache(maxsize=256), positional-only, a module removed: the
    static check misses the renamed memo, the census sees flashinfer's own bound fill and hold."""
    result = measured["good-upgrades"]
    assert result["census"]["verdict"] == "flat", leak_text(result)
    assert (alone(result), result["verdict"]) == (0, "bounded")
    renamed = f"flashinfer.mla._core.{RENAMED_CONFIG}"
    (said,) = [line for line in result["census"]["bounded"] if renamed in line]
    assert "lru_cache maxsize 256" in said
    assert any("tuning_config is missing" in note and "no effect measured" in note for note in result["notes"])
    assert built["good-upgrades"][1][releases.UNREACHED_MODULE] is None
    table = as_table([Result(**result)], [])
    assert "bounded" in table and "exit 0" in table


@uses("positional-only")
def test_positional_only_is_bounded_with_the_difference_as_a_note(measured):
    """The tuning config's parameters positional-only: flashinfer's builder passes them
    positionally, so fi_compat bounds the memo as before (keyed by position) and the census
    measures it flat: exit 0, the signature difference a note, not a refusal."""
    result = measured["positional-only"]
    assert result["census"]["verdict"] == "flat", leak_text(result)
    assert (alone(result), result["verdict"]) == (0, "bounded"), result["reason"]
    assert not grown_by_census(result)
    assert "fi_compat bounded tuning-config" in result["census"]["bounded"]
    assert any("became positional-only" in note for note in result["notes"]), result["notes"]
