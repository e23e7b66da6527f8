"""flashinfer-python requirements that name no version: a wheel file is checked,
a wheel URL only with --download, VCS / editable / source trees never; none of
them may pass (exit 0) unchecked.

The wheels are the real releases from the guard's wheel cache (the
``real_wheel`` fixture of tests/conftest.py); --download is served by a local
HTTP server, so the test needs no network beyond filling that cache.
"""

from __future__ import annotations

import http.server
import shutil
import threading
from pathlib import Path

import pytest

from fi_compat.commands.guard.fetch import file_sha256
from fi_compat.commands.guard.pins import LOCAL_WHEEL, REMOTE_WHEEL, UNCHECKABLE, read_pins
from test_guard_wheels import run_guard, run_json

WHEEL_0618 = "flashinfer_python-0.6.18-py3-none-any.whl"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def kinds(path: Path) -> list[tuple[str, int, str]]:
    return [(f.kind, f.line, f.location) for f in read_pins(path).found]


# --------------------------------------------------------------------------- what each line is read as


def test_how_each_unversioned_form_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkout").mkdir()
    write(tmp_path / "checkout" / "pyproject.toml", '[project]\nname = "flashinfer-python"\n')
    (tmp_path / "numpy-src").mkdir()
    write(tmp_path / "numpy-src" / "pyproject.toml", '[project]\nname = "numpy"\n')
    wheel = tmp_path / WHEEL_0618
    wheel.write_bytes(b"")
    req = write(tmp_path / "requirements.txt", "\n".join([
        f"./{WHEEL_0618}",                                                            # 1 local wheel
        f"flashinfer-python @ file://{wheel}",                                        # 2 local wheel
        f"https://example.invalid/x/{WHEEL_0618}#sha256={'ab' * 32}",                  # 3 remote wheel
        "flashinfer-python @ https://example.invalid/flashinfer_python-0.6.18.tar.gz",  # 4 sdist URL
        "git+https://github.com/flashinfer-ai/flashinfer.git@v0.6.18#egg=flashinfer-python",  # 5 VCS
        "git+https://github.com/flashinfer-ai/flashinfer.git@v0.6.18",                # 6 VCS, named by repo
        "flashinfer-python @ git+https://github.com/flashinfer-ai/flashinfer.git",     # 7 VCS
        "-e git+https://github.com/flashinfer-ai/flashinfer.git#egg=flashinfer_python",  # 8 editable VCS
        "-e ./checkout",                                                              # 9 editable, named by pyproject
        "--editable=./flashinfer",                                                    # 10 editable, absent dir
        "./checkout",                                                                 # 11 source tree
        "-e ./numpy-src",                                                             # 12 not flashinfer
        "git+https://github.com/numpy/numpy.git",                                     # 13 not flashinfer
        "https://example.invalid/numpy-2.0-py3-none-any.whl",                         # 14 not flashinfer
    ]) + "\n")
    assert kinds(req) == [
        (LOCAL_WHEEL, 1, str(wheel)),
        (LOCAL_WHEEL, 2, str(wheel)),
        (REMOTE_WHEEL, 3, f"https://example.invalid/x/{WHEEL_0618}#sha256={'ab' * 32}"),
        (UNCHECKABLE, 4, "https://example.invalid/flashinfer_python-0.6.18.tar.gz"),
        (UNCHECKABLE, 5, "git+https://github.com/flashinfer-ai/flashinfer.git@v0.6.18#egg=flashinfer-python"),
        (UNCHECKABLE, 6, "git+https://github.com/flashinfer-ai/flashinfer.git@v0.6.18"),
        (UNCHECKABLE, 7, "git+https://github.com/flashinfer-ai/flashinfer.git"),
        (UNCHECKABLE, 8, "git+https://github.com/flashinfer-ai/flashinfer.git#egg=flashinfer_python"),
        (UNCHECKABLE, 9, "./checkout"),
        (UNCHECKABLE, 10, "./flashinfer"),
        (UNCHECKABLE, 11, "./checkout"),
    ]
    found = read_pins(req).found
    assert found[2].sha256 == "ab" * 32
    assert "VCS requirement" in found[4].reason and "names a commit, not a release" in found[4].reason
    assert "editable install" in found[7].reason and "fi-compat doctor --no-import" in found[8].reason
    assert "source tree" in found[10].reason and "pip wheel --no-deps" in found[10].reason


def test_relative_wheel_path_is_tried_from_the_cwd_then_the_file(tmp_path, monkeypatch):
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / WHEEL_0618).write_bytes(b"")
    req = write(tmp_path / "deps" / "requirements.txt", f"./{WHEEL_0618}\n")
    monkeypatch.chdir(tmp_path)  # pip would look in the cwd first: not there, so the file's folder
    ((kind, _, location),) = kinds(req)
    assert (kind, location) == (LOCAL_WHEEL, str(tmp_path / "deps" / WHEEL_0618))
    (tmp_path / "deps" / WHEEL_0618).unlink()
    (found,) = read_pins(req).found
    assert found.kind == UNCHECKABLE
    assert f"looked at {tmp_path / WHEEL_0618} or {tmp_path / 'deps' / WHEEL_0618}" in found.reason


