"""Find the flashinfer-python requirements in pip requirement files (and ``--pin``).

Follows pip's file format (``pip help install``, "Requirements File Format"):

* the file is UTF-8, or UTF-16/UTF-32 with a byte-order mark; a UTF-8 BOM is
  dropped and CRLF line ends are fine, as pip reads them;
* ``#`` starts a comment at the start of a line or after whitespace;
* a line ending in ``\\`` continues on the next one (a comment line never
  continues); errors name the first physical line;
* ``${NAME}`` is replaced from the environment, as pip does;
* ``-r``/``--requirement`` and ``-c``/``--constraint`` include another file,
  relative to the including file's directory (cycles are reported); a
  flashinfer-python line in a constraint file is checked like any other;
* options after a requirement (``--hash=...``) are ignored, as are whole-line
  options (``--index-url``, ``--pre``, ...) except ``-e``/``--editable``;
* requirements are parsed with :class:`packaging.requirements.Requirement`:
  extras and environment markers are accepted.  Markers are *not* evaluated:
  the machine running the guard is not the one the pin deploys to.

A flashinfer-python requirement that names no version (a wheel path, a URL,
VCS, ``-e``, and ``flashinfer @ URL`` or a bare archive URL of the flashinfer
repository) becomes a :class:`~.pin.Pin` of another kind through
:mod:`.direct`.  Lines naming other packages are ignored, and so are bare
paths and URLs that are not flashinfer; anything else that does not parse is
an error naming ``file:line``, ``flashinfer-python==X @ URL`` (which pip
refuses) included.
"""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path
from typing import Iterator, Optional

from packaging.requirements import InvalidRequirement, Requirement

from .. import DISTRIBUTION
from ..errors import RequirementsError
from .direct import classify, is_flashinfer, names_flashinfer, versioned_direct_reference
from .pin import Pin

_COMMENT = re.compile(r"(^|\s+)#.*$")
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")
_EXTRAS_SUFFIX = re.compile(r"\[[^\]/]*\]$")
_EDITABLE = ("-e", "--editable")
_MAX_DEPTH = 32
# pip's auto_decode order: a UTF-32 LE mark starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _decode(path: Path, data: bytes) -> str:
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise RequirementsError(
            f"{path}: cannot read: {exc}; pip reads UTF-8, or UTF-16/UTF-32 with a byte-order mark"
        ) from None


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """pip's ``join_lines``: join backslash continuations, keep the first line number."""
    start: Optional[int] = None
    parts: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line  # so the comment is stripped after joining
            if parts:
                parts.append(line)
                assert start is not None
                yield start, "".join(parts)
                parts = []
            else:
                yield number, line
        else:
            if not parts:
                start = number
            parts.append(line.strip("\\"))
    if parts:
        assert start is not None
        yield start, "".join(parts)


def _split_options(line: str) -> tuple[str, str]:
    """pip's ``break_args_options``: the requirement is every token before the first option."""
    tokens = line.split(" ")
    args: list[str] = []
    options = list(tokens)
    for token in tokens:
        if token.startswith("-"):
            break
        args.append(token)
        options.pop(0)
    return " ".join(args), " ".join(options)


def _option_value(line: str, flags: tuple[str, ...]) -> Optional[str]:
    """The value of a whole-line option (``-r x``, ``-rx``, ``--requirement=x``), else ``None``."""
    for flag in flags:
        if line == flag:
            return ""
        if flag.startswith("--") and line.startswith(flag + "="):
            return line[len(flag) + 1 :].strip()
        if line.startswith(flag + " ") or line.startswith(flag + "\t"):
            return line[len(flag) :].strip()
        if not flag.startswith("--") and line.startswith(flag) and not line.startswith(flag + "-"):
            return line[len(flag) :].strip()  # -rfile.txt, as optparse allows
    return None


def _include(line: str) -> Optional[tuple[str, bool]]:
    """``(file, is_constraint)`` for a ``-r``/``-c`` line, else ``None``."""
    requirement = _option_value(line, ("-r", "--requirement"))
    if requirement is not None:
        return requirement, False
    constraint = _option_value(line, ("-c", "--constraint"))
    return None if constraint is None else (constraint, True)


def _looks_like_path_or_url(text: str) -> bool:
    return "://" in text or text.startswith((".", "/", "~", "file:")) or text.endswith((".whl", ".zip", ".tar.gz"))


