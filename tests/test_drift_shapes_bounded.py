"""Issue #22, runtime side: fi_compat bounds each shape's cache where it sits
(under a stack of decorators, at a huge or constant-spelled maxsize, behind an
alias, in a module imported lazily after ``install()``).  The runtime side's
own subprocess checks are tests/matrix/test_drift_shapes_runtime.py; this one
measures what the shape's memo holds after the run.

Each shape is a real release with one small edit (tests/helpers/drift_shapes.py); the
child (tests/helpers/drift_shape_runtime.py) installs fi_compat with a bound of 8 and
decodes 48 distinct lengths over 128K: the flashinfer memo the shape grows
must end at most the bound times the row's scale, the row's verdict ``bound``.
Class-based and instance-held memos and new caches fi_compat has no row for
are the census's to name (tests/matrix/test_drift_shapes.py), not here.

Cost: 15-30 s per release on a shared core.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fi_compat.model.release_list import DEFAULT_RELEASE

sys.path.insert(0, str(Path(__file__).parent / "matrix"))  # drift_shape_census's _size_at, for the child

from helpers import drift_shapes  # noqa: E402
from helpers.drift_runner import ForkServer  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CACHE_SIZE, LENGTHS, MAX_SCALE = 8, 48, 16
#: shape -> (fi_compat row that must bound it, layout, backend)
RUNTIME: dict[str, tuple[str, str, str]] = {
    "config-decorated": ("tuning-config", "vllm", "auto"),
    "sizer-decorated": ("split-kv", "vllm", "cute-dsl"),
    "config-huge-maxsize": ("tuning-config", "vllm", "auto"),
    "config-const-none": ("tuning-config", "vllm", "auto"),
    "config-aliased-cache": ("tuning-config", "vllm", "auto"),
    "sizer-moved-lazy": ("split-kv", "vllm", "cute-dsl"),
}


@pytest.fixture(scope="module")
def server():
    with ForkServer(paths=(str(Path(__file__).parent / "matrix"),)) as running:
        yield running


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_the_shape_is_bounded_where_it_sits(name, server, tmp_path_factory):
    shape = drift_shapes.SHAPES_BY_NAME[name]
    try:
        synthetic = drift_shapes.build_site(shape, tmp_path_factory.mktemp(name))
    except ValueError as exc:
        pytest.skip(str(exc))
    row, layout, backend = RUNTIME[name]
    module, attributes = drift_shapes.GROWS_AT[name]
    report = server.run(synthetic.site, "helpers.drift_shape_runtime:bounded_run", timeout=600, module=module,
                        attributes=attributes, layout=layout, backend=backend, lengths=LENGTHS,
                        cache_size=CACHE_SIZE)
    assert report["verdicts"][row] == "bound", report
    assert report["size"] is not None, report
    assert report["size"] <= CACHE_SIZE * MAX_SCALE, report  # without the fix: one entry per length or more


@pytest.mark.parametrize(
    ("named", "expected"),
    [("", drift_shapes.SHAPE_BASES), ("default", (DEFAULT_RELEASE,)), (" 0.7.4 , default ", ("0.7.4", DEFAULT_RELEASE))],
)
def test_shape_bases_read_from_the_environment(named, expected, monkeypatch):
    monkeypatch.setenv(drift_shapes.SHAPE_BASES_ENV, named)
    assert drift_shapes.shape_bases() == expected


def test_a_shape_base_that_is_not_one_is_refused_with_the_accepted_names(monkeypatch):
    monkeypatch.setenv(drift_shapes.SHAPE_BASES_ENV, "0.6.13")
    accepted = r"accepted: default, 0\.6\.18, 0\.7\.4"
    with pytest.raises(ValueError, match=rf"FI_COMPAT_SHAPE_BASES=0\.6\.13: not a shape base; {accepted}"):
        drift_shapes.shape_bases()
