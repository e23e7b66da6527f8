import importlib.metadata
import logging

import pytest
from packaging.version import Version

from fi_compat.model.release_detection import detect_release


def synthetic(metadata=None, build=None, module=None):
    return detect_release(metadata_reader=lambda: metadata, build_meta_reader=lambda: build,
                          module_reader=lambda: module)


def test_real_installed_release_matches_distribution_metadata():
    try:
        expected = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed here")
    info = detect_release()
    assert info.version == Version(expected)
    assert info.source in ("build-meta", "module")


def test_not_installed():
    info = synthetic()
    assert info.version is None and not info.installed and info.source == "none"
    assert str(info) == "not installed"


@pytest.mark.parametrize(
    "raw,public,is_post,is_pre,is_dev",
    [
        ("0.6.18+cu130", "0.6.18", False, False, False),
        ("0.6.15.post1", "0.6.15.post1", True, False, False),
        ("0.6.18rc1", "0.6.18rc1", False, True, False),
        ("0.7.5.dev3", "0.7.5.dev3", False, True, True),
    ],
)
def test_version_forms(raw, public, is_post, is_pre, is_dev):
    info = synthetic(metadata=raw)
    assert info.public == public
    assert info.version.is_postrelease is is_post
    assert info.version.is_prerelease is is_pre
    assert info.version.is_devrelease is is_dev
    assert info.source == "metadata"


def test_code_wins_over_stale_metadata_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="fi_compat"):
        info = synthetic(metadata="0.6.15", build="0.6.18")
    assert info.version == Version("0.6.18") and info.source == "build-meta"
    assert info.metadata_version == "0.6.15"
    assert any("metadata says flashinfer 0.6.15" in r.getMessage() for r in caplog.records)


def test_imported_module_version_wins_over_files():
    info = synthetic(metadata="0.6.17", build="0.6.17", module="0.6.18")
    assert info.version == Version("0.6.18") and info.source == "module"


def test_unusable_versions_are_ignored_with_a_note():
    info = synthetic(metadata="0.6.18", build="0.0.0+unknown")
    assert info.version == Version("0.6.18") and info.source == "metadata"
    info = synthetic(metadata="not-a-version")
    assert info.version is None
    assert any("not a usable PEP 440 version" in n for n in info.notes)
