#!/usr/bin/env python3
"""Carry the GPU matrix's wheelhouse to an offline CUDA machine in pieces, and run the matrix there.

The GPU machines lent here reach no package index, and a call carries at most
64 MiB of files.  The 18 flashinfer wheels are 530 MB, but most of their
members are the same bytes release after release (cubins, headers), so the
pack stores each distinct member once (by sha256), compresses the store, and
cuts it into pieces; the dependencies' wheels travel as they are.  On the
device, ``start`` rebuilds every wheel member by member and checks each member
against the wheel's own ``RECORD`` (the zip container differs from the
published one; its contents do not).

Each piece carries its own header (the pack's sha256, its index, the number of
pieces and its own sha256), so a piece needs nothing beside it: ``receive``
checks it wherever it was carried, and ``start`` names what is missing.

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

Failures are one line on stderr and exit status 2 (``collect``: 3 while the
matrix runs): pip's refusal with its own last lines, a piece damaged in
transit, pieces of two packs, a piece missing, no matrix started.
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
import tempfile
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
#: The pip that downloads (the tests put a stand-in here).
PIP = (sys.executable, "-m", "pip")
#: First line of every piece: this tag, then one JSON object (see :func:`piece_header`).
PIECE_TAG = b"fi_compat-gpu-pack-piece 1 "


class PackError(Exception):
    """Something the user must act on; ``main`` prints it as one line and exits 2."""


# --------------------------------------------------------------------------- here: download and pack


def _pip_download(requirements: list[str], into: Path, binary_for_device: bool) -> None:
    """``pip download --no-deps`` of ``requirements`` into ``into``.  pip
    resolves the requirements of one command together, so two versions of one
    project are refused (ResolutionImpossible): callers ask for one flashinfer
    release a command.  Raises :class:`PackError` with pip's last lines."""
    command = [*PIP, "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(into)]
    if binary_for_device:
        command += ["--python-version", DEVICE_PYTHON, "--implementation", "cp"]
        for platform in PLATFORMS:
            command += ["--platform", platform]
    done = subprocess.run(command + requirements, capture_output=True, text=True)
    if done.returncode != 0:
        said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise PackError(f"pip download {' '.join(requirements)} failed (exit {done.returncode}): "
                        + " | ".join(said[-3:]))


def flashinfer_wheels(wheels: Path, release: str) -> list[Path]:
    """The cached wheels of exactly ``release`` (``0.6.15`` is not ``0.6.15.post1``)."""
    return sorted(wheels.glob(f"flashinfer_python-{release}-*.whl"))


def download_releases(wheels: Path, releases: list[str]) -> list[str]:
    """One ``pip download`` per release missing from ``wheels``, each into a
    scratch folder first, so an interrupted download leaves no partial wheel
    that a later pack would take as present.  Returns the releases downloaded."""
    wheels.mkdir(parents=True, exist_ok=True)
    fetched = []
    for release in releases:
        if flashinfer_wheels(wheels, release):
            continue
        with tempfile.TemporaryDirectory(dir=wheels, prefix=".incoming-") as scratch:
            _pip_download([f"flashinfer-python=={release}"], Path(scratch), binary_for_device=False)
            got = flashinfer_wheels(Path(scratch), release)
            if not got:
                raise PackError(f"pip download flashinfer-python=={release} left no flashinfer_python-{release}-*.whl "
                                f"(it got: {sorted(p.name for p in Path(scratch).iterdir())})")
            for path in got:
                path.replace(wheels / path.name)
        print(f"gpu_wheelhouse: downloaded {got[0].name} ({(wheels / got[0].name).stat().st_size >> 20} MiB)",
              flush=True)
        fetched.append(release)
    return fetched


def download_dependencies(dependencies: Path) -> None:
    """The pinned dependencies for the device's Python, in one command (distinct
    projects, which pip accepts together); again whenever the pins change."""
    stamp = dependencies / "pins.json"
    if stamp.exists() and json.loads(stamp.read_text()) == list(DEPENDENCIES):
        return
    shutil.rmtree(dependencies, ignore_errors=True)
    dependencies.mkdir(parents=True)
    _pip_download(list(DEPENDENCIES), dependencies, binary_for_device=True)
    stamp.write_text(json.dumps(list(DEPENDENCIES)))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    tar.addfile(member, io.BytesIO(data))


def build_archive(wheels: Path, dependencies: Path, releases: list[str], archive: Path) -> None:
    """The deduplicated store (each distinct wheel member once, by sha256), the
    dependencies' wheels and the manifest, as one xz-compressed tar."""
    manifest: dict[str, list[list[str]]] = {}
    seen: set[str] = set()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for release in releases:
            path = flashinfer_wheels(wheels, release)[0]
            entries = []
            with zipfile.ZipFile(path) as wheel:
                for info in wheel.infolist():
                    data = wheel.read(info)
                    digest = hashlib.sha256(data).hexdigest()
                    entries.append([info.filename, digest])
                    if digest not in seen:
                        seen.add(digest)
                        _add(tar, f"members/{digest}", data)
            manifest[path.name] = entries
        for path in sorted(dependencies.glob("*.whl")):
            _add(tar, f"wheels/{path.name}", path.read_bytes())
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    started = time.monotonic()
    # xz as a process: it compresses on every core (Python's lzma uses one)
    compressed = subprocess.run(["xz", "-6", "-T0", "-c"], input=buffer.getvalue(), check=True,
                                capture_output=True).stdout
    archive.write_bytes(compressed)
    print(f"gpu_wheelhouse: {len(seen)} distinct members, {len(buffer.getvalue()) >> 20} MiB -> "
          f"{len(compressed) >> 20} MiB xz in {time.monotonic() - started:.0f} s")


def piece_header(pack_digest: str, index: int, count: int, payload: bytes) -> bytes:
    fields = {"pack": pack_digest, "index": index, "count": count, "sha256": hashlib.sha256(payload).hexdigest()}
    return PIECE_TAG + json.dumps(fields, sort_keys=True).encode() + b"\n"


def cut(archive: Path, into: Path, piece_bytes: int | None = None) -> list[Path]:
    """Cut ``archive`` into self-describing pieces ``into/piece-NN`` (the old ones
    removed) of :data:`PIECE_BYTES` each, the last one shorter."""
    piece_bytes = piece_bytes or PIECE_BYTES
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    data = archive.read_bytes()
    pack_digest = hashlib.sha256(data).hexdigest()
    starts = range(0, len(data), piece_bytes)
    pieces = []
    for index, start in enumerate(starts):
        payload = data[start:start + piece_bytes]
        piece = into / f"piece-{index:02d}"
        piece.write_bytes(piece_header(pack_digest, index, len(starts), payload) + payload)
        pieces.append(piece)
    return pieces


def pack(cache: Path, releases: list[str], into: Path | None = None) -> list[Path]:
    """Cut the archive of ``releases`` and the pinned dependencies into pieces
    under ``into`` (default :data:`PACK_DIR`), building it first when ``cache``
    has none: one ``pip download`` per release missing from ``cache/wheels``
    (530 MB for all 18), the dependencies, then the xz compression (about 8
    minutes for all 18 on 2 cores).  An archive once built needs no wheel: the
    downloads may be deleted."""
    key = hashlib.sha256(json.dumps([releases, list(DEPENDENCIES)]).encode()).hexdigest()[:16]
    archive = cache / f"pack-{key}.tar.xz"
    if not archive.exists():
        wheels, dependencies = cache / "wheels", cache / "dependencies"
        download_releases(wheels, releases)
        download_dependencies(dependencies)
        partial = archive.with_suffix(".partial")
        build_archive(wheels, dependencies, releases, partial)
        partial.replace(archive)
    return cut(archive, into or PACK_DIR)


# --------------------------------------------------------------------------- device: receive, start, collect


def read_piece(path: Path) -> tuple[dict, bytes]:
    """A piece's header and payload; :class:`PackError` for a file that is not
    a piece or whose payload differs from its header's sha256 (damaged or cut short)."""
    if not path.is_file():
        raise PackError(f"{path}: no such file (carry it into the call: run(carry=['{path}'], ...))")
    data = path.read_bytes()
    line, _, payload = data.partition(b"\n")
    if not line.startswith(PIECE_TAG):
        raise PackError(f"{path}: not a piece of a gpu_wheelhouse pack (no {PIECE_TAG.decode().strip()!r} header); "
                        "pack again with this script")
    try:
        header = json.loads(line[len(PIECE_TAG):])
    except ValueError:
        raise PackError(f"{path}: damaged header; carry it again") from None
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise PackError(f"{path}: damaged: {len(payload)} bytes whose sha256 is not the one its header records; "
                        "carry it again")
    return header, payload


def receive(piece: Path, store: Path | None = None) -> None:
    """On the device: check a carried piece and keep it in ``store`` (default
    :data:`DEVICE_STORE`; the next call's checkout no longer has the piece).  A
    piece of another pack replaces what an earlier pack left."""
    store = store or DEVICE_STORE
    header, _ = read_piece(piece)
    store.mkdir(parents=True, exist_ok=True)
    for held in store.glob("piece-*"):
        if read_piece_header(held).get("pack") != header["pack"]:
            held.unlink()
            print(f"gpu_wheelhouse: removed {held.name} of an earlier pack")
    shutil.copyfile(piece, store / f"piece-{header['index']:02d}")
    held = sorted(p.name for p in store.glob("piece-*"))
    print(f"gpu_wheelhouse: received piece {header['index'] + 1} of {header['count']} "
          f"({piece.stat().st_size >> 20} MiB, checked); held: {held}")


def read_piece_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        line = handle.readline()
    return json.loads(line[len(PIECE_TAG):]) if line.startswith(PIECE_TAG) else {}


def joined(store: Path) -> bytes:
    """The pack from the received pieces; :class:`PackError` naming what is missing."""
    pieces = sorted(store.glob("piece-*")) if store.is_dir() else []
    if not pieces:
        raise PackError(f"no piece received in {store}: run 'receive' for each piece first "
                        "(the calls 'pack' printed)")
    parts = [read_piece(p) for p in pieces]
    packs = {header["pack"] for header, _ in parts}
    if len(packs) > 1:
        raise PackError(f"{store} holds pieces of {len(packs)} packs; receive every piece of one pack again")
    count = parts[0][0]["count"]
    by_index = {header["index"]: payload for header, payload in parts}
    missing = [f"piece-{i:02d}" for i in range(count) if i not in by_index]
    if missing:
        raise PackError(f"missing {', '.join(missing)} of {count} pieces (received: "
                        f"{', '.join(p.name for p in pieces)}): run 'receive' for each, then 'start'")
    data = b"".join(by_index[i] for i in range(count))
    if hashlib.sha256(data).hexdigest() != parts[0][0]["pack"]:
        raise PackError("the pieces do not make the pack their headers name; pack and carry them again")
    return data


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


def unpack(store: Path | None = None, wheelhouse: Path | None = None) -> list[str]:
    """On the device: join the pieces (default :data:`DEVICE_STORE`), rebuild
    every wheel into ``wheelhouse`` (default :data:`DEVICE_WHEELHOUSE`), check
    each member against its RECORD."""
    wheelhouse = wheelhouse or DEVICE_WHEELHOUSE
    data = joined(store or DEVICE_STORE)
    shutil.rmtree(wheelhouse, ignore_errors=True)  # no wheel of an earlier pack is taken for this one's
    wheelhouse.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(data))) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        members = {}
        for member in tar.getmembers():
            if member.name.startswith("members/"):
                members[member.name[len("members/"):]] = tar.extractfile(member).read()  # type: ignore[union-attr]
            elif member.name.startswith("wheels/"):
                (wheelhouse / member.name[len("wheels/"):]).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    built = []
    for name, entries in manifest.items():
        path = wheelhouse / name
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:  # pip reads either; stored is faster
            for filename, digest in entries:
                wheel.writestr(filename, members[digest])
        with zipfile.ZipFile(path) as wheel:
            hashes = _record_hashes(wheel)
            bad = [f for f, h in hashes.items() if _urlsafe(wheel.read(f)) != h]
        if bad:
            raise PackError(f"{name}: {len(bad)} members differ from RECORD, e.g. {bad[:3]}")
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
    marker = DEVICE_RUN / "started.json"
    if not marker.exists():
        raise PackError(f"no matrix started on this machine ({marker} is absent: a fresh machine, or 'start' "
                        "never ran); receive the pieces and 'start' first")
    started = json.loads(marker.read_text())
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
        if log.exists():
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


