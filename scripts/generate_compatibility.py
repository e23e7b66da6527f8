#!/usr/bin/env python3
"""Generate docs/compatibility.md from the matrix results.  Never edit the output by hand.

Reads ``docs/compat-results/cpu/*.json`` (``nox -s matrix``) and
``docs/compat-results/gpu/*.json`` (``nox -s gpu_matrix`` or
``scripts/run_gpu_matrix.py``), one file per release as written by
``scripts/run_release_suite.py``, and writes, in this order, what a reader
needs first:

* the summary: one row per release in ``fi_compat.model.release_list.MATRIX_RELEASES``
  (plus any other release with results): the caches fi_compat bounds, the
  outcome on CPU and GPU, host memory per distinct ``max_seq_len`` without →
  with fi_compat, and which fi_compat code each result ran;
* the skip reasons, summed across releases: a reason that names its own
  release is counted with the release written ``X.Y.Z``, so the same reason
  on 18 releases is one line, not 18;
* growth per layout, backend and query mode (the census), one line per
  combination across releases;
* the per-test grid (tests passed, failed, skipped per test file and release);
* how the runs were made, and the commands that regenerate all of it.

Standard library only (``packaging`` for release order where installed).
Reads a few dozen small files: well under a second.

    python3 scripts/generate_compatibility.py            # writes docs/compatibility.md
    python3 scripts/generate_compatibility.py --check    # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from _matrix_common import MATRIX_RUN_FILE, RESULTS, ROOT, code_label, fingerprint, read_results, release_list

OUTPUT = ROOT / "docs" / "compatibility.md"
PLATFORMS = (("cpu", "CPU"), ("gpu", "GPU"))
#: Written in place of a result's own release in a skip reason, so that the
#: same reason on different releases sums.
RELEASE_TOKEN = "X.Y.Z"


def load_releases() -> tuple[str, ...]:
    return tuple(release_list().MATRIX_RELEASES)


def version_key(release: str) -> Any:
    try:
        from packaging.version import Version

        return Version(release)
    except Exception:  # packaging missing or odd name: plain sort
        return tuple(int(p) if p.isdigit() else 0 for p in release.replace("post", "").split("."))


def load(results: Path, platform: str) -> dict[str, dict[str, Any]]:
    return read_results(results / platform)


def all_releases(*results: dict[str, dict[str, Any]]) -> list[str]:
    """The matrix's releases and any other with a result, oldest first: the
    order release ranges ("0.6.13 – 0.6.16.post4") are read in."""
    return sorted(set(load_releases()).union(*results), key=version_key)


def by_release(results: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(results.items(), key=lambda kv: version_key(kv[0]))


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def release_ranges(releases: Iterable[str], order: list[str], count: bool = True) -> str:
    """``releases`` as runs of consecutive entries of ``order``: "all 18",
    "0.6.13 – 0.6.16.post4, 0.7.4 (10)" (the count only with ``count``)."""
    wanted = set(releases)
    if wanted == set(order):
        return f"all {len(order)}"
    runs: list[list[str]] = []
    previous_in = False
    for release in order:
        if release in wanted:
            if previous_in:
                runs[-1].append(release)
            else:
                runs.append([release])
        previous_in = release in wanted
    parts = [run[0] if len(run) == 1 else f"{run[0]} – {run[-1]}" for run in runs]
    return ", ".join(parts) + ("" if len(wanted) == 1 or not count else f" ({len(wanted)})")


def span(values: list[float], digits: str = "g") -> str:
    low, high = min(values), max(values)
    return f"{low:{digits}}" if low == high else f"{low:{digits}}–{high:{digits}}"


# --------------------------------------------------------------------------- the summary


def verdict(result: Optional[dict[str, Any]], code: str) -> str:
    """The cell for one run; a run of other fi_compat code than ``code`` (the
    checkout's fingerprint) says which code and when it ran: it vouches for
    that code only."""
    if result is None:
        return "not run"
    t = result["pytest"]
    counts = f"{t['passed']} passed, {t['failed'] + t['errors']} failed, {t['skipped']} skipped"
    word = "**yes**" if result["verified"] else "**no**"
    older = "" if ran_this_code(result, code) else f"; ran on older code, {code_label(result)}, {result['date']}"
    return f"{word} ({counts}{older})"


def ran_this_code(result: dict[str, Any], code: str) -> bool:
    return (result.get("fingerprint") or {}).get("code") == code


def older_code_line(cpu: dict[str, dict[str, Any]], code: str) -> list[str]:
    """Which CPU results ran other code than this checkout's: CI runs the
    representative releases on every change, and a release re-runs them all
    (scripts/check_results_fresh.py --release-gate)."""
    older = [release for release, r in by_release(cpu) if not ran_this_code(r, code)]
    if not older:
        return ["All CPU results ran this code.", ""]
    which = "every release" if len(older) == len(cpu) else ", ".join(older)
    return [f"**{len(older)} of {len(cpu)} CPU results ran on older code** than this checkout's ({which}; "
            "each cell names the code it ran):",
            "CI runs the representative releases (`fi_compat.model.release_list.CI_RELEASES`) on every change,",
            "and a release re-runs the whole matrix (`python3 scripts/check_results_fresh.py --release-gate` fails",
            "until then).", ""]


def bytes_cell(growth: Optional[dict[str, Any]], site: str) -> str:
    if not growth:
        return "—"
    without, with_ = growth.get(f"{site}_without"), growth.get(f"{site}_with")

    def fmt(m: Optional[dict[str, Any]]) -> str:
        return "error" if m is None else f"{m['bytes_per_distinct']:,.0f} B"

    return f"{fmt(without)} → {fmt(with_)}"


def bounded_of(*results: Optional[dict[str, Any]]) -> str:
    """The caches fi_compat bounds on the release (bounds.py row names)."""
    for r in results:
        if r is not None and r.get("bounded"):
            return ", ".join(r["bounded"])
    return "—"


def summary_table(releases: list[str], cpu: dict[str, dict[str, Any]], gpu: dict[str, dict[str, Any]],
                  code: str) -> list[str]:
    lines = ["| release | caches fi_compat bounds | CPU verified | GPU verified | growth CPU, builder "
             "| growth CPU, decode | growth GPU, builder | growth GPU, decode |",
             "|---|---|---|---|---|---|---|---|"]
    for release in releases:
        c, g = cpu.get(release), gpu.get(release)
        lines.append(
            f"| {release} | {bounded_of(c, g)} | {verdict(c, code)} | {verdict(g, code)} "
            f"| {bytes_cell(c and c.get('growth'), 'builder')} | {bytes_cell(c and c.get('growth'), 'decode')} "
            f"| {bytes_cell(g and g.get('growth'), 'builder')} | {bytes_cell(g and g.get('growth'), 'decode')} |")
    return lines + [""]


def code_table(platforms: dict[str, dict[str, dict[str, Any]]], code: str) -> list[str]:
    """Which fi_compat code each result ran, one line per (platform, code, date)."""
    lines = ["Which fi_compat code each result ran:", "",
             "| platform | fi_compat code (commit, start of the code fingerprint) | date | device | releases "
             "| this checkout's code |",
             "|---|---|---|---|---|---|"]
    any_result = False
    order = all_releases(*platforms.values())
    for platform, title in PLATFORMS:
        results = platforms[platform]
        groups: dict[tuple[str, str, str, bool], list[str]] = {}
        for release, r in by_release(results):
            label = code_label(r)
            recorded = (r.get("fingerprint") or {}).get("code")
            if r.get("commit") and recorded:
                label += f", code {recorded[:12]}"
            key = (label, r["date"], r["device"], ran_this_code(r, code))
            groups.setdefault(key, []).append(release)
        for (label, date, device, current), members in groups.items():
            any_result = True
            lines.append(f"| {title} | {label} | {date} | {cell(device)} | {release_ranges(members, order)} "
                         f"| {'yes' if current else '**no**: older code'} |")
    return (lines + [""]) if any_result else []


# --------------------------------------------------------------------------- skip reasons


def own_release_pattern(release: str) -> re.Pattern[str]:
    """``release`` as a whole version, not the start of a longer one
    (0.6.15 does not match inside 0.6.15.post1)."""
    return re.compile(r"(?<![\w.])" + re.escape(release) + r"(?![\w]|\.\w)")


def skip_reasons(results: dict[str, dict[str, Any]]) -> dict[str, tuple[int, set[str]]]:
    """Each skip reason with its release written ``X.Y.Z``: (tests skipped in
    all, releases).  A reason given word for word on more than one release
    does not depend on the release and is kept as it is, even where it names
    one (``the workaround installs on 0.6.15 and 0.6.15.post1 only``); where
    a release is named twice, once as the release skipping and once as a
    fixed reference (``flashinfer 0.6.18: ... (0.6.18 on key it ...)``), only
    the first is replaced if that gives a reason other releases give."""
    raw_releases: dict[str, set[str]] = {}
    for release, r in results.items():
        for reason in r["pytest"].get("skip_reasons", {}):
            raw_releases.setdefault(reason, set()).add(release)

    def every(release: str, reason: str) -> str:
        if len(raw_releases[reason]) > 1:
            return reason
        return own_release_pattern(release).sub(RELEASE_TOKEN, reason)

    templates: dict[str, set[str]] = {}
    for release, r in results.items():
        for reason in r["pytest"].get("skip_reasons", {}):
            templates.setdefault(every(release, reason), set()).add(release)
    summed: dict[str, tuple[int, set[str]]] = {}
    for release, r in results.items():
        for reason, n in r["pytest"].get("skip_reasons", {}).items():
            shown = every(release, reason)
            if len(raw_releases[reason]) == 1:
                first = own_release_pattern(release).sub(RELEASE_TOKEN, reason, count=1)
                if first != shown and templates.get(first, set()) - {release}:
                    shown = first
            total, where = summed.get(shown, (0, set()))
            summed[shown] = (total + n, where | {release})
    return summed


def skips_section(platforms: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    summed = {platform: skip_reasons(platforms[platform]) for platform, _ in PLATFORMS}
    reasons = sorted({reason for by_reason in summed.values() for reason in by_reason},
                     key=lambda reason: (-sum(by_reason.get(reason, (0, set()))[0] for by_reason in summed.values()),
                                         reason))
    if not reasons:
        return []
    order = all_releases(*platforms.values())
    totals = "; ".join(f"{title} {sum(n for n, _ in summed[platform].values()):,} skips over "
                       f"{len(platforms[platform])} releases" for platform, title in PLATFORMS if summed[platform])
    lines = ["## Skipped tests, by reason", "",
             "Why tests skipped, summed over the releases: where a reason names its own release, the release is",
             f"written `{RELEASE_TOKEN}`, so one reason given on several releases is one line. Most skips are tests",
             "gated to other releases, calls the release refuses (the test checks that it refuses) and, on a device",
             f"without SM100/SM103, the tests that launch a real MLA kernel. In all: {totals}; {len(reasons)} reasons.",
             "",
             "| reason | " + " | ".join(f"{title}: skips (releases)" for _, title in PLATFORMS) + " |",
             "|---|" + "---|" * len(PLATFORMS)]
    for reason in reasons:
        cells = []
        for platform, _ in PLATFORMS:
            n, where = summed[platform].get(reason, (0, set()))
            ranges = release_ranges(where, order, count=False)
            cells.append("—" if not n else f"{n} ({ranges})" if len(where) == 1 or ranges.startswith("all")
                         else f"{n} ({len(where)}: {ranges})")
        lines.append(f"| {cell(reason)} | " + " | ".join(cells) + " |")
    return lines + [""]


# --------------------------------------------------------------------------- the census


CENSUS_INTRO = [
    "From `tests/matrix/test_census_bounds.py` on each release: the real MLA decode host path driven as each",
    "engine calls it, a distinct `max_seq_len` and a varying batch size every batch (and, for SGLang, a varying",
    "block-table width). *entries*: flashinfer's own cache entries added per distinct length (the census);",
    "*blocks*: Python memory blocks still allocated per distinct length (`sys.getallocatedblocks()` after a",
    "collection), flashinfer alone and, in the steady state, with fi_compat (the test asserts fewer than 2 with",
    "fi_compat); *window*: tracemalloc growth with fi_compat over the run's last lengths (asserted under 1 MiB; a",
    "short window is mostly allocator noise, not a per-length figure). Modes: `q1` decode, `mtp` speculative",
    "(q_len 2–4 with `max_q_len`), `sparse` top-k, `dcp` decode context parallelism, `modular` and `varq`",
    "cute-dsl variants, where the release accepts them. Each line spans the releases in its *releases* column.",
]


def census_section(platforms: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Per release, the extremes on each platform; then per (layout, backend,
    query mode), what the census test measured across the releases that
    accept it."""
    titled = [(platform, title) for platform, title in PLATFORMS
              if any(r.get("census") for r in platforms[platform].values())]
    if not titled:
        return []
    per_release = ["| release | " + " | ".join(f"{title}: combinations × lengths | {title}: blocks / length, alone "
                                               f"(least) → fi_compat (most)" for _, title in titled) + " |",
                   "|---|" + "---|---|" * len(titled)]
    releases = sorted({release for platform, _ in titled for release, r in platforms[platform].items()
                       if r.get("census")}, key=version_key)
    for release in releases:
        cells = []
        for platform, _ in titled:
            rows = (platforms[platform].get(release) or {}).get("census") or []
            if not rows:
                cells += ["—", "—"]
                continue
            cells += [f"{len(rows)} × {span([r['lengths'] for r in rows], ',')}",
                      f"{min(r['alone_blocks_per_length'] for r in rows):g} → "
                      f"{max(r['bounded_blocks_per_length'] for r in rows):g}"]
        per_release.append(f"| {release} | " + " | ".join(cells) + " |")
    grid = ["| platform | layout | backend | mode | releases | alone: entries / length | alone: blocks / length "
            "| fi_compat: blocks / length | fi_compat: window (most) | rows with traffic |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    order = all_releases(*platforms.values())
    for platform, title in titled:
        results = platforms[platform]
        combos: dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]] = {}
        for release, result in by_release(results):
            for r in result.get("census") or []:
                combos.setdefault((r["layout"], r["backend"], r["mode"]), []).append((release, r))
        for (layout, backend, mode), seen in sorted(combos.items()):
            rows = [r for _, r in seen]
            window = max(rows, key=lambda r: r["bounded_bytes_per_length"] * r["bounded_window"])
            traffic = sorted({name for r in rows for name in r["rows_with_traffic"]})
            grid.append(
                f"| {title} | {layout} | {backend} | {mode} | {release_ranges([rel for rel, _ in seen], order)} "
                f"| {span([r['alone_entries_per_length'] for r in rows])} "
                f"| {span([r['alone_blocks_per_length'] for r in rows])} "
                f"| {span([r['bounded_blocks_per_length'] for r in rows])} "
                f"| {window['bounded_bytes_per_length'] * window['bounded_window'] / 1024:,.1f} KiB over "
                f"{window['bounded_window']} | {', '.join(traffic) or '—'} |")
    return ["## Growth per layout, backend and query mode (census)", "", *CENSUS_INTRO, "", *per_release, "",
            *grid, ""]


