"""The doctor report as text: one screen for a bug report or a serving log."""

from __future__ import annotations

from typing import Any

CENSUS_SHOWN = 8  # the largest unbounded flashinfer caches holding entries, by name; --json lists all


def _line(label: str, value: Any) -> str:
    return f"{label:<22}{value}".rstrip()


def _environment(report: dict[str, Any]) -> list[str]:
    fi, torch, py = report["flashinfer"], report["torch"], report["python"]
    lines = [
        _line("fi_compat", f"{report['fi_compat']['version']} ({report['fi_compat']['path']})"),
        _line("python", f"{py['version']} {py['implementation']} ({py['executable']})"),
        _line("platform", py["platform"]),
    ]
    if torch["installed"]:
        device = {
            "cuda": f"CUDA {torch['device_name']} (sm {torch['capability']})",
            "cpu": "CPU only (no CUDA device visible)",
        }.get(torch["device"], torch["device"])
        lines.append(_line("torch", f"{torch['version']} (CUDA build: {torch['cuda_build'] or 'none'}); {device}"))
    else:
        lines.append(
            _line("torch", torch["error"] if torch["installed"] is None else f"not importable: {torch['error']}")
        )
    lines.append(
        _line(
            "flashinfer",
            f"{fi['release'] or 'not installed'} (detected from {fi['detected_from']}; "
            f"metadata {fi['metadata_version']}, _build_meta {fi['build_meta_version']}, module "
            f"{fi['module_version']})",
        )
    )
    lines += [_line("", f"note: {note}") for note in fi["notes"]]
    lines.append(
        _line(
            "flashinfer import",
            f"ok ({fi['import_mode']})" if fi["imported"] else f"failed/skipped: {fi['import_error']}",
        )
    )
    return lines


def _bounds(report: dict[str, Any]) -> list[str]:
    bounds, call_api = report["bounds"], report["call_api"]
    if bounds["outcome"] is None:
        return ["bounded caches: no verdict (flashinfer not found)"]
    lines = [f"bounded caches ({bounds['outcome']}; checked on {bounds['checked_on']}):"]
    for row in bounds["rows"]:
        state = row["verdict"] + ("" if row["verified"] or row["verdict"] != "bound" else ", unverified")
        lines.append(f"  {row['name']:<24}{state}: {row['reason']}")
        if row["patched"]:
            mine, theirs = row["fi_compat"], row["flashinfer"]
            sizes = (
                ""
                if mine is None
                else f"; fi_compat {mine['currsize']}/{mine['maxsize']} entries, "
                f"{mine['hits']} hits, {mine['misses']} misses, {mine['evictions']} evictions"
            )
            if theirs is not None:
                sizes += f"; flashinfer's own cache {theirs['currsize']} entries"
            lines.append(f"  {'':<24}patched: {', '.join(row['patched'])}{sizes}")
        elif row["waiting_for"]:
            lines.append(f"  {'':<24}bounded when {row['waiting_for']} is imported")
    verdict = "ok" if call_api["status"] == "ok" else f"{str(call_api['status']).upper()}: {call_api['difference']}"
    lines.append(_line("call API (decode)", f"{verdict} ({call_api['where'] or call_api['function']})"))
    return lines


def _watch(watch: dict[str, Any]) -> str:
    if not watch["runs"]:
        why = "FI_COMPAT_WATCH=off" if watch["setting"] == "off" else "every bound verified on this release"
        return f"{watch['setting']}: does not run ({why})"
    text = f"{watch['setting']}: runs ({watch['why'] or 'asked for'})"
    if watch["phase"] is not None:
        retired = watch["retired_after_s"]
        text += f"; here: {watch['phase']}" + (f" after {retired} s" if retired is not None else "")
        if watch["findings"]:
            text += f"; found: {'; '.join(watch['findings'])}"
    return text


def _state(report: dict[str, Any]) -> list[str]:
    installed, trt, census = report["installed"], report["trtllm_workaround"], report["census"]
    lines = [
        _line("state", installed["state"] + (f" ({installed['outcome']})" if installed["outcome"] else "")),
        _line("fi_compat patches", ", ".join(installed["patched"]) or "none"),
        _line("runtime watch", _watch(report["watch"])),
    ]
    if trt["present"] is None:
        workaround = "unknown (flashinfer not imported)"
    else:
        workaround = f"present ({trt['position']})" if trt["present"] else "absent"
    package = (
        "imported"
        if trt["tensorrt_llm_imported"]
        else ("installed, not imported" if trt["tensorrt_llm_installed"] else "not installed")
    )
    lines.append(_line("TensorRT-LLM memo", f"{workaround}, checked in {trt['checked_in']} (tensorrt_llm {package})"))
    if trt["note"]:
        lines.append(_line("", trt["note"]))
    if census["taken"]:
        unbounded = census["flashinfer_unbounded"]
        lines.append(
            _line(
                "census",
                f"{census['caches']} functools caches loaded; {len(unbounded)} of flashinfer's "
                f"are unbounded, holding {census['flashinfer_unbounded_entries']} entries",
            )
        )
        holding = [count for count in unbounded if count["currsize"] > 0]
        for count in holding[:CENSUS_SHOWN]:
            lines.append(_line("", f"{count['currsize']:>8}  {count['qualname']}"))
        if len(holding) > CENSUS_SHOWN:
            lines.append(_line("", f"... and {len(holding) - CENSUS_SHOWN} more holding entries (--json lists all)"))
        walked = census.get("walked")
        if walked:
            hidden = walked["unbounded_caches"]
            lines.append(
                _line(
                    "memo walk",
                    f"{walked['memos']} memos reachable from flashinfer ({walked['walk_s']} s); "
                    f"{len(hidden)} unbounded caches holding entries",
                )
            )
            for memo in hidden[:CENSUS_SHOWN]:
                lines.append(_line("", f"{memo['size']:>8}  {memo['path']} ({memo['where']})"))
    else:
        lines.append(_line("census", "not taken (flashinfer not imported)"))
    return lines


def format_text(report: dict[str, Any]) -> str:
    title = (
        "fi_compat doctor report for this process"
        if report["trtllm_workaround"]["checked_in"] == "this process"
        else "fi-compat doctor"
    )
    lines = [f"{title} (schema {report['schema_version']})", ""]
    lines += _environment(report) + [""] + _bounds(report) + [""] + _state(report) + ["", "settings:"]
    for name, setting in report["settings"].items():
        if setting["error"]:
            lines.append(f"  {name:<20}INVALID ({setting['env']}): {setting['error']}")
        else:
            lines.append(f"  {name:<20}{setting['value']!r:<12} from {setting['source']} ({setting['env']})")
    result = report["install_result"]
    if result is not None:
        lines += [
            "",
            "install (--install, in this doctor process only): "
            + (f"ok, {result['state']}" if result["ok"] else f"failed: {result['error']}"),
        ]
    if report["problems"]:
        lines += ["", "could not / problems:"] + [f"  - {p}" for p in report["problems"]]
    lines += ["", "What each line means: docs/doctor.md"]
    return "\n".join(lines)


__all__ = ["format_text"]
