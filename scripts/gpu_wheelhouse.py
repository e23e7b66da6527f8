#!/usr/bin/env python3
"""Carry the GPU matrix's wheelhouse to an offline CUDA machine in pieces, and run the matrix there.

The GPU machines lent here reach no package index, and a call carries at most
64 MiB of files.  The 18 flashinfer wheels are 530 MB, but most of their
members are the same bytes release after release (cubins, headers), so the
pack stores each distinct member once (by sha256), compresses the store, and
cuts it into pieces; the dependencies' wheels travel as they are.  On the
device, ``unpack`` rebuilds every wheel member by member and checks each
member against the wheel's own ``RECORD`` (the zip container differs from the
published one; its contents do not).

Here (once; the pack is kept in ``--cache`` and reused while the releases and
pins are unchanged)::

    python3 scripts/gpu_wheelhouse.py pack            # prints the calls to make

On the device (the calls ``pack`` prints)::

    python3 scripts/gpu_wheelhouse.py receive .gpu-pack/piece-00   # each piece: kept in /tmp/fi_compat_pack
    python3 scripts/gpu_wheelhouse.py start --jobs 9               # unpack, then the matrix in the background
    python3 scripts/gpu_wheelhouse.py collect                      # progress; the results archive into $OUT

``start`` runs ``scripts/run_gpu_matrix.py`` detached (``setsid``), so the
matrix outlives the call that started it; ``collect`` reports what has
finished and, once everything has, packs the results and logs into one
archive under ``$OUT`` (the tool returns at most 8 files a call).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from _matrix_common import ROOT, release_list

#: flashinfer's import dependencies and fi_compat's build/runtime needs, for the
#: device's Python (3.12); the versions the CPU matrix's base environment resolves.
DEPENDENCIES = (
    "apache-tvm-ffi==0.1.15.post2",
    "cuda-tile==1.7.0",
    "nvidia-cutlass-dsl==4.8.1",
    "nvidia-cutlass-dsl-libs-base==4.8.1",
    "nvidia-cutlass-dsl-libs-core==4.8.1",
    "nvidia-cutlass-dsl-libs-cu13==4.8.1",
    "wrapt==2.5.2",
    "setuptools==81.0.0",
)
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64")
PIECE_BYTES = 56 << 20  # with the checkout (about 4 MB) inside a call's 64 MiB
PACK_DIR = ROOT / ".gpu-pack"  # ignored by git (.gitignore); named in each call's carry
DEVICE_STORE = Path("/tmp/fi_compat_pack")
DEVICE_WHEELHOUSE = Path("/tmp/fi_compat_wheelhouse")
DEVICE_RUN = Path("/tmp/fi_compat_gpu_run")


def _pip_download(requirements: list[str], into: Path, binary_for_device: bool) -> None:
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into)]
    if binary_for_device:
        command += ["--only-binary=:all:", "--python-version", DEVICE_PYTHON, "--implementation", "cp"]
        for platform in PLATFORMS:
            command += ["--platform", platform]
    subprocess.run(command + requirements, check=True)


def _record_hashes(wheel: zipfile.ZipFile) -> dict[str, str]:
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    hashes = {}
    for line in wheel.read(record).decode().splitlines():
        name, digest, _ = (line.rsplit(",", 2) + ["", ""])[:3]
        if digest.startswith("sha256="):
            hashes[name] = digest[len("sha256="):]
    return hashes


def _urlsafe(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def pack(cache: Path, releases: list[str]) -> list[Path]:
    """Download what is missing, build the deduplicated archive, cut it into pieces under .gpu-pack/."""
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    missing = [r for r in releases if not list(wheels.glob(f"flashinfer_python-{r}-*.whl"))]
    if missing:
        _pip_download([f"flashinfer-python=={r}" for r in missing], wheels, binary_for_device=False)
    dependencies = cache / "dependencies"
    dependencies.mkdir(exist_ok=True)
    stamp = dependencies / "pins.json"
    if not stamp.exists() or json.loads(stamp.read_text()) != list(DEPENDENCIES):
        shutil.rmtree(dependencies)
        dependencies.mkdir()
        _pip_download(list(DEPENDENCIES), dependencies, binary_for_device=True)
        stamp.write_text(json.dumps(list(DEPENDENCIES)))
    key = hashlib.sha256(json.dumps([releases, list(DEPENDENCIES)]).encode()).hexdigest()[:16]
    archive = cache / f"pack-{key}.tar.xz"
    if not archive.exists():
        manifest: dict[str, list[list[str]]] = {}
        seen: set[str] = set()
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for release in releases:
                (path,) = sorted(wheels.glob(f"flashinfer_python-{release}-*.whl"))[:1]
                entries = []
                with zipfile.ZipFile(path) as wheel:
                    for info in wheel.infolist():
                        data = wheel.read(info)
                        digest = hashlib.sha256(data).hexdigest()
                        entries.append([info.filename, digest])
                        if digest not in seen:
                            seen.add(digest)
                            member = tarfile.TarInfo(f"members/{digest}")
                            member.size = len(data)
                            tar.addfile(member, io.BytesIO(data))
                manifest[path.name] = entries
            for path in sorted(dependencies.glob("*.whl")):
                data = path.read_bytes()
                member = tarfile.TarInfo(f"wheels/{path.name}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
            data = json.dumps(manifest).encode()
            member = tarfile.TarInfo("manifest.json")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        started = time.monotonic()
        # xz as a process: it compresses on every core (Python's lzma uses one)
        compressed = subprocess.run(["xz", "-6", "-T0", "-c"], input=buffer.getvalue(), check=True,
                                    capture_output=True).stdout
        archive.write_bytes(compressed)
        print(f"gpu_wheelhouse: {len(seen)} distinct members, {len(buffer.getvalue()) >> 20} MiB -> "
              f"{len(compressed) >> 20} MiB xz in {time.monotonic() - started:.0f} s")
    shutil.rmtree(PACK_DIR, ignore_errors=True)
    PACK_DIR.mkdir()
    data = archive.read_bytes()
    pieces = []
    for index in range(0, len(data), PIECE_BYTES):
        piece = PACK_DIR / f"piece-{index // PIECE_BYTES:02d}"
        piece.write_bytes(data[index:index + PIECE_BYTES])
        pieces.append(piece)
    (PACK_DIR / "sha256").write_text(hashlib.sha256(data).hexdigest())
    return pieces


def receive(piece: Path) -> None:
    """On the device: keep a carried piece (the next call's checkout no longer has it)."""
    DEVICE_STORE.mkdir(parents=True, exist_ok=True)
    shutil.copy(piece, DEVICE_STORE / piece.name)
    digest = PACK_DIR / "sha256"
    if digest.exists():
        shutil.copy(digest, DEVICE_STORE / "sha256")
    print(f"received {piece.name}: {piece.stat().st_size >> 20} MiB; held: "
          f"{sorted(p.name for p in DEVICE_STORE.glob('piece-*'))}")


def unpack() -> list[str]:
    """On the device: join the pieces, rebuild every wheel, check each member against its RECORD."""
    data = b"".join(p.read_bytes() for p in sorted(DEVICE_STORE.glob("piece-*")))
    expected = (DEVICE_STORE / "sha256").read_text().strip()
    if hashlib.sha256(data).hexdigest() != expected:
        raise SystemExit("gpu_wheelhouse: the pieces do not make the pack (a piece is missing or damaged)")
    DEVICE_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data))) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        members = {}
        for member in tar.getmembers():
            if member.name.startswith("members/"):
                members[member.name[len("members/"):]] = tar.extractfile(member).read()  # type: ignore[union-attr]
            elif member.name.startswith("wheels/"):
                (DEVICE_WHEELHOUSE / member.name[len("wheels/"):]).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    built = []
    for name, entries in manifest.items():
        path = DEVICE_WHEELHOUSE / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:  # pip reads either; stored is faster
            for filename, digest in entries:
                wheel.writestr(filename, members[digest])
        with zipfile.ZipFile(path) as wheel:
            hashes = _record_hashes(wheel)
            bad = [f for f, h in hashes.items() if _urlsafe(wheel.read(f)) != h]
        if bad:
            raise SystemExit(f"gpu_wheelhouse: {name}: {len(bad)} members differ from RECORD, e.g. {bad[:3]}")
        built.append(name)
    return built