# --------------------------------------------------------------------------- the per-test grid


def test_cell(counts: Optional[dict[str, int]]) -> str:
    if counts is None:
        return "—"
    text = f"{counts['passed']}"
    if counts["failed"]:
        text += f" **{counts['failed']}✗**"
    if counts["skipped"]:
        text += f" {counts['skipped']}s"
    return text


def grid_section(platforms: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines = ["## Tests per file and release", "",
             "Each cell: tests passed, then **failed ✗** where any, then skipped (`s`), in that file of",
             "`tests/matrix/` on that release; — where the file did not run (the GPU matrix leaves the host-logic",
             "files to the CPU matrix: `HOST_LOGIC_FILES` in `tests/matrix/conftest.py`).", ""]
    shown = False
    for platform, title in PLATFORMS:
        results = platforms[platform]
        files = sorted({f for r in results.values() for f in r["pytest"].get("by_file", {})})
        if not files:
            continue
        shown = True
        releases = [release for release, _ in by_release(results)]
        lines += [f"**{title}**", "", "| test file | " + " | ".join(releases) + " |", "|---|" + "---|" * len(releases)]
        for f in files:
            cells = [test_cell(results[rel]["pytest"].get("by_file", {}).get(f)) for rel in releases]
            lines.append(f"| `{f or '(collection)'}` | " + " | ".join(cells) + " |")
        lines.append("")
        for release, r in by_release(results):
            names = r["pytest"].get("failures", [])
            if names:
                shown_names = ", ".join(f"`{n.split('::')[-1]}`" for n in names[:6])
                more = f" and {len(names) - 6} more" if len(names) > 6 else ""
                lines.append(f"- {title} {release}: failing tests {shown_names}{more}")
        if any(r["pytest"].get("failures") for r in results.values()):
            lines.append("")
    return lines if shown else []


# --------------------------------------------------------------------------- runs


def matrix_run_line(folder: Path) -> list[str]:
    """The last run of every release at once (scripts/run_cpu_matrix.py), if recorded."""
    path = folder / MATRIX_RUN_FILE
    if not path.exists():
        return []
    run = json.loads(path.read_text())
    load = run.get("load_average_1min") or {}
    busy = f", load average {load['start']} at the start and {load['end']} at the end" if load else ""
    if run.get("cpu_seconds"):
        busy += f"; {run['cpu_seconds'] / 60:.1f} CPU-minutes in all"
    outcome = f"failed: {', '.join(run['failed'])}" if run.get("failed") else "all passed"
    return [f"- Whole matrix: {run['sessions']} sessions, {run['jobs']} at a time, "
            f"**{run['wall_seconds'] / 60:.1f} minutes wall** on {run['cpu_count']} cores{busy} "
            f"({run['date']}, {outcome}); command: `{run['command']}`"]


def runs_section(title: str, results: dict[str, dict[str, Any]], folder: Path, order: list[str]) -> list[str]:
    lines = [f"### {title}", ""]
    notes = folder / "NOTES.md"
    if notes.exists():
        # How the run was set up (an offline machine's wheelhouse, a re-run):
        # kept beside the results it explains, linked from here.
        relative = notes.relative_to(OUTPUT.parent) if notes.is_relative_to(OUTPUT.parent) else notes
        lines += [f"How this run was made, and what happened in it: [{relative.as_posix()}]({relative.as_posix()}).", ""]
    if not results:
        return lines + ["No results recorded.", ""]
    lines += matrix_run_line(folder)
    groups: dict[tuple, list[str]] = {}
    gpu = title.startswith("GPU")
    for release, r in by_release(results):
        key = (r["device"], r["python"], r["torch"], r["date"], r["command"] if gpu else "")
        groups.setdefault(key, []).append(release)
    for (device, python, torch, date, command), releases in groups.items():
        lines.append(f"- {date}: {device}; Python {python}, torch {torch}; releases {release_ranges(releases, order)}")
        if command:
            lines.append(f"  - command: `{command}`")
    if not gpu:
        lines.append("  - command, per release: `python3 -m nox -s \"matrix(flashinfer='X')\"` "
                     "(all of them: `python3 scripts/run_cpu_matrix.py --jobs 2` or `python3 -m nox -s matrix`)")
    return lines + [""]


# --------------------------------------------------------------------------- the document


def render(results_dir: Path) -> str:
    cpu, gpu = load(results_dir, "cpu"), load(results_dir, "gpu")
    platforms = {"cpu": cpu, "gpu": gpu}
    code = fingerprint()["code"]
    releases = all_releases(cpu, gpu)
    out = [
        "# flashinfer compatibility",
        "",
        "<!-- Generated by scripts/generate_compatibility.py from docs/compat-results/; do not edit by hand. -->",
        "",
        "Each row is one flashinfer-python release of the matrix (`fi_compat.model.release_list.MATRIX_RELEASES`).",
        "*CPU verified*: fi_compat's release suite (`tests/matrix`) passed under the CPU-host shim (`nox -s matrix`).",
        "*GPU verified*: the same suite, less the host-logic files a device cannot change and plus the `gpu` tests,",
        "passed on a CUDA device with no shim (`nox -s gpu_matrix` / `scripts/run_gpu_matrix.py`); MLA kernel",
        "launches need SM100/SM103 and are skipped elsewhere, so on other devices the real host path (builder,",
        "`AutoTuner.choose_one`, decode up to the launch) is what is verified. A release is verified only if",
        "pytest passed at least one test with no failure and the growth measurement ran.",
        "",
        "*Growth* is host (Python-heap) memory per distinct `max_seq_len`, steady state, flashinfer alone → with",
        "fi_compat (`scripts/measure_growth.py`: tracemalloc over 800 new distinct values after 400 warm-up",
        "values). *builder*: `_build_mla_decode_tuning_config` called directly (every autotuned path, e.g.",
        "`backend=\"auto\"`). *decode*: `trtllm_batch_decode_with_kv_cache_mla` called as TensorRT-LLM calls it",
        "(`backend=\"trtllm-gen\"`), launch recorded. A result of other fi_compat code than this checkout's says so",
        "in its cell (\"ran on older code\", with its commit, or the start of its code fingerprint where the run",
        "recorded no commit, and its date): it vouches for that code only.",
        "",
        "## Summary",
        "",
        *older_code_line(cpu, code),
        *summary_table(releases, cpu, gpu, code),
        *code_table(platforms, code),
    ]
    out += skips_section(platforms)
    out += census_section(platforms)
    out += grid_section(platforms)
    out += ["## Runs", ""]
    out += runs_section("CPU matrix", cpu, results_dir / "cpu", releases)
    out += runs_section("GPU matrix", gpu, results_dir / "gpu", releases)
    out += [
        "## Regenerate",
        "",
        "```",
        "python3 scripts/run_cpu_matrix.py --jobs 2          # CPU results -> docs/compat-results/cpu/",
        "python3 -m nox -s gpu_matrix -- --wheelhouse DIR    # on a CUDA machine -> docs/compat-results/gpu/",
        "python3 scripts/generate_compatibility.py           # this file",
        "```",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(RESULTS))
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--check", action="store_true", help="exit 1 if the output is not up to date")
    args = parser.parse_args(argv)
    text = render(Path(args.results))
    output = Path(args.output)
    if args.check:
        current = output.read_text() if output.exists() else ""
        if current != text:
            print(f"{output} is stale: run scripts/generate_compatibility.py", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
