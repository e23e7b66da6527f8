"""The bad-input catalogue: every public entry point and the CLI, fed wrong
types, out-of-range sizes, unknown policy names and malformed environment
variables, plus every typed error and warning fi_compat raises.

One table, two readers: ``tests/test_errors_catalogue.py`` runs each row and
checks the exception type, the message fragment and that nothing was
installed; ``scripts/generate_errors_doc.py`` runs the same rows and writes the
messages a user sees into ``docs/errors.md`` (a test fails when that file is
out of date).

Rows that reach flashinfer run against a fake release of ``tests/helpers/fakes.py``
(every module fi_compat reads, written as source and imported), so every
message is the same whatever flashinfer is installed (and none is imported).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from packaging.version import Version

from helpers import fakes

NOT_DEFAULT = object()  # a non-default value for any keyword


@dataclass(frozen=True)
class Row:
    """``call()`` runs in :func:`sandbox`: ``env`` set, the fake ``release``
    (with ``drifts``, then ``replace`` on its core module) imported as flashinfer."""

    id: str
    entry: str  # what a user calls, e.g. "install()", "FI_COMPAT_CACHE_SIZE", "fi-compat"
    given: str  # the bad input, in words a user recognises
    call: Callable[[], Any]
    raises: str  # exception or warning class name, or "exit 2"
    contains: str  # a fragment the message must contain
    env: dict = field(default_factory=dict)
    importable: bool = True  # False: flashinfer cannot be imported at all
    release: str = "0.6.18"
    drifts: tuple = ()
    replace: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # name -> bytes, written to a temporary working directory


@dataclass
class Outcome:
    raises: str
    message: str
    state: str  # fi_compat's state afterwards


@contextlib.contextmanager
def not_importable(release: str) -> Iterator[None]:
    """flashinfer's decode module cannot be imported; release detection still says ``release``."""
    from fi_compat.installing import installer
    from fi_compat.model.release_detection import ReleaseInfo
    from fi_compat.model.specs import CORE_MODULE

    saved = {n: m for n, m in sys.modules.items() if n == "flashinfer" or n.startswith("flashinfer.")}
    saved_detect = installer.detect_release
    for name in saved:
        del sys.modules[name]
    for package in ("flashinfer", "flashinfer.mla"):
        sys.modules[package] = types.ModuleType(package)
        sys.modules[package].__path__ = []  # type: ignore[attr-defined]
    sys.modules[CORE_MODULE] = None  # type: ignore[assignment]  (import fails)
    info = ReleaseInfo(Version(release), "metadata", metadata_version=release)
    installer.detect_release = lambda: info
    try:
        yield
    finally:
        installer.detect_release = saved_detect
        for name in [n for n in sys.modules if n == "flashinfer" or n.startswith("flashinfer.")]:
            del sys.modules[name]
        sys.modules.update(saved)


@contextlib.contextmanager
def sandbox(row: Row) -> Iterator[str]:
    """Environment, working directory and a fake flashinfer release; all undone after."""
    from fi_compat.installing import installer

    saved_env = {k: v for k, v in os.environ.items() if k.startswith("FI_COMPAT_")}
    saved_cwd = os.getcwd()
    workdir = tempfile.mkdtemp(prefix="fi-compat-errors-")
    with contextlib.ExitStack() as loaded:
        try:
            if row.importable:
                loaded.enter_context(fakes.loaded_release(row.release, drifts=row.drifts, replace=row.replace))
            else:
                loaded.enter_context(not_importable(row.release))
            installer.reset()
            os.chdir(workdir)
            for name, content in row.files.items():
                with open(name, "wb") as handle:
                    handle.write(content)
            for key in saved_env:
                del os.environ[key]
            os.environ.update(row.env)
            yield workdir
        finally:
            os.chdir(saved_cwd)
            shutil.rmtree(workdir, ignore_errors=True)
            installer.reset()
            for key in [k for k in os.environ if k.startswith("FI_COMPAT_")]:
                del os.environ[key]
            os.environ.update(saved_env)


def run(row: Row) -> Outcome:
    """Run one row; the first fi_compat warning counts as the outcome if nothing raised."""
    with sandbox(row) as workdir:
        outcome = _run(row)
    for directory in {workdir, os.path.realpath(workdir)}:  # temporary paths would make the doc unstable
        outcome.message = outcome.message.replace(directory + os.sep, "")
    return outcome


