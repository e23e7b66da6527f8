"""Issue #22's shapes (tests/helpers/drift_shapes.py), each a real release with one
small edit, through the guard's census: the functools census and the census
by memory (fi_compat.counting.memo_walk, fi_compat.counting.memory_census) over the query modes
that reach the shape's cache, fi_compat installed.

For each shape the child also reads the ground truth: how many entries the
shape's own memo holds at the end (tests/matrix/drift_shape_census.py).  The
census must agree with it: a memo that grew per distinct length is a leak the
guard names (exit 1), with its ``file:line``; one that fi_compat bounded is
not.  On the real release, over every query mode, the census by memory finds
exactly what the functools census finds: nothing.

Cost: about 20-60 s per release on a shared core (most of it the walks
under tracing); the real release's all-mode run about 2-3 min.
"""

from __future__ import annotations

import os

import pytest

from helpers import drift
from helpers import drift_shapes
from helpers.drift_shapes import GROWS_AT, SHAPES

drift_shapes.skip_unless_on_a_shape_base()

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHILD = "drift_shape_census:census_report"
#: flashinfer memos on the real release's decode path that can gain an entry at any length with
#: fi_compat installed, and the most entries their keys allow (read from the 0.7.x wheels): the
#: cute-dsl reducer's split cap, keyed by ``split_kv`` (at most 128), and the kernel compiled for
#: each cap (dtypes, head counts and page size are fixed; q_len, the var-length and DCP flags take
#: one value per call mode, and the probe drives every mode in one process; the cap takes at most
#: 7 values): 7 caps for each of at most 9 call modes.  One run held 18.
_MONOLITHIC = "flashinfer.cute_dsl.attention.monolithic.mla_decode"
BOUNDED_BY_KEY = {f"{_MONOLITHIC}._get_reducer_max_splits": 128, f"{_MONOLITHIC}._get_compiled_mla_kernel": 7 * 9}

LENGTHS = 32  # two halves of 16 distinct lengths over 128K: at 0.25 entries a length, 4 entries a half
Q1_VLLM, CUTE_VLLM = ["vllm", "auto", "q1"], ["vllm", "cute-dsl", "q1"]
COMBOS = {
    "sizer-decorated": [CUTE_VLLM],
    "sizer-moved-lazy": [CUTE_VLLM],
    "decode-new-cache-decorated": [["trtllm", "trtllm-gen", "q1"]],
    "decode-new-cache-mtp": [Q1_VLLM, ["vllm", "auto", "mtp"]],
}


@pytest.fixture(scope="module")
def server(fork_server):
    return fork_server


def _run(server, site, **kwargs):
    return server.run(site, CHILD, timeout=900, **kwargs)


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_no_shape_is_green_while_its_memo_grows(shape, server, tmp_path_factory):
    try:
        synthetic = drift_shapes.build_site(shape, tmp_path_factory.mktemp(shape.name))
    except ValueError as exc:
        pytest.skip(str(exc))
    module, attributes = GROWS_AT[shape.name]
    report = _run(server, synthetic.site, combos=COMBOS.get(shape.name, [Q1_VLLM]), lengths=LENGTHS,
                  grows_at=[module, attributes])
    assert report["version"] == synthetic.version
    assert report["refused"] == [], report["refused"]
    truth = report["truth"]
    assert truth is not None, f"{module}.{attributes} not found after the run"
    grew = truth >= 0.25 * LENGTHS / 2
    leaf = attributes.split(".")[0]
    named = [leak for leak in report["leaks"] if leaf in leak["function"] or leaf in leak["describe"]]
    if grew:
        # the guard names it (file:line for the census by memory) and fails
        assert named, (truth, report["leaks"], report["memory_sites"], report["functools_grown"])
        if shape.name == "decode-new-cache-mtp":
            # reached only when q_len > 1: the q1 soak stays flat, the MTP soak finds it
            assert all(mode == ["vllm", "auto", "mtp"] for leak in named for mode in leak["modes"]), named
    else:
        assert named == [], (truth, named)  # fi_compat bounded it: nothing to report
    sites = [site for sites in report["memory_sites"].values() for site in sites]
    for site in sites:
        file, _, line = site["where"].rpartition(":")
        assert line.isdigit() and file.startswith(str(synthetic.site)), site  # flashinfer's file:line


def test_real_release_census_by_memory_agrees_with_the_functools_census(server):
    """Every query mode the release accepts, every layout and backend, 128K
    context: neither eye finds growth with fi_compat installed (no new false
    alarms).  Modes a release refuses are listed, never silently dropped."""
    report = _run(server, None, lengths=LENGTHS)
    assert report["version"] == drift.base_version(drift.real_package_dir())
    assert report["leaks"] == [], report["leaks"]
    assert report["census_not_walked"] == []  # the walk sees every cache the functools census counts
    # a memo may gain an entry late only where its key bounds it (a split value first seen in the
    # second half), and then holds no more than that bound; any other gain is growth
    unbounded = {mode: {name: size for name, size in grown.items() if size > BOUNDED_BY_KEY.get(name, 0)}
                 for mode, grown in report["functools_grown"].items()}
    assert all(not grown for grown in unbounded.values()), {mode: grown for mode, grown in unbounded.items() if grown}
    assert all(not sites for sites in report["memory_sites"].values()), report["memory_sites"]
    modes = {key.rsplit("/", 1)[1] for key in report["functools_grown"]}
    assert {"q1", "mtp"} <= modes, report["refused"]