def _bare_target(text: str) -> str:
    """A bare path or URL line without its marker and extras (``./x.whl[cu13] ; python_version>"3"``)."""
    target = text.split(";", 1)[0].strip() if "://" not in text else text.split(" ;", 1)[0].strip()
    return target if "://" in target else _EXTRAS_SUFFIX.sub("", target)


def _expand(line: str) -> str:
    return _ENV_VAR.sub(lambda m: os.environ.get(m.group(1), m.group(0)), line)


def parse_file(path: os.PathLike | str, *, constraint: bool = False) -> list[Pin]:
    """Every flashinfer-python requirement in ``path`` and the files it includes.
    Raises :class:`~..errors.RequirementsError` naming ``file:line``."""
    return list(_parse(Path(path), constraint, []))


def _parse(path: Path, constraint: bool, stack: list[Path]) -> Iterator[Pin]:
    resolved = path.resolve()
    if resolved in stack:
        chain = " -> ".join(str(p) for p in [*stack, resolved])
        raise RequirementsError(f"{path}: include cycle: {chain}")
    if len(stack) >= _MAX_DEPTH:
        raise RequirementsError(f"{path}: includes nested more than {_MAX_DEPTH} deep")
    try:
        text = _decode(path, path.read_bytes())
    except FileNotFoundError:
        raise RequirementsError(f"{path}: no such requirement file") from None
    except OSError as exc:
        raise RequirementsError(f"{path}: cannot read: {exc}") from None
    stack = [*stack, resolved]
    for number, raw in _logical_lines(text):
        line = _expand(_COMMENT.sub("", raw)).strip()
        if not line:
            continue
        where = f"{path}:{number}"
        located = dict(source=str(path), line=number, text=line, constraint=constraint, base_dirs=[path.parent])
        include = _include(line)
        if include is not None:
            target, included_as_constraint = include
            if not target:
                raise RequirementsError(f"{where}: {line!r} names no file")
            if "://" in target:
                raise RequirementsError(
                    f"{where}: remote include {target!r} is not supported; check the file it points to directly"
                )
            child = Path(os.path.expanduser(target))
            if not child.is_absolute():
                child = path.parent / child
            yield from _parse(child, constraint or included_as_constraint, stack)
            continue
        editable = _option_value(line, _EDITABLE)
        if editable is not None:
            target = _bare_target(editable)
            if target and names_flashinfer(target, [path.parent]):
                yield classify(target, editable=True, **located)
            continue
        if line.startswith("-"):
            continue  # a whole-line option: --index-url, --pre, --hash on its own, ...
        requirement_text, _options = _split_options(line)
        try:
            requirement = Requirement(requirement_text)
        except InvalidRequirement as exc:
            # Before the bare-URL fallback: its file-name test would read
            # "flashinfer-python==X @ URL" as an unnamed URL and skip it.
            refused = versioned_direct_reference(requirement_text, [path.parent])
            if refused is not None:
                raise RequirementsError(f"{where}: {refused}") from None
            if _looks_like_path_or_url(requirement_text):
                target = _bare_target(requirement_text)
                if names_flashinfer(target, [path.parent]):
                    yield classify(target, **located)
                continue
            raise RequirementsError(f"{where}: malformed requirement {requirement_text!r}: {exc}") from None
        if not is_flashinfer(requirement, [path.parent]):
            continue
        marker = None if requirement.marker is None else str(requirement.marker)
        if requirement.url:
            yield classify(requirement.url, marker=marker, **located)
            continue
        yield Pin(str(path), number, line, specifier=requirement.specifier, marker=marker, constraint=constraint)


def parse_pin(text: str) -> Pin:
    """A ``--pin`` argument: ``flashinfer-python==X``, any specifier, or ``flashinfer-python @ URL``."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        refused = versioned_direct_reference(text)
        if refused is not None:
            raise RequirementsError(f"--pin: {refused}") from None
        raise RequirementsError(f"--pin {text!r}: malformed requirement: {exc}") from None
    if not is_flashinfer(requirement):
        raise RequirementsError(f"--pin {text!r}: the guard checks {DISTRIBUTION} only")
    source = f"--pin {text}"
    if requirement.url:
        return classify(requirement.url, source=source, line=None, text=text)
    return Pin(source, None, text, specifier=requirement.specifier)
