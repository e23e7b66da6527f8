"""SGLang's and vLLM's decode batches on the installed real release, with fi_compat
reached the two ways those engines' users can adopt it without editing the engine.

* **Transparent mode** (``fi_compat.install(transparent=True)``), in this process:
  SGLang looks ``flashinfer.decode``'s decode function up at every call; vLLM
  calls a name it bound with ``from flashinfer.decode import ...`` when its
  module was imported, before the install (the replay alternates that name
  with one bound after the install).
* **``fi-compat run``** (the default settings, not transparent), in a child
  process started as ``python -m fi_compat run -- python replay_child.py``.

Each replay runs ``FI_COMPAT_MATRIX_LENGTHS`` batches (default 2,000; the child
half as many per engine) from :mod:`engine_replay`, through flashinfer alone
and through fi_compat, and asserts: no flashinfer cache grows by more than
fi_compat's cache size (:data:`engine_replay.CACHE_SIZE`) while flashinfer
alone does (from 0.6.15.post1, where its tuning-config memo exists);
tracemalloc growth under :data:`engine_replay.GROWTH_LIMIT` over the replay;
each call makes one launch, and every launch equals flashinfer's own for the
same batch (the default ``exact`` max_seq_len policy changes no argument).
A release that rejects an engine's call (DCP before 0.6.17) skips, naming
flashinfer's error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.counting import census

import engine_replay as er
from helpers import device_gate
from helpers.support import describe_error, flashinfer_refusal, installed_release

torch = pytest.importorskip("torch")

MATRIX = Path(__file__).resolve().parent
TESTS = MATRIX.parent
TUNING_MEMO_SINCE = Version("0.6.15.post1")  # flashinfer's unbounded memo keyed by the length
CHILD_TIMEOUT = 600
# the shim's recorded cute-dsl kernel has no compiled artifacts to query; flashinfer falls back to the SM count
CUTE_DSL_SHIM_WARNING = "ignore:cutlass.get_max_active_clusters failed:RuntimeWarning"

# id -> (layout, backend as the engine passes it (None: omitted, flashinfer's auto), decode context parallelism)
REPLAYS = {
    "sglang-auto": ("sglang", None, False),
    "sglang-cute-dsl": ("sglang", "cute-dsl", False),
    "vllm-auto": ("vllm", None, False),
    "vllm-dcp-cute-dsl": ("vllm", "cute-dsl", True),
}


@pytest.fixture
def recorder(fi_cpu_host):
    import flashinfer.decode  # noqa: F401  (SGLang's and vLLM's module)

    fi_cpu_host.recorder.clear()
    return fi_cpu_host.recorder


@pytest.fixture
def engine_modules():
    """Modules the test registers (vLLM's early-bound name), removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        sys.modules.pop(name, None)


def steps_for(layout: str, count: int) -> list[er.Step]:
    return er.sglang_steps(count, seed=18) if layout == "sglang" else er.vllm_steps(count, seed=18)


def grew_past_bound(before: dict, after: dict) -> list[str]:
    return [g.describe() for g in census.over_bound(after, before, er.CACHE_SIZE)]


def run_alone(replayer, steps, decode_for, recorder, what: str) -> tuple[er.Replay, list[str]]:
    """flashinfer alone: launches, and which of its caches grew past the bound (the
    control: the measurement sees a leak when there is one).  Skips if the release
    rejects the call."""
    before = census.take()
    ran: list[er.Replay] = []
    refusal = flashinfer_refusal(lambda: ran.append(er.run(replayer, steps, decode_for, recorder, traced=False)))
    if refusal is not None:  # any type flashinfer raises; the replay's own errors propagate
        pytest.skip(f"flashinfer {installed_release()} rejects {what}: {describe_error(refusal)}")
    return ran[0], grew_past_bound(before, census.take())


@pytest.mark.filterwarnings(CUTE_DSL_SHIM_WARNING)
@pytest.mark.parametrize("replay", list(REPLAYS))
def test_replay_through_transparent_mode(replay, recorder, engine_modules, fi_matrix_lengths):
    layout, backend, dcp = REPLAYS[replay]
    device_gate.require_backend(backend)
    steps = steps_for(layout, fi_matrix_lengths)
    replayer = er.driver(torch, layout, backend, steps, dcp=dcp)
    missing = replayer.missing_parameter(er.public_decode())
    if missing is not None:
        pytest.skip(f"flashinfer {installed_release()} has no {missing} parameter")
    if layout == "vllm":
        engine_modules += ["replay_vllm_bound_before_install", "replay_vllm_bound_after_install"]
        early = er.bind_early(engine_modules[0])

        def decode_for(index):
            return er.held_decode(early)
    else:
        def decode_for(index):
            return er.public_decode()

    alone, alone_grew = run_alone(replayer, steps, decode_for, recorder, f"{replay}'s call")

    state = fi_compat.install(transparent=True, cache_size=er.CACHE_SIZE)
    assert state["state"] == "installed", state
    proxy = er.public_decode()
    assert getattr(proxy, "_fi_compat_wrapper", False), \
        f"install(transparent=True) left {er.PUBLIC_MODULE}'s decode function unwrapped: {proxy!r}"
    if layout == "vllm":
        late = er.bind_early(engine_modules[1])
        # the identity scan reached the name vLLM bound before install; a later import gets the proxy too
        assert er.held_decode(early) is proxy and er.held_decode(late) is proxy
        holders = (early, late)

        def decode_for(index):
            return er.held_decode(holders[index % 2])

    before = census.take()
    replayed = er.run(replayer, steps, decode_for, recorder, traced=True)
    after = census.take()

    assert grew_past_bound(before, after) == []
    assert replayed.growth < er.GROWTH_LIMIT, f"{replayed.growth} B over {len(steps)} batches"
    assert (replayed.not_one_launch, alone.not_one_launch) == (0, 0)
    assert er.differences(steps, replayed, alone) == []
    if installed_release() >= TUNING_MEMO_SINCE:
        assert alone_grew, "flashinfer alone should grow its memo past the bound on this release"


# --------------------------------------------------------------------------- fi-compat run


def test_replays_under_fi_compat_run(tmp_path, fi_matrix_lengths):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), str(MATRIX), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run(
        [sys.executable, "-m", "fi_compat", "run", "--cache-size", str(er.CACHE_SIZE), "--",
         sys.executable, str(MATRIX / "replay_child.py"), str(tmp_path), str(fi_matrix_lengths // 2)],
        env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    assert out.returncode == 0, out.stderr[-4000:]
    report = json.loads((tmp_path / "replays.json").read_text())

    assert report["state_at_start"] == "pending" and report["state"] == "installed"
    assert report["cache_size"] == er.CACHE_SIZE
    release = str(installed_release())
    lines = [line for line in out.stderr.splitlines() if line.startswith("fi_compat INFO fi_compat: flashinfer ")]
    assert lines and all(f"flashinfer {release}; pid {report['pid']}; bounded: " in line for line in lines), \
        out.stderr[-4000:]
    assert sorted(report["engines"]) == ["sglang", "vllm"]
    for engine, seen in report["engines"].items():
        assert seen["grew_past_bound"] == [], engine
        assert seen["growth"] < er.GROWTH_LIMIT, (engine, seen["growth"])
        assert seen["not_one_launch"] == [0, 0], engine
        assert seen["differences"] == [], engine
        if installed_release() >= TUNING_MEMO_SINCE:
            assert seen["alone_grew_past_bound"], engine
