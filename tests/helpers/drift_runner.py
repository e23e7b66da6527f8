"""Run code against synthetic flashinfer releases (tests/helpers/drift.py), one forked
child per release.

flashinfer can be imported once per process, and a fresh interpreter spends
about 5 s importing torch and 2 s importing flashinfer's other dependencies
before flashinfer itself (2-4 s).  A :class:`ForkServer` is one process that
imports those once (never flashinfer) and forks a child per request: the
child puts the release's site directory first on ``sys.path``, calls
``module:function(**kwargs)`` and hands back its JSON-able result.  Children
run one at a time (the machine is shared), each under ``SIGALRM`` so a hang
fails instead of blocking the suite.

Needs ``os.fork`` (Linux, macOS).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Optional

#: Imported by the server before any fork: torch and flashinfer's third-party
#: dependencies (those that are installed), and fi_compat.  Never flashinfer.
PRELOAD = ("torch", "numpy", "tvm_ffi", "cuda", "cutlass", "jinja2", "requests", "filelock", "einops", "wrapt",
           "packaging", "fi_compat", "fi_compat.workload", "fi_compat.calls.call_api", "fi_compat.installing.installer")


class ChildError(RuntimeError):
    """The child raised, died or timed out; the message holds its traceback."""


class ForkServer:
    """``run(site, "module:function", **kwargs)`` in a fresh fork.  Close with
    :meth:`close` (or use as a context manager).  ``paths`` go first on the
    server's ``PYTHONPATH`` (the modules the children call); ``environ`` is
    the server's (and so every child's) environment, default ``os.environ``."""

    def __init__(self, paths: tuple[str, ...] = (), preload: tuple[str, ...] = PRELOAD, start_timeout: float = 180,
                 environ: Optional[dict[str, str]] = None) -> None:
        env = dict(os.environ if environ is None else environ)
        env["PYTHONPATH"] = os.pathsep.join([*paths, str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")])
        env.setdefault("OMP_NUM_THREADS", "1")
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from helpers import drift_runner; drift_runner.serve({list(preload)!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
        )
        self._read(start_timeout)

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise ChildError(f"drift fork server gave no answer within {timeout:.0f} s:\n{self.stderr_tail()}")
        return json.loads(line)

    def stderr_tail(self, size: int = 6000) -> str:
        self._stderr.seek(0, os.SEEK_END)
        end = self._stderr.tell()
        self._stderr.seek(max(0, end - size))
        return self._stderr.read().decode(errors="replace")

    def run(self, site: Optional[Path], target: str, timeout: int = 90, **kwargs: Any) -> Any:
        """The value ``target(**kwargs)`` returned in a child with ``site``
        first on ``sys.path``; :class:`ChildError` if it raised or died."""
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
            result_path = handle.name
        try:
            request = {"site": None if site is None else str(site), "target": target, "kwargs": kwargs,
                       "result": result_path, "timeout": timeout}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            status = self._read(timeout + 30)["status"]
            text = Path(result_path).read_text() if os.path.getsize(result_path) else ""
        finally:
            os.unlink(result_path)
        outcome = json.loads(text) if text else None
        if outcome is None or not outcome.get("ok"):
            detail = outcome["error"] if outcome else f"child exited with status {status} and no result"
            raise ChildError(f"{target} on {site}:\n{detail}\n--- stderr tail ---\n{self.stderr_tail()}")
        return outcome["value"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(preload: list[str]) -> None:
    """The server loop (runs in the server process)."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the children print goes to stderr, never into the answers
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (an optional dependency; the child imports what it needs)
            pass
    answers.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")


def _child(request: dict) -> None:
    code = 1
    try:
        signal.alarm(int(request["timeout"]))
        if request["site"]:
            sys.path.insert(0, request["site"])
        module_name, _, function_name = request["target"].partition(":")
        value = getattr(importlib.import_module(module_name), function_name)(**request["kwargs"])
        outcome = {"ok": True, "value": value}
        code = 0
    except BaseException:  # noqa: BLE001  (reported to the parent)
        outcome = {"ok": False, "error": traceback.format_exc()}
    try:
        with open(request["result"], "w") as handle:
            json.dump(outcome, handle, default=repr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
