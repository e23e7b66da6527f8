"""Find the flashinfer-python requirements in pip requirement files.

Follows pip's file format (``pip help install``, "Requirements File Format"):

* ``#`` starts a comment at the start of a line or after whitespace;
* a line ending in ``\\`` continues on the next one (a comment line never
  continues); errors name the first physical line;
* ``${NAME}`` is replaced from the environment, as pip does;
* ``-r``/``--requirement`` and ``-c``/``--constraint`` include another file,
  relative to the including file's directory (cycles are reported);
* options after a requirement (``--hash=...``, ``--config-settings ...``) are
  ignored, as are whole-line options (``--index-url``, ``-e``, ``--pre``, ...);
* requirements are parsed with :class:`packaging.requirements.Requirement`:
  extras and environment markers are accepted.  Markers are *not* evaluated:
  the machine running the guard is not the one the pin deploys to, so every
  flashinfer-python line is checked.

Lines naming other packages are ignored.  A bare path or URL (``./pkg``,
``https://.../x.whl``) names no package and is ignored too; anything else
that does not parse is an error naming ``file:line``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from . import DISTRIBUTION
from .errors import RequirementsError

_COMMENT = re.compile(r"(^|\s+)#.*$")
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")
_INCLUDE = {"-r": "requirement", "--requirement": "requirement", "-c": "constraint", "--constraint": "constraint"}
_MAX_DEPTH = 32


@dataclass(frozen=True)
class Found:
    """One flashinfer-python line."""

    requirement: Requirement
    path: Path
    line: int
    constraint: bool  # came from a -c file

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def specifier(self) -> SpecifierSet:
        return self.requirement.specifier

    def __str__(self) -> str:
        kind = " (constraint)" if self.constraint else ""
        return f"{self.where}: {self.requirement}{kind}"


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


def _include_target(line: str) -> Optional[tuple[str, str]]:
    """``("requirement"|"constraint", target)`` for an include line, else ``None``."""
    for flag, kind in _INCLUDE.items():
        if line == flag:
            return kind, ""
        if line.startswith(flag + "=") and flag.startswith("--"):
            return kind, line[len(flag) + 1:].strip()
        if line.startswith(flag + " ") or line.startswith(flag + "\t"):
            return kind, line[len(flag):].strip()
        if flag in ("-r", "-c") and line.startswith(flag) and not line.startswith(flag + "-"):
            return kind, line[len(flag):].strip()  # -rfile.txt, as optparse allows
    return None


def _looks_like_path_or_url(text: str) -> bool:
    return "://" in text or text.startswith((".", "/", "~")) or text.endswith((".whl", ".zip", ".tar.gz"))


def _expand(line: str) -> str:
    return _ENV_VAR.sub(lambda m: os.environ.get(m.group(1), m.group(0)), line)


def parse_file(path: os.PathLike | str, *, constraint: bool = False) -> list[Found]:
    """Every flashinfer-python requirement in ``path`` and the files it includes."""
    return list(_parse(Path(path), constraint, []))


def _parse(path: Path, constraint: bool, stack: list[Path]) -> Iterator[Found]:
    resolved = path.resolve()
    if resolved in stack:
        chain = " -> ".join(str(p) for p in [*stack, resolved])
        raise RequirementsError(f"{path}: include cycle: {chain}")
    if len(stack) >= _MAX_DEPTH:
        raise RequirementsError(f"{path}: includes nested more than {_MAX_DEPTH} deep")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RequirementsError(f"{path}: no such requirement file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RequirementsError(f"{path}: cannot read: {exc}") from None
    stack = [*stack, resolved]
    for number, raw in _logical_lines(text):
        line = _expand(_COMMENT.sub("", raw)).strip()
        if not line:
            continue
        where = f"{path}:{number}"
        include = _include_target(line)
        if include is not None:
            kind, target = include
            if not target:
                raise RequirementsError(f"{where}: {line!r} names no file")
            if "://" in target:
                raise RequirementsError(f"{where}: remote include {target!r} is not supported; "
                                        "check the file it points to directly")
            child = Path(os.path.expanduser(target))
            if not child.is_absolute():
                child = path.parent / child
            yield from _parse(child, constraint or kind == "constraint", stack)
            continue
        if line.startswith("-"):
            continue  # a whole-line option: --index-url, -e, --pre, --hash on its own, ...
        requirement_text, _options = _split_options(line)
        try:
            requirement = Requirement(requirement_text)
        except InvalidRequirement as exc:
            if _looks_like_path_or_url(requirement_text):
                continue  # a bare path or URL: names no package by itself
            raise RequirementsError(f"{where}: malformed requirement {requirement_text!r}: {exc}") from None
        if canonicalize_name(requirement.name) != DISTRIBUTION:
            continue
        if requirement.url:
            raise RequirementsError(
                f"{where}: {DISTRIBUTION} from a direct URL ({requirement.url}) cannot be checked "
                "by release; download the wheel and pass it with --wheel"
            )
        yield Found(requirement, path, number, constraint)


def parse_pin(text: str) -> Requirement:
    """A ``--pin`` argument: ``flashinfer-python==X`` (any specifier works)."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise RequirementsError(f"--pin {text!r}: malformed requirement: {exc}") from None
    if canonicalize_name(requirement.name) != DISTRIBUTION:
        raise RequirementsError(f"--pin {text!r}: the guard checks {DISTRIBUTION} only")
    if requirement.url:
        raise RequirementsError(f"--pin {text!r}: a direct URL cannot be checked by release; use --wheel")
    return requirement