def _run(row: Row) -> Outcome:
    import fi_compat
    from fi_compat.errors import FiCompatWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            row.call()
        except SystemExit as exc:
            return Outcome(f"exit {exc.code}", _cli_message(), fi_compat.status()["state"])
        except Exception as exc:  # noqa: BLE001  (that is the point)
            return Outcome(type(exc).__name__, str(exc), fi_compat.status()["state"])
    state = fi_compat.status()["state"]
    for warning in caught:
        if issubclass(warning.category, FiCompatWarning):
            return Outcome(warning.category.__name__, str(warning.message), state)
    return Outcome("nothing", "", state)


_last_stderr = io.StringIO()
_last_stdout = io.StringIO()


def _cli_message() -> str:
    """What the user reads: a guard result's reason (``--json``), else stderr."""
    out = _last_stdout.getvalue()
    if out.lstrip().startswith("{"):
        import json

        results = json.loads(out).get("results") or []
        errors = [r["reason"] for r in results if r.get("verdict") == "error"]
        if errors:
            return errors[0]
    return _last_stderr.getvalue().strip()


def cli(*argv: str) -> Callable[[], Any]:
    def call() -> Any:
        from fi_compat.cli import main

        global _last_stderr, _last_stdout
        _last_stderr, _last_stdout = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(_last_stderr), contextlib.redirect_stdout(_last_stdout):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse
                code = exc.code
        raise SystemExit(code)

    return call


def _zip(members: dict) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def install(**kwargs: Any) -> Callable[[], Any]:
    def call() -> Any:
        import fi_compat

        return fi_compat.install(**kwargs)

    return call


def decode_args(max_seq_len: Any = 4096) -> list:
    shaped = fakes.Shaped
    return [shaped(4, 1, 128, 576), shaped(64, 32, 576), shaped(1 << 20), 128, 512, 64, shaped(4, 64), shaped(4),
            max_seq_len]


def mla_decode(*args: Any, **kwargs: Any) -> Callable[[], Any]:
    def call() -> Any:
        import fi_compat

        return fi_compat.mla_decode(*args, **kwargs)

    return call


def builder_kwargs(**overrides: Any) -> dict:
    values = dict(fakes.BUILDER_ARGS)
    values.update(overrides)
    return values


def build(**kwargs: Any) -> Callable[[], Any]:
    def call() -> Any:
        import fi_compat

        return fi_compat.build_mla_decode_tuning_config(**kwargs)

    return call


def policy(*args: Any, **kwargs: Any) -> Callable[[], Any]:
    def call() -> Any:
        import fi_compat

        return fi_compat.apply_max_seq_len_policy(*args, **kwargs)

    return call


ACCEPTED_POLICY = dict(policy="bucket", page_size=32, capacity=4096)

