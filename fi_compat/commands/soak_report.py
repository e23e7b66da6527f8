"""The text and the plot of ``fi-compat soak``'s results (:mod:`.soak` runs the
passes; this only renders what they measured): host time per call, host
memory, the census of flashinfer's and fi_compat's caches, and each memo's
entries, size and second-half miss rate.  Pure formatting; the plot imports
matplotlib only when asked for.
"""

from __future__ import annotations

from typing import Any, Optional

VARIANTS = ("unpatched", "fi_compat")


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
    from ..census import CacheCount, grown

    def counts(raw: dict[str, Any]) -> dict[str, Any]:
        return {name: CacheCount(**entry) for name, entry in raw.items()}

    return [g.describe() for g in grown(counts(result["census_before"]), counts(result["census_after"]))]


def _second_half_growth(result: dict[str, Any]) -> str:
    """tracemalloc growth over the second half, per length first seen there."""
    if result.get("half_tracemalloc_bytes") is None or result["tracemalloc_growth_bytes"] is None:
        return "n/a"
    grown = result["tracemalloc_growth_bytes"] - result["half_tracemalloc_bytes"]
    return _format_bytes(grown / max(1, result["second_half_new_lengths"]))


def memo_rows(result: Optional[dict[str, Any]]) -> list[str]:
    """One line per fi_compat memo that was looked up: entries / bound, its
    approximate size, and the second half's misses (the steady state; the first
    half includes every first sight of a key) per lookup and per decode call: a
    memo reached only on another memo's miss (the tuning-config memo behind the
    builder memo) sees few lookups, nearly all new, and its cost is per call."""
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
        rate = f"{100 * late_misses / late:.1f} %" if late else "n/a"
        per_call = f"{100 * late_misses / calls:.2f} %" if calls else "n/a"
        total_bytes += stats.get("approx_bytes") or 0
        rows.append(
            f"{name}: {stats['currsize']:,} / {stats['maxsize']:,} entries, "
            f"{_format_bytes(stats.get('approx_bytes'))}, {rate} of {late:,} lookups, {per_call} of calls"
        )
    if not rows:
        return []
    together = result.get("fi_compat_memo_bytes")
    if together is None:  # a result without the measured total: the sum, shared objects in each memo
        return rows + [f"all memos: {_format_bytes(total_bytes)} (sum of the estimates above)"]
    return rows + [f"all memos: {_format_bytes(together)} (keys and values, objects they share counted once)"]


def report_text(timed: dict[str, dict[str, Any]], traced: dict[str, dict[str, Any]], options: dict[str, Any]) -> str:
    low, high = options["batch_range"]
    lines = [
        f"fi-compat soak: flashinfer {next(iter(timed.values()))['flashinfer']}, layout {options['layout']}, backend "
        f"{options['backend']}, batch size {low if low == high else f'{low}-{high} (varies per batch)'}, "
        f"mode {options.get('mode', 'q1')}, context {options['context']:,}, distribution {options['distribution']}, "
        f"seed {options['seed']}, "
        f"cache size {options['cache_size']}"
        + (f", call API (policy {options['policy']})" if options["call_api"] else ""),
        "",
        f"{'':34}" + "".join(f"{variant:>20}" for variant in timed),
    ]

    def row(label: str, values: list[str]) -> None:
        lines.append(f"{label:34}" + "".join(f"{v:>20}" for v in values))

    results = list(timed.values())
    row("batches (distinct lengths)", [f"{r['steps']:,} ({r['distinct_max_seq_len']:,})" for r in results])
    lines.append("host time per call (timed pass, no tracing):")
    row(
        "  median / p99, wall clock",
        [f"{r['time_per_call_us']['median']:.0f} / {r['time_per_call_us']['p99']:.0f} us" for r in results],
    )
    row("  mean, wall clock", [f"{r['time_per_call_us']['mean']:.0f} us" for r in results])
    row(
        "  median / mean, thread CPU time",
        [f"{r['time_per_call_us']['cpu_median']:.0f} / {r['time_per_call_us']['cpu_mean']:.0f} us" for r in results],
    )
    window = results[0]["time_per_call_us"]["window"]
    row(
        f"  last-{window:,} / first-{window:,} (CPU)",
        [f"{r['time_per_call_us']['last_cpu_mean'] / r['time_per_call_us']['first_cpu_mean']:.2f}" for r in results],
    )
    lines.append("host memory:")
    if traced:
        row("  tracemalloc growth (traced pass)", [_format_bytes(traced[v]["tracemalloc_growth_bytes"]) for v in timed])
        row(
            "  growth / distinct length",
            [
                _format_bytes(traced[v]["tracemalloc_growth_bytes"] / max(1, traced[v]["distinct_max_seq_len"]))
                for v in timed
            ],
        )
        row("  second half / new distinct length", [_second_half_growth(traced[v]) for v in timed])
    row("  RSS growth (timed pass)", [_format_bytes(r["rss_growth_bytes"]) for r in results])
    lines.append("census after the batches:")
    row("  flashinfer unbounded cache entries", [str(_unbounded_flashinfer_entries(r)) for r in results])
    row(
        "  fi_compat cache entries",
        [
            "-" if not r["fi_compat_caches"] else str(sum(c["currsize"] for c in r["fi_compat_caches"].values()))
            for r in results
        ],
    )
    memos = memo_rows(timed.get("fi_compat"))
    if memos:
        lines.append(
            "fi_compat memos (entries, approx. size; second half: misses per lookup, and misses per decode call,"
            " which counts a memo behind another memo by what reaches it):"
        )
        lines.extend(f"  {line}" for line in memos)
    for variant, result in traced.items():
        sites = result.get("memory_sites")
        if sites is not None:  # fi_compat.memory_census: grows per distinct length and nothing bounds it
            lines.append(f"census by memory, {variant}:" + ("" if sites else " nothing grows per distinct length"))
            lines.extend(
                f"  {site['where']}: {site['what']}, {site['bytes_per_length']:.0f} B per length" for site in sites[:8]
            )
    for variant, result in timed.items():
        growth = census_growth(result)
        lines.append(f"caches that grew, {variant}:" + ("" if growth else " none"))
        lines.extend(f"  {line}" for line in growth[:8])
        if len(growth) > 8:
            lines.append(f"  ... and {len(growth) - 8} more")
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


__all__ = ["VARIANTS", "census_growth", "memo_rows", "plot", "report_text"]
