"""The verdict on each bounded cache (``fi_compat.verdict.bounds``) and what install() does with it,
on fake flashinfer releases (tests/helpers/fakes.py) for what no release has yet.

The fakes are checked first against the real wheels: each fake release gets
the verdict its real wheel gets, row by row.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
import warnings

import pytest
from packaging.version import Version

import fi_compat
from fi_compat.verdict import bounds
from fi_compat.installing import installer
from fi_compat.model import specs
from fi_compat.verdict.bounds import by_name
from fi_compat.verdict.judgement import (
    BOUND,
    BOUNDED_UPSTREAM,
    MISMATCH,
    MISSING,
    NO_CACHE,
    NOT_IN_RELEASE,
    PARTIAL,
    PREDATES,
    UNSUPPORTED,
    UNVERIFIED,
    VERIFIED,
    judge,
    judge_release,
)
from fi_compat.commands.guard.wheel import WheelSources
from fi_compat.errors import (
    WARNING_LIMIT, SignatureMismatchError, UnsupportedReleaseError, UnsupportedReleaseWarning, UnverifiedReleaseWarning,
)
from fi_compat.lookup import DirectoryReader, find_live, source_lookup
from fi_compat.model.release_list import MATRIX_RELEASES

from helpers import fakes
from helpers.fakes import BUILDER_ARGS, DRIFT_RELEASE, DRIFTS, loaded_release


def flashinfer_objects() -> dict[tuple[str, str], object]:
    """Every attribute of every loaded flashinfer module, and of the classes they define."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "flashinfer" or name.startswith("flashinfer.")):
            continue
        for attribute, value in list(vars(module).items()):
            found[(name, attribute)] = value
            if isinstance(value, type) and value.__module__ == name:
                for member, item in vars(value).items():
                    found[(f"{name}.{attribute}", member)] = item
    return found


def assert_untouched(before: dict) -> None:
    after = flashinfer_objects()
    changed = [key for key, value in before.items() if after.get(key) is not value]
    assert changed == [], changed


def warnings_logged(caplog) -> list[str]:
    """fi_compat's log records at WARNING and above, without the ``fi_compat: `` prefix."""
    return [r.getMessage().removeprefix("fi_compat: ") for r in caplog.records
            if r.name.startswith("fi_compat") and r.levelno >= logging.WARNING]


def summary(judged) -> list[tuple]:
    """What a verdict says about each row, comparable across lookups."""
    return [(v.bound.name, v.kind, v.verified, None if v.found is None else
             (v.found.memo, v.found.maxsize, tuple(v.found.function.text()))) for v in judged.rows]


# --------------------------------------------------------------------------- the fakes are faithful


#: The first release of each fact the fakes reproduce (a parameter, a decorator, a module), and the last of
#: 0.6.13's unbounded nearest-profile memo.  tests/test_guard_wheels.py walks every matrix release.
FACT_RELEASES = ["0.6.13", "0.6.14", "0.6.15", "0.6.15.post1", "0.6.16", "0.6.17", "0.6.18", "0.7.1", "0.7.4"]


def test_the_fact_releases_are_matrix_releases():
    assert set(FACT_RELEASES) <= set(MATRIX_RELEASES)


@pytest.mark.parametrize("release", FACT_RELEASES)
def test_each_fake_release_gets_the_verdict_of_its_real_wheel(release, real_wheel, tmp_path):
    with WheelSources.open(real_wheel(release)) as wheel:
        real = judge_release(source_lookup(wheel), Version(release))
    fake = judge_release(source_lookup(DirectoryReader(str(fakes.write_release(tmp_path, release)))), Version(release))
    assert summary(fake) == summary(real)
    assert (fake.call_api, real.call_api) == (None, None)
    assert fake.outcome == real.outcome == VERIFIED


# --------------------------------------------------------------------------- judge(): every verdict kind


def verdict(fake, row: str, lookup: str):
    """The verdict on ``row`` through a live lookup, or through the fake's source."""
    bound = by_name(row)
    version = Version(fake.release)
    if lookup == "live":
        if importlib.util.find_spec(bound.module) is not None:
            importlib.import_module(bound.module)
        found = find_live(bound.spec, bound.spec.at(fake.release))
    else:
        found = source_lookup(DirectoryReader(str(fake.root)))(bound.spec)
    return judge(bound, found, version)


