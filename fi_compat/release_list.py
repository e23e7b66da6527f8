"""The release lists, in one place.

``MATRIX_RELEASES`` is what ``nox -s matrix`` runs (one session each) and what
the adapters' verified ranges may claim: ``tests/test_release_list.py`` fails
when a matrix release is covered by no adapter, or when a range covers a
published release that is not in the matrix.

``PUBLISHED_RELEASES`` is every flashinfer-python release from 0.6.13 on, as
the package index listed them on 2026-12-02 (``pip index versions
flashinfer-python``).  Append new releases here when they appear; the guard
and the release-list test read it.
"""

from __future__ import annotations

PUBLISHED_RELEASES: tuple[str, ...] = (
    "0.6.13", "0.6.14", "0.6.15", "0.6.15.post1",
    "0.6.16", "0.6.16.post1", "0.6.16.post2", "0.6.16.post3", "0.6.16.post4",
    "0.6.17", "0.6.18", "0.6.18.post1",
    "0.7.0", "0.7.0.post1", "0.7.1", "0.7.2", "0.7.2.post1", "0.7.4",
)

# Every published release the adapters claim: verified means "ran here".
MATRIX_RELEASES: tuple[str, ...] = PUBLISHED_RELEASES

DEFAULT_RELEASE = "0.6.18"
