"""``fi-compat audit``: find flashinfer's unbounded caches, and the ones that leak.

Static by default (``fi_compat.commands.audit.scan``: ``ast`` over the source, nothing
imported); ``--live`` also runs a short decode workload and reports what each
flagged cache actually gained (``fi_compat.commands.audit.live``).  What the findings
mean and what to do about them: docs/audit.md.

Exit status: 0 when the audit ran (findings are information, not failure),
2 when there was nothing to audit (flashinfer not installed and neither
``--source`` nor ``--wheel`` given, or a path that does not exist), 3 when
``--live`` could not import torch/flashinfer (the static report is still
printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from typing import Any, Iterable, Iterator, Optional

from ...model.release_detection import build_meta_version
from .scan import (
    PER_REQUEST_PATTERNS,
    Finding,
    SourceFile,
    installed_package_dir,
    iter_directory,
    iter_wheel,
    scan,
)

SCHEMA_VERSION = 1
DEFAULT_TOP = 10

EXIT_OK = 0
EXIT_NOTHING_TO_AUDIT = 2
EXIT_LIVE_FAILED = 3


class _Recorder:
    """Passes sources through and keeps ``_build_meta.py``'s version on the way."""

    def __init__(self, sources: Iterable[SourceFile]) -> None:
        self.sources = sources
        self.version: Optional[str] = None

    def __iter__(self) -> Iterator[SourceFile]:
        for source in self.sources:
            if source.path.endswith("/_build_meta.py") and source.path.count("/") == 1:
                self.version = build_meta_version(source.data)
            yield source


def run_audit(*, source_dir: Optional[str] = None, wheel: Optional[str] = None, exact: bool = False) -> dict[str, Any]:
    """The static audit as a JSON-ready dict (every finding, ranked).

    Raises ``FileNotFoundError`` when there is nothing to audit.
    """
    if source_dir is not None and wheel is not None:
        raise ValueError("give --source or --wheel, not both")
    if wheel is not None:
        if not os.path.isfile(wheel):
            raise FileNotFoundError(f"wheel not found: {wheel}")
        if not zipfile.is_zipfile(wheel):
            # iter_wheel reads lazily: without this the scan dies with a traceback
            raise zipfile.BadZipFile(f"not a wheel (a .whl file is a zip archive): {wheel}")
        kind, where, sources = "wheel", os.path.abspath(wheel), iter_wheel(wheel)
    else:
        kind = "source" if source_dir is not None else "installed"
        where = source_dir if source_dir is not None else installed_package_dir()
        if where is None:
            raise FileNotFoundError(
                "flashinfer is not installed here (no importable 'flashinfer' package); "
                "pass --source DIR (a flashinfer package directory) or --wheel PATH"
            )
        if not os.path.isdir(where):
            raise FileNotFoundError(f"not a directory: {where}")
        where = os.path.abspath(where)
        sources = iter_directory(where)
    recorder = _Recorder(sources)
    findings, files = scan(recorder, exact=exact)
    flagged = [f for f in findings if f.score > 0]
    return {
        "schema_version": SCHEMA_VERSION,
        "source": {"kind": kind, "path": where},
        "release": recorder.version,
        "files": files,
        "unbounded_caches": len(findings),
        "flagged_count": len(flagged),
        "findings": [f.as_dict() for f in findings],
        "patterns": [{"category": c, "weight": w, "regex": rx} for c, w, rx in PER_REQUEST_PATTERNS],
        "live": None,
    }


def _trim(report: dict[str, Any], top: Optional[int]) -> dict[str, Any]:
    """Keep the top ``top`` findings (None: all); say how many were left out."""
    findings = report["findings"]
    shown = findings if top is None else findings[:top]
    trimmed = dict(report, findings=shown)
    rest = findings[len(shown) :]
    trimmed["omitted"] = {
        "flagged": sum(1 for f in rest if f["score"] > 0),
        "unflagged": sum(1 for f in rest if f["score"] == 0),
    }
    return trimmed


