"""scripts/gpu_wheelhouse.py without network: ``pack`` from an empty cache, the
pieces carried to any path, ``start``'s and ``collect``'s plain refusals.

pip is replaced by :data:`FAKE_PIP`, which does what pip 23.2 did here
(``pip download --no-deps`` from an empty ``PIP_CACHE_DIR``): it refuses two
versions of one project in one command with ResolutionImpossible (exit 1,
the two ERROR lines below, verbatim), refuses a version the index lacks with
"No matching distribution" (exit 1), and otherwise writes each requested wheel
into ``-d``.  The wheels are small but shaped like flashinfer's: a
``.dist-info/RECORD`` with urlsafe sha256 digests, members shared between
releases (the bytes the pack stores once) and members of one release, both
incompressible, so the pack comes out in several pieces.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile

import pytest

pytestmark = pytest.mark.skipif(shutil.which("xz") is None, reason="the pack compresses with xz")

FAKE_PIP = r'''
import base64, hashlib, json, os, random, sys, zipfile

INDEX = json.loads(os.environ["FAKE_PIP_INDEX"])  # project -> versions the index has
args = sys.argv[1:]
assert args[0] == "download", args
requirements, into, skip_value = [], None, False
for i, arg in enumerate(args[1:], 1):
    if skip_value:
        skip_value = False
    elif arg == "-d":
        into, skip_value = args[i + 1], True
    elif arg in ("--python-version", "--implementation", "--platform"):
        skip_value = True
    elif not arg.startswith("-"):
        requirements.append(arg)
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps(requirements) + "\n")
pins = [r.split("==") for r in requirements]
projects = [p for p, _ in pins]
for project in projects:
    same = [r for r in requirements if r.split("==")[0] == project]
    if len(same) > 1:
        sys.stderr.write(f"ERROR: Cannot install {' and '.join(same[:-1])} and {same[-1]} because these package "
                         "versions have conflicting dependencies.\n"
                         "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/"
                         "dependency-resolution/#dealing-with-dependency-conflicts\n")
        sys.exit(1)
for project, version in pins:
    if version not in INDEX.get(project, []):
        sys.stderr.write(f"ERROR: Could not find a version that satisfies the requirement {project}=={version} "
                         f"(from versions: {', '.join(INDEX.get(project, []))})\n"
                         f"ERROR: No matching distribution found for {project}=={version}\n")
        sys.exit(1)

def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

for project, version in pins:
    name = project.replace("-", "_")
    package = name.split("_")[0]
    info = f"{name}-{version}.dist-info"
    members = {f"{package}/__init__.py": f"__version__ = {version!r}\n".encode(),
               f"{package}/data/cubins.bin": random.Random(0).randbytes(8192),  # the same in every release
               f"{package}/data/{version}.bin": random.Random(version).randbytes(4096),
               f"{info}/METADATA": f"Name: {project}\nVersion: {version}\n".encode()}
    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in members.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(into, f"{name}-{version}-py3-none-any.whl"), "w") as wheel:
        for member, data in members.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{info}/RECORD", record)
'''

RELEASES = ["0.6.13", "0.6.15", "0.6.15.post1"]


@pytest.fixture
def wheelhouse(load, tmp_path, monkeypatch):
    """The script with the fake pip, small pieces and every device path under tmp_path."""
    gw = load("gpu_wheelhouse")
    fake = tmp_path / "fake_pip.py"
    fake.write_text(FAKE_PIP)
    index = {"flashinfer-python": RELEASES}
    index.update({pin.split("==")[0]: [pin.split("==")[1]] for pin in gw.DEPENDENCIES})
    monkeypatch.setenv("FAKE_PIP_INDEX", json.dumps(index))
    monkeypatch.setenv("FAKE_PIP_LOG", str(tmp_path / "pip.log"))
    monkeypatch.setattr(gw, "PIP", (sys.executable, str(fake)))
    monkeypatch.setattr(gw, "PIECE_BYTES", 16384)
    for name, folder in (("PACK_DIR", "pack"), ("DEVICE_STORE", "device/store"),
                         ("DEVICE_WHEELHOUSE", "device/wheelhouse"), ("DEVICE_RUN", "device/run")):
        monkeypatch.setattr(gw, name, tmp_path / folder)
    return gw


def pip_calls(tmp_path) -> list[list[str]]:
    log = tmp_path / "pip.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_fake_pip_refuses_two_releases_in_one_command_as_pip_does(wheelhouse, tmp_path):
    done = subprocess.run([*wheelhouse.PIP, "download", "--no-deps", "-d", str(tmp_path),
                           "flashinfer-python==0.6.13", "flashinfer-python==0.6.15"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "ERROR: ResolutionImpossible" in done.stderr
    assert not list(tmp_path.glob("*.whl"))


def test_pack_from_an_empty_cache_asks_pip_for_one_release_a_command(wheelhouse, tmp_path):
    pieces = wheelhouse.pack(tmp_path / "cache", RELEASES)

    calls = pip_calls(tmp_path)
    flashinfer = [c for c in calls if any(r.startswith("flashinfer-python==") for r in c)]
    assert flashinfer == [[f"flashinfer-python=={r}"] for r in RELEASES]
    assert [c for c in calls if c not in flashinfer] == [list(wheelhouse.DEPENDENCIES)]  # distinct projects: one call
    assert len(pieces) > 1 and [p.name for p in pieces] == [f"piece-{i:02d}" for i in range(len(pieces))]
    assert sorted(p.name for p in (tmp_path / "cache" / "wheels").iterdir()) == \
        sorted(f"flashinfer_python-{r}-py3-none-any.whl" for r in RELEASES)  # no scratch folder left behind

    shutil.rmtree(tmp_path / "cache" / "wheels")  # the archive is kept: no wheel is needed again
    again = wheelhouse.pack(tmp_path / "cache", RELEASES)  # no pip, the same pieces
    assert len(pip_calls(tmp_path)) == len(calls)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in pieces]

    wheelhouse.pack(tmp_path / "cache", RELEASES[:2])  # another set of releases: a new archive, downloads again
    assert pip_calls(tmp_path)[len(calls):] == [[f"flashinfer-python=={r}"] for r in RELEASES[:2]]


def test_a_release_pip_cannot_find_fails_the_pack_with_pips_words(wheelhouse, tmp_path, capsys):
    wheelhouse.pack(tmp_path / "cache", RELEASES[:1])
    status = wheelhouse.main(["pack", "--cache", str(tmp_path / "cache"), "--releases", "0.6.13", "9.9.9"])
    err = capsys.readouterr().err
    assert status == 2
    assert "flashinfer-python==9.9.9 failed (exit 1)" in err and "No matching distribution found" in err
    assert "Traceback" not in err
    assert pip_calls(tmp_path)[-1] == ["flashinfer-python==9.9.9"]  # 0.6.13 came from the cache


def test_pieces_carried_to_any_path_rebuild_every_wheel(wheelhouse, tmp_path):
    pieces = wheelhouse.pack(tmp_path / "cache", RELEASES)
    carried = tmp_path / "shared" / "elsewhere"
    carried.mkdir(parents=True)
    for number, piece in reversed(list(enumerate(pieces))):  # any order, any name, nothing beside them
        target = carried / f"part{number}.bin"
        shutil.copy(piece, target)
        assert wheelhouse.main(["receive", str(target)]) == 0

    built = wheelhouse.unpack()
    assert sorted(built) == sorted(f"flashinfer_python-{r}-py3-none-any.whl" for r in RELEASES)
    for release in RELEASES:
        name = f"flashinfer_python-{release}-py3-none-any.whl"
        with zipfile.ZipFile(tmp_path / "cache" / "wheels" / name) as original, \
                zipfile.ZipFile(wheelhouse.DEVICE_WHEELHOUSE / name) as rebuilt:
            assert {n: original.read(n) for n in original.namelist()} == {n: rebuilt.read(n) for n in rebuilt.namelist()}
    dependencies = sorted(p.name for p in wheelhouse.DEVICE_WHEELHOUSE.iterdir() if not p.name.startswith("flashinfer"))
    assert len(dependencies) == len(wheelhouse.DEPENDENCIES)


def test_start_names_the_missing_pieces(wheelhouse, tmp_path, capsys):
    assert wheelhouse.main(["start"]) == 2
    assert "no piece received" in capsys.readouterr().err

    pieces = wheelhouse.pack(tmp_path / "cache", RELEASES)
    assert len(pieces) >= 3
    assert wheelhouse.main(["receive", str(pieces[1])]) == 0
    assert wheelhouse.main(["start"]) == 2
    err = capsys.readouterr().err
    missing = ", ".join(p.name for p in pieces if p != pieces[1])
    assert f"missing {missing} of {len(pieces)} pieces (received: piece-01)" in err
    assert "Traceback" not in err and not wheelhouse.DEVICE_RUN.exists()


def test_a_damaged_piece_is_refused_where_it_arrives(wheelhouse, tmp_path, capsys):
    piece = wheelhouse.pack(tmp_path / "cache", RELEASES)[0]
    damaged = tmp_path / "damaged"
    data = bytearray(piece.read_bytes())
    data[-1] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert wheelhouse.main(["receive", str(damaged)]) == 2
    assert "damaged" in capsys.readouterr().err
    assert not list(wheelhouse.DEVICE_STORE.glob("piece-*"))

    assert wheelhouse.main(["receive", str(tmp_path / "absent")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_piece_of_a_new_pack_replaces_the_old_packs_pieces(wheelhouse, tmp_path):
    old = wheelhouse.pack(tmp_path / "cache", RELEASES[:1])
    assert wheelhouse.main(["receive", str(old[0])]) == 0
    new = wheelhouse.pack(tmp_path / "cache", RELEASES)
    assert wheelhouse.main(["receive", str(new[-1])]) == 0
    held = sorted(p.name for p in wheelhouse.DEVICE_STORE.glob("piece-*"))
    assert held == [new[-1].name]
    header = wheelhouse.read_piece_header(wheelhouse.DEVICE_STORE / held[0])
    assert header["pack"] == hashlib.sha256(b"".join(wheelhouse.read_piece(p)[1] for p in new)).hexdigest()


def test_collect_before_start_says_so(wheelhouse, capsys):
    assert wheelhouse.main(["collect"]) == 2
    err = capsys.readouterr().err
    assert "no matrix started on this machine" in err and "Traceback" not in err


def test_pack_prints_one_call_per_piece_carrying_only_that_piece(wheelhouse, tmp_path, capsys):
    assert wheelhouse.main(["pack", "--cache", str(tmp_path / "cache"), "--releases", *RELEASES]) == 0
    calls = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("run(")]
    pieces = sorted(wheelhouse.PACK_DIR.iterdir())  # outside the checkout here: named by absolute path
    assert len(calls) == len(pieces) + 1
    for piece, call in zip(pieces, calls):
        assert call.startswith(f"run(carry=['{piece}'], command='python3 scripts/gpu_wheelhouse.py receive {piece}")
    assert calls[-2].endswith("&& python3 scripts/gpu_wheelhouse.py start --jobs 9')")
    assert "collect --wait 540" in calls[-1]
    assert wheelhouse.device_calls([wheelhouse.ROOT / ".gpu-pack" / "piece-00"])[0] == (
        "run(carry=['.gpu-pack/piece-00'], command='python3 scripts/gpu_wheelhouse.py receive .gpu-pack/piece-00"
        " && python3 scripts/gpu_wheelhouse.py start --jobs 9')")