KINDS = [
    # (release, drift, row, kind, words in the reason)
    ("0.6.18", None, "tuning-config", BOUND, "has an unbounded functools cache"),
    ("0.6.15", None, "builder", BOUND, "builds a fresh result per call"),
    ("0.6.15", None, "nearest-profile", BOUND, "bounded by flashinfer at 16384 entries on a key that grows"),
    ("0.6.13", None, "nearest-profile", BOUND, "has an unbounded functools cache"),
    ("0.6.15", fakes.BUILDER_GAINED_CACHE, "builder", BOUND, "has an unbounded functools cache"),
    ("0.6.18", fakes.CONFIG_BOUNDED_UPSTREAM, "tuning-config", BOUNDED_UPSTREAM, "bounded by flashinfer itself (maxsize 256)"),
    ("0.6.18", fakes.CONFIG_LOST_CACHE, "tuning-config", NO_CACHE, "keeps no cache"),
    ("0.6.18", fakes.CONFIG_POSITIONAL_ONLY, "tuning-config", BOUND,
     "became positional-only: fi_compat keys them by position"),
    ("0.6.18", None, "nearest-profile", NO_CACHE, "keeps no cache"),
    ("0.6.15", None, "tuning-config", NOT_IN_RELEASE, "arrived in 0.6.15.post1"),
    ("0.6.17", None, "split-kv-hca", NOT_IN_RELEASE, "arrived in 0.6.18"),
    ("0.6.18", DRIFTS["tuning-config"]["vanished"], "tuning-config", MISSING, "is missing (moved or removed)"),
    ("0.6.18", DRIFTS["tuning-config"]["renamed"], "tuning-config", MISMATCH,
     "parameter 'profile_seq_len' was renamed to 'profile_len'"),
    ("0.6.15", DRIFTS["builder"]["keyword-only"], "builder", MISMATCH, "parameter 'max_seq_len' became keyword-only"),
]


@pytest.mark.parametrize("lookup", ["live", "source"])
@pytest.mark.parametrize("release,drift,row,kind,words", KINDS,
                         ids=[f"{k[2]}-{k[3]}-{k[0]}" + ("" if k[1] is None else "-drift") for k in KINDS])
def test_every_verdict_kind(release, drift, row, kind, words, lookup, tmp_path):
    with loaded_release(release, tmp_path, drifts=() if drift is None else (drift,)) as fake:
        judged = verdict(fake, row, lookup)
    assert judged.kind == kind, judged.reason
    assert words in judged.reason
    assert judged.problem is (kind in (MISSING, MISMATCH))
    if kind == MISMATCH:
        assert judged.mismatch is not None and words in judged.mismatch.difference
    if kind in (BOUND, BOUNDED_UPSTREAM, NO_CACHE):
        # every fake release here is a matrix release, every function at home; a note is a signature never run
        assert judged.verified is not bool(judged.note)


@pytest.mark.parametrize("lookup", ["live", "source"])
def test_a_function_found_only_in_another_module_is_bound_unverified_and_says_where(lookup, tmp_path):
    with loaded_release("0.6.18", tmp_path, drifts=(fakes.CONFIG_MOVED,)) as fake:
        importlib.import_module(fakes.MOVED_TO)  # what the builder's module does at import
        judged = verdict(fake, "tuning-config", lookup)
    assert (judged.kind, judged.verified, judged.found.moved) == (BOUND, False, True)
    assert f"found in {fakes.MOVED_TO}, moved from {specs.CORE_MODULE}" in judged.reason


@pytest.mark.parametrize("lookup", ["live", "source"])
def test_a_function_moved_and_imported_back_is_bound_through_both_names(lookup, tmp_path):
    with loaded_release("0.6.18", tmp_path, drifts=(fakes.CONFIG_MOVED_REIMPORTED,)) as fake:
        judged = verdict(fake, "tuning-config", lookup)
        if lookup == "live":
            holders = {(owner.__name__, attribute) for owner, attribute in judged.found.aliases}
            assert holders == {(specs.CORE_MODULE, specs.TUNING_CONFIG.name), (fakes.MOVED_TO, specs.TUNING_CONFIG.name)}
    assert (judged.kind, judged.verified, judged.found.moved) == (BOUND, True, False)
    assert judged.found.defined_in == fakes.MOVED_TO


