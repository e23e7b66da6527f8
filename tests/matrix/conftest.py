"""Marker and host logic for the release suite (``tests/matrix``).

Platforms (``FI_COMPAT_MATRIX_PLATFORM``, set by ``scripts/run_release_suite.py``):

``cpu`` (also the default when unset)
    ``nox -s matrix`` and ``nox -s tests``: tests marked ``gpu`` are skipped
    ("needs a CUDA device"); the ``fi_cpu_host`` fixture is fi_compat's
    CPU-host shim, an SM100, or with ``FI_COMPAT_SHIM_CAPABILITY=9.0`` the SM90
    of the H100/H200 the GPU matrix runs on: flashinfer's backend resolution
    and argument checks then refuse on CPU what they refuse there, and the
    tests gated by ``tests/helpers/device_gate.py`` skip as they do there.
``gpu``
    ``nox -s gpu_matrix``: no shim.  ``fi_cpu_host`` is replaced by a host
    that stubs only the trtllm-gen kernel-module loader (real torch, real
    device properties, real CUDA tensors), ``fi_device`` is ``cuda``, and
    torch's default device is ``cuda`` for the whole run, so the suite's
    plain ``torch.zeros(...)`` inputs are CUDA tensors (explicit ``meta`` or
    ``cpu`` tensors stay where they are asked to be).
    Tests marked ``gpu`` run; those also marked ``mla_kernel`` (they launch
    a real MLA kernel) skip with the reason "needs SM100/SM103" on any other
    device.  ``FI_COMPAT_SHIM_CAPABILITY`` is refused here (the device's own
    capability is the one that counts).

A test that needs a backend or a compute capability asks
``tests/helpers/device_gate.py`` (``require_backend``), which answers for the
device of either platform; ``test_device_gate.py`` checks its answers against
flashinfer on every release and device.

Markers: ``gpu`` (needs a CUDA device), ``mla_kernel`` (launches an MLA
decode kernel: SM100/SM103 only).

``FI_COMPAT_MATRIX_LENGTHS`` (fixture ``fi_matrix_lengths``): how many batches
(distinct per-batch lengths) each long replay pass runs; default 2,000, which
separates linear growth from a bound by three orders of magnitude; at least
1,500 (the census's sweep of every K-tile class and profile step, then a steady
state).
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

from fi_compat.workload import CAPABILITY_ENV
from helpers import device_gate

NEEDS_SM100 = "needs SM100/SM103"
NEEDS_CUDA = "needs a CUDA device (run by nox -s gpu_matrix)"


DEFAULT_MATRIX_LENGTHS = 2_000
MIN_MATRIX_LENGTHS = 1_500


def matrix_lengths() -> int:
    value = os.environ.get("FI_COMPAT_MATRIX_LENGTHS", "").strip()
    if not value:
        return DEFAULT_MATRIX_LENGTHS
    try:
        lengths = int(value)
    except ValueError:
        lengths = 0
    if lengths < MIN_MATRIX_LENGTHS:
        raise pytest.UsageError(f"FI_COMPAT_MATRIX_LENGTHS={value!r}: expected an integer >= {MIN_MATRIX_LENGTHS} "
                                f"(default {DEFAULT_MATRIX_LENGTHS})")
    return lengths


def matrix_platform() -> str:
    value = os.environ.get("FI_COMPAT_MATRIX_PLATFORM", "cpu").strip().lower()
    if value not in ("cpu", "gpu"):
        raise pytest.UsageError(f"FI_COMPAT_MATRIX_PLATFORM={value!r}: expected cpu or gpu")
    return value


def cuda_capability() -> tuple[int, int] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return device_gate.capability()


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(CAPABILITY_ENV, "").strip():
        if matrix_platform() == "gpu":
            raise pytest.UsageError(f"{CAPABILITY_ENV} chooses the CPU-host shim's device; the GPU matrix runs on "
                                    "the device's own: unset it")
        device_gate.capability()  # a value the shim does not present is a usage error, before any test
    config.addinivalue_line("markers", "gpu: needs a CUDA device (run by nox -s gpu_matrix)")
    config.addinivalue_line("markers", f"mla_kernel: launches a real MLA decode kernel ({NEEDS_SM100})")
    config.addinivalue_line("markers", "census: thousands of distinct lengths per combination "
                                       "(FI_COMPAT_MATRIX_LENGTHS); the slowest part of the matrix")


#: The release suite's files whose outcome a CUDA device cannot change: they
#: judge fi_compat's own host logic (the install state machine, forks, pickling,
#: the drift catalogue, import races, key proofs on synthetic arguments, the
#: memo walk), on the CPU host or in processes that put the CPU shim up
#: themselves.  The GPU matrix leaves them to the CPU matrix, which runs every
#: one of them on every release; what it keeps is what a device changes: the
#: host path on real CUDA tensors and streams for every backend, layout and
#: query mode (the census), the call API, CUDA-graph capture and the engines'
#: replays (docs/ci.md, "The GPU matrix").
HOST_LOGIC_FILES = frozenset(
    {
        "test_bucket_match.py",  # the nearest-profile search on shape tuples
        "test_concurrency.py",  # threads racing install(): the CPU matrix's race
        "test_drift_catalogue.py",  # synthetic releases edited from the wheel, under the shim
        "test_drift_declared.py",
        "test_drift_shapes.py",
        "test_drift_shapes_runtime.py",
        "test_doctor_exit.py",  # the doctor's exit status on an edited release under the shim
        "test_functools_parity.py",  # each memo against functools.lru_cache on the same calls
        "test_fork.py",  # fork safety of fi_compat's locks (CUDA cannot be used in a forked child)
        "test_install_races.py",  # forks under the CPU shim (issue #40's stress run)
        "test_key_proofs.py",  # each key's neutrality on random scalar arguments
        "test_moved_and_reexported.py",  # where fi_compat finds a function
        "test_orders.py",  # 120 install / import / uninstall orders, one fork each
        "test_pickling.py",
        "test_status_walk.py",  # the memo walk
        "test_strict_refusal.py",  # a caught strict refusal keeps refusing
        "test_strict_startup.py",  # start-up hooks in child processes under the shim
        "test_trtllm_fake.py",  # the fake of TensorRT-LLM's workaround against its source
        "test_watch.py",  # the watch's verdicts on releases edited from the wheel, under the shim
        "test_watch_lifecycle.py",  # where the watch runs and how it retires, its child under the shim
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    platform = matrix_platform()
    capability = cuda_capability() if platform == "gpu" else None
    if platform == "gpu":
        host_logic = [item for item in items if item.path.name in HOST_LOGIC_FILES]
        if host_logic:
            config.hook.pytest_deselected(items=host_logic)
            items[:] = [item for item in items if item.path.name not in HOST_LOGIC_FILES]
    for item in items:
        if item.get_closest_marker("gpu") is None and item.get_closest_marker("mla_kernel") is None:
            continue
        if platform != "gpu" or capability is None:
            item.add_marker(pytest.mark.skip(reason=NEEDS_CUDA))
        elif item.get_closest_marker("mla_kernel") is not None and capability not in device_gate.MLA_KERNEL_CAPABILITIES:
            item.add_marker(pytest.mark.skip(reason=NEEDS_SM100))


def pytest_report_header(config: pytest.Config) -> str:
    return f"fi_compat release suite: platform {matrix_platform()}, device {device_gate.describe()}"


@pytest.fixture(scope="session")
def fi_matrix_lengths() -> int:
    """Batches per long replay pass (``FI_COMPAT_MATRIX_LENGTHS``, default 2,000)."""
    return matrix_lengths()


@pytest.fixture(scope="session")
def fi_platform() -> str:
    """``"cpu"`` or ``"gpu"``: which matrix this run belongs to."""
    return matrix_platform()


@pytest.fixture(scope="session")
def fi_device(fi_platform: str) -> Any:
    """Where tests should put their tensors: ``cuda`` on the GPU matrix, else ``cpu``."""
    torch = pytest.importorskip("torch")
    if fi_platform == "gpu":
        if not torch.cuda.is_available():
            pytest.fail("FI_COMPAT_MATRIX_PLATFORM=gpu but torch sees no CUDA device")
        return torch.device("cuda", 0)
    return torch.device("cpu")


if matrix_platform() == "gpu":

    @pytest.fixture(scope="session", autouse=True)
    def _cuda_default_device() -> Iterator[None]:
        """The same suite on real CUDA tensors: tensors created without a
        device land on the GPU (flashinfer's trtllm-gen path rejects CPU
        tensors on a CUDA host)."""
        try:
            import torch
        except ImportError:
            yield
            return
        if not torch.cuda.is_available():
            yield
            return
        torch.set_default_device("cuda")
        try:
            yield
        finally:
            torch.set_default_device(None)

    @pytest.fixture(scope="session")
    def fi_cpu_host() -> Iterator[Any]:  # noqa: F811  (overrides the plugin's shim)
        """GPU matrix: flashinfer on the real CUDA device, only the trtllm-gen
        kernel-module loader stubbed (no torch or capability shim)."""
        pytest.importorskip("torch")
        from fi_compat.workload.hosts import flashinfer_host

        with flashinfer_host("cuda") as host:
            yield host


# --------------------------------------------------------------------------- shared fixtures


@pytest.fixture(scope="session")
def release() -> Any:
    """The installed flashinfer release (``packaging.version.Version``)."""
    from fi_compat.model.release_detection import detect_release

    version = detect_release().version
    if version is None:
        pytest.skip("the release suite needs flashinfer-python installed")
    return version


@pytest.fixture
def core(fi_cpu_host: Any) -> Any:
    """``flashinfer.mla._core`` of the installed release (imported under the host shim)."""
    import importlib

    from fi_compat.model.specs import CORE_MODULE

    return importlib.import_module(CORE_MODULE)


@pytest.fixture(scope="session")
def decode_function(fi_cpu_host: Any) -> Any:
    """The public decode function as an engine imports it (``flashinfer.mla.X``)."""
    import flashinfer.mla

    from fi_compat.model.specs import DECODE

    return getattr(flashinfer.mla, DECODE.name)


class FlashinferCaches:
    """Empties flashinfer's caches, so every test starts as a fresh process would."""

    @staticmethod
    def clear() -> int:
        from decode_driver import clear_flashinfer_caches

        return clear_flashinfer_caches()