def start(jobs: int, pytest_args: list[str]) -> None:
    """On the device: unpack, then start the whole matrix detached; returns at once."""
    built = unpack()
    print(f"gpu_wheelhouse: {len(built)} flashinfer wheels rebuilt and checked against their RECORDs")
    shutil.rmtree(DEVICE_RUN, ignore_errors=True)
    (DEVICE_RUN / "results").mkdir(parents=True)
    command = [sys.executable, str(ROOT / "scripts" / "run_gpu_matrix.py"), "--wheelhouse", str(DEVICE_WHEELHOUSE),
               "--jobs", str(jobs), "--results", str(DEVICE_RUN / "results"), "--venvs", str(DEVICE_RUN / "venvs"),
               *(["--", *pytest_args] if pytest_args else [])]
    with open(DEVICE_RUN / "matrix.log", "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (DEVICE_RUN / "started.json").write_text(json.dumps({"pid": process.pid, "at": time.time(), "command": command}))
    print(f"gpu_wheelhouse: matrix started (pid {process.pid}); collect with: python3 scripts/gpu_wheelhouse.py collect")


def collect(wait: float) -> int:
    """On the device: what has finished; once the matrix has, one archive of results and logs into $OUT."""
    started = json.loads((DEVICE_RUN / "started.json").read_text())
    deadline = time.monotonic() + wait
    while True:
        alive = Path(f"/proc/{started['pid']}").exists() and "zombie" not in _state(started["pid"])
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(5)
    finished = sorted(p.stem for p in (DEVICE_RUN / "results").glob("*.json"))
    elapsed = time.time() - started["at"]
    print(f"gpu_wheelhouse: {len(finished)} results after {elapsed:.0f} s; matrix {'running' if alive else 'done'}")
    log = DEVICE_RUN / "matrix.log"
    if log.exists():
        print("\n".join(line for line in log.read_text().splitlines() if line.startswith("=== ") and " in " in line))
    if alive:
        return 3
    out = Path(os.environ.get("OUT", "/tmp"))
    with tarfile.open(out / "gpu-results.tar.gz", "w:gz") as tar:
        tar.add(DEVICE_RUN / "results", arcname="results")
        tar.add(log, arcname="matrix.log")
        for venv_log in sorted((DEVICE_RUN / "venvs").glob("*.log")):
            tar.add(venv_log, arcname=f"logs/{venv_log.name}")
    print(f"gpu_wheelhouse: results in {out / 'gpu-results.tar.gz'} ({elapsed:.0f} s of matrix)")
    return 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    packing = verbs.add_parser("pack", help="here: download, deduplicate, compress, cut into pieces")
    packing.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fi_compat_gpu")
    packing.add_argument("--releases", nargs="*")
    receiving = verbs.add_parser("receive", help="device: keep one carried piece")
    receiving.add_argument("piece", type=Path)
    starting = verbs.add_parser("start", help="device: unpack and start the matrix detached")
    starting.add_argument("--jobs", type=int, default=9)
    starting.add_argument("pytest_args", nargs="*")
    collecting = verbs.add_parser("collect", help="device: progress, and the results archive when done")
    collecting.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the matrix to finish")
    args = parser.parse_args()
    if args.verb == "pack":
        releases = args.releases or list(release_list().MATRIX_RELEASES)
        pieces = pack(args.cache, releases)
        print("gpu_wheelhouse: the device calls, one after another inside the machine's warm window:")
        for number, piece in enumerate(pieces):
            rel = piece.relative_to(ROOT)
            then = " && python3 scripts/gpu_wheelhouse.py start --jobs 9" if number == len(pieces) - 1 else ""
            print(f"  run(carry=['{rel}', '.gpu-pack/sha256'], "
                  f"command='python3 scripts/gpu_wheelhouse.py receive {rel}{then}')")
        print("  run(command='python3 scripts/gpu_wheelhouse.py collect --wait 540')   # again until it exits 0")
        return 0
    if args.verb == "receive":
        receive(args.piece)
        return 0
    if args.verb == "start":
        start(args.jobs, args.pytest_args)
        return 0
    return collect(args.wait)


if __name__ == "__main__":
    sys.exit(main())