def test_a_namesake_elsewhere_in_a_release_that_predates_the_function_is_not_it(tmp_path):
    with loaded_release("0.6.15", tmp_path) as fake:
        elsewhere = types.ModuleType(fakes.MOVED_TO)
        exec(f"def {specs.TUNING_CONFIG.name}(buckets, num_pages, profile_seq_len):\n    return None\n",
             vars(elsewhere))
        sys.modules[fakes.MOVED_TO] = elsewhere
        judged = verdict(fake, "tuning-config", "live")
    assert judged.kind == NOT_IN_RELEASE


# --------------------------------------------------------------------------- judge_release(): outcomes


def judged_release(fake, release: str = ""):
    return judge_release(source_lookup(DirectoryReader(str(fake.root))), Version(release or fake.release))


def test_outcome_verified(tmp_path):
    with loaded_release("0.6.18", tmp_path) as fake:
        judged = judged_release(fake)
    assert judged.outcome == VERIFIED and judged.problems == [] and judged.call_api is None
    assert judged.reason() == "flashinfer 0.6.18: every bound fits and is verified"


@pytest.mark.parametrize("release", ["0.7.5", "0.7.3"])
def test_outcome_unverified_outside_the_matrix(release, tmp_path):
    """0.7.5 is past every row's range; 0.7.3 lies inside them but the matrix never ran it."""
    with loaded_release(release, tmp_path) as fake:
        judged = judged_release(fake)
    assert judged.outcome == UNVERIFIED
    bound_rows = [v for v in judged.rows if v.kind == BOUND]
    assert bound_rows and not any(v.verified for v in bound_rows)
    assert "outside the verified releases: " + specs.TUNING_CONFIG.qualname in judged.reason()


def test_outcome_partial_when_one_row_changed(tmp_path):
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFTS["tuning-config"]["renamed"],)) as fake:
        judged = judged_release(fake)
    assert judged.outcome == PARTIAL
    assert [v.bound.name for v in judged.problems] == ["tuning-config"]
    assert by_name("builder").name in [v.bound.name for v in judged.rows if v.kind == BOUND]
    assert "was renamed to 'profile_len'" in judged.reason()


def test_outcome_unsupported_when_nothing_is_found(tmp_path):
    judged = judge_release(source_lookup(DirectoryReader(str(tmp_path))), Version("0.6.18"))
    assert judged.outcome == UNSUPPORTED
    present = [b.name for b in bounds.BOUNDS if b.spec.present_in(Version("0.6.18"))]
    assert [v.bound.name for v in judged.problems] == present
    assert judged.call_api is not None and judged.call_api.found is None


def test_a_changed_decode_leaves_every_row_verified_and_the_release_unverified(tmp_path):
    """The caches are bounded as before, but that decode signature never ran in the matrix: the
    release is unverified, for status(), doctor and the guard alike (one rule, in the outcome)."""
    decode = fakes.decode_def("0.6.18").replace("max_seq_len, sparse_mla_top_k=0", "max_seq_len, page_stride, sparse_mla_top_k=0")
    drift = fakes.Drift(specs.DECODE, "gained required parameter 'page_stride'", decode)
    with loaded_release("0.6.18", tmp_path, drifts=(drift,)) as fake:
        judged = judged_release(fake)
    assert all(v.verified for v in judged.rows if v.kind == BOUND) and not judged.problems
    assert judged.outcome == UNVERIFIED
    assert judged.call_api is not None and "gained required parameter 'page_stride'" in judged.call_api.difference
    assert "call API: " in judged.reason()


# --------------------------------------------------------------------------- install(): reactions

DRIFT_CASES = [pytest.param(row, case, id=f"{row}/{case}") for row in DRIFTS for case in DRIFTS[row]]


