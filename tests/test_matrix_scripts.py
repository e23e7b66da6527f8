"""The matrix plumbing: junit parsing (scripts/run_release_suite.py) and the
compatibility-doc generator (scripts/generate_compatibility.py)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.matrix.test_a" name="test_ok"/>
<testcase classname="tests.matrix.test_a" name="test_bad"><failure message="boom"/></testcase>
<testcase classname="tests.matrix.test_a" name="test_err"><error message="fixture"/></testcase>
<testcase classname="tests.matrix.test_gpu" name="test_k"><skipped message="needs SM100/SM103"/></testcase>
<testcase classname="tests.matrix.test_gpu" name="test_h"><skipped message="needs SM100/SM103"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_counts_and_reasons(load, tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    result = load("run_release_suite").parse_junit(path)
    assert (result["tests"], result["passed"], result["failed"], result["errors"], result["skipped"]) == (5, 1, 1, 1, 2)
    assert result["skip_reasons"] == {"needs SM100/SM103": 2}
    assert result["failures"] == ["tests.matrix.test_a::test_bad", "tests.matrix.test_a::test_err"]
    assert result["by_file"] == {"test_a": {"passed": 1, "failed": 2, "skipped": 0},
                                 "test_gpu": {"passed": 0, "failed": 0, "skipped": 2}}


def test_parse_junit_missing_file_is_nothing_passed(load, tmp_path):
    assert load("run_release_suite").parse_junit(tmp_path / "absent.xml")["passed"] == 0


def result(release, platform, verified, passed=10, failed=0, device="CPU x"):
    growth = {"builder_without": {"bytes_per_distinct": 1814.2}, "builder_with": {"bytes_per_distinct": 3.9},
              "decode_without": {"bytes_per_distinct": 0.4}, "decode_with": None, "errors": {"decode_with": "x"}}
    return {
        "schema": 1, "platform": platform, "release": release, "bounded": ["tuning-config", "builder"],
        "device": device, "python": "3.12.3", "torch": "2.11.0", "command": "python3 scripts/run_gpu_matrix.py --x",
        "date": "2026-12-02", "verified": verified, "growth": growth,
        "pytest": {"tests": passed + failed + 1, "passed": passed, "failed": failed, "errors": 0, "skipped": 1,
                   "skip_reasons": {"needs SM100/SM103": 1}, "failures": ["t::test_x"] * failed, "exit_status": 0},
    }


def test_generator_rows_from_results(load, tmp_path):
    code = load("_matrix_common").fingerprint()["code"]
    for platform, release, verified, failed, ran in (("cpu", "0.6.18", True, 0, code), ("cpu", "0.7.4", False, 2, code),
                                                     ("gpu", "0.6.18", True, 0, "an older checkout")):
        folder = tmp_path / platform
        folder.mkdir(exist_ok=True)
        device = "NVIDIA H200 (SM90)" if platform == "gpu" else "CPU x"
        (folder / f"{release}.json").write_text(json.dumps({
            **result(release, platform, verified, failed=failed, device=device), "fingerprint": {"code": ran}}))
    text = load("generate_compatibility").render(tmp_path)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| 0.")}
    assert "**yes** (10 passed, 0 failed, 1 skipped)" in rows["0.6.18"]
    # a run of other code than the checkout's vouches for that code only, and says so
    assert ("**yes** (10 passed, 0 failed, 1 skipped; ran on older code, fingerprint "
            "an older che, 2026-12-02)") in rows["0.6.18"]
    assert rows["0.6.18"].count("ran on older code") == 1
    # which code each result ran, with its device, one line per platform, code and date
    assert "| GPU | fingerprint an older che | 2026-12-02 | NVIDIA H200 (SM90) | 0.6.18 | **no**: older code |" in text
    assert "| CPU | fingerprint " + code[:12] + " | 2026-12-02 | CPU x | 0.6.18, 0.7.4 (2) | yes |" in text
    assert "1,814 B → 4 B" in rows["0.6.18"]
    assert "0 B → error" in rows["0.6.18"]
    assert "**no** (10 passed, 2 failed, 1 skipped)" in rows["0.7.4"]
    assert rows["0.6.13"].count("not run") == 2  # every matrix release gets a row
    assert "`python3 scripts/run_gpu_matrix.py --x`" in text
    assert "not be edited" not in text and "do not edit by hand" in text


def test_generator_lists_the_census_rows_per_release(load, tmp_path):
    census = [{"release": "0.6.18", "layout": layout, "backend": "auto", "mode": "q1", "lengths": 2000,
               "alone_entries_per_length": 2.0, "alone_blocks_per_length": 30.5, "bounded_bytes_per_length": size,
               "bounded_window": 128, "bounded_blocks_per_length": blocks, "bounded_cpu_us_per_call": 300,
               "rows_with_traffic": ["tuning-config"]} for layout, size, blocks in (("vllm", 3.5, 0.0), ("sglang", 41.0, 0.25))]
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "0.6.18.json").write_text(json.dumps({**result("0.6.18", "cpu", True), "census": census}))
    census_74 = [{**row, "release": "0.7.4", "alone_blocks_per_length": 40.0, "bounded_blocks_per_length": 0.5,
                  "bounded_bytes_per_length": 8.0} for row in census[1:]]
    (tmp_path / "cpu" / "0.7.4.json").write_text(json.dumps({**result("0.7.4", "cpu", True), "census": census_74}))
    text = load("generate_compatibility").render(tmp_path)
    # per release: combinations x lengths, the least Python blocks per length alone -> the most with fi_compat
    assert "| 0.6.18 | 2 × 2,000 | 30.5 → 0.25 |" in text
    assert "| 0.7.4 | 1 × 2,000 | 40 → 0.5 |" in text
    # per combination, across the releases that ran it: ranges, the largest window, the rows with traffic
    assert "| CPU | vllm | auto | q1 | 0.6.18 | 2 | 30.5 | 0 | 0.4 KiB over 128 | tuning-config |" in text
    assert "| CPU | sglang | auto | q1 | 0.6.18, 0.7.4 (2) | 2 | 30.5–40 | 0.25–0.5 | 5.1 KiB over 128 | tuning-config |" in text


def test_skip_reasons_sum_across_releases_with_the_release_written_once(load, tmp_path):
    """A reason naming its own release is one line for every release that
    gives it; a reason that names a fixed release (the same words on several
    releases) is kept as it is."""
    generate = load("generate_compatibility")
    reasons = {
        "0.6.18": {"flashinfer 0.6.18 rejects it: ValueError: no": 3, "gated before 0.6.18": 1,
                   "flashinfer 0.6.18: keeps no cache (0.6.18 on key it)": 1},
        "0.7.0": {"flashinfer 0.7.0 rejects it: ValueError: no": 2, "gated before 0.6.18": 1,
                  "flashinfer 0.7.0: keeps no cache (0.6.18 on key it)": 1},
        "0.7.4": {"flashinfer 0.7.4 rejects it: ValueError: no": 4, "only on 0.7.4.post1": 1},
    }
    for release, by_reason in reasons.items():
        folder = tmp_path / "cpu"
        folder.mkdir(exist_ok=True)
        data = result(release, "cpu", True)
        data["pytest"]["skip_reasons"] = by_reason
        (folder / f"{release}.json").write_text(json.dumps(data))
    summed = generate.skip_reasons(generate.load(tmp_path, "cpu"))
    assert summed == {
        "flashinfer X.Y.Z rejects it: ValueError: no": (9, {"0.6.18", "0.7.0", "0.7.4"}),
        "gated before 0.6.18": (2, {"0.6.18", "0.7.0"}),
        "flashinfer X.Y.Z: keeps no cache (0.6.18 on key it)": (2, {"0.6.18", "0.7.0"}),
        "only on 0.7.4.post1": (1, {"0.7.4"}),  # 0.7.4 is not 0.7.4.post1
    }
    text = generate.render(tmp_path)
    line = next(line for line in text.splitlines() if line.startswith("| flashinfer X.Y.Z rejects it"))
    assert line == "| flashinfer X.Y.Z rejects it: ValueError: no | 9 (3: 0.6.18, 0.7.0, 0.7.4) | — |"
    assert "flashinfer 0.7.0 rejects" not in text


def test_release_ranges_follow_the_release_order(load):
    ranges = load("generate_compatibility").release_ranges
    order = ["0.6.13", "0.6.14", "0.6.15", "0.6.15.post1", "0.6.16", "0.7.4"]
    assert ranges(order, order) == "all 6"
    assert ranges(["0.6.13", "0.6.14", "0.6.15", "0.7.4"], order) == "0.6.13 – 0.6.15, 0.7.4 (4)"
    assert ranges(["0.6.15.post1"], order) == "0.6.15.post1"
    assert ranges(["0.6.14", "0.6.16"], order, count=False) == "0.6.14, 0.6.16"


def test_the_committed_compatibility_doc_stays_readable():
    """docs/compatibility.md is read by people: well under 50 KB, no line a
    screen cannot hold a few times over, the summary before the details."""
    text = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    assert len(text.encode()) < 50_000, f"docs/compatibility.md is {len(text.encode()):,} bytes"
    longest = max(text.splitlines(), key=len)
    assert len(longest) <= 400, f"a line of {len(longest)} characters: {longest[:120]}..."
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Summary", "## Skipped tests, by reason"]
