"""The release lists, in one place.

``MATRIX_RELEASES`` is what ``nox -s matrix`` runs (one session each) and what
the verified ranges of :data:`fi_compat.verdict.bounds.BOUNDS` may claim:
``tests/test_release_list.py`` fails when a matrix release has a bounded
cache's function but lies outside that row's verified range, or when a range
covers a published release that is not in the matrix.

``PUBLISHED_RELEASES`` is every flashinfer-python release from 0.6.13 on, as
the package index listed them on 2026-12-02 (``pip index versions
flashinfer-python``).  Append new releases here when they appear; the guard
and the release-list test read it.

``CI_RELEASES`` is the representative subset that ``.ci/run`` runs: the
default release's ``tests/matrix`` inside ``nox -s tests`` (the README's test
command runs the whole suite), the others as matrix sessions
(``CI_SESSION_RELEASES``, ``scripts/run_cpu_matrix.py --ci``).  The whole
matrix runs as ``nox -s matrix`` and its committed results must match the
code (``scripts/check_results_fresh.py``).

This module imports nothing: the noxfile and the scripts load it by path.
"""

from __future__ import annotations

PUBLISHED_RELEASES: tuple[str, ...] = (
    "0.6.13",
    "0.6.14",
    "0.6.15",
    "0.6.15.post1",
    "0.6.16",
    "0.6.16.post1",
    "0.6.16.post2",
    "0.6.16.post3",
    "0.6.16.post4",
    "0.6.17",
    "0.6.18",
    "0.6.18.post1",
    "0.7.0",
    "0.7.0.post1",
    "0.7.1",
    "0.7.2",
    "0.7.2.post1",
    "0.7.4",
)

#: Releases older than the matrix that a supported engine pins (TensorRT-LLM
#: 1.2.1: 0.6.4) or that sit just below it (0.6.12, the last before MLA decode
#: ran the autotuner).  Not matrix releases: tests/test_older_releases.py checks,
#: on their real wheels, only the verdicts (every row ``not-in-release``, no
#: WARNING), the guard (``nothing-to-bound``) and the call API (runs, or raises
#: UnsupportedFeatureError naming the release and the parameter or function).
OLDER_CHECKED_RELEASES: tuple[str, ...] = ("0.6.4", "0.6.12")

# Every published release fi_compat supports: verified means "ran here".
MATRIX_RELEASES: tuple[str, ...] = PUBLISHED_RELEASES

DEFAULT_RELEASE = "0.6.18"

#: The releases ``.ci/run`` runs, chosen so that CI stays within 30 minutes on
#: its fresh 2-core machine (a release's tests/matrix session takes 3.5-5 min
#: there, and no two may run at once: .ci/run says why).  Each is the first or
#: last of its kind:
CI_RELEASES: tuple[str, ...] = (
    # oldest: fresh TuningConfig per call (colliding nearest-profile memo),
    # 9-parameter builder, the decode without kv_scale_format, cum_seq_lens_q,
    # max_q_len or multi_ctas_kv_counter_buffer (most keyword gating).
    "0.6.13",
    # the default release (README's commands), run by `nox -s tests`:
    # functools.cache'd tuning config (8 parameters) and cute-dsl sizer,
    # initializers on TuningConfig, no nearest-profile memo, use_fp16_softmax.
    "0.6.18",
    # newest: return_lse_base (from 0.7.1) and, on 0.7.4 only, an explicit
    # backend="trtllm-gen" that skips the builder outside autotuning.
    "0.7.4",
)
#: CI_RELEASES as ``.ci/run``'s matrix sessions: all but the default release,
#: whose tests/matrix ``nox -s tests`` already runs beside them (running it
#: twice would cost CI a seventh of its time and test nothing new).
CI_SESSION_RELEASES: tuple[str, ...] = tuple(r for r in CI_RELEASES if r != DEFAULT_RELEASE)
# Not represented in CI, each a 3.5-4 min session it has no time for: 0.6.15
# (last fresh-config release, the one TensorRT-LLM's workaround fits exactly),
# 0.6.15.post1 (first cached 3-parameter tuning config; 0.6.15's number with a
# different layout), 0.6.16-0.6.16.post4 (11-parameter builder: cute_dsl_impl,
# sinks), 0.6.17 (last DynamicTensorSpec with tensor_initializers), 0.6.14 and
# the 0.7.0-0.7.2 series.  The committed full-matrix results cover every one of
# them, and CI fails when they are older than the code
# (scripts/check_results_fresh.py).