def behaviour(fake) -> object:
    """What the fake flashinfer answers through its builder (which calls the config)."""
    try:
        return fake.core._build_mla_decode_tuning_config(**BUILDER_ARGS).key
    except Exception as exc:  # noqa: BLE001 - what that drifted flashinfer itself does
        return repr(exc)


@pytest.fixture
def by_name_only(monkeypatch):
    """The runtime watch off: what fi_compat does with a row from its name alone (with the
    watch on, a memo missing by name is the watch's to measure: test_a_memo_missing_by_name_...)."""
    monkeypatch.setenv("FI_COMPAT_WATCH", "off")


@pytest.mark.parametrize("row,case", DRIFT_CASES)
def test_strict_mode_raises_a_typed_error_and_installs_nothing(row, case, tmp_path, by_name_only):
    drift = DRIFTS[row][case]
    release = DRIFT_RELEASE[row]
    with loaded_release(release, tmp_path, drifts=(drift,)):
        before = flashinfer_objects()
        with pytest.raises(SignatureMismatchError) as info:
            fi_compat.install(strict=True)
        assert info.value.qualname == drift.spec.qualname
        assert info.value.release == release
        assert drift.words in info.value.difference
        assert drift.words in str(info.value) and drift.spec.qualname in str(info.value)
        assert_untouched(before)
        state = fi_compat.status()
        assert state["state"] == "not-installed" and state["patched"] == [] and state["caches"] == {}


@pytest.mark.parametrize("row,case", DRIFT_CASES)
def test_default_mode_warns_once_and_leaves_that_function_alone(row, case, tmp_path, caplog, by_name_only):
    drift = DRIFTS[row][case]
    release = DRIFT_RELEASE[row]
    with loaded_release(release, tmp_path, drifts=(drift,)) as fake:
        holder = (drift.spec.module, drift.spec.name)
        original = flashinfer_objects().get(holder)
        answered = behaviour(fake)
        with caplog.at_level(logging.DEBUG, logger="fi_compat"), pytest.warns(UnsupportedReleaseWarning) as warned:
            state = fi_compat.install()
        assert warnings_logged(caplog) == []  # a warning, not also a log line
        (message,) = [str(w.message) for w in warned if issubclass(w.category, UnsupportedReleaseWarning)]
        assert release in message and drift.spec.qualname in message and drift.words in message
        assert len(message) <= WARNING_LIMIT and "fi-compat doctor" in message, message
        assert any(drift.words in note for note in state["notes"])  # the full reason, for the doctor
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            fi_compat.install(cache_size=64)  # re-installs: the same cause, in the same process
        assert not [w for w in again if issubclass(w.category, UnsupportedReleaseWarning)]
        assert flashinfer_objects().get(holder) is original
        assert state["state"] == "installed" and state["outcome"] == PARTIAL
        rows = {b["name"]: b for b in state["bounds"]}
        assert rows[row]["verdict"] in (MISSING, MISMATCH) and rows[row]["patched"] == []
        assert any(b["patched"] for b in state["bounds"])  # the other rows are bounded all the same
        assert behaviour(fake) == answered


def test_a_memo_whose_parameters_became_positional_only_is_bounded_and_refuses_keywords_as_before(tmp_path):
    """flashinfer's builder calls the tuning config positionally: a release that makes its
    parameters positional-only changes nothing the memo does, so it is bounded (a note, not a
    WARNING, even under strict), and a call naming one by keyword still raises flashinfer's own
    TypeError, cached answer or not."""
    with loaded_release("0.6.18", tmp_path, drifts=(fakes.CONFIG_POSITIONAL_ONLY,)) as fake:
        answered = behaviour(fake)

        def by_keyword() -> str:
            with pytest.raises(TypeError) as info:
                fake.core._mla_decode_tuning_config(buckets=(1,), num_pages=1, profile_seq_len=1)
            return str(info.value)

        refused = by_keyword()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            state = fi_compat.install(strict=True)
        assert not [w for w in seen if issubclass(w.category, UnsupportedReleaseWarning)]
        rows = {b["name"]: b for b in state["bounds"]}
        assert rows["tuning-config"]["verdict"] == BOUND and rows["tuning-config"]["patched"], rows["tuning-config"]
        assert "became positional-only" in rows["tuning-config"]["reason"]
        assert not rows["tuning-config"]["verified"]  # a signature the matrix never ran
        assert behaviour(fake) == answered == behaviour(fake)  # the second answer from fi_compat's memo
        fake.core._mla_decode_tuning_config((1,), 1, 1)  # cached positionally ...
        assert by_keyword() == refused  # ... and still refused by keyword, in flashinfer's words


