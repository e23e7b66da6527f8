"""Real flashinfer wheels under another label, or with one spec'd function renamed or moved, and
what fi_compat bounds on them by memory.  A test-support module (no tests here).

:func:`relabelled_wheel` writes the real wheel again with only its version changed (the
dist-info ``METADATA`` and ``flashinfer/_build_meta.py``, what release detection and the
guard read), through :func:`helpers.guard_releases.edited_wheel`, optionally with a source
edit.  :func:`bounded_by_memory` installs a wheel in a throwaway directory (the guard's
census overlay) and runs :data:`CHILD` there: fi_compat installed under the CPU-host shim,
the runtime watch off (what the rows bound is measured, not what the watch would add), an
optional spec change applied in place first (the one line a maintainer adds to
``fi_compat/model/specs.py``), then SGLang's decode call (:mod:`fi_compat.workload.workload`)
over distinct lengths, its block-table width following each, with flashinfer's memory
counted: the ``functools`` census (:func:`fi_compat.counting.census.take`) of every cache in
flashinfer's modules, and the census by memory (:func:`fi_compat.counting.measurement.measure`).
Cost: 5-15 s to write a wheel, 30-90 s a child on 2 shared cores.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from fi_compat.commands.guard.census_env import install_overlay, probe_environment
from fi_compat.model.spec_model import FunctionSpec

from helpers.guard_releases import Release, edited_wheel

SGLANG_LENGTHS = 48
"""Distinct lengths per run (two interleaved halves over 1 .. 1M tokens, each its own
block-table width, as SGLang pads it): enough for the census by memory to see a memo that
keeps one entry per length (it needs a quarter entry per length in each half)."""


def relabelled_wheel(
    real: Path, version: str, dest: Path, edit: Optional[Callable[[dict[str, str]], dict[str, Any]]] = None
) -> Path:
    """``real`` as ``dest/flashinfer_python-<version>-py3-none-any.whl``: its version changed,
    and ``edit`` applied to its sources (files -> changed files) when given."""
    release = Release(f"relabelled-{version}", version, f"the real wheel labelled {version}", edit or (lambda files: {}))
    dest.mkdir(parents=True, exist_ok=True)
    return edited_wheel(real, release, dest)[0]


def declared(spec: FunctionSpec, changed: FunctionSpec) -> dict[str, Any]:
    """The fields a spec line changes: what :func:`declare` writes into the spec object."""
    return {f.name: getattr(changed, f.name) for f in dataclasses.fields(FunctionSpec)
            if getattr(changed, f.name) != getattr(spec, f.name)}


CHILD = textwrap.dedent("""
    import json, os, sys, warnings
    os.environ["FI_COMPAT_WATCH"] = "off"
    warnings.filterwarnings("ignore", message="cutlass.get_max_active_clusters failed")
    request = json.loads(sys.argv[1])
    from fi_compat.model import specs
    for name, method, args, kwargs in request["declare"]:  # the spec line, in place: every row holds the object
        spec = getattr(specs, name)
        changed = getattr(spec, method)(*args, **kwargs)
        for field in ("module", "name", "params", "added_in", "renamed_from", "removed_in"):
            object.__setattr__(spec, field, getattr(changed, field))

    import fi_compat
    from fi_compat.counting import census, measurement
    from fi_compat.workload import cpu_host
    from fi_compat.workload.driver import Driver

    PAGE, CONTEXT = 64, 1 << 20
    count = request["lengths"]
    values = [1 + i * (CONTEXT // count) for i in range(count)]
    halves = (values[0::2], values[1::2])
    out = {}
    with warnings.catch_warnings(record=True) as caught, cpu_host() as host:
        warnings.simplefilter("always")
        import torch, flashinfer, flashinfer.mla as mla
        out["flashinfer"] = flashinfer.__version__
        state = fi_compat.install()
        out["release"], out["state"], out["outcome"] = str(state["release"]["version"]), state["state"], state["outcome"]
        out["rows"] = {row["name"]: [row["verdict"], row["verified"]] for row in state["bounds"]}
        decode = getattr(mla, specs.DECODE.name)
        # SGLang's call (backend auto), its block-table width following the batch's longest request
        driver = Driver(torch, decode, "sglang", "auto", context=CONTEXT, page_size=PAGE, num_pages=512, max_batch=8)

        def once(length):
            driver.call(8, length)
            host.recorder.launches.clear()

        once(CONTEXT - 8)  # first-call imports and compiles are not growth
        counts = [census.take()]

        reached = {}

        def drive(half):
            for length in half:
                once(length)
            counts.append(census.take())
            # fi_compat's misses in this pass (the census empties its caches, and their numbers, next)
            for name, cache in fi_compat.status(walk=False)["caches"].items():
                reached[name] = reached.get(name, 0) + cache["misses"]

        memory = measurement.measure(drive, halves)
        status = fi_compat.status(walk=False)
    out["patched"] = sorted(status["patched"])
    # every flashinfer cache that grew, with what it gained in each half: flashinfer's own memory
    grown = {}
    for half in (0, 1):
        for growth in census.grown(counts[half], counts[half + 1]):
            if growth.after.owner == "flashinfer":
                grown.setdefault(growth.qualname, [0, 0])[half] = growth.gained
    out["flashinfer_grown"] = grown
    out["sites"] = [[site["where"], site["what"], round(site["bytes_per_length"])] for site in memory["sites"]]
    # which rows the calls reached (fi_compat's own numbers say only that, never that flashinfer is bounded)
    out["reached"] = reached
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught if "fi_compat" in w.category.__module__]
    print("RESULT " + json.dumps(out))
""")


def bounded_by_memory(
    wheel: Path, scratch: Path, declare: Sequence[tuple[str, str, tuple, dict]] = (), lengths: int = SGLANG_LENGTHS
) -> dict[str, Any]:
    """:data:`CHILD` on ``wheel`` installed in ``scratch``: its JSON report.  ``declare``:
    ``(spec name in fi_compat.model.specs, method, args, kwargs)`` applied before installing."""
    overlay = scratch / "site"
    install_overlay(wheel, overlay)
    request = json.dumps({"declare": [list(d) for d in declare], "lengths": lengths})
    done = subprocess.run([sys.executable, "-c", CHILD, request], capture_output=True, text=True, timeout=900,
                          env=probe_environment(overlay, scratch), stdin=subprocess.DEVNULL)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"child failed ({done.returncode}): {done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])
