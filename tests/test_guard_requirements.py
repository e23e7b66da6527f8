"""Requirement-file parsing and release listing of the pin-bump guard (no wheels, no network).

Pins written without a version (wheel paths, URLs, VCS, editable) are in
tests/test_guard_unpinned.py; the other file formats in tests/test_guard_formats.py."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from fi_compat.commands.guard.errors import ReleaseListError, RequirementsError
from fi_compat.commands.guard.index import ReleaseSource, parse_index_output, pinned, query_index, releases_for
from fi_compat.commands.guard.pins import REMOTE_WHEEL, SPECIFIER, groups as _groups, parse_pin
from fi_compat.commands.guard.pins.requirements import parse_file
from fi_compat.model.release_list import PUBLISHED_RELEASES


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def specs(found) -> list[tuple[str, int, str]]:
    return [(Path(f.source).name, f.line, str(f.specifier)) for f in found]


def test_comments_blank_lines_extras_markers_hashes_and_other_packages(tmp_path):
    req = write(tmp_path / "requirements.txt", """
        # a comment
        numpy==1.26.4 --hash=sha256:aaaa

        torch>=2.4  # trailing comment with flashinfer-python==0.0.1
        FlashInfer_Python[jit,cu130] == 0.6.18 ; python_version >= "3.10" \\
            --hash=sha256:bbbb \\
            --hash=sha256:cccc
        flashinfer-cubin==0.6.18
        --index-url https://example.invalid/simple
        -e ./some/editable
        ./local/path
        """)
    found = parse_file(req)
    assert specs(found) == [("requirements.txt", 5, "==0.6.18")]
    assert found[0].marker == 'python_version >= "3.10"'
    assert not found[0].constraint


def test_includes_are_relative_to_the_including_file(tmp_path, monkeypatch):
    write(tmp_path / "deps" / "base.txt", """
        -c ../constraints/pins.txt
        flashinfer-python>=0.6.15
        """)
    write(tmp_path / "constraints" / "pins.txt", "flashinfer-python==0.6.16\n")
    write(tmp_path / "deps" / "more.txt", "flashinfer-python<0.8\n")
    top = write(tmp_path / "requirements.txt", """
        -r deps/base.txt
        --requirement=deps/more.txt
        """)
    monkeypatch.chdir(tmp_path / "constraints")  # includes must not resolve against the cwd
    found = parse_file(top)
    assert specs(found) == [("pins.txt", 1, "==0.6.16"), ("base.txt", 2, ">=0.6.15"), ("more.txt", 1, "<0.8")]
    assert [f.constraint for f in found] == [True, False, False]


def test_short_include_forms_and_env_vars(tmp_path, monkeypatch):
    monkeypatch.setenv("FI_PIN", "0.7.4")
    write(tmp_path / "a.txt", "flashinfer-python==${FI_PIN}\n")
    write(tmp_path / "b.txt", "flashinfer-python!=0.7.0\n")
    top = write(tmp_path / "top.txt", "-ra.txt\n-c b.txt\n")
    assert specs(parse_file(top)) == [("a.txt", 1, "==0.7.4"), ("b.txt", 1, "!=0.7.0")]


def test_malformed_line_names_file_and_first_physical_line(tmp_path):
    req = write(tmp_path / "r.txt", """
        numpy
        # fine
        flashinfer-python = = 0.6.18 \\
            --hash=sha256:aa
        """)
    with pytest.raises(RequirementsError, match=r"r\.txt:3: malformed requirement"):
        parse_file(req)


def test_missing_include_and_cycle_are_errors(tmp_path):
    top = write(tmp_path / "top.txt", "-r nowhere.txt\n")
    with pytest.raises(RequirementsError, match=r"nowhere\.txt: no such requirement file"):
        parse_file(top)
    write(tmp_path / "x.txt", "-r y.txt\n")
    write(tmp_path / "y.txt", "-r x.txt\n")
    with pytest.raises(RequirementsError, match="include cycle"):
        parse_file(tmp_path / "x.txt")


def test_direct_url_for_flashinfer_is_found_but_other_urls_ignored(tmp_path):
    ok = write(tmp_path / "ok.txt", "https://example.invalid/other-1.0-py3-none-any.whl\n")
    assert parse_file(ok) == []
    url = write(tmp_path / "url.txt", "flashinfer-python @ https://example.invalid/f.whl\n")
    (found,) = parse_file(url)
    assert (found.kind, found.location, found.where) == (REMOTE_WHEEL, "https://example.invalid/f.whl", f"{url}:1")


@pytest.mark.parametrize("encoding, bom", [("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"),
                                           ("utf-16-be", b"\xfe\xff"), ("utf-32-le", b"\xff\xfe\x00\x00")])
def test_byte_order_marks_and_crlf_read_as_pip_reads_them(tmp_path, encoding, bom):
    """The BOM sits right before an include line and a continuation ends in a
    CRLF: both must still work (a BOM left in front of -r hid the include)."""
    write(tmp_path / "base.txt", "flashinfer-python>=0.6.15\n")
    text = "-r base.txt\r\n# comment\r\nflashinfer-python==0.6.18 \\\r\n    --hash=sha256:aa\r\nnumpy\r\n"
    top = tmp_path / "requirements.txt"
    top.write_bytes(bom + text.encode(encoding))
    assert specs(parse_file(top)) == [("base.txt", 1, ">=0.6.15"), ("requirements.txt", 3, "==0.6.18")]


def test_bom_without_crlf_and_a_lone_crlf_file(tmp_path):
    bom_only = tmp_path / "bom.txt"
    bom_only.write_bytes(b"\xef\xbb\xbfflashinfer-python==0.7.4\n")
    crlf_only = tmp_path / "crlf.txt"
    crlf_only.write_bytes(b"numpy\r\nflashinfer-python==0.6.18\r\n")
    assert specs(parse_file(bom_only)) == [("bom.txt", 1, "==0.7.4")]
    assert specs(parse_file(crlf_only)) == [("crlf.txt", 2, "==0.6.18")]


def test_undecodable_file_says_what_pip_accepts(tmp_path):
    bad = tmp_path / "r.txt"
    bad.write_bytes(b"flashinfer-python==0.6.18\n\xff\xfe\xfd\n")
    with pytest.raises(RequirementsError, match=r"r\.txt: cannot read: .*pip reads UTF-8, or UTF-16/UTF-32"):
        parse_file(bad)


def test_constraint_alone_is_a_pin_to_check(tmp_path):
    write(tmp_path / "constraints.txt", "flashinfer-python==0.6.18\n")
    top = write(tmp_path / "requirements.txt", "-c constraints.txt\nnumpy\n")
    found = parse_file(top)
    assert [(f.constraint, str(f.specifier)) for f in found] == [(True, "==0.6.18")]
    assert [str(s) for s, _ in _groups(found)] == ["==0.6.18"]


def test_cycle_error_names_the_chain_of_files(tmp_path):
    write(tmp_path / "a.txt", "-r sub/b.txt\n")
    write(tmp_path / "sub" / "b.txt", "-c ../a.txt\n")
    with pytest.raises(RequirementsError) as caught:
        parse_file(tmp_path / "a.txt")
    message = str(caught.value)
    assert "include cycle" in message
    assert message.endswith(f"{tmp_path / 'a.txt'} -> {tmp_path / 'sub' / 'b.txt'} -> {tmp_path / 'a.txt'}")


def test_parse_pin():
    pin = parse_pin("flashinfer_python==0.7.4")
    assert (pin.kind, str(pin.specifier), pin.where) == (SPECIFIER, "==0.7.4", "--pin flashinfer_python==0.7.4")
    assert parse_pin("flashinfer-python @ https://example.invalid/flashinfer_python-0.7.4-py3-none-any.whl").kind == REMOTE_WHEEL
    with pytest.raises(RequirementsError, match="checks flashinfer-python only"):
        parse_pin("torch==2.4")
    with pytest.raises(RequirementsError, match="malformed"):
        parse_pin("flashinfer-python==")


def test_groups_intersect_unmarked_lines_and_split_markers(tmp_path):
    write(tmp_path / "c.txt", "flashinfer-python==0.6.18\n")
    top = write(tmp_path / "r.txt", """
        -c c.txt
        flashinfer-python>=0.6.15
        """)
    assert [str(s) for s, _ in _groups(parse_file(top))] == [str(SpecifierSet(">=0.6.15,==0.6.18"))]
    split = write(tmp_path / "split.txt", """
        flashinfer-python==0.6.18; python_version < "3.12"
        flashinfer-python==0.7.4; python_version >= "3.12"
        """)
    assert sorted(str(s) for s, _ in _groups(parse_file(split))) == ["==0.6.18", "==0.7.4"]


@pytest.mark.parametrize(
    "specifier, expected",
    [("==0.6.18", ["0.6.18"]), ("===0.6.18", ["0.6.18"]), ("==0.6.*", None), (">=0.6", None),
     ("==0.6.18,==0.7.4", []), ("==0.6.18,<0.6.17", [])],
)
def test_pinned(specifier, expected):
    assert pinned(SpecifierSet(specifier)) == expected


def test_index_output_json_and_text_forms():
    assert parse_index_output('{"name": "flashinfer-python", "versions": ["0.7.4", "0.7.2"]}') == ["0.7.4", "0.7.2"]
    text = "flashinfer-python (0.7.4)\nAvailable versions: 0.7.4, 0.7.2.post1, 0.6.13\n  INSTALLED: 0.6.18\n"
    assert parse_index_output(text) == ["0.7.4", "0.7.2.post1", "0.6.13"]
    with pytest.raises(ReleaseListError):
        parse_index_output("ERROR: nothing")


def fake_pip(tmp_path: Path, body: str) -> str:
    """An executable standing in for ``python`` whose ``-m pip ...`` runs ``body``."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport sys\n{textwrap.dedent(body)}\n")
    script.chmod(0o755)
    return str(script)