@pytest.fixture(scope="session")
def flashinfer_cache_reset(fi_cpu_host: Any) -> FlashinferCaches:
    """Empties flashinfer's caches on demand (for module-scoped fixtures)."""
    return FlashinferCaches()


@pytest.fixture
def fresh_flashinfer_caches(fi_cpu_host: Any) -> Iterator[FlashinferCaches]:
    """flashinfer's functools caches emptied before and after the test."""
    FlashinferCaches.clear()
    yield FlashinferCaches()
    FlashinferCaches.clear()


@pytest.fixture
def quiet_launches(fi_cpu_host: Any) -> Iterator[Any]:
    """The launch recorder keeping only the last two launches (each holds its
    tensors: thousands of kept launches would be growth the census tests measure)."""
    from collections import deque

    recorder = fi_cpu_host.recorder
    saved = recorder.launches
    recorder.launches = deque(maxlen=2)
    yield recorder
    recorder.launches = saved


@pytest.fixture(scope="session")
def fork_server() -> Iterator[Any]:
    """One :class:`drift_runner.ForkServer` for the whole run: a process that
    imported torch, flashinfer's third-party dependencies and fi_compat (never
    flashinfer) and forks a child per synthetic release (the drift catalogue,
    the moved and re-exported releases).  A child then pays only for
    importing its flashinfer, not for a fresh interpreter's torch (about 1 s)
    and dependencies (about 0.4 s); the server starts once (about 2 s).  Its
    environment has no ``FI_COMPAT_*`` settings.  Skips where there is no
    ``os.fork``; a server that does not start fails the tests that use it."""
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    from pathlib import Path

    from helpers.drift_runner import ForkServer
    from helpers.support import environ_without_fi_compat_settings

    here = Path(__file__).resolve().parent
    with ForkServer(paths=(str(here.parent.parent), str(here.parent), str(here)),
                    environ=environ_without_fi_compat_settings()) as server:
        yield server


@pytest.fixture(scope="session")
def matrix_report() -> Iterator[list[dict[str, Any]]]:
    """Rows the census tests measured; written as JSON to ``$FI_COMPAT_MATRIX_REPORT``
    (if set) at the end of the session, for docs/compatibility.md."""
    rows: list[dict[str, Any]] = []
    yield rows
    path = os.environ.get("FI_COMPAT_MATRIX_REPORT")
    if path and rows:
        import json

        with open(path, "w") as handle:
            json.dump(rows, handle, indent=1)


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory: Any) -> Any:
    """A release built from the installed wheel with the tuning-config builder's
    parameters swapped (tests/helpers/drift.py's "builder-swap"): one that strict mode
    refuses.  Skips where the release has no such builder."""
    from helpers import drift

    try:
        return drift.build_site(drift.EDITS_BY_NAME["builder-swap"], tmp_path_factory.mktemp("builder-swap"))
    except ValueError as exc:
        pytest.skip(str(exc))