def test_a_memo_missing_by_name_is_warned_about_and_measured(tmp_path):
    """The tuning config gone by name (moved, renamed or removed): fi_compat no longer knows
    what keeps its configs, so install() says so once (a WARNING naming it), bounds the other
    rows as before, and the runtime watch (FI_COMPAT_WATCH=auto) measures what grows in its place."""
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFTS["tuning-config"]["vanished"],)):
        with pytest.warns(UnsupportedReleaseWarning) as warned:
            state = fi_compat.install()
        (message,) = [str(w.message) for w in warned if issubclass(w.category, UnsupportedReleaseWarning)]
        assert "_mla_decode_tuning_config is missing" in message and "left unbounded" in message, message
        assert state["state"] == "installed" and state["watch"] is not None
        assert "_mla_decode_tuning_config is missing" in state["watch"]["why"], state["watch"]
        rows = {b["name"]: b for b in state["bounds"]}
        assert rows["tuning-config"]["verdict"] == MISSING and rows["builder"]["patched"]
        with pytest.raises(SignatureMismatchError, match="_mla_decode_tuning_config is missing"):
            fi_compat.install(strict=True)  # strict: the typed error, nothing installed
        assert fi_compat.status(walk=False)["watch"] is None


def test_strict_from_the_environment(tmp_path, monkeypatch, by_name_only):
    monkeypatch.setenv("FI_COMPAT_STRICT", "1")
    with loaded_release("0.6.18", tmp_path, drifts=(DRIFTS["tuning-config"]["vanished"],)):
        with pytest.raises(SignatureMismatchError, match="is missing"):
            fi_compat.install()


def test_flashinfer_imported_without_its_modules_is_unsupported_not_silent(tmp_path, caplog):
    with loaded_release("0.6.18", tmp_path, imported=False):
        sys.modules["flashinfer"] = types.ModuleType("flashinfer")  # the loader takes it out again
        with pytest.warns(UnsupportedReleaseWarning) as warned:
            state = fi_compat.install()
        with pytest.raises(SignatureMismatchError, match="is missing"):
            fi_compat.install(strict=True)
    assert state["state"] == "unsupported" and state["patched"] == []
    said = [str(w.message) for w in warned]
    for bound in bounds.BOUNDS:
        if bound.spec.present_in(Version("0.6.18")):
            assert any(bound.spec.qualname in m and "is missing" in m for m in said), bound.name


def test_unverified_release_with_matching_signatures_is_bounded_with_one_warning(tmp_path, caplog):
    with loaded_release("0.7.5", tmp_path) as fake:
        with caplog.at_level(logging.WARNING, logger="fi_compat"), pytest.warns(UnverifiedReleaseWarning) as warned:
            state = fi_compat.install()
        assert warnings_logged(caplog) == []  # a warning, not also a log line
        (message,) = [str(w.message) for w in warned]
        assert "flashinfer 0.7.5 is outside the releases fi_compat verified" in message
        assert len(message) <= WARNING_LIMIT and "fi-compat doctor" in message, message
        unverified = [b for b in state["bounds"] if b["verdict"] == BOUND and not b["verified"]]
        assert f"{len(unverified)} caches bounded" in message
        assert any(b["cache"] == specs.TUNING_CONFIG.qualname for b in unverified)  # the rows: in status/doctor
        assert state["state"] == "installed" and state["outcome"] == UNVERIFIED
        assert getattr(fake.core._mla_decode_tuning_config, "_fi_compat_wrapper", False)