def device_calls(pieces: list[Path], jobs: int = 9) -> list[str]:
    """The device calls that carry ``pieces`` (one each) and start the matrix."""
    calls = []
    for number, piece in enumerate(pieces):
        rel = piece.relative_to(ROOT) if piece.is_relative_to(ROOT) else piece
        then = f" && python3 scripts/gpu_wheelhouse.py start --jobs {jobs}" if number == len(pieces) - 1 else ""
        calls.append(f"run(carry=['{rel}'], command='python3 scripts/gpu_wheelhouse.py receive {rel}{then}')")
    calls.append("run(command='python3 scripts/gpu_wheelhouse.py collect --wait 540')   # again until it exits 0")
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    packing = verbs.add_parser("pack", help="here: download, deduplicate, compress, cut into pieces")
    packing.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fi_compat_gpu")
    packing.add_argument("--releases", nargs="*")
    receiving = verbs.add_parser("receive", help="device: check and keep one carried piece")
    receiving.add_argument("piece", type=Path)
    starting = verbs.add_parser("start", help="device: unpack and start the matrix detached")
    starting.add_argument("--jobs", type=int, default=9)
    starting.add_argument("pytest_args", nargs="*")
    collecting = verbs.add_parser("collect", help="device: progress, and the results archive when done")
    collecting.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the matrix to finish")
    args = parser.parse_args(argv)
    try:
        if args.verb == "pack":
            releases = args.releases or list(release_list().MATRIX_RELEASES)
            pieces = pack(args.cache, releases)
            print("gpu_wheelhouse: the device calls, one after another inside the machine's warm window:")
            for call in device_calls(pieces):
                print("  " + call)
            return 0
        if args.verb == "receive":
            receive(args.piece)
            return 0
        if args.verb == "start":
            start(args.jobs, args.pytest_args)
            return 0
        return collect(args.wait)
    except PackError as exc:
        print(f"gpu_wheelhouse {args.verb}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