def format_text(report: dict[str, Any]) -> str:
    source = report["source"]
    lines = [
        f"fi-compat audit: flashinfer {report['release'] or '(version unknown)'} ({source['kind']}: {source['path']})",
        f"{report['files']} Python files, {report['unbounded_caches']} unbounded caches, "
        f"{report['flagged_count']} with per-request-looking parameters",
        "",
    ]
    live = {r["function"]: r for r in (report["live"] or {}).get("results", [])}
    if report["findings"]:
        lines.append("rank score  function  (file:line)")
    for rank, finding in enumerate(report["findings"], 1):
        flagged = ", ".join(f"{p['name']} ({p['category']})" for p in finding["flagged"]) or "-"
        lines.append(f"{rank:4d} {finding['score']:5d}  {finding['function']}  ({finding['where']})")
        lines.append(f"{'':12}@{finding['decorator']}  params: {', '.join(finding['params']) or '(none)'}")
        lines.append(f"{'':12}per-request: {flagged}")
        result = live.get(finding["function"])
        if result is not None:
            lines.append(f"{'':12}live: {_live_text(result)}")
    omitted = report.get("omitted") or {}
    if omitted.get("flagged") or omitted.get("unflagged"):
        lines.append("")
        lines.append(
            f"... and {omitted['flagged']} more flagged, {omitted['unflagged']} unflagged "
            "(--top N, --all, or --json for everything)"
        )
    if report["live"] is not None:
        workload = report["live"]["workload"]
        lines.append("")
        lines.append(
            f"live: {workload['calls']} decode calls ({workload['layout']}'s call), "
            f"{workload['distinct_max_seq_len']} distinct max_seq_len, {workload['seconds']:.2f} s on "
            f"{workload['host']}"
        )
        growing = [r for r in report["live"]["results"] if (r["gained"] or 0) > 0]
        for result in growing:
            lines.append(f"  GREW  {result['function']} ({result['where']}): {_live_text(result)}")
        once = [o for o in report["live"]["other_growth"] if o["gained"] == 1]
        for other in [o for o in report["live"]["other_growth"] if o["gained"] > 1]:
            bound = "unbounded" if other["maxsize"] is None else f"maxsize {other['maxsize']}"
            lines.append(
                f"  GREW  {other['function']} (not flagged by the scan; {other['owner']}, {bound}): "
                f"+{other['gained']} entries ({other['currsize_before']} -> {other['currsize_after']})"
            )
        if once:
            lines.append(
                f"  {len(once)} more caches gained one entry each (set-up, not per request; --json lists them)"
            )
        if not growing and not report["live"]["other_growth"]:
            lines.append("  no flashinfer cache grew during the workload")
    if report.get("live_error"):
        lines.append("")
        lines.append(f"live: not run: {report['live_error']}")
    lines.append("")
    lines.append("What these mean and what to do: docs/audit.md")
    return "\n".join(lines)


def _live_text(result: dict[str, Any]) -> str:
    if result["status"] in ("measured", "bounded"):
        text = f"+{result['gained']} entries ({result['currsize_before']} -> {result['currsize_after']})"
        return text + (f"; {result['detail']}" if result["detail"] else "")
    return {
        "not-loaded": "module not loaded by the decode workload",
        "nested": "defined inside a function: not reachable from outside",
    }.get(result["status"], result["status"])


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="list flashinfer's unbounded caches, flag and rank the per-request ones",
        description="Walk flashinfer's source with ast (no import) and list every unbounded cache "
        "(functools.cache, @cache, lru_cache(maxsize=None), lru_cache(None)), flagging and "
        "ranking those whose parameters look per-request. See docs/audit.md.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--source", metavar="DIR", help="a flashinfer package directory (default: the installed one)")
    where.add_argument("--wheel", metavar="PATH", help="a flashinfer-python wheel, read in memory")
    parser.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"show the N highest-ranked findings (default {DEFAULT_TOP})",
    )
    parser.add_argument("--all", action="store_true", help="show every finding")
    parser.add_argument("--json", action="store_true", help="print JSON (schema_version %d)" % SCHEMA_VERSION)
    parser.add_argument("--exact", action="store_true", help="parse every candidate file whole (slower; same result)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="also run a short decode workload on the installed flashinfer and report what each flagged cache gained",
    )
    parser.add_argument(
        "--steps", type=int, default=None, metavar="N", help="decode calls in the --live workload (default 200)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.live and (args.source or args.wheel):
        print(
            "fi-compat audit: --live measures the installed flashinfer; it cannot be combined with --source or --wheel",
            file=sys.stderr,
        )
        return EXIT_NOTHING_TO_AUDIT
    if args.steps is not None and args.steps < 1:
        print(f"fi-compat audit: --steps {args.steps}: must be at least 1", file=sys.stderr)
        return EXIT_NOTHING_TO_AUDIT
    try:
        report = run_audit(source_dir=args.source, wheel=args.wheel, exact=args.exact)
    except (FileNotFoundError, zipfile.BadZipFile) as exc:
        if args.json:
            print(json.dumps({"schema_version": SCHEMA_VERSION, "error": str(exc)}, indent=2))
        else:
            print(f"fi-compat audit: nothing to audit: {exc}", file=sys.stderr)
        return EXIT_NOTHING_TO_AUDIT
    status = EXIT_OK
    if args.live:
        from . import live as audit_live

        flagged = [_finding_from_dict(f) for f in report["findings"] if f["score"] > 0]
        try:
            report["live"] = audit_live.live_audit(flagged, steps=args.steps or audit_live.DEFAULT_STEPS)
        except Exception as exc:  # noqa: BLE001 - report what could not be done, keep the static part
            report["live_error"] = f"{type(exc).__name__}: {exc}"
            status = EXIT_LIVE_FAILED
    report = _trim(report, None if args.all else max(0, args.top))
    print(json.dumps(report, indent=2) if args.json else format_text(report))
    return status


def _finding_from_dict(data: dict[str, Any]) -> Finding:
    path, _, line = data["where"].rpartition(":")
    return Finding(
        data["module"], data["qualname"], path, int(line), data["decorator"], tuple(data["params"]), (), data["score"]
    )