def test_the_warning_for_a_moved_function_names_the_module_it_was_found_in(tmp_path):
    with loaded_release("0.6.18", tmp_path, drifts=(fakes.CONFIG_MOVED,)):
        importlib.import_module(fakes.MOVED_TO)
        with pytest.warns(UnverifiedReleaseWarning) as warned:
            state = fi_compat.install()
    assert any(f"1 found moved, in {fakes.MOVED_TO}" in str(w.message) for w in warned)
    row = next(b for b in state["bounds"] if b["name"] == "tuning-config")
    assert f"found in {fakes.MOVED_TO}" in row["reason"]  # where: in status() and the doctor


def test_a_moved_function_is_bounded_and_its_row_says_where(tmp_path):
    with loaded_release("0.6.18", tmp_path, drifts=(fakes.CONFIG_MOVED,)) as fake:
        moved = importlib.import_module(fakes.MOVED_TO)
        with pytest.warns(UnverifiedReleaseWarning, match="found moved"):
            state = fi_compat.install()
        row = next(b for b in state["bounds"] if b["name"] == "tuning-config")
        assert f"found in {fakes.MOVED_TO}" in row["reason"] and row["verified"] is False
        assert row["patched"] == [f"{fakes.MOVED_TO}.{specs.TUNING_CONFIG.name}"]
        assert getattr(moved._mla_decode_tuning_config, "_fi_compat_wrapper", False)
        fake.core._build_mla_decode_tuning_config(**BUILDER_ARGS)  # reaches it through the moved module
        assert moved._mla_decode_tuning_config.cache_info().currsize == 1


def test_a_lazily_imported_module_is_patched_by_its_import_hook(tmp_path):
    lazy = specs.CUTE_DSL_SPLIT_KV.module
    with loaded_release("0.6.18", tmp_path) as fake:
        assert lazy not in sys.modules
        state = fi_compat.install()
        row = next(b for b in state["bounds"] if b["name"] == "split-kv")
        assert (row["verdict"], row["waiting_for"], row["patched"]) == (BOUND, lazy, [])
        for length in range(1, 400):  # the decode imports the module on its first cute-dsl call
            fake.core.trtllm_batch_decode_with_kv_cache_mla(*fakes.decode_args(length), backend="cute-dsl")
        sizer = sys.modules[lazy]._get_split_kv_and_workspace_size
        assert getattr(sizer, "_fi_compat_wrapper", False)
        row = next(b for b in fi_compat.status()["bounds"] if b["name"] == "split-kv")
        assert row["waiting_for"] is None and row["patched"] == [f"{lazy}.{specs.CUTE_DSL_SPLIT_KV.name}"]
        # the key holds ceil(max_seq_len / 128): 399 lengths are 4 entries, and flashinfer's own cache holds none
        assert row["fi_compat"]["currsize"] == 4
        assert row["flashinfer"] == {"currsize": 0, "maxsize": None}


def test_install_before_the_import_finishes_in_the_post_import_hook(tmp_path):
    with loaded_release("0.6.18", tmp_path, imported=False):
        assert fi_compat.install()["state"] == "pending"
        core = importlib.import_module(specs.CORE_MODULE)
        assert fi_compat.status()["state"] == "installed"
        assert getattr(core._mla_decode_tuning_config, "_fi_compat_wrapper", False)


def test_drift_found_by_the_post_import_hook_never_breaks_the_import(tmp_path, caplog):
    drift = DRIFTS["tuning-config"]["renamed"]
    with loaded_release("0.6.18", tmp_path, drifts=(drift,), imported=False):
        assert fi_compat.install()["state"] == "pending"
        with caplog.at_level(logging.WARNING, logger="fi_compat"), pytest.warns(UnsupportedReleaseWarning) as warned:
            core = importlib.import_module(specs.CORE_MODULE)
        assert warnings_logged(caplog) == []
        (message,) = [str(w.message) for w in warned if issubclass(w.category, UnsupportedReleaseWarning)]
        assert drift.words in message
        assert fi_compat.status()["state"] == "installed"
        assert not getattr(core._mla_decode_tuning_config, "_fi_compat_wrapper", False)


