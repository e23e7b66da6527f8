"""The text and the plot of ``fi-compat soak``'s results (:mod:`.soak` runs the
passes; this only renders what they measured): host time per call, host
memory, the census of flashinfer's and fi_compat's caches, and each memo's
entries, size and second-half miss rate.  Pure formatting; the plot imports
matplotlib only when asked for.
"""

from __future__ import annotations

from typing import Any, Optional

VARIANTS = ("unpatched", "fi_compat")
LABEL = 42  # the width of the table's first column


def _format_bytes(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def _unbounded_flashinfer_entries(result: dict[str, Any]) -> int:
    return sum(
        c["currsize"] for c in result["census_after"].values() if c["owner"] == "flashinfer" and c["maxsize"] is None
    )


def census_growth(result: dict[str, Any]) -> list[str]:
    """Every cache the census saw grow during the pass, largest gain first."""
    from ..counting.census import CacheCount, grown

    def counts(raw: dict[str, Any]) -> dict[str, Any]:
        return {name: CacheCount(**entry) for name, entry in raw.items()}

    return [g.describe() for g in grown(counts(result["census_before"]), counts(result["census_after"]))]


def _second_half_growth(result: dict[str, Any]) -> str:
    """tracemalloc growth over the second half, per length first seen there."""
    if result.get("half_tracemalloc_bytes") is None or result["tracemalloc_growth_bytes"] is None:
        return "n/a"
    grown = result["tracemalloc_growth_bytes"] - result["half_tracemalloc_bytes"]
    return _format_bytes(grown / max(1, result["second_half_new_lengths"]))


def short_path(where: str) -> str:
    """``file:line`` as a reader finds it: from the package on (after the last
    ``site-packages/``), else relative to the working directory, else as is."""
    import os

    for marker in ("site-packages/", "dist-packages/"):
        index = where.rfind(marker)
        if index >= 0:
            return where[index + len(marker) :]
    if os.path.isabs(where):
        relative = os.path.relpath(where)
        return where if relative.startswith("..") else relative
    return where


def memo_rows(result: Optional[dict[str, Any]]) -> list[str]:
    """One line per fi_compat memo that was looked up, each saying what its
    figures are: entries of the bound, its approximate size, and the second
    half's misses (the steady state; the first half includes every first sight
    of a key) per lookup and per decode call: a memo reached only on another
    memo's miss (the tuning-config memo behind the builder memo) sees few
    lookups, nearly all new, and its cost is per call."""
    if not result or not result.get("fi_compat_caches"):
        return []
    half = result.get("half_fi_compat_caches") or {}
    calls = result["steps"] - result["half"] if result.get("half") else 0  # decode calls in the second half
    rows, total_bytes = [], 0
    for name, stats in result["fi_compat_caches"].items():
        lookups = stats["hits"] + stats["misses"]
        if not lookups:
            continue
        before = half.get(name, {"hits": 0, "misses": 0})
        late_misses = stats["misses"] - before["misses"]
        late = late_misses + stats["hits"] - before["hits"]
        looked_up = (
            f"{late_misses:,} misses in {late:,} lookups ({100 * late_misses / late:.1f} %)" if late else "no lookups"
        )
        per_call = f"misses on {100 * late_misses / calls:.2f} % of {calls:,} decode calls" if calls else "no calls"
        total_bytes += stats.get("approx_bytes") or 0
        rows.append(
            f"memo {name}: {stats['currsize']:,} entries (bound {stats['maxsize']:,}), "
            f"about {_format_bytes(stats.get('approx_bytes'))}; second half: {looked_up}, {per_call}"
        )
    if not rows:
        return []
    together = result.get("fi_compat_memo_bytes")
    if together is None:  # a result without the measured total: the sum, shared objects in each memo
        return rows + [f"all fi_compat memos: {_format_bytes(total_bytes)} (sum of the estimates above)"]
    return rows + [f"all fi_compat memos: {_format_bytes(together)} (keys and values, shared objects counted once)"]


def report_text(timed: dict[str, dict[str, Any]], traced: dict[str, dict[str, Any]], options: dict[str, Any]) -> str:
    """The soak's report.  Each row of the table names its figure and how it
    was measured, so a line read alone (quoted in an issue, grepped from a
    log) still says what it is; the columns are the unpatched and fi_compat
    passes; paths start at the package (:func:`short_path`)."""
    low, high = options["batch_range"]
    lines = [
        f"fi-compat soak: flashinfer {next(iter(timed.values()))['flashinfer']}, layout {options['layout']}, backend "
        f"{options['backend']}, batch size {low if low == high else f'{low}-{high} (varies per batch)'}, "
        f"mode {options.get('mode', 'q1')}, context {options['context']:,}, distribution {options['distribution']}, "
        f"seed {options['seed']}, "
        f"cache size {options['cache_size']}"
        + (f", call API (policy {options['policy']})" if options["call_api"] else ""),
        "",
        f"{'':{LABEL}}" + "".join(f"{variant:>20}" for variant in timed),
    ]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"{label:{LABEL}}" + "".join(f"{v:>20}" for v in values))

    results = list(timed.values())
    row("batches (distinct max_seq_len)", [f"{r['steps']:,} ({r['distinct_max_seq_len']:,})" for r in results])
    row(
        "time/call, median / p99 (wall, untraced)",
        [f"{r['time_per_call_us']['median']:.0f} / {r['time_per_call_us']['p99']:.0f} us" for r in results],
    )
    row("time/call, mean (wall, untraced)", [f"{r['time_per_call_us']['mean']:.0f} us" for r in results])
    row(
        "time/call, median / mean (thread CPU)",
        [f"{r['time_per_call_us']['cpu_median']:.0f} / {r['time_per_call_us']['cpu_mean']:.0f} us" for r in results],
    )
    window = results[0]["time_per_call_us"]["window"]
    row(
        f"CPU time/call, last / first {window:,} calls",
        [f"{r['time_per_call_us']['last_cpu_mean'] / r['time_per_call_us']['first_cpu_mean']:.2f}" for r in results],
    )
    if traced:
        row(
            "tracemalloc growth, whole run (traced)",
            [_format_bytes(traced[v]["tracemalloc_growth_bytes"]) for v in timed],
        )
        row(
            "tracemalloc growth / distinct length",
            [
                _format_bytes(traced[v]["tracemalloc_growth_bytes"] / max(1, traced[v]["distinct_max_seq_len"]))
                for v in timed
            ],
        )
        row("tracemalloc growth / new length, 2nd half", [_second_half_growth(traced[v]) for v in timed])
    row("RSS growth, whole run (untraced)", [_format_bytes(r["rss_growth_bytes"]) for r in results])
    row("flashinfer unbounded cache entries, end", [str(_unbounded_flashinfer_entries(r)) for r in results])
    row(
        "fi_compat cache entries, end",
        [
            "-" if not r["fi_compat_caches"] else str(sum(c["currsize"] for c in r["fi_compat_caches"].values()))
            for r in results
        ],
    )
    lines.extend(memo_rows(timed.get("fi_compat")))
    for variant, result in traced.items():
        sites = result.get("memory_sites")
        if sites is None:
            continue
        # fi_compat.counting.memory_census: what grows per distinct length and nothing bounds
        if not sites:
            lines.append(f"grows per distinct length, {variant} (census by memory): nothing")
        lines.extend(
            f"grows per distinct length, {variant} (census by memory): {short_path(site['where'])}: {site['what']}, "
            f"{site['bytes_per_length']:.0f} B per length"
            for site in sites[:8]
        )
    for variant, result in timed.items():
        growth = census_growth(result)
        if not growth:
            lines.append(f"cache that grew, {variant}: none")
        lines.extend(f"cache that grew, {variant}: {line}" for line in growth[:8])
        if len(growth) > 8:
            lines.append(f"cache that grew, {variant}: ... and {len(growth) - 8} more")
    if set(timed) == set(VARIANTS) and timed["unpatched"]["steps"] != timed["fi_compat"]["steps"]:
        base = timed["unpatched"]
        lines.append(
            f"note: the unpatched side ran {base['steps']:,} batches ({base['distinct_max_seq_len']:,} "
            "distinct lengths) to save time; compare the per-length figures, not the totals"
        )
    if not traced:
        lines.append("(--no-trace-memory: no traced pass; memory is RSS only)")
    return "\n".join(lines)


def plot(
    timed: dict[str, dict[str, Any]], traced: dict[str, dict[str, Any]], path: str, options: dict[str, Any]
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit(f"--plot needs matplotlib: pip install 'fi-compat[plot]' ({exc})") from None
    source = traced or timed
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for variant, result in source.items():
        steps = [s for s, _ in result["samples"]]
        mib = [b / (1 << 20) for _, b in result["samples"]]
        axis.plot(steps, mib, label=f"{variant} ({result['outcome'] or 'not installed'})")
    axis.set_xlabel("decode batch (max_seq_len changes every batch)")
    axis.set_ylabel(f"host memory growth, MiB ({'tracemalloc' if traced else 'RSS'})")
    axis.set_title(
        f"flashinfer {next(iter(source.values()))['flashinfer']} MLA decode host path, "
        f"{options['layout']} layout, context {options['context']:,}"
    )
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


__all__ = ["VARIANTS", "census_growth", "memo_rows", "plot", "report_text", "short_path"]
