#!/usr/bin/env python3
"""Generate docs/compatibility.md from the matrix results.  Never edit the output by hand.

Reads ``docs/compat-results/cpu/*.json`` (``nox -s matrix``) and
``docs/compat-results/gpu/*.json`` (``nox -s gpu_matrix`` or
``scripts/run_gpu_matrix.py``), one file per release as written by
``scripts/run_release_suite.py``, and writes one row per release in
``fi_compat.model.release_list.MATRIX_RELEASES`` (plus any other release with results).

    python3 scripts/generate_compatibility.py            # writes docs/compatibility.md
    python3 scripts/generate_compatibility.py --check    # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from _matrix_common import MATRIX_RUN_FILE, RESULTS, ROOT, code_label, fingerprint, read_results, release_list

OUTPUT = ROOT / "docs" / "compatibility.md"


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


def verdict(result: Optional[dict[str, Any]], code: str, with_device: bool = False) -> str:
    """The cell for one run; a run of other fi_compat code than ``code`` (the
    checkout's fingerprint) says which code and when it ran: it vouches for
    that code only."""
    if result is None:
        return "not run"
    t = result["pytest"]
    counts = f"{t['passed']} passed, {t['failed'] + t['errors']} failed, {t['skipped']} skipped"
    word = "**yes**" if result["verified"] else "**no**"
    device = f" on {result['device']}" if with_device else ""
    older = "" if ran_this_code(result, code) else f"; ran on older code, {code_label(result)}, {result['date']}"
    return f"{word}{device} ({counts}{older})"


def ran_this_code(result: dict[str, Any], code: str) -> bool:
    return (result.get("fingerprint") or {}).get("code") == code


def older_code_line(cpu: dict[str, dict[str, Any]], code: str) -> list[str]:
    """Which CPU results ran other code than this checkout's: CI runs the
    representative releases on every change, and a release re-runs them all
    (scripts/check_results_fresh.py --release-gate)."""
    older = [release for release, r in sorted(cpu.items(), key=lambda kv: version_key(kv[0]))
             if not ran_this_code(r, code)]
    if not older:
        return ["All CPU results ran this code.", ""]
    return [f"**{len(older)} of {len(cpu)} CPU results ran on older code** than this checkout's ({', '.join(older)}; "
            "each cell names the code it ran): CI runs the representative releases "
            "(`fi_compat.model.release_list.CI_RELEASES`) on every change, and a release re-runs the whole matrix "
            "(`python3 scripts/check_results_fresh.py --release-gate` fails until then).", ""]


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


def runs_section(title: str, results: dict[str, dict[str, Any]], folder: Path) -> list[str]:
    lines = [f"### {title}", ""]
    notes = folder / "NOTES.md"
    if notes.exists():
        # How the run was set up (e.g. an offline machine's wheelhouse): kept
        # beside the results it explains.
        lines += [notes.read_text().strip(), ""]
    if not results:
        return lines + ["No results recorded.", ""]
    lines += matrix_run_line(folder)
    groups: dict[tuple, list[str]] = {}
    for release, r in sorted(results.items(), key=lambda kv: version_key(kv[0])):
        key = (r["device"], r["python"], r["torch"], r["date"], r["command"] if title.startswith("GPU") else "")
        groups.setdefault(key, []).append(release)
    for (device, python, torch, date, command), releases in groups.items():
        lines.append(f"- {date}: {device}; Python {python}, torch {torch}; releases {', '.join(releases)}")
        if command:
            lines.append(f"  - command: `{command}`")
    if not title.startswith("GPU"):
        lines.append("  - command, per release: `python3 -m nox -s \"matrix(flashinfer='X')\"` "
                     "(all of them: `python3 -m nox -s matrix`)")
    reasons: dict[str, int] = {}
    for r in results.values():
        for reason, n in r["pytest"].get("skip_reasons", {}).items():
            reasons[reason] = reasons.get(reason, 0) + n
    if reasons:
        lines.append("- skips, summed over releases: " + "; ".join(
            f"{n} × \"{reason}\"" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])))
    files = sorted({f for r in results.values() for f in r["pytest"].get("by_file", {})})
    if files:
        lines += ["", "| release | " + " | ".join(f"`{f}`" for f in files) + " |",
                  "|---|" + "---|" * len(files)]
        for rel, r in sorted(results.items(), key=lambda kv: version_key(kv[0])):
            by_file = r["pytest"].get("by_file", {})
            cells = []
            for f in files:
                c = by_file.get(f)
                cells.append("—" if c is None else f"{c['passed']} ✓ {c['failed']} ✗ {c['skipped']} skip")
            lines.append(f"| {rel} | " + " | ".join(cells) + " |")
        lines.append("")
    failing = {rel: r["pytest"].get("failures", []) for rel, r in results.items() if r["pytest"].get("failures")}
    for rel, names in sorted(failing.items(), key=lambda kv: version_key(kv[0])):
        shown = ", ".join(f"`{n.split('::')[-1]}`" for n in names[:6])
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        lines.append(f"- {rel}: failing tests {shown}{more}")
    return lines + [""]


def census_section(cpu: dict[str, dict[str, Any]]) -> list[str]:
    """Per (layout, backend, query mode) the release accepts: what the census
    test measured through the real decode host path (tests/matrix/test_census_bounds.py)."""
    lines = ["", "## Growth per layout, backend and query mode (CPU, census)", "",
             "From `tests/matrix/test_census_bounds.py` on each release: the real MLA decode host path driven",
             "as each engine calls it, a distinct `max_seq_len` and a varying batch size every batch (and, for",
             "SGLang, a varying block-table width). *entries*: flashinfer's own cache entries added per distinct",
             "length (the census); *blocks*: Python memory blocks still allocated per distinct length",
             "(`sys.getallocatedblocks()` after a collection), without fi_compat and, in the steady state, with it",
             "(the test asserts fewer than 2 with fi_compat); *window*: tracemalloc growth with fi_compat over",
             "the last lengths of the run (asserted under 1 MiB; a short window is mostly allocator noise, so it",
             "is not a per-length figure). Modes: `q1` decode, `mtp` speculative (q_len 2–4 with `max_q_len`),",
             "`sparse` top-k, `dcp` decode context parallelism, `modular` and `varq` cute-dsl variants, where the",
             "release accepts them.", ""]
    for release, result in sorted(cpu.items(), key=lambda kv: version_key(kv[0])):
        rows = result.get("census") or []
        if not rows:
            continue
        alone = min(r["alone_blocks_per_length"] for r in rows)
        bounded = max(r["bounded_blocks_per_length"] for r in rows)
        lines += [f"<details><summary>{release}: {len(rows)} combinations, {rows[0]['lengths']:,} lengths each; "
                  f"Python blocks per distinct length: at least {alone:g} alone, at most {bounded:g} with "
                  f"fi_compat</summary>", "",
                  "| layout | backend | mode | alone: entries / length | alone: blocks / length "
                  "| fi_compat: blocks / length | fi_compat: window | rows with traffic |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in sorted(rows, key=lambda r: (r["layout"], r["backend"], r["mode"])):
            window = r["bounded_bytes_per_length"] * r["bounded_window"]
            lines.append(f"| {r['layout']} | {r['backend']} | {r['mode']} | {r['alone_entries_per_length']} "
                         f"| {r['alone_blocks_per_length']} | {r['bounded_blocks_per_length']} "
                         f"| {window / 1024:,.1f} KiB over {r['bounded_window']} "
                         f"| {', '.join(r['rows_with_traffic']) or '—'} |")
        lines += ["", "</details>", ""]
    return lines


def render(results_dir: Path) -> str:
    cpu, gpu = load(results_dir, "cpu"), load(results_dir, "gpu")
    code = fingerprint()["code"]
    releases = sorted(set(load_releases()) | set(cpu) | set(gpu), key=version_key)
    out = [
        "# flashinfer compatibility",
        "",
        "<!-- Generated by scripts/generate_compatibility.py from docs/compat-results/; do not edit by hand. -->",
        "",
        "Each row is one flashinfer-python release of the matrix (`fi_compat.model.release_list.MATRIX_RELEASES`).",
        "*CPU verified*: `tests/matrix` passed under the CPU shim (`nox -s matrix`). *GPU verified*: the same",
        "suite plus the `gpu` tests on a CUDA device with no shim (`nox -s gpu_matrix` / `scripts/run_gpu_matrix.py`);",
        "MLA kernel launches need SM100/SM103 and are skipped elsewhere, so on other devices the real host path",
        "(builder, `AutoTuner.choose_one`, decode up to a recorded launch) is what is verified.",
        "A release is verified only if pytest passed at least one test with no failure and the growth",
        "measurement ran.",
        "",
        "*Growth* is host (Python-heap) memory per distinct `max_seq_len`, steady state, without → with",
        "fi_compat (`scripts/measure_growth.py`: tracemalloc over 800 new distinct values after 400 warm-up",
        "values). *builder*: `_build_mla_decode_tuning_config` called directly (every autotuned path, e.g.",
        "`backend=\"auto\"` on SM100). *decode*: `trtllm_batch_decode_with_kv_cache_mla` called as TensorRT-LLM",
        "calls it (`backend=\"trtllm-gen\"`), launch stubbed. GPU columns come from the GPU run where there is one.",
        "A run of other fi_compat code than this checkout's says so in its cell (\"ran on older code\", with its",
        "commit, or the start of its code fingerprint where the run recorded no commit, and its date).",
        "",
        *older_code_line(cpu, code),
        "| release | caches fi_compat bounds | CPU verified | growth CPU, builder | growth CPU, decode "
        "| GPU verified | growth GPU, builder | growth GPU, decode |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for release in releases:
        c, g = cpu.get(release), gpu.get(release)
        out.append(
            f"| {release} | {bounded_of(c, g)} | {verdict(c, code)} | {bytes_cell(c and c.get('growth'), 'builder')} "
            f"| {bytes_cell(c and c.get('growth'), 'decode')} | {verdict(g, code, with_device=True)} "
            f"| {bytes_cell(g and g.get('growth'), 'builder')} | {bytes_cell(g and g.get('growth'), 'decode')} |"
        )
    out += census_section(cpu)
    out += ["", "## Runs", ""]
    out += runs_section("CPU matrix", cpu, results_dir / "cpu")
    out += runs_section("GPU matrix", gpu, results_dir / "gpu")
    out += [
        "## Regenerate",
        "",
        "```",
        "python3 -m nox -s matrix                      # CPU results -> docs/compat-results/cpu/",
        "python3 -m nox -s gpu_matrix -- --wheelhouse DIR   # on a CUDA machine -> docs/compat-results/gpu/",
        "python3 scripts/generate_compatibility.py          # this file",
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
