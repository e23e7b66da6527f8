"""Issue 39, "strict that stops": after ``install(strict=True)`` refuses a release
and the program catches the typed error, nothing fi_compat exposes decodes on
unbounded flashinfer: ``fi_compat.mla_decode`` and
``fi_compat.build_mla_decode_tuning_config`` raise the same typed error, every
call, until the program chooses otherwise (``uninstall()``, or
``install(strict=False)``: docs/errors.md).  Before, both decoded on unpatched
flashinfer with no error and no warning.

Both ways a strict install meets the release: after ``import flashinfer``
(``install()`` raises) and before it (the import raises).  The release is the
real wheel with the builder's ``q_len`` and ``num_heads`` swapped
(tests/helpers/drift.py), run in a child process under the CPU-host shim.  Seconds.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:
    pytest.skip("needs flashinfer-python", allow_module_level=True)


PROGRAM = """
import sys, torch, fi_compat
from fi_compat.errors import SignatureMismatchError
from fi_compat.workload import CpuHost, workload
from fi_compat.workload.builder import builder_arguments

INSTALL_FIRST = sys.argv[1] == "before-import"

def attempt(label, call):
    try:
        call()
    except SignatureMismatchError as exc:
        print(label, "RAISED", type(exc).__name__, flush=True)
    else:
        print(label, "DECODED", flush=True)

# the CPU-host shim in steps, as an engine meets flashinfer: torch's CUDA answers before the import,
# flashinfer's loader stub after it
host = CpuHost()
host.patch_torch()
if INSTALL_FIRST:
    fi_compat.install(strict=True)
try:
    import flashinfer.mla
    if not INSTALL_FIRST:
        fi_compat.install(strict=True)
except SignatureMismatchError:
    print("REFUSED", flush=True)
import flashinfer.mla  # a failed import took only the package out of sys.modules: this one succeeds
host.patch_flashinfer()
inputs = workload.make_inputs(torch, "trtllm", batch=2, width=16, num_pages=64)
# TensorRT-LLM passes the keywords flashinfer has (its counter buffer from 0.6.15 on): the call
# API, seen through flashinfer's own signature, is asked for those only
import functools
from fi_compat.model import specs
through_api = functools.wraps(getattr(sys.modules["flashinfer.mla"], specs.DECODE.name))(
    lambda *args, **kwargs: fi_compat.mla_decode(*args, **kwargs))
decode = lambda: workload.trtllm_call(through_api, inputs, 1000)
build = lambda: fi_compat.build_mla_decode_tuning_config(**builder_arguments())
for attempt_number in range(3):
    attempt("decode", decode)
    attempt("builder", build)
launches = len(host.launches)
fi_compat.uninstall()  # the program's choice: go on unbounded
attempt("after-uninstall", decode)
print("LAUNCHES", launches, len(host.launches), flush=True)
"""


@pytest.mark.parametrize("when", ["after-import", "before-import"])
def test_a_caught_strict_refusal_still_refuses_every_decode_through_fi_compat(mismatched, when):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_COMPAT_")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([str(mismatched.site), *sys.path])
    done = subprocess.run([sys.executable, "-c", PROGRAM, when], capture_output=True, text=True, timeout=600,
                          env=env)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines[0] == "REFUSED", done.stdout
    assert lines[1:7] == ["decode RAISED SignatureMismatchError", "builder RAISED SignatureMismatchError"] * 3, lines
    assert lines[7] == "after-uninstall DECODED", lines
    before, after = map(int, lines[8].split()[1:])
    assert before == 0 and after > 0, lines  # no kernel launched while refused; the chosen decode launches