def test_a_strict_failure_in_the_hook_is_raised_by_the_import(tmp_path):
    """Strict: the mismatch found when flashinfer is imported raises the typed
    error from that import (issue 22: it used to be kept for a call nobody makes)."""
    drift = DRIFTS["tuning-config"]["renamed"]
    with loaded_release("0.6.18", tmp_path, drifts=(drift,), imported=False):
        assert fi_compat.install(strict=True)["state"] == "pending"
        with pytest.raises(SignatureMismatchError, match="renamed to 'profile_len'"):
            importlib.import_module(specs.CORE_MODULE)
        state = fi_compat.status()
        assert state["state"] == "failed" and drift.words in state["error"] and state["patched"] == []
        assert not any(getattr(v, "_fi_compat_wrapper", False) for v in flashinfer_objects().values())


def test_install_is_idempotent_and_uninstall_restores_every_object(tmp_path, caplog):
    with loaded_release("0.6.18", tmp_path) as fake:
        importlib.import_module(specs.CUTE_DSL_SPLIT_KV_BATCH_MLA.module)
        before = flashinfer_objects()
        fi_compat.install()
        proxy = fake.core._mla_decode_tuning_config
        with caplog.at_level(logging.DEBUG, logger="fi_compat"):
            fi_compat.install()
        assert fake.core._mla_decode_tuning_config is proxy
        assert any("nothing to do" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)
        assert sorted(fi_compat.status()["patched"]) == sorted([
            specs.TUNING_CONFIG.qualname, specs.TUNING_CONFIG_BUILDER.qualname, specs.CUTE_DSL_BATCH_CAP.qualname,
            "flashinfer.autotuner.autotuner." + specs.NEAREST_PROFILE_CACHED.name,
            specs.CUTE_DSL_SPLIT_KV_BATCH_MLA.qualname])  # the monolithic sizer's module is not loaded
        fi_compat.uninstall()
        assert_untouched(before)
        fi_compat.uninstall()
        assert_untouched(before)


@pytest.mark.parametrize("where", ["patch", "transparent"])
def test_a_failure_at_any_step_leaves_nothing_half_installed(where, tmp_path, monkeypatch):
    """Make the k-th attribute replacement fail, for every k (and the transparent
    mode's plan after them): install() re-raises and every object is the original."""
    import fi_compat.adapters.base as base
    from fi_compat.calls import transparent

    with loaded_release("0.7.4", tmp_path):
        for module in (specs.CUTE_DSL_SPLIT_KV.module, specs.CUTE_DSL_SPLIT_KV_BATCH_MLA.module):
            importlib.import_module(module)
        before = flashinfer_objects()
        replacements = len(fi_compat.install()["patched"])
        fi_compat.uninstall()
        assert replacements >= 5
        failing_points = range(1, replacements + 1) if where == "patch" else [None]
        for failing in failing_points:
            calls = []

            def counting_setattr(owner, attribute, value, calls=calls, failing=failing):
                calls.append(attribute)
                if len(calls) == failing:
                    raise RuntimeError(f"simulated failure replacing {attribute}")
                setattr(owner, attribute, value)

            def failing_plan(route):
                raise RuntimeError("simulated failure in transparent mode")

            monkeypatch.setattr(base, "setattr", counting_setattr, raising=False)
            monkeypatch.setattr(transparent, "plan", failing_plan)
            with pytest.raises(RuntimeError, match="simulated failure"):
                fi_compat.install(transparent=where == "transparent")
            monkeypatch.undo()
            assert_untouched(before)
            assert fi_compat.status()["state"] == "not-installed" and fi_compat.status()["patched"] == []
            installer.reset()
        assert fi_compat.install()["state"] == "installed"  # and a clean install afterwards works


def test_the_proxy_reports_its_own_cache_and_bypasses_flashinfers(tmp_path):
    with loaded_release("0.6.18", tmp_path) as fake:
        inner = fake.core._mla_decode_tuning_config
        fi_compat.install(cache_size=4)
        proxy = fake.core._mla_decode_tuning_config
        for length in range(100, 2000, 100):  # 19 lengths, more ladder steps than the bound holds
            proxy((1, 2), 8, length)
        info = proxy.cache_info()
        assert info.maxsize == 4 and info.currsize == 4
        assert inner.cache_info().currsize == 0
        proxy.cache_clear()
        assert proxy.cache_info().currsize == 0