# --------------------------------------------------------------------------- exit status of each


@pytest.mark.parametrize("line, words", [
    (f"flashinfer-python @ https://example.invalid/{WHEEL_0618}",
     ["cannot be verified offline", "fi-compat guard --wheel", "--download"]),
    ("git+https://github.com/flashinfer-ai/flashinfer.git@v0.6.18#egg=flashinfer-python",
     ["names a commit, not a release", "pip wheel --no-deps"]),
    ("-e git+https://github.com/flashinfer-ai/flashinfer.git#egg=flashinfer-python", ["editable install"]),
    ("-e ./flashinfer", ["editable install", "fi-compat doctor --no-import"]),
    (f"./missing/{WHEEL_0618}", ["does not exist"]),
])
def test_unchecked_flashinfer_requirement_never_exits_0(tmp_path, monkeypatch, capsys, line, words):
    monkeypatch.chdir(tmp_path)
    req = write(tmp_path / "requirements.txt", f"numpy\n{line}\n")
    status, data = run_json(str(req), "--offline", "--cache-dir", str(tmp_path / "cache"), capsys=capsys)
    assert status == 2
    (result,) = data["results"]
    assert (result["verdict"], result["origin"]) == ("error", f"{req}:2")
    for word in words:
        assert word in result["reason"], result["reason"]


def test_local_wheel_is_checked(real_wheel, tmp_path, monkeypatch, capsys):
    shutil.copy(real_wheel("0.6.18"), tmp_path / WHEEL_0618)
    monkeypatch.chdir(tmp_path)
    req = write(tmp_path / "requirements.txt", f"./{WHEEL_0618}\n")
    status, data = run_json(str(req), "--offline", capsys=capsys)
    assert status == 0
    (result,) = data["results"]
    assert (result["release"], result["verdict"]) == ("0.6.18", "verified")
    verdicts = {row["name"]: row["verdict"] for row in result["bounds"]}
    assert verdicts["tuning-config"] == verdicts["builder"] == "bound"  # read from the wheel itself
    assert result["wheel"] == str(tmp_path / WHEEL_0618)


class _WheelServer:
    """Serves one directory over HTTP on 127.0.0.1 and counts the requests."""

    def __init__(self, directory: Path) -> None:
        counter = self.requests = []

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(directory), **kwargs)

            def log_message(self, *args):
                counter.append(args)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "_WheelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_url_pin_is_fetched_once_with_download(real_wheel, tmp_path, capsys):
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(real_wheel("0.6.18"), served / WHEEL_0618)
    cache = tmp_path / "cache"
    with _WheelServer(served) as server:
        req = write(tmp_path / "requirements.txt", f"flashinfer-python @ {server.url}/{WHEEL_0618}\n")
        status, data = run_json(str(req), "--cache-dir", str(cache), capsys=capsys)
        assert status == 2 and "cannot be verified offline" in data["results"][0]["reason"]
        assert server.requests == []  # nothing fetched without --download
        status, data = run_json(str(req), "--download", "--cache-dir", str(cache), capsys=capsys)
        assert status == 0, data
        (result,) = data["results"]
        assert (result["release"], result["verdict"]) == ("0.6.18", "verified")
        assert Path(result["wheel"]).parent.parent == cache / "urls"
        fetched = len(server.requests)
        assert fetched >= 1
        status, _ = run_json(str(req), "--download", "--cache-dir", str(cache), capsys=capsys)
        assert status == 0 and len(server.requests) == fetched  # the second run reads the cache


def test_download_refuses_a_wheel_whose_hash_differs(real_wheel, tmp_path, capsys):
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(real_wheel("0.6.17"), served / WHEEL_0618)  # the wrong file behind the right name
    expected = file_sha256(real_wheel("0.6.18"))
    with _WheelServer(served) as server:
        req = write(tmp_path / "requirements.txt",
                    f"flashinfer-python @ {server.url}/{WHEEL_0618}#sha256={expected}\n")
        status, data = run_json(str(req), "--download", "--cache-dir", str(tmp_path / "cache"), capsys=capsys)
    assert status == 2
    assert "`pip download` failed" in data["results"][0]["reason"]
    assert not list((tmp_path / "cache").rglob("*.whl"))


def test_download_and_offline_together_are_a_usage_error(tmp_path, capsys):
    status, text = run_guard("--pin", "flashinfer-python==0.6.18", "--download", "--offline", capsys=capsys)
    assert status == 2 and "--download fetches URLs and --offline forbids it" in text
