"""Registry outcomes (verified / unverified / unsupported) and install()'s
reaction to each, on fake modules for drift no release has yet."""

from __future__ import annotations

import logging
import sys
import types
import warnings

import pytest
from packaging.version import Version

import fi_compat
from fi_compat import installer
from fi_compat.adapters import ADAPTERS, CachedConfigAdapter, FreshConfigAdapter, select
from fi_compat.specs import CORE_MODULE
from fi_compat.errors import (
    SignatureMismatchError,
    UnsupportedReleaseError,
    UnsupportedReleaseWarning,
    UnverifiedReleaseWarning,
)
from fi_compat.release_detection import ReleaseInfo
from fi_compat.signatures import found_from_callable

import fakes


def lookup_in(module):
    def lookup(spec):
        if spec.module != CORE_MODULE or not hasattr(module, spec.name):
            return None
        return found_from_callable(spec.qualname, getattr(module, spec.name))

    return lookup


@pytest.fixture
def use_fake(monkeypatch):
    """Put a fake core module in sys.modules and pretend a release is installed."""

    def use(module, release):
        monkeypatch.setitem(sys.modules, CORE_MODULE, module)
        if "flashinfer" not in sys.modules:
            monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
        info = ReleaseInfo(Version(release), "metadata", metadata_version=release)
        monkeypatch.setattr(installer, "detect_release", lambda: info)
        return module

    return use


@pytest.mark.parametrize(
    "release,adapter",
    [("0.6.13", FreshConfigAdapter), ("0.6.15", FreshConfigAdapter), ("0.6.15.post1", CachedConfigAdapter),
     ("0.6.16.post4", CachedConfigAdapter), ("0.7.4", CachedConfigAdapter), ("0.6.18+cu130", CachedConfigAdapter)],
)
def test_ranges_put_post_and_local_releases_where_they_belong(release, adapter):
    assert [a for a in ADAPTERS if a.covers(Version(release))] == [adapter]


@pytest.mark.parametrize("release", ["0.6.12", "0.6.18rc1", "0.7.4.post1", "0.7.5", "0.8.0"])
def test_releases_outside_every_range(release):
    assert not any(a.covers(Version(release)) for a in ADAPTERS)


def test_verified_outcome():
    selection = select(Version("0.6.18"), lookup_in(fakes.fake_core("0.6.18")))
    assert (selection.outcome, selection.adapter) == ("verified", CachedConfigAdapter)
    selection = select(Version("0.6.14"), lookup_in(fakes.fake_core("0.6.15")))
    assert (selection.outcome, selection.adapter) == ("verified", FreshConfigAdapter)


def test_unverified_release_uses_matching_adapter_with_one_warning(use_fake, caplog):
    module = use_fake(fakes.fake_core("0.6.18"), "0.7.5")
    with caplog.at_level(logging.WARNING, logger="fi_compat"), pytest.warns(UnverifiedReleaseWarning) as warned:
        state = fi_compat.install()
    assert state["outcome"] == "unverified" and state["adapter"] == CachedConfigAdapter.name
    assert state["state"] == "installed"
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1 and "0.7.5" in records[0].getMessage() and "outside every verified range" in records[0].getMessage()
    assert len(warned) == 1
    assert getattr(module._mla_decode_tuning_config, "_fi_compat_wrapper", False)


#: Every adapter family, the fake layout that mimics it and the release that
#: fake claims to be (inside the adapter's verified range).
ADAPTER_LAYOUTS = {CachedConfigAdapter: ("0.6.18", "0.6.18"), FreshConfigAdapter: ("0.6.15", "0.6.15")}
DRIFT_CASES = [
    pytest.param(adapter, case, id=f"{adapter.name}/{case}")
    for adapter, (layout, _) in ADAPTER_LAYOUTS.items()
    for case in sorted(fakes.DRIFTS[layout])
]


def test_every_adapter_has_a_drift_layout():
    assert set(ADAPTER_LAYOUTS) == set(ADAPTERS)
    cases = [set(fakes.DRIFTS[layout]) for layout, _ in ADAPTER_LAYOUTS.values()]
    common = {"gained-required", "lost-parameter", "renamed", "positional-only", "keyword-only", "vanished",
              "moved", "returns-other-type", "raises"}
    assert all(common <= c for c in cases)


def use_drift(use_fake, monkeypatch, adapter, case):
    layout, release = ADAPTER_LAYOUTS[adapter]
    drift = fakes.DRIFTS[layout][case]
    module = use_fake(drift.core(), release)
    if drift.moved:
        monkeypatch.setitem(sys.modules, fakes.MOVED_TO, fakes._moved[0])
    return drift, release, module


def behaviour(module):
    """What the (drifted, unpatched) fake flashinfer answers: decode and builder."""
    builder = getattr(module, "_build_mla_decode_tuning_config", None)
    try:
        built = fakes.call_by_name(builder, **fakes.BUILDER_ARGS) if builder is not None else None
    except (RuntimeError, TypeError) as exc:  # what that drifted flashinfer itself does
        built = repr(exc)
    built = getattr(built, "key", built)
    return module.trtllm_batch_decode_with_kv_cache_mla(*range(9)), built