def test_index_range_uses_index_and_excludes_prereleases(tmp_path):
    python = fake_pip(tmp_path, """
        assert sys.argv[1:5] == ["-m", "pip", "index", "versions"], sys.argv
        print('{"versions": ["0.8.0rc1", "0.7.9", "0.7.4", "0.6.18", "0.6.9"]}')
        """)
    source = ReleaseSource(python=python)
    releases, note = releases_for(SpecifierSet(">=0.6.13"), source)
    assert releases == ["0.6.18", "0.7.4", "0.7.9"]
    assert note is None
    assert releases_for(SpecifierSet(">=0.8.0rc1"), source)[0] == ["0.8.0rc1"]


def test_index_failure_falls_back_to_builtin_list_with_a_note(tmp_path):
    python = fake_pip(tmp_path, """
        sys.stderr.write("ERROR: Could not find a version (network unreachable)\\n")
        sys.exit(1)
        """)
    releases, note = releases_for(SpecifierSet(">=0.7"), ReleaseSource(python=python))
    assert releases == [r for r in PUBLISHED_RELEASES if r.startswith("0.7")]
    assert "package index unavailable" in note and "network unreachable" in note and "PUBLISHED_RELEASES" in note
    offline, note = releases_for(SpecifierSet("<0.6.15"), ReleaseSource(offline=True, python="/nonexistent"))
    assert offline == ["0.6.13", "0.6.14"] and "--offline" in note


