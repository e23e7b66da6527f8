"""The census probe of ``fi-compat guard --census``: one process, one flashinfer release.

Run by :mod:`.census_check` with the candidate wheel installed in a throwaway
directory put first on ``PYTHONPATH``; never run in the user's own process
(flashinfer's caches are process-global, and this imports torch and flashinfer)::

    python -m fi_compat.commands.guard.census_probe --release X --target DIR --out FILE
                                                    [--lengths N] [--modes MODE,MODE] [--only-bounds NAME,NAME]

It installs fi_compat, imports flashinfer under the CPU-host shim
(:func:`fi_compat.workload.cpu_host`) and, for each engine layout with its
backends (:data:`ENGINE_BACKENDS`, from the engines' records) and query mode
(default :data:`DEFAULT_MODES`), decodes ``N`` distinct ``max_seq_len`` values up
to :data:`CONTEXT`, the batch varying with the length, in two interleaved halves
with one engine's call (:class:`fi_compat.workload.driver.Driver`), measured
through the census (:func:`fi_compat.counting.measurement.measure`: the
functools caches and flashinfer's memory before, between and after).  It writes JSON to
``--out``: the growth of every cache in each half, and for each grown
flashinfer cache the cached function's parameters (its key) as
:mod:`fi_compat.lookup` describes them.  Deciding what is a leak is the
guard's job (:mod:`.census_check`), not the probe's.

``--only-bounds`` is internal, for testing the guard itself: it removes every
other row from :data:`fi_compat.verdict.bounds.BOUNDS` in this process before
installing, so the probe behaves like a fi_compat that knows only those rows (``tuning-config,builder`` is fi_compat as
it was before the cute-dsl sizer took ``max_seq_len``).  It is not an option of :func:`fi_compat.install`.

Cost, on 2 shared cores: importing torch and flashinfer (10-20 s), then about
10-20 s per engine call and mode, nearly all of it the census by memory
(tracemalloc slows the host path several times over, and each of the four
snapshots walks every flashinfer memo).  An engine's call that raises
``TypeError`` for its arguments is reported under ``broken_calls``, not raised.
Failure: any exception is written to ``--out`` as ``{"error": ...}`` with exit
status 3, so the guard can say what went wrong instead of a bare traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import time
import traceback
from typing import Any, Optional, Sequence, Union

from ...workload.engine_model import Engine
from ...workload.engines import ENGINES
from ...workload.modes import MODES, MTP_Q_LEN
from .census_keys import describe_key as describe_key
from .census_keys import restrict_bounds as restrict_bounds

#: Every engine's layout and the backends it sends, and the query modes each (layout, backend) also
#: drives beyond ``q1``: read from the engines' records (:data:`fi_compat.workload.engines.ENGINES`).
ENGINE_BACKENDS: tuple[tuple[str, str], ...] = tuple((e.name, b) for e in ENGINES.values() for b in e.backends)
EXTRA_MODES: dict[tuple[str, str], tuple[str, ...]] = {
    (e.name, b): tuple(e.modes.get(b, ())) for e in ENGINES.values() for b in e.backends
}
#: Every query mode the probe knows, in the order it drives them (``--modes`` picks a subset).
QUERY_MODES = MODES
#: What the guard drives by default: one and two query tokens on every engine's layout and
#: backend (10 calls); the other modes add 7 more and about 70 % to the time (docs/guard.md).
DEFAULT_MODES = ("q1", "mtp")
DEFAULT_LENGTHS = 256
CONTEXT = 1 << 20
"""Longest ``max_seq_len`` decoded (1M tokens); lengths are spread over ``[1, CONTEXT]``,
more than one 128-token K tile apart (the coarsest key fi_compat knows), so a memo
reached only past 128K still sees over a hundred of them."""
BATCH = 8
VARIED_BATCHES = (BATCH, 3, 1)
"""Batch sizes the one- and two-token modes cycle through, as the engines' batches
vary step by step (the other modes keep :data:`BATCH`: their extra tensors are
sized once)."""
PAGE_SIZE = 64
NUM_PAGES = 512
PROBE_ERROR = 3
#: What Python says when a call does not fit the callee's signature.
_SIGNATURE_ERROR = re.compile(
    r"unexpected keyword argument|missing \d+ required|takes \d+ positional|positional-only arguments? passed"
    r"|got multiple values for argument"
)


def probe_lengths(count: int, combo: int) -> tuple[list[int], list[int]]:
    """Two interleaved halves of ``count`` distinct lengths over ``[1, CONTEXT]``.

    Each layout gets its own values (offset by ``combo``), so a cache keyed on
    the exact length that an earlier layout filled cannot hide this layout's
    growth.  Both halves span the whole range, so a cache keyed on a clamp of
    the length grows alike in each."""
    step = CONTEXT // count
    values = [1 + combo + i * step for i in range(count)]
    return values[0::2], values[1::2]


def soak_layout(
    torch: Any,
    decode: Any,
    host: Any,
    layout: Union[str, Engine],
    backend: str,
    halves: tuple[list[int], list[int]],
    mode: str = "q1",
) -> dict[str, Any]:
    """One engine's call in ``mode`` (a record or its name: :class:`fi_compat.workload.driver.Driver`)
    over both halves of lengths, measured through the census
    (:func:`fi_compat.counting.measurement.measure`): the growth of every functools cache in
    each half, and the census by memory over the same halves."""
    from ...counting import census, measurement
    from ...workload.driver import Driver

    driver = Driver(
        torch,
        decode,
        layout,
        backend,
        mode,
        context=CONTEXT,
        page_size=PAGE_SIZE,
        num_pages=NUM_PAGES,
        max_batch=BATCH,
    )
    batches = VARIED_BATCHES if mode in ("q1", "mtp") else (BATCH,)

    def decode_once(length: int) -> None:
        # the batch follows the length, so the pass that repeats a half repeats its calls exactly
        # (what grows then grows per call, not per request shape)
        driver.call(batches[length % len(batches)], length)
        host.recorder.launches.clear()

    decode_once(CONTEXT - 4 * MTP_Q_LEN)  # warm-up: first-call imports and compiles are not growth
    started = time.perf_counter()
    launches = host.recorder.total

    def drive(half: Sequence[int]) -> None:
        for length in half:
            decode_once(length)

    memory = measurement.measure(drive, halves)
    counts = memory["caches"]
    grown = {}
    for index in (0, 1):
        for growth in census.grown(counts[index], counts[index + 1]):
            entry = grown.setdefault(
                growth.qualname,
                {
                    "qualname": growth.qualname,
                    "owner": growth.after.owner,
                    "maxsize": growth.after.maxsize,
                    "gained": [0, 0],
                    "currsize": 0,
                },
            )
            entry["gained"][index] = growth.gained
    for name, entry in grown.items():
        entry["currsize"] = counts[2][name].currsize
    return {
        "layout": driver.engine.name,
        "backend": backend,
        "mode": mode,
        "lengths": [len(halves[0]), len(halves[1])],
        "launches": host.recorder.total - launches,
        "seconds": round(time.perf_counter() - started, 3),
        "grown": sorted(grown.values(), key=lambda e: -sum(e["gained"])),
        "memory": {k: memory[k] for k in ("sites", "census_s")},
    }


def run_probe(
    release: str, target: str, lengths: int, only_bounds: Optional[list[str]], modes: tuple[str, ...] = QUERY_MODES
) -> dict[str, Any]:
    import warnings

    if only_bounds is not None:
        restrict_bounds(only_bounds)
    # The census measures what fi_compat's rows bound.  The runtime watch would
    # bound a growing memo part-way through the run, after hundreds of lengths,
    # and the verdict would then depend on when it did (and under --only-bounds
    # it would bound the rows left out on purpose).
    os.environ["FI_COMPAT_WATCH"] = "off"
    # the shim's recorded cute-dsl kernel has no compiled artifacts to query;
    # flashinfer then falls back to the SM count, as it says
    warnings.filterwarnings("ignore", message="cutlass.get_max_active_clusters failed")
    import importlib.metadata as metadata

    import torch

    from ... import public  # the public functions, as fi_compat's facade gives them
    from ...model import specs
    from ...workload import cpu_host

    spec = importlib.util.find_spec("flashinfer")
    location = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    if location is None or os.path.commonpath([os.path.abspath(location), os.path.abspath(target)]) != os.path.abspath(
        target
    ):
        raise RuntimeError(f"flashinfer resolves to {location}, not the throwaway install in {target}")
    installed = metadata.version("flashinfer-python")
    if _version(release) is not None and _version(installed) != _version(release):
        raise RuntimeError(f"the throwaway install holds flashinfer-python {installed}, not {release}")
    public.install()
    results: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []  # query modes this release does not accept
    broken: list[dict[str, Any]] = []  # engine calls the release refuses with TypeError
    with cpu_host() as host:
        module = importlib.import_module("flashinfer.mla")
        decode = getattr(module, specs.DECODE.name)
        combos = [
            (layout, backend, mode)
            for layout, backend in ENGINE_BACKENDS
            for mode in ("q1", *EXTRA_MODES.get((layout, backend), ()))
            if mode in modes
        ]
        for combo, (layout, backend, mode) in enumerate(combos):
            halves = probe_lengths(lengths, combo)
            try:
                results.append(soak_layout(torch, decode, host, layout, backend, halves, mode))
            except TypeError as exc:
                if not _SIGNATURE_ERROR.search(str(exc)):
                    if mode == "q1":
                        raise RuntimeError(f"layout {layout}, backend {backend}: TypeError: {exc}") from exc
                    refused.append(
                        {"layout": layout, "backend": backend, "mode": mode, "error": f"TypeError: {exc}"[:300]}
                    )
                    continue
                # the engine's call itself is refused (a parameter it passes renamed or removed):
                # the release breaks that engine, whatever its memory does
                broken.append(
                    {
                        "layout": layout,
                        "backend": backend,
                        "mode": mode,
                        "error": f"TypeError: {exc}"[:300],
                        "where": _raised_in_flashinfer(exc),
                    }
                )
            except Exception as exc:  # noqa: BLE001  (q1: reported with the layout, the guard exits 2)
                if mode == "q1":
                    raise RuntimeError(f"layout {layout}, backend {backend}: {type(exc).__name__}: {exc}") from exc
                refused.append(
                    {"layout": layout, "backend": backend, "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:300]}
                )
        state = public.status(walk=False)
    keys = {}
    for result in results:
        for entry in result["grown"]:
            if entry["owner"] == "flashinfer" and entry["qualname"] not in keys:
                keys[entry["qualname"]] = describe_key(entry["qualname"])
    return {
        "release": installed,
        "asked": release,
        "location": location,
        "only_bounds": only_bounds,
        "modes": list(modes),
        "lengths": lengths,
        "context": CONTEXT,
        "batch": BATCH,
        "fi_compat": {
            "outcome": state["outcome"],
            "state": state["state"],
            "bounds": [
                {"name": row["name"], "verdict": row["verdict"], "patched": row.get("patched")}
                for row in state["bounds"]
            ],
        },
        "layouts": results,
        "refused_modes": refused,
        "broken_calls": broken,
        "keys": keys,
    }


def _raised_in_flashinfer(exc: BaseException) -> Optional[str]:
    """``flashinfer/...py:LINE`` of the innermost flashinfer frame ``exc`` passed, if any."""
    where = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        marker = f"{os.sep}flashinfer{os.sep}"
        if marker in filename:
            where = f"flashinfer{os.sep}{filename.rsplit(marker, 1)[1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def parse_modes(text: str) -> tuple[str, ...]:
    """``q1,mtp`` -> the modes in :data:`QUERY_MODES` order; ValueError naming what is accepted."""
    asked = [mode.strip() for mode in text.split(",") if mode.strip()]
    unknown = [mode for mode in asked if mode not in QUERY_MODES]
    if unknown or not asked:
        raise ValueError(f"query modes {', '.join(unknown) or '(none)'} not known; accepted: {', '.join(QUERY_MODES)}")
    return tuple(mode for mode in QUERY_MODES if mode in asked)


def _version(text: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fi_compat.commands.guard.census_probe")
    parser.add_argument("--release", required=True)
    parser.add_argument("--target", required=True, help="the throwaway directory holding the installed wheel")
    parser.add_argument("--out", required=True)
    parser.add_argument("--lengths", type=int, default=DEFAULT_LENGTHS)
    parser.add_argument(
        "--only-bounds",
        default=None,
        metavar="NAME,NAME",
        help="internal (tests of the guard): install only these rows of fi_compat.verdict.bounds.BOUNDS",
    )
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), help="the query modes to drive: MODE,MODE")
    args = parser.parse_args(argv)
    only = None if args.only_bounds is None else [n.strip() for n in args.only_bounds.split(",") if n.strip()]
    try:
        payload = run_probe(args.release, args.target, args.lengths, only, parse_modes(args.modes))
        status = 0
    except BaseException as exc:  # noqa: BLE001  (everything reaches the guard as text)
        payload = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}
        status = PROBE_ERROR
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(payload, handle)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