@pytest.mark.parametrize("adapter,case", DRIFT_CASES)
def test_drift_default_mode_warns_once_and_leaves_flashinfer_untouched(adapter, case, use_fake, monkeypatch, caplog):
    drift, release, module = use_drift(use_fake, monkeypatch, adapter, case)
    expected_behaviour = behaviour(module)
    before = dict(vars(module))
    with caplog.at_level(logging.DEBUG, logger="fi_compat"), pytest.warns(UnsupportedReleaseWarning) as warned:
        state = fi_compat.install()
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    message = records[0].getMessage()
    assert release in message and drift.words in message
    assert drift.function in message
    assert len(warned) == 1 and drift.words in str(warned[0].message)
    assert state["state"] == "unsupported" and state["patched"] == [] and state["caches"] == {}
    assert vars(module) == before  # untouched: same objects
    assert all(vars(module)[k] is v for k, v in before.items())
    assert behaviour(module) == expected_behaviour  # and still working as it did
    fi_compat.uninstall()
    assert all(vars(module)[k] is v for k, v in before.items())


@pytest.mark.parametrize("adapter,case", DRIFT_CASES)
def test_drift_strict_mode_raises_typed_error(adapter, case, use_fake, monkeypatch):
    drift, release, module = use_drift(use_fake, monkeypatch, adapter, case)
    before = dict(vars(module))
    with pytest.raises((SignatureMismatchError, UnsupportedReleaseError)) as info:
        fi_compat.install(strict=True)
    assert drift.words in str(info.value) and release in str(info.value)
    assert drift.function in str(info.value)
    if isinstance(info.value, SignatureMismatchError):
        assert info.value.qualname == f"{CORE_MODULE}.{drift.function}"
        assert info.value.release == release
        assert drift.words in info.value.difference
    else:  # found by the feature probe: signatures fit, behaviour does not
        assert case in ("returns-other-type", "raises")
        assert info.value.release == release
    assert all(vars(module)[k] is v for k, v in before.items()) and vars(module) == before
    assert fi_compat.status()["state"] == "not-installed" and fi_compat.status()["patched"] == []


@pytest.mark.parametrize("adapter", list(ADAPTER_LAYOUTS), ids=lambda a: a.name)
def test_drift_found_by_the_post_import_hook_is_handled_alike(adapter, use_fake, monkeypatch, caplog):
    """install() before flashinfer is imported: the drift is found when the hook
    runs, and must not break the import itself (one WARNING, nothing patched)."""
    layout, release = ADAPTER_LAYOUTS[adapter]
    drift = fakes.DRIFTS[layout]["raises"]
    module = drift.core()
    monkeypatch.delitem(sys.modules, CORE_MODULE, raising=False)
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    info = ReleaseInfo(Version(release), "metadata", metadata_version=release)
    monkeypatch.setattr(installer, "detect_release", lambda: info)
    assert fi_compat.install()["state"] == "pending"
    before = dict(vars(module))
    package = types.ModuleType("flashinfer")
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, CORE_MODULE, module)
    with caplog.at_level(logging.WARNING, logger="fi_compat"), pytest.warns(UnsupportedReleaseWarning):
        installer._on_flashinfer_import(package)  # what wrapt calls when the import completes
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING][0].count(drift.words) == 1
    assert fi_compat.status()["state"] == "unsupported" and vars(module) == before


@pytest.mark.parametrize("adapter", list(ADAPTER_LAYOUTS), ids=lambda a: a.name)
@pytest.mark.parametrize("where", ["before-wrap", "wrap", "transparent"])
def test_failure_at_every_step_leaves_nothing_half_installed(adapter, where, use_fake, monkeypatch):
    """Make each patch step fail in turn (and the transparent step after them):
    install() re-raises and every attribute is the original object again."""
    import fi_compat.adapters.base as base
    import fi_compat.call_api as decode

    layout, release = ADAPTER_LAYOUTS[adapter]
    module = use_fake(fakes.fake_core(layout), release)
    steps, _, _ = adapter.plan(module, 8)
    originals = dict(vars(module))
    failing_points = range(1, len(steps) + 1) if where != "transparent" else [None]
    for failing in failing_points:
        calls = []
        real_wrap = base.wrapt.patches.wrap_object

        def wrap(target, name, factory, *args, **kwargs):
            calls.append(name)
            if where == "wrap" and len(calls) == failing:
                raise RuntimeError(f"simulated failure wrapping {name}")
            if where == "before-wrap" and len(calls) == failing:
                raise RuntimeError("simulated failure")
            return real_wrap(target, name, factory, *args, **kwargs)

        def transparent():
            raise RuntimeError("simulated failure in transparent mode")

        monkeypatch.setattr(base.wrapt.patches, "wrap_object", wrap)
        monkeypatch.setattr(decode, "install_transparent", transparent)
        with pytest.raises(RuntimeError, match="simulated failure"):
            fi_compat.install(transparent=where == "transparent")
        assert all(vars(module)[k] is v for k, v in originals.items()), (where, failing)
        assert vars(module).keys() == originals.keys()
        assert fi_compat.status()["state"] == "not-installed" and fi_compat.status()["patched"] == []
        monkeypatch.undo()
        module = use_fake(fakes.fake_core(layout), release)
        originals = dict(vars(module))
        # and a clean install afterwards works
        assert fi_compat.install()["state"] == "installed"
        fi_compat.uninstall()