def test_installing_releases_what_the_unbounded_cache_held(tmp_path):
    with loaded_release("0.6.18", tmp_path) as fake:
        for length in range(50):
            fake.core._mla_decode_tuning_config((1,), 8, length)
        inner = fake.core._mla_decode_tuning_config
        assert inner.cache_info().currsize == 50
        fi_compat.install()
        assert inner.cache_info().currsize == 0


def test_unsupported_release_error_names_the_release_and_what_to_do():
    error = UnsupportedReleaseError("0.9.0", "nothing binds the tuning config")
    assert str(error).startswith("flashinfer-python 0.9.0: nothing binds the tuning config. Pin a release")


# --------------------------------------------------------------------------- releases below a row (issue #25)


@pytest.mark.parametrize("row", ["nearest-profile", "split-kv", "builder"])
def test_a_release_below_the_rows_first_release_predates_it_even_with_the_function(row, tmp_path):
    """0.6.13's functions judged as 0.6.12: the row starts at 0.6.13 (its
    verified range), so it is not-in-release, found or not, and no problem."""
    with loaded_release("0.6.13", tmp_path) as fake:
        judged = judge(by_name(row), source_lookup(DirectoryReader(str(fake.root)))(by_name(row).spec),
                       Version("0.6.12"))
    assert judged.kind == NOT_IN_RELEASE and not judged.problem
    assert by_name(row).since == Version("0.6.13")
    assert "0.6.13" in judged.reason


def test_a_release_above_the_range_is_still_bound_unverified(tmp_path):
    with loaded_release("0.7.4", tmp_path) as fake:
        whole = judged_release(fake, "0.7.5")
    assert whole.outcome == UNVERIFIED


def test_a_release_below_every_row_has_the_outcome_predates(tmp_path):
    with loaded_release("0.6.13", tmp_path) as fake:
        whole = judged_release(fake, "0.6.4")
    assert whole.outcome == PREDATES and whole.problems == []
    assert "predates every cache fi_compat bounds (the first arrives in 0.6.13)" in whole.reason()


def test_every_row_is_verified_through_one_release():
    """The verified ranges end at one constant (specs.VERIFIED_THROUGH): moving
    the matrix to a new release is one edit, not one per row."""
    from packaging.specifiers import SpecifierSet

    ends = {(s.operator, s.version) for row in bounds.BOUNDS for s in row.verified if s.operator.startswith("<")}
    assert ends == {("<=", specs.VERIFIED_THROUGH)}
    assert specs.verified_from("0.6.13") == SpecifierSet(">=0.6.13,<=" + specs.VERIFIED_THROUGH)


def test_an_unverified_release_warns_once_per_process_across_lazily_imported_modules(tmp_path, caplog):
    """vLLM's path on a release the matrix never ran: install(), then each cute-dsl
    module imported lazily by a decode is judged again.  Before issue 39 each
    judgement raised the same UnverifiedReleaseWarning again (4 on vLLM's path),
    each also logged; now one warning, no log line, at most 200 characters."""
    lazy = [specs.CUTE_DSL_SPLIT_KV.module]
    with loaded_release("0.7.5", tmp_path) as fake:
        assert all(module not in sys.modules for module in lazy)
        with caplog.at_level(logging.WARNING, logger="fi_compat"), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            fi_compat.install()
            for length in range(1, 50):  # the decode imports the cute-dsl module on its first cute-dsl call
                fake.core.trtllm_batch_decode_with_kv_cache_mla(*fakes.decode_args(length), backend="cute-dsl")
            fi_compat.install(cache_size=64)  # re-judged on new settings: the same cause
        assert all(module in sys.modules for module in lazy)
        row = next(b for b in fi_compat.status()["bounds"] if b["name"] == "split-kv")
        assert row["patched"] and row["verified"] is False  # judged again, live, after the lazy import
    unverified = [str(w.message) for w in said if issubclass(w.category, UnverifiedReleaseWarning)]
    assert len(unverified) == 1 and len(unverified[0]) <= WARNING_LIMIT, unverified
    assert warnings_logged(caplog) == []