def test_pip_without_json_option_falls_back_to_text(tmp_path):
    python = fake_pip(tmp_path, """
        if "--json" in sys.argv:
            sys.stderr.write("no such option: --json\\n"); sys.exit(2)
        print("flashinfer-python (0.7.4)\\nAvailable versions: 0.7.4, 0.7.2")
        """)
    assert query_index(python, 5) == ["0.7.4", "0.7.2"]


def _load_hooks(text: str) -> list[dict]:
    """PyYAML when installed, else the flat ``- key: value`` subset this file uses."""
    try:
        import yaml
    except ModuleNotFoundError:
        hooks: list[dict] = []
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith("- "):
                hooks.append({})
                line = line[2:]
            key, _, value = line.strip().partition(": ")
            value = value.strip()
            if value[:1] in "'\"" and value:
                value = value[1:-1]
            hooks[-1][key] = {"true": True, "false": False}.get(value, value)
        return hooks
    return yaml.safe_load(text)


def test_pre_commit_hook_definition():
    import re

    repo = Path(__file__).resolve().parents[1]
    (hook,) = _load_hooks((repo / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "fi-compat-guard" and hook["entry"] == "fi-compat guard --static"
    assert hook["language"] == "python" and hook["pass_filenames"] is True
    assert 'fi-compat = "fi_compat.cli:main"' in (repo / "pyproject.toml").read_text()
    pattern = re.compile(hook["files"])
    for path in ("requirements.txt", "svc/requirements-gpu.in", "constraints.txt", "requirements/base.txt",
                 "requirements-dev.txt", "constraints-cu13.txt", "requirements/gpu/extra.in", "dev.in",
                 "pyproject.toml", "python/pyproject.toml", "uv.lock", "svc/uv.lock", "poetry.lock",
                 "pylock.toml", "pylock.dev.toml", "deploy/pylock.gpu.toml"):
        assert pattern.search(path), path
    for path in ("setup.py", "docs/requirements.md", "src/my_requirements_parser.py", "MANIFEST.in",
                 "Makefile.in", "src/config.h.in", "setup.cfg.in", "cmake/FooConfig.cmake.in",
                 "pyproject.toml.bak", "my-pyproject.toml", "uv.lock.old", "Cargo.lock", "package-lock.json",
                 "pylock.a.b.toml", "pylocks.toml", "tests/data/uv.lock/readme.txt"):
        assert not pattern.search(path), path