def test_strict_from_environment(use_fake, monkeypatch):
    use_fake(fakes.DRIFTS["0.6.18"]["vanished"].core(), "0.6.18")
    monkeypatch.setenv("FI_COMPAT_STRICT", "1")
    with pytest.raises(SignatureMismatchError):
        fi_compat.install()


def test_function_moved_to_another_module_is_reported_missing(use_fake):
    moved = fakes.fake_core("0.6.18", remove=("_build_mla_decode_tuning_config",))
    use_fake(moved, "0.6.18")
    with pytest.warns(UnsupportedReleaseWarning, match="_build_mla_decode_tuning_config: is missing"):
        state = fi_compat.install()
    assert state["state"] == "unsupported"


def test_drift_in_range_falls_back_to_other_adapter_as_unverified(use_fake):
    # A "0.6.18" without the functools.cache layout but with 0.6.15's builder
    # signature: the fresh-config adapter fits, so it is used, unverified.
    use_fake(fakes.fake_core("0.6.15"), "0.6.18")
    with pytest.warns(UnverifiedReleaseWarning, match="signatures changed"):
        state = fi_compat.install()
    assert state["adapter"] == FreshConfigAdapter.name and state["outcome"] == "unverified"


def test_install_is_idempotent_and_uninstall_restores_identity(use_fake, caplog):
    module = use_fake(fakes.fake_core("0.6.18"), "0.6.18")
    originals = dict(vars(module))
    fi_compat.install()
    wrapped = module._mla_decode_tuning_config
    with caplog.at_level(logging.DEBUG, logger="fi_compat"):
        fi_compat.install()
    assert module._mla_decode_tuning_config is wrapped
    assert any("nothing to do" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
    fi_compat.uninstall()
    assert all(vars(module)[k] is v for k, v in originals.items())
    fi_compat.uninstall()  # again: harmless
    assert all(vars(module)[k] is v for k, v in originals.items())


def test_failure_part_way_leaves_nothing_half_installed(use_fake, monkeypatch):
    module = use_fake(fakes.fake_core("0.6.18"), "0.6.18")
    originals = dict(vars(module))
    import fi_compat.adapters.base as base

    real_wrap = base.wrapt.patches.wrap_object
    calls = []

    def failing_second(target, name, factory, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:
            raise RuntimeError("simulated failure on the second patch")
        return real_wrap(target, name, factory, *args, **kwargs)

    monkeypatch.setattr(base.wrapt.patches, "wrap_object", failing_second)
    with pytest.raises(RuntimeError, match="second patch"):
        fi_compat.install()
    assert all(vars(module)[k] is v for k, v in originals.items())


def test_wrapper_reports_its_own_cache_not_flashinfers(use_fake):
    module = use_fake(fakes.fake_core("0.6.18"), "0.6.18")
    inner = module._mla_decode_tuning_config
    fi_compat.install(maxsize=4)
    proxy = module._mla_decode_tuning_config
    for length in range(100, 110):
        proxy((1, 2), 8, length)
    info = proxy.cache_info()
    assert info.maxsize == 4 and info.currsize <= 4
    assert inner.cache_info().currsize == 0  # flashinfer's unbounded cache is bypassed
    proxy.cache_clear()
    assert proxy.cache_info().currsize == 0


def test_installing_releases_what_the_unbounded_cache_held(use_fake):
    module = use_fake(fakes.fake_core("0.6.18"), "0.6.18")
    for length in range(50):
        module._mla_decode_tuning_config((1,), 8, length)
    assert module._mla_decode_tuning_config.cache_info().currsize == 50
    inner = module._mla_decode_tuning_config
    fi_compat.install()
    assert inner.cache_info().currsize == 0


def test_keyword_only_drift_is_reported(use_fake):
    def config_keyword_only(buckets, num_pages, *, profile_seq_len, has_sparse_mla_top_k_lens=False,
                            sparse_top_k_width=0, enable_dcp=False, cp_world=1, cp_rank=0):
        return fakes.TuningConfig(())

    import functools

    use_fake(fakes.fake_core("0.6.18", replace={"_mla_decode_tuning_config": functools.cache(config_keyword_only)}),
             "0.6.18")
    with pytest.warns(UnsupportedReleaseWarning, match="'profile_seq_len' became keyword-only"):
        assert fi_compat.install()["state"] == "unsupported"


def test_flashinfer_imported_but_mla_module_moved_is_not_silent(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.delitem(sys.modules, CORE_MODULE, raising=False)
    info = ReleaseInfo(Version("0.6.18"), "metadata", metadata_version="0.6.18")
    monkeypatch.setattr(installer, "detect_release", lambda: info)
    with pytest.warns(UnsupportedReleaseWarning, match="is missing"):
        state = fi_compat.install()
    assert state["state"] == "unsupported"
