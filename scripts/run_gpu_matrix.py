#!/usr/bin/env python3
"""The GPU release matrix without nox (``nox -s gpu_matrix`` uses the same install steps).

For each release: a venv with ``--system-site-packages`` (the machine's torch,
never downloaded), flashinfer-python==X, fi_compat, then
``scripts/run_release_suite.py --platform gpu`` (``tests/matrix`` with the ``gpu``
tests, no shim, plus the growth measurement on real CUDA tensors), which
writes ``RESULTS/X.json``.

Offline machines: ``--wheelhouse DIR`` (or ``FI_COMPAT_WHEELHOUSE``) holding
``flashinfer_python-X-*.whl`` for the releases to run plus flashinfer's import
dependencies for that machine's Python (``apache-tvm-ffi``, ``cuda-tile``,
``nvidia-cutlass-dsl`` with its ``libs-base``, ``libs-core`` and ``libs-cu13``
or ``-cu12``), ``wrapt>=2.4`` and ``setuptools>=69`` (fi_compat's build
backend), one version of each: every non-flashinfer wheel there is installed
in one ``pip install --no-deps``; nothing is fetched (docs/ci.md, "Offline
runners", downloads them; ``scripts/gpu_wheelhouse.py`` carries them to this
project's lent machines).

    python3 scripts/run_gpu_matrix.py --wheelhouse /path/to/wheels            # every release found there
    python3 scripts/run_gpu_matrix.py --wheelhouse DIR --releases 0.6.15 0.6.18 -- -x
"""

from __future__ import annotations

import argparse
import contextlib
import concurrent.futures
import os
import shlex
import site
import subprocess
import sys
import threading
import time
from pathlib import Path

from _matrix_common import RESULTS, ROOT, release_list

WHEELHOUSE_ENV = "FI_COMPAT_WHEELHOUSE"


def flashinfer_wheel(release: str, wheelhouse: str) -> Path:
    wheels = sorted(Path(wheelhouse).glob(f"flashinfer_python-{release}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"no flashinfer_python-{release}-*.whl in {wheelhouse}")
    return wheels[0]


def install_commands(release: str, wheelhouse: str | None, python: str, root: str) -> list[list[str]]:
    """pip commands that put flashinfer ``release`` and fi_compat into the
    environment of ``python``.  Raises FileNotFoundError when a wheelhouse is
    given and holds no wheel for ``release``."""
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if wheelhouse is None:
        # Online: flashinfer with its dependencies (torch is already satisfied
        # by the system site-packages, so pip leaves it alone).
        return [pip + [f"flashinfer-python=={release}"], pip + ["-e", f"{root}[test]"]]
    wheel = flashinfer_wheel(release, wheelhouse)
    others = sorted(str(p) for p in Path(wheelhouse).glob("*.whl") if not p.name.startswith("flashinfer_python-"))
    commands = []
    if others:
        commands.append(pip + ["--no-index", "--no-deps", *others])
    commands.append(pip + ["--no-index", "--no-deps", str(wheel)])
    commands.append(pip + ["--no-index", "--no-deps", "--no-build-isolation", root])
    return commands


def inherit_site_packages(python: str) -> None:
    """Make the venv of ``python`` see this interpreter's packages.

    ``venv --system-site-packages`` exposes the *base* interpreter's
    site-packages; when this interpreter is itself a venv (the H200 image's
    ``python3`` is ``/opt/torch/.venv``, which holds torch) that is not where
    the machine's torch lives, so a ``.pth`` file adds this interpreter's
    site-packages after the new venv's own.  No-op outside a venv.
    """
    if sys.prefix == sys.base_prefix:
        return
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in site.getsitepackages())
    Path(purelib, "_fi_compat_inherit_site.pth").write_text(lines)


def releases_in(wheelhouse: str) -> list[str]:
    found = []
    for release in release_list().MATRIX_RELEASES:
        try:
            flashinfer_wheel(release, wheelhouse)
        except FileNotFoundError:
            continue
        found.append(release)
    return found


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python3", "scripts/run_gpu_matrix.py", *argv])  # recorded in each result
    pytest_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, pytest_args = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheelhouse", default=os.environ.get(WHEELHOUSE_ENV))
    parser.add_argument("--releases", nargs="*", help="default: every matrix release with a wheel in the wheelhouse")
    parser.add_argument("--venvs", default="/tmp/fi_compat_gpu_venvs")
    parser.add_argument("--results", default=str(RESULTS / "gpu"))
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="releases run at the same time (default 1)")
    args = parser.parse_args(argv)
    if args.wheelhouse:
        args.wheelhouse = str(Path(args.wheelhouse).resolve())
    releases = args.releases
    if not releases:
        if not args.wheelhouse:
            parser.error("give --releases, or a --wheelhouse to take them from")
        releases = releases_in(args.wheelhouse)

    build_lock = threading.Lock()

    def run_release(release: str) -> tuple[str, str, float]:
        start = time.time()
        venv = Path(args.venvs) / release
        log = Path(args.venvs) / f"{release}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            def say(text: str) -> None:
                out.write(text + "\n")
                out.flush()

            say(f"=== flashinfer {release}: venv {venv}")
            try:
                subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--clear", str(venv)],
                               check=True, stdout=out, stderr=subprocess.STDOUT)
                python = str(venv / "bin" / "python")
                inherit_site_packages(python)
                for cmd in install_commands(release, args.wheelhouse, python, str(ROOT)):
                    say("+ " + shlex.join(cmd))
                    # Building fi_compat writes into the source tree: one at a time.
                    with (build_lock if cmd[-1] == str(ROOT) else contextlib.nullcontext()):
                        subprocess.run(cmd, check=True, stdout=out, stderr=subprocess.STDOUT)
            except (FileNotFoundError, subprocess.CalledProcessError) as exc:
                say(f"=== flashinfer {release}: install failed: {exc}")
                return release, "install failed", time.time() - start
            run = [python, str(ROOT / "scripts" / "run_release_suite.py"), "--platform", "gpu",
                   "--results", args.results, "--command", command, *(["--skip-growth"] if args.skip_growth else []),
                   *(["--", *pytest_args] if pytest_args else [])]
            say("+ " + shlex.join(run))
            status = subprocess.call(run, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return release, "verified" if status == 0 else f"failed ({status})", time.time() - start

    # Releases are independent (own venv, own process): run --jobs at a time.
    # Logs are printed as each release finishes, so a run cut short by a
    # time limit still shows every finished release.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        summary = []
        for future in concurrent.futures.as_completed([pool.submit(run_release, r) for r in releases]):
            release, outcome, seconds = future.result()
            summary.append((release, outcome, seconds))
            print((Path(args.venvs) / f"{release}.log").read_text(), flush=True)
            print(f"=== {release}: {outcome} in {seconds:.0f}s", flush=True)
    summary.sort(key=lambda item: releases.index(item[0]))
    print("=== gpu_matrix summary")
    for release, outcome, seconds in summary:
        print(f"  {release:14} {outcome:18} {seconds:6.1f}s")
    return 0 if summary and all(outcome == "verified" for _, outcome, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