ROWS: list[Row] = [
    # ---------------------------------------------------------------- install()
    Row("install-maxsize-str", "install()", "maxsize='big'", install(maxsize="big"), "ValueError",
        "maxsize='big' is not an integer"),
    Row("install-maxsize-float", "install()", "maxsize=8.0", install(maxsize=8.0), "ValueError",
        "maxsize=8.0 (float) is not an integer"),
    Row("install-maxsize-bool", "install()", "maxsize=True", install(maxsize=True), "ValueError",
        "maxsize=True (bool) is not an integer"),
    Row("install-maxsize-zero", "install()", "maxsize=0", install(maxsize=0), "ValueError",
        "maxsize=0 is out of range; accepted: 1 to 1048576"),
    Row("install-maxsize-huge", "install()", "maxsize=2**21", install(maxsize=2**21), "ValueError",
        "maxsize=2097152 is out of range"),
    Row("install-policy-unknown", "install()", "max_seq_len_policy='fixed'", install(max_seq_len_policy="fixed"),
        "ValueError", "is not a max_seq_len policy; accepted: exact, bucket, capacity"),
    Row("install-policy-type", "install()", "max_seq_len_policy=3", install(max_seq_len_policy=3), "ValueError",
        "max_seq_len_policy=3 is not a max_seq_len policy"),
    Row("install-strict-str", "install()", "strict='maybe'", install(strict="maybe"), "ValueError",
        "strict='maybe' is not a boolean"),
    Row("install-strict-int", "install()", "strict=1", install(strict=1), "ValueError",
        "strict=1 is not a boolean; accepted: True or False"),
    Row("install-transparent-type", "install()", "transparent=[True]", install(transparent=[True]), "ValueError",
        "transparent=[True] is not a boolean"),
    Row("install-positional", "install()", "install(64)", lambda: __import__("fi_compat").install(64), "TypeError",
        "takes 0 positional arguments"),
    Row("install-unknown-keyword", "install()", "max_size=64 (the keyword is cache_size)", install(max_size=64),
        "TypeError", "unexpected keyword argument 'max_size'"),
    # ---------------------------------------------------------------- environment
    Row("env-cache-size-word", "FI_COMPAT_CACHE_SIZE", "'lots'", install(), "ValueError",
        "FI_COMPAT_CACHE_SIZE='lots' is not an integer", env={"FI_COMPAT_CACHE_SIZE": "lots"}),
    Row("env-cache-size-float", "FI_COMPAT_CACHE_SIZE", "'1.5'", install(), "ValueError",
        "FI_COMPAT_CACHE_SIZE='1.5' is not an integer", env={"FI_COMPAT_CACHE_SIZE": "1.5"}),
    Row("env-cache-size-zero", "FI_COMPAT_CACHE_SIZE", "'0'", install(), "ValueError",
        "FI_COMPAT_CACHE_SIZE=0 is out of range", env={"FI_COMPAT_CACHE_SIZE": "0"}),
    Row("env-cache-size-negative", "FI_COMPAT_CACHE_SIZE", "'-5'", install(), "ValueError",
        "FI_COMPAT_CACHE_SIZE='-5' is not an integer; accepted: an integer from 1 to 1048576, written with the "
        "digits 0-9 only", env={"FI_COMPAT_CACHE_SIZE": "-5"}),
    Row("env-cache-size-underscore", "FI_COMPAT_CACHE_SIZE", "'1_000'", install(), "ValueError",
        "FI_COMPAT_CACHE_SIZE='1_000' is not an integer", env={"FI_COMPAT_CACHE_SIZE": "1_000"}),
    Row("env-cache-size-plus", "FI_COMPAT_CACHE_SIZE", "'+5'", install(), "ValueError",
        "FI_COMPAT_CACHE_SIZE='+5' is not an integer", env={"FI_COMPAT_CACHE_SIZE": "+5"}),
    Row("env-cache-size-other-digits", "FI_COMPAT_CACHE_SIZE", "'\u0663' (Arabic-Indic three)", install(),
        "ValueError", "FI_COMPAT_CACHE_SIZE='\u0663' is not an integer", env={"FI_COMPAT_CACHE_SIZE": "\u0663"}),
    Row("env-disable-with-strict", "FI_COMPAT_DISABLE", "'1' with install(strict=True)", install(strict=True),
        "ValueError", "FI_COMPAT_DISABLE=1 (environment) contradicts strict=True (install() argument)",
        env={"FI_COMPAT_DISABLE": "1"}),
    Row("env-policy", "FI_COMPAT_MAX_SEQ_LEN_POLICY", "'round'", install(), "ValueError",
        "FI_COMPAT_MAX_SEQ_LEN_POLICY='round' is not a max_seq_len policy",
        env={"FI_COMPAT_MAX_SEQ_LEN_POLICY": "round"}),
    Row("env-strict", "FI_COMPAT_STRICT", "'maybe'", install(), "ValueError",
        "FI_COMPAT_STRICT='maybe' is not a boolean; accepted: 0, 1, false, no, off, on, true, yes",
        env={"FI_COMPAT_STRICT": "maybe"}),
    Row("env-disable", "FI_COMPAT_DISABLE", "'2'", install(), "ValueError", "FI_COMPAT_DISABLE='2' is not a boolean",
        env={"FI_COMPAT_DISABLE": "2"}),
    Row("env-transparent", "FI_COMPAT_TRANSPARENT", "'enabled'", install(), "ValueError",
        "FI_COMPAT_TRANSPARENT='enabled' is not a boolean", env={"FI_COMPAT_TRANSPARENT": "enabled"}),
    Row("env-via-mla-decode", "FI_COMPAT_CACHE_SIZE (first mla_decode installs)", "'lots'",
        mla_decode(*decode_args()), "ValueError", "FI_COMPAT_CACHE_SIZE='lots' is not an integer",
        env={"FI_COMPAT_CACHE_SIZE": "lots"}),
    # ---------------------------------------------------------------- mla_decode()
    Row("decode-max-seq-len-str", "mla_decode()", "max_seq_len='4096'", mla_decode(*decode_args("4096")),
        "ValueError", "max_seq_len='4096' (str) is not an int; accepted: an int from 1 to 2147483647"),
    Row("decode-max-seq-len-float", "mla_decode()", "max_seq_len=4096.0", mla_decode(*decode_args(4096.0)),
        "ValueError", "max_seq_len=4096.0 (float) is not an int"),
    Row("decode-max-seq-len-bool", "mla_decode()", "max_seq_len=True", mla_decode(*decode_args(True)),
        "ValueError", "max_seq_len=True (bool) is not an int"),
    Row("decode-max-seq-len-zero", "mla_decode()", "max_seq_len=0", mla_decode(*decode_args(0)), "ValueError",
        "max_seq_len=0 is out of range; accepted: 1 to 2147483647"),
    Row("decode-max-seq-len-huge", "mla_decode()", "max_seq_len=2**31", mla_decode(*decode_args(2**31)),
        "ValueError", "max_seq_len=2147483648 is out of range"),
    Row("decode-max-seq-len-missing", "mla_decode()", "no max_seq_len", mla_decode(*decode_args()[:8]),
        "TypeError", "missing required argument 'max_seq_len'"),
    Row("decode-policy-unknown", "mla_decode()", "max_seq_len_policy='fixed'",
        mla_decode(*decode_args(), max_seq_len_policy="fixed"), "ValueError",
        "max_seq_len_policy='fixed' is not a max_seq_len policy"),
    Row("decode-unknown-keyword", "mla_decode()", "max_kv_len=4096", mla_decode(*decode_args(), max_kv_len=4096),
        "TypeError", "unexpected keyword argument 'max_kv_len'; accepted: query, kv_cache"),
    Row("decode-too-many-positional", "mla_decode()", "34 positional arguments", mla_decode(*decode_args(), *[None] * 25),
        "TypeError", "takes at most 33 positional arguments (34 given)"),
    Row("decode-duplicate-argument", "mla_decode()", "bmm1_scale positionally and by keyword",
        mla_decode(*decode_args(), 0, None, 1.0, bmm1_scale=0.5), "TypeError",
        "fi_compat.mla_decode() got multiple values for argument 'bmm1_scale': positional argument 12 and the "
        "keyword bmm1_scale="),
    Row("decode-missing-argument", "mla_decode()", "no seq_lens", mla_decode(*decode_args()[:7], max_seq_len=64),
        "TypeError", "fi_compat.mla_decode() missing required argument 'seq_lens'"),
    Row("decode-max-seq-len-tensor", "mla_decode()", "max_seq_len=<0-d tensor>",
        mla_decode(*decode_args(fakes.Scalar(4096))), "ValueError",
        "is not an int; accepted: an int from 1 to 2147483647 (the maximum KV length of the batch); for a tensor pass .item()"),
    Row("decode-gained-required", "mla_decode()", "a release whose decode gained a required parameter",
        mla_decode(*decode_args()), "SignatureMismatchError",
        "trtllm_batch_decode_with_kv_cache_mla gained required parameter 'page_stride', which fi_compat does not "
        "know", replace={"trtllm_batch_decode_with_kv_cache_mla": fakes.decode_gained_required}),
    Row("decode-renamed-keyword", "mla_decode()", "bmm2_scale=0.5 on a release that renamed it",
        mla_decode(*decode_args(), bmm2_scale=0.5), "UnsupportedFeatureError",
        "keyword 'bmm2_scale' is not a parameter of flashinfer.mla._core.trtllm_batch_decode_with_kv_cache_mla in "
        "the installed flashinfer-python 0.6.18 (renamed or removed",
        replace={"trtllm_batch_decode_with_kv_cache_mla": fakes.decode_renamed_bmm2}),
    Row("decode-new-default", "mla_decode()", "a release that changed bmm2_scale's default",
        mla_decode(*decode_args()), "DefaultMismatchWarning",
        "'bmm2_scale' defaults to 2.0 (the call API documents 1.0)",
        replace={"trtllm_batch_decode_with_kv_cache_mla": fakes.decode_new_default}),
    Row("decode-unsupported-keyword", "mla_decode()", "multi_ctas_kv_counter_buffer=<tensor> on 0.6.13",
        mla_decode(*decode_args(), multi_ctas_kv_counter_buffer=fakes.Shaped(8)), "UnsupportedFeatureError",
        "keyword 'multi_ctas_kv_counter_buffer' was added in flashinfer-python 0.6.15; the installed release "
        "is 0.6.13", release="0.6.13"),
    Row("decode-no-flashinfer", "mla_decode()", "flashinfer-python not importable", mla_decode(*decode_args()),
        "ImportError", "fi_compat.mla_decode needs flashinfer-python importable on this host",
        env={"FI_COMPAT_DISABLE": "1"}, importable=False),
    # ---------------------------------------------------------------- build_mla_decode_tuning_config()
    Row("build-max-seq-len-str", "build_mla_decode_tuning_config()", "max_seq_len='64'",
        build(**builder_kwargs(max_seq_len="64")), "ValueError", "max_seq_len='64' (str) is not an int"),
    Row("build-max-seq-len-negative", "build_mla_decode_tuning_config()", "max_seq_len=-1",
        build(**builder_kwargs(max_seq_len=-1)), "ValueError", "max_seq_len=-1 is out of range"),
    Row("build-unknown-keyword", "build_mla_decode_tuning_config()", "page_size=32",
        build(**builder_kwargs(page_size=32)), "TypeError", "unexpected keyword argument 'page_size'"),
    Row("build-unsupported-keyword", "build_mla_decode_tuning_config()", "sinks=<tensor> on 0.6.13",
        build(**builder_kwargs(sinks=fakes.Shaped(128))), "UnsupportedFeatureError",
        "keyword 'sinks' was added in flashinfer-python 0.6.16; the installed release is 0.6.13",
        release="0.6.13"),
    Row("build-missing", "build_mla_decode_tuning_config()", "a release without the builder (renamed)",
        build(**builder_kwargs()), "SignatureMismatchError",
        "_build_mla_decode_tuning_config is missing (moved or removed)", replace={"_build_mla_decode_tuning_config": None}),
    Row("build-predates", "build_mla_decode_tuning_config()", "a release older than the builder",
        build(**builder_kwargs()), "UnsupportedFeatureError",
        "which flashinfer-python added in 0.6.13; the installed release 0.6.12 predates it", release="0.6.12",
        replace={"_build_mla_decode_tuning_config": None}),
    # ---------------------------------------------------------------- apply_max_seq_len_policy()
    Row("policy-unknown", "apply_max_seq_len_policy()", "policy='fixed'",
        policy(100, policy="fixed", page_size=32, capacity=4096), "ValueError",
        "max_seq_len_policy='fixed' is not a max_seq_len policy; accepted: exact, bucket, capacity"),
    Row("policy-max-seq-len", "apply_max_seq_len_policy()", "max_seq_len=-3", policy(-3, **ACCEPTED_POLICY),
        "ValueError", "max_seq_len=-3 is out of range"),
    Row("policy-page-size-zero", "apply_max_seq_len_policy()", "page_size=0",
        policy(100, policy="bucket", page_size=0, capacity=4096), "ValueError",
        "page_size=0 is out of range; accepted: a positive int"),
    Row("policy-page-size-str", "apply_max_seq_len_policy()", "page_size='32'",
        policy(100, policy="bucket", page_size="32", capacity=4096), "ValueError",
        "page_size='32' (str) is not an int"),
    Row("policy-capacity-str", "apply_max_seq_len_policy()", "capacity='4096'",
        policy(100, policy="exact", page_size=32, capacity="4096"), "ValueError",
        "capacity='4096' (str) is not an int"),
    Row("policy-capacity-negative", "apply_max_seq_len_policy()", "capacity=-1",
        policy(100, policy="capacity", page_size=32, capacity=-1), "ValueError",
        "capacity=-1 is out of range; accepted: a positive int"),
    # ---------------------------------------------------------------- typed errors and warnings
    Row("strict-signature", "install(strict=True)", "a parameter renamed (the tuning config)", install(strict=True),
        "SignatureMismatchError", "_mla_decode_tuning_config parameter 'profile_seq_len' was renamed to "
        "'profile_len'", drifts=(fakes.DRIFTS["tuning-config"]["renamed"],)),
    Row("strict-missing", "install(strict=True)", "a function removed (the tuning config)",
        install(strict=True), "SignatureMismatchError",
        "flashinfer.mla._core._mla_decode_tuning_config is missing (moved or removed)",
        drifts=(fakes.DRIFTS["tuning-config"]["vanished"],)),
    Row("strict-unverified", "install(strict=True)", "a release the release matrix never ran, signatures fit",
        install(strict=True), "UnverifiedReleaseError",
        "flashinfer-python 0.7.5: flashinfer 0.7.5 is outside the releases fi_compat verified", release="0.7.5"),
    Row("default-drift", "install()", "a parameter renamed (the tuning config)", install(), "UnsupportedReleaseWarning",
        "parameter 'profile_seq_len' was renamed to 'profile_len'; left unbounded (details: fi-compat doctor)",
        drifts=(fakes.DRIFTS["tuning-config"]["renamed"],)),
    Row("unverified-release", "install()", "a release the release matrix never ran, signatures fit",
        install(), "UnverifiedReleaseWarning",
        "flashinfer 0.7.5 is outside the releases fi_compat verified; 8 caches bounded (signatures match)",
        release="0.7.5"),
    # ---------------------------------------------------------------- CLI
    Row("cli-no-command", "fi-compat", "no subcommand", cli(), "exit 2", "usage: fi-compat"),
    Row("cli-unknown-command", "fi-compat", "frobnicate", cli("frobnicate"), "exit 2", "invalid choice: 'frobnicate'"),
    Row("cli-unknown-option", "fi-compat", "--bogus", cli("--bogus"), "exit 2", "unrecognized arguments: --bogus"),
    # ---------------------------------------------------------------- fi-compat guard (never reaches the network)
    Row("guard-nothing", "fi-compat guard", "no FILE, --pin or --wheel", cli("guard"), "exit 2",
        "fi-compat guard: give requirement FILEs, --pin REQ or --wheel PATH"),
    Row("guard-max-releases", "fi-compat guard", "--max-releases 0",
        cli("guard", "--max-releases", "0", "--pin", "flashinfer-python==0.6.18"), "exit 2",
        "--max-releases must be at least 1"),
    Row("guard-max-releases-type", "fi-compat guard", "--max-releases many",
        cli("guard", "--max-releases", "many", "--pin", "flashinfer-python==0.6.18"), "exit 2",
        "argument --max-releases: invalid int value: 'many'"),
    Row("guard-file-missing", "fi-compat guard", "a requirement file that does not exist",
        cli("guard", "--offline", "--json", "missing.txt"), "exit 2", "missing.txt: no such requirement file"),
    Row("guard-file-malformed", "fi-compat guard", "requirements.txt: flashinfer-python>=0.6.15,<<0.7",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2",
        "requirements.txt:1: malformed requirement 'flashinfer-python>=0.6.15,<<0.7'",
        files={"requirements.txt": b"flashinfer-python>=0.6.15,<<0.7\n"}),
    Row("guard-file-remote-include", "fi-compat guard", "requirements.txt: -r https://example.com/r.txt",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2",
        "requirements.txt:1: remote include 'https://example.com/r.txt' is not supported",
        files={"requirements.txt": b"-r https://example.com/r.txt\n"}),
    Row("guard-file-include-cycle", "fi-compat guard", "a.txt: -r b.txt, b.txt: -r a.txt",
        cli("guard", "--offline", "--json", "a.txt"), "exit 2", "include cycle",
        files={"a.txt": b"-r b.txt\n", "b.txt": b"-r a.txt\n"}),
    Row("guard-file-direct-url", "fi-compat guard", "requirements.txt: flashinfer-python @ https://…/x.whl",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2",
        "flashinfer-python from a URL (https://example.com/flashinfer_python-0.6.18-py3-none-any.whl) cannot be "
        "verified offline",
        files={"requirements.txt": b"flashinfer-python @ https://example.com/flashinfer_python-0.6.18-py3-none-any.whl\n"}),
    Row("guard-file-vcs", "fi-compat guard", "requirements.txt: git+https://…/flashinfer.git#egg=flashinfer-python",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2", "names a commit, not a release",
        files={"requirements.txt": b"git+https://github.com/flashinfer-ai/flashinfer.git@v0.6.18#egg=flashinfer-python\n"}),
    Row("guard-file-archive-url", "fi-compat guard",
        "requirements.txt: https://github.com/flashinfer-ai/flashinfer/archive/refs/tags/v0.7.4.tar.gz",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2",
        "is a source archive of the flashinfer repository (a code host's archive of a ref), not a wheel",
        files={"requirements.txt": b"https://github.com/flashinfer-ai/flashinfer/archive/refs/tags/v0.7.4.tar.gz\n"}),
    Row("guard-file-version-and-url", "fi-compat guard", "requirements.txt: flashinfer-python==0.7.4 @ https://…/x.whl",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2",
        "gives both a version (==0.7.4) and a URL: a direct reference (`name @ URL`) takes no version",
        files={"requirements.txt": b"flashinfer-python==0.7.4 @ https://example.com/flashinfer_python-0.7.4-py3-none-any.whl\n"}),
    Row("guard-offline-range-past-list", "fi-compat guard", "--offline --pin 'flashinfer-python<0.6.13'",
        cli("guard", "--offline", "--json", "--pin", "flashinfer-python<0.6.13"), "exit 2",
        "flashinfer-python<0.6.13 admits releases before 0.6.13, which were not checked: --offline"),
    Row("guard-file-editable", "fi-compat guard", "requirements.txt: -e ./flashinfer",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2", "an editable install of flashinfer-python",
        files={"requirements.txt": b"-e ./flashinfer\n"}),
    Row("guard-file-local-wheel-missing", "fi-compat guard",
        "requirements.txt: ./flashinfer_python-0.6.18-py3-none-any.whl, absent",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2",
        "the local wheel ./flashinfer_python-0.6.18-py3-none-any.whl does not exist",
        files={"requirements.txt": b"./flashinfer_python-0.6.18-py3-none-any.whl\n"}),
    Row("guard-file-not-text", "fi-compat guard", "a requirement file that is neither UTF-8 nor UTF-16/32 with a BOM",
        cli("guard", "--offline", "--json", "requirements.txt"), "exit 2", "requirements.txt: cannot read",
        files={"requirements.txt": b"\x80flashinfer-python==0.6.18\n"}),
    Row("guard-toml-unknown", "fi-compat guard", "ruff.toml (a TOML file that pins nothing known)",
        cli("guard", "--offline", "--json", "ruff.toml"), "exit 2", "ruff.toml: cannot tell which format",
        files={"ruff.toml": b"line-length = 100\n"}),
    Row("guard-toml-invalid", "fi-compat guard", "pyproject.toml that is not valid TOML",
        cli("guard", "--offline", "--json", "pyproject.toml"), "exit 2", "pyproject.toml: not valid TOML",
        files={"pyproject.toml": b"[project\n"}),
    Row("guard-group-missing", "fi-compat guard", "pyproject.toml: {include-group = \"missing\"}",
        cli("guard", "--offline", "--json", "pyproject.toml"), "exit 2",
        "[dependency-groups] dev: Dependency group 'missing' not found",
        files={"pyproject.toml": b'[dependency-groups]\ndev = [{include-group = "missing"}]\n'}),
    Row("guard-format-unknown", "fi-compat guard", "--format setup.py",
        cli("guard", "--format", "setup.py", "requirements.txt"), "exit 2", "argument --format: invalid choice"),
    Row("guard-download-offline", "fi-compat guard", "--download --offline",
        cli("guard", "--download", "--offline", "--pin", "flashinfer-python==0.6.18"), "exit 2",
        "--download fetches URLs and --offline forbids it"),
    Row("guard-pin-other", "fi-compat guard", "--pin numpy==1", cli("guard", "--offline", "--json", "--pin", "numpy==1"),
        "exit 2", "--pin 'numpy==1': the guard checks flashinfer-python only"),
    Row("guard-pin-malformed", "fi-compat guard", "--pin flashinfer-python===",
        cli("guard", "--offline", "--json", "--pin", "flashinfer-python==="), "exit 2",
        "--pin 'flashinfer-python===': malformed requirement"),
    Row("guard-wheel-missing", "fi-compat guard", "--wheel nowhere.whl",
        cli("guard", "--json", "--wheel", "nowhere.whl"), "exit 2", "nowhere.whl: no such file"),
    Row("guard-wheel-not-zip", "fi-compat guard", "--wheel of a file that is not a zip",
        cli("guard", "--json", "--wheel", "fake.whl"), "exit 2",
        "fake.whl: not a zip archive, so not a wheel", files={"fake.whl": b"not a zip"}),
    Row("guard-wheel-other-package", "fi-compat guard", "--wheel of another package's wheel",
        cli("guard", "--json", "--wheel", "numpy.whl"), "exit 2", "numpy.whl: not a flashinfer-python wheel",
        files={"numpy.whl": _zip({"numpy/__init__.py": ""})}),
    Row("guard-find-links-missing", "fi-compat guard", "--find-links nowhere (not a directory)",
        cli("guard", "--find-links", "nowhere", "--pin", "flashinfer-python==0.6.18"), "exit 2",
        "fi-compat guard: --find-links nowhere: no such directory"),
    Row("guard-census-missing-dependency", "fi-compat guard",
        "--census, a wheel whose Requires-Dist names a distribution the guard's Python lacks",
        cli("guard", "--census", "--json", "--wheel", "flashinfer_python-0.6.18-py3-none-any.whl"), "exit 2",
        "--census needs pip, torch and flashinfer-python 0.6.18's dependencies in the Python that runs the guard",
        files={"flashinfer_python-0.6.18-py3-none-any.whl": _zip({
            **fakes.release_files("0.6.18"),
            "flashinfer_python-0.6.18.dist-info/METADATA": "Metadata-Version: 2.1\nName: flashinfer-python\n"
            "Version: 0.6.18\nRequires-Dist: torch\nRequires-Dist: absent-dependency>=1.0\n\n"})}),
    # ---------------------------------------------------------------- fi-compat doctor / audit / soak
    Row("doctor-unknown-option", "fi-compat doctor", "--bogus", cli("doctor", "--bogus"), "exit 2",
        "unrecognized arguments: --bogus"),
    Row("audit-source-missing", "fi-compat audit", "--source /nonexistent/flashinfer",
        cli("audit", "--source", "/nonexistent/flashinfer"), "exit 2",
        "fi-compat audit: nothing to audit: not a directory: /nonexistent/flashinfer"),
    Row("audit-wheel-missing", "fi-compat audit", "--wheel nowhere.whl", cli("audit", "--wheel", "nowhere.whl"),
        "exit 2", "fi-compat audit: nothing to audit: wheel not found: nowhere.whl"),
    Row("audit-wheel-not-zip", "fi-compat audit", "--wheel of a file that is not a zip",
        cli("audit", "--wheel", "fake.whl"), "exit 2",
        "fi-compat audit: nothing to audit: not a wheel (a .whl file is a zip archive): fake.whl",
        files={"fake.whl": b"not a zip"}),
    Row("audit-top-type", "fi-compat audit", "--top many", cli("audit", "--top", "many"), "exit 2",
        "argument --top: invalid int value: 'many'"),
    Row("audit-steps", "fi-compat audit", "--live --steps 0", cli("audit", "--live", "--steps", "0"), "exit 2",
        "fi-compat audit: --steps 0: must be at least 1"),
    Row("audit-live-with-wheel", "fi-compat audit", "--live --wheel x.whl", cli("audit", "--live", "--wheel", "x.whl"),
        "exit 2", "--live measures the installed flashinfer; it cannot be combined with --source or --wheel"),
    Row("soak-steps", "fi-compat soak", "--steps 0", cli("soak", "--steps", "0"), "exit 2",
        "argument --steps: 0 must be positive"),
    Row("soak-cache-size", "fi-compat soak", "--cache-size 0", cli("soak", "--cache-size", "0"), "exit 2",
        "argument --cache-size: 0 must be positive"),
    Row("soak-context", "fi-compat soak", "--context 0", cli("soak", "--context", "0"), "exit 2",
        "argument --context: 0 must be positive"),
    Row("soak-policy", "fi-compat soak", "--policy fixed", cli("soak", "--policy", "fixed"), "exit 2",
        "argument --policy: invalid choice: 'fixed'"),
    Row("soak-batch-sizes", "fi-compat soak", "--batch-sizes 64:8", cli("soak", "--batch-sizes", "64:8"), "exit 2",
        "argument --batch-sizes: '64:8': need 1 <= LOW <= HIGH"),
    Row("soak-layout", "fi-compat soak", "--layout tgi", cli("soak", "--layout", "tgi"), "exit 2",
        "argument --layout: invalid choice: 'tgi'"),
    Row("soak-trtllm-backend", "fi-compat soak", "--layout trtllm --backend cute-dsl",
        cli("soak", "--layout", "trtllm", "--backend", "cute-dsl"), "exit 2",
        "--backend cute-dsl with --layout trtllm: TensorRT-LLM's call passes trtllm-gen"),
    # ---------------------------------------------------------------- fi-compat run (every row fails before exec)
    Row("run-nothing", "fi-compat run", "no command", cli("run"), "exit 2", "no command given: put it after --"),
    Row("run-no-separator", "fi-compat run", "python app.py (no --)", cli("run", "python", "app.py"), "exit 2",
        "put -- between fi-compat's options and the command (got 'python' first)"),
    Row("run-empty-command", "fi-compat run", "-- and nothing after it", cli("run", "--"), "exit 2",
        "no command after --"),
    Row("run-cache-size", "fi-compat run", "--cache-size 0", cli("run", "--cache-size", "0", "--", "python"),
        "exit 2", "argument --cache-size: --cache-size=0 is out of range; accepted: 1 to 1048576"),
    Row("run-policy", "fi-compat run", "--policy sometimes", cli("run", "--policy", "sometimes", "--", "python"),
        "exit 2", "argument --policy: invalid choice: 'sometimes'"),
]
