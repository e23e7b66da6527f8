"""What a TensorRT-LLM process shows of fi_compat under its default logging (issue #25).

TensorRT-LLM's ``tensorrt_llm/logger.py`` (read at 027cd518) configures logging once, at
import: ``logging.basicConfig`` with the level from ``TLLM_LOG_LEVEL`` (default
``warning``), one stderr handler on the root logger.  The child below sets up
logging the same way, then installs fi_compat on the real flashinfer wheel
under the CPU-host shim, and the test reads its stderr: the way
docs/integration/tensorrt_llm.md ("Checking a rank") tells users to see the
install line has to survive exactly that configuration."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import logging, os, sys, warnings
    warnings.simplefilter("ignore")
    level = {"warning": logging.WARNING, "info": logging.INFO}[os.environ.get("TLLM_LOG_LEVEL", "warning").lower()]
    logging.basicConfig(level=level, format="[%(asctime)s] %(message)s")  # as TensorRT-LLM's Logger does
    if sys.argv[1] == "fi_compat-logger-info":
        logging.getLogger("fi_compat").setLevel(logging.INFO)
    import fi_compat
    from fi_compat.workload import cpu_host
    with cpu_host():
        import flashinfer
        fi_compat.install()
        if sys.argv[1] == "doctor-at-warning":
            logging.getLogger("TRT-LLM").warning(fi_compat.doctor_report())
""")

INSTALL_LINE = "fi_compat: flashinfer "


def _stderr(mode: str, **env: str) -> str:
    if importlib.util.find_spec("flashinfer") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch and flashinfer-python installed")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("FI_COMPAT_", "TLLM_"))}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=300,
                          env=environ, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_by_default_the_install_line_is_not_shown():
    """The INFO line exists, but TensorRT-LLM's WARNING root level drops it:
    why the doc must not just say "look for it"."""
    assert INSTALL_LINE not in _stderr("plain")


def test_the_fi_compat_logger_at_info_shows_only_fi_compats_line():
    err = _stderr("fi_compat-logger-info")
    lines = [line for line in err.splitlines() if INSTALL_LINE in line]
    assert len(lines) == 1 and "; pid " in lines[0] and "bounded: " in lines[0], err[-2000:]


def test_tllm_log_level_info_shows_it_too():
    assert INSTALL_LINE in _stderr("plain", TLLM_LOG_LEVEL="info")


def test_the_doctor_report_logged_at_warning_shows_the_state():
    err = _stderr("doctor-at-warning")
    assert "fi_compat" in err and "tuning-config" in err and "bound" in err, err[-2000:]
