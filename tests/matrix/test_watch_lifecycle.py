"""Where the runtime watch runs, and how it leaves: nothing of it on a verified release, and on an
unknown one (the real release under another label) a walk, a retirement once memory is flat, and a
return when flashinfer imports a new module.

The verified case runs in this process on the release under test; the unknown one in a child of
the fork server (``watch_release_driver.py``'s ``lifecycle``), which drives SGLang's call and
reads, with tracemalloc, what the watch's own lines hold while it runs.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys

import pytest
from packaging.version import Version

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:  # find, not import: it needs the shim
    pytest.skip("needs flashinfer-python", allow_module_level=True)

from helpers import drift  # noqa: E402
from helpers import watch_releases  # noqa: E402

from fi_compat.model.release_list import MATRIX_RELEASES  # noqa: E402

#: What the watch's own records and walk may hold at any time.
ONE_MEGABYTE = 1 << 20


def _fi_compat_callbacks() -> list:
    return [c for c in gc.callbacks if (getattr(c, "__module__", "") or "").startswith("fi_compat")]


def test_a_verified_release_runs_nothing_but_the_memos(fi_cpu_host, quiet_launches, release, monkeypatch):
    """Default settings on a release the matrix verified: the decode function is flashinfer's own
    at every module that holds it, no collector callback, no watch, and everything fi_compat put
    in place is a memo (the rows' bounds), before and after a stretch of SGLang's calls (its
    trtllm-gen backend, which every device's host path runs)."""
    if str(release) not in MATRIX_RELEASES:
        pytest.skip(f"flashinfer {release} is not a verified release")
    monkeypatch.delenv("FI_COMPAT_WATCH", raising=False)
    import torch

    import fi_compat
    import flashinfer.mla
    import flashinfer.mla._core as core
    from fi_compat.installing import installer
    from fi_compat.memo.proxies import is_memo
    from fi_compat.model.specs import DECODE
    from fi_compat.workload import workload

    original = getattr(core, DECODE.name)
    status = fi_compat.install()
    assert status["watch"] is None and _fi_compat_callbacks() == [], status["watch"]
    inputs = workload.make_inputs(torch, "sglang", batch=4, width=256, page_size=64, num_pages=64)
    for max_seq_len in range(1000, 1300):
        workload.call("sglang", getattr(flashinfer.mla, DECODE.name), inputs, max_seq_len, "trtllm-gen")
    holders = [name for name, module in sys.modules.copy().items()
               if vars(module).get(DECODE.name, original) is not original]
    assert holders == [], holders
    assert fi_compat.status(walk=False)["watch"] is None and _fi_compat_callbacks() == []
    installation = installer.snapshot().installation
    replaced = [step.proxy for step in installation.steps()] if installation is not None else []
    assert replaced and all(is_memo(r) for r in replaced), replaced


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory, request):
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork (the run's fork server)")
    base = Version(drift.base_version(drift.real_package_dir()))
    root = tmp_path_factory.mktemp("watch-lifecycle")
    site = drift.build_site(watch_releases.RELABELLED, root, version=f"{base.base_version}.post0.dev951").site
    out = root / "lifecycle.json"
    request.getfixturevalue("fork_server").run(site, "watch_release_driver:lifecycle", timeout=600,
                                               out=str(out), most=40_000)
    return json.loads(out.read_text())


def test_an_unknown_release_is_watched_until_memory_is_flat_then_left_alone(lifecycle):
    started, retired = lifecycle["started"], lifecycle["retired"]
    assert started is not None and "outside the releases fi_compat verified" in started["why"], started
    assert started["decode_tick"] == "in place", started
    assert lifecycle.get("retired_at") is not None, retired  # it retired within the run
    assert retired["phase"] == "retired" and retired["walks"] >= 0 and retired["findings"] == [], retired
    assert retired["decode_tick"] == "retired" and retired["patched"] == [], retired
    # nothing of it stays in the call path: every holder has flashinfer's function, no callback is left
    assert lifecycle["decode_is_flashinfers"] == [] and lifecycle["callbacks"] == [], lifecycle


def test_the_watch_holds_under_a_megabyte_at_any_time(lifecycle):
    held = lifecycle["held"]
    assert held and max(held) <= ONE_MEGABYTE, held
    assert held[-1] <= max(held)  # read while it walked and read, up to its retirement


def test_a_new_flashinfer_module_brings_the_watch_back(lifecycle):
    assert lifecycle.get("fresh_module"), "no flashinfer module left to import on this host"
    rearmed = lifecycle["rearmed"]
    assert rearmed["phase"] != "retired" and rearmed["rearmed"] == 1, rearmed
    assert rearmed["decode_tick"] == "in place", rearmed
