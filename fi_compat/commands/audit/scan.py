"""Static half of ``fi-compat audit``: find every unbounded memo in flashinfer's source.

Nothing is imported: files are read (from the installed package directory, a
``--source`` directory or a wheel read in memory) and parsed with :mod:`ast`.
A decorator counts when :func:`fi_compat.lookup.unbounded_memo_decorator`
recognises it (``functools.cache``, ``@cache``, ``lru_cache(maxsize=None)``,
``lru_cache(None)``); the same classification the runtime, doctor and guard use.

Speed.  flashinfer 0.7.4 ships 3,559 Python files (715 MB); parsing all of the
740 that mention a cache decorator takes ~18 s.  The scanner therefore parses
only the *top-level statements* that contain a candidate decorator line (a
cheap regular expression finds them), each statement with its real line
numbers.  A chunk that does not parse on its own (a top-level boundary guessed
wrongly, e.g. inside a triple-quoted string) falls back to parsing the whole
file, so the result equals a whole-file walk; ``exact=True`` forces the
whole-file walk (``tests/test_audit.py`` checks the two agree).
"""

from __future__ import annotations

import ast
import os
import re
import zipfile
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

from ...model.release_detection import package_directories
from ...lookup import unbounded_memo_decorator

# --------------------------------------------------------------------------- what looks per-request

#: (category, weight, regular expression on a parameter name).  A parameter
#: is flagged by the first pattern that matches its (lower-case) name.  The
#: weight says how fast a serving loop can mint new values: sequence and KV
#: lengths change every batch over a range of up to millions; token counts
#: too; batch sizes and offsets take fewer distinct values; page counts are
#: usually the KV pool size.  docs/audit.md explains each category.
PER_REQUEST_PATTERNS: tuple[tuple[str, int, str], ...] = (
    ("query length", 3, r"(^|_)(q|qo|query)_?(seq_?)?(len|lens|length|lengths)($|_)|seq_?lens?_q($|_)"),
    (
        "sequence/KV length",
        5,
        r"seq_?lens?($|_)|seq_?lengths?($|_)|(kv|ctx|context|past|prefix|cache)_?(len|lens|length|lengths)($|_)"
        r"|(^|_)max_(kv|ctx|context)($|_)",
    ),
    ("token count", 4, r"(^|_)(num|n|total|max)_?(tokens?|toks?)($|_)|(^|_)tokens?_(count|num)($|_)"),
    ("batch size", 3, r"(^|_)(batch_?size|bs|batch|num_(requests?|reqs?|seqs?|sequences)|buckets?)($|_)"),
    ("offset", 3, r"(^|_)(offsets?|indptr|start|pos|position|positions)($|_)"),
    ("page/block count", 2, r"(^|_)(num|n|max)_(pages|blocks|kv_pages|kv_blocks)($|_)"),
)
_COMPILED = tuple((category, weight, re.compile(rx)) for category, weight, rx in PER_REQUEST_PATTERNS)

#: Names that carry a per-request word but hold a flag, a type or a mode
#: (``use_cu_seqlens``, ``cu_seqlens_dtype``, ``kv_lengths_mode``): never flagged.
NOT_PER_REQUEST = re.compile(
    r"^(use|has|is|enable|enabled|with|need|needs|should|skip|do|return)_"
    r"|_(dtype|dtypes|mode|key|layout|type|format|kind|name|fn|func|backend|arch|str|flag)$"
)

#: Parameters never flagged (receivers).
_RECEIVERS = {"self", "cls"}

#: Integer-like annotations: a per-request value is an ``int``; a dtype or a
#: string naming a backend is not.
_INT_ANNOTATIONS = {"int", "Optional[int]", "int | None", "tuple[int, ...]", "Tuple[int, ...]"}

_CANDIDATE = re.compile(rb"^[ \t]*@[ \t]*(?:functools[ \t]*\.[ \t]*)?(?:cache|lru_cache)\b", re.M)
_TOP_LEVEL = re.compile(rb"^[A-Za-z_@]", re.M)
_CONTINUATION = (b"else", b"elif", b"except", b"finally")


def classify_parameter(name: str) -> Optional[tuple[str, int]]:
    """``(category, weight)`` when ``name`` looks per-request, else ``None``."""
    lowered = name.lower()
    if lowered in _RECEIVERS or NOT_PER_REQUEST.search(lowered):
        return None
    for category, weight, pattern in _COMPILED:
        if pattern.search(lowered):
            return category, weight
    return None


@dataclass(frozen=True)
class FlaggedParam:
    name: str
    category: str
    weight: int
    int_annotated: bool


@dataclass(frozen=True)
class Finding:
    """One function carrying an unbounded memo decorator."""

    module: str
    qualname: str
    path: str  # relative to the scanned root, "/" separated
    line: int  # of the ``def``
    decorator: str
    params: tuple[str, ...]
    flagged: tuple[FlaggedParam, ...] = field(default=())
    score: int = 0

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def full_name(self) -> str:
        return f"{self.module}.{self.qualname}"

    def as_dict(self) -> dict:
        return {
            "function": self.full_name,
            "module": self.module,
            "qualname": self.qualname,
            "where": self.where,
            "decorator": self.decorator,
            "params": list(self.params),
            "flagged": [
                {"name": p.name, "category": p.category, "weight": p.weight, "int_annotated": p.int_annotated}
                for p in self.flagged
            ],
            "score": self.score,
        }


def score_finding(flagged: Iterable[FlaggedParam], params: tuple[str, ...], required: tuple[str, ...]) -> int:
    """Rank key: how likely each call is to add an entry.  Zero when nothing is flagged.

    * strength: the weight of the strongest flagged parameter, +1 when any
      flagged parameter is annotated ``int``: the fastest-varying value
      decides how many entries a serving loop mints;
    * breadth: +1 per further flagged parameter;
    * dominance: up to +6 for the share of the *required* parameters (those
      every caller passes; options with defaults rarely vary) that are
      flagged.  A key made only of per-request values (``buckets, num_pages,
      profile_seq_len``) misses on nearly every new batch; a compile key with
      one length among fifteen types and sizes is usually fed bucketed values.
    """
    flagged = tuple(flagged)
    if not flagged:
        return 0
    strength = max(p.weight for p in flagged) + (1 if any(p.int_annotated for p in flagged) else 0)
    breadth = len(flagged) - 1
    basis = required or params
    flagged_names = {p.name for p in flagged}
    dominance = round(6 * sum(1 for name in basis if name in flagged_names) / max(1, len(basis)))
    return strength + breadth + dominance


# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, "/" separated, starting with the package name
    data: bytes


def iter_directory(package_dir: str) -> Iterator[SourceFile]:
    """Every ``.py`` under ``package_dir`` (a ``flashinfer`` package directory)."""
    package_dir = os.path.abspath(package_dir)
    base = os.path.dirname(package_dir)
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                full = os.path.join(root, name)
                with open(full, "rb") as handle:
                    yield SourceFile(os.path.relpath(full, base).replace(os.sep, "/"), handle.read())


def iter_wheel(wheel_path: str, package: str = "flashinfer") -> Iterator[SourceFile]:
    """Every ``package/**.py`` of a wheel, read in memory (nothing extracted)."""
    with zipfile.ZipFile(wheel_path) as archive:
        for info in archive.infolist():
            if info.filename.startswith(package + "/") and info.filename.endswith(".py"):
                yield SourceFile(info.filename, archive.read(info))


def installed_package_dir(package: str = "flashinfer") -> Optional[str]:
    """The directory ``import flashinfer`` would load, found without importing it."""
    directories = package_directories(package)
    return directories[0] if directories else None


# --------------------------------------------------------------------------- scanning


def _module_name(path: str) -> str:
    name = path[:-3].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _chunks_for(data: bytes, candidate_offsets: list[int]) -> Optional[list[tuple[int, int]]]:
    """Byte ranges of the top-level statements holding ``candidate_offsets``."""
    starts: list[int] = []
    previous_decorator = False
    for match in _TOP_LEVEL.finditer(data):
        position = match.start()
        line_head = data[position : position + 8]
        if line_head.startswith(_CONTINUATION) and re.match(rb"(else|elif|except|finally)\b", line_head):
            previous_decorator = False
            continue
        if not previous_decorator:
            starts.append(position)
        previous_decorator = line_head.startswith(b"@")
    if not starts:
        return None
    ranges: list[tuple[int, int]] = []
    import bisect

    for offset in candidate_offsets:
        index = bisect.bisect_right(starts, offset) - 1
        if index < 0:
            return None
        begin = starts[index]
        end = starts[index + 1] if index + 1 < len(starts) else len(data)
        if not ranges or ranges[-1] != (begin, end):
            ranges.append((begin, end))
    return ranges


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, path: str) -> None:
        self.module = module
        self.path = path
        self.stack: list[str] = []
        self.found: list[Finding] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            text = unbounded_memo_decorator(decorator)
            if text is not None:
                self.found.append(_finding(self.module, ".".join(self.stack + [node.name]), self.path, node, text))
                break
        self.stack.extend([node.name, "<locals>"])
        self.generic_visit(node)
        del self.stack[-2:]

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function


def _finding(
    module: str, qualname: str, path: str, node: ast.FunctionDef | ast.AsyncFunctionDef, decorator: str
) -> Finding:
    args = node.args
    every = (
        list(args.posonlyargs)
        + list(args.args)
        + ([args.vararg] if args.vararg else [])
        + list(args.kwonlyargs)
        + ([args.kwarg] if args.kwarg else [])
    )
    params = tuple(a.arg for a in every if a.arg not in _RECEIVERS)
    positional = list(args.posonlyargs) + list(args.args)
    with_default = {a.arg for a in positional[len(positional) - len(args.defaults) :]} if args.defaults else set()
    with_default |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
    required = tuple(
        name
        for name in params
        if name not in with_default
        and name not in {args.vararg.arg if args.vararg else "", args.kwarg.arg if args.kwarg else ""}
    )
    flagged: list[FlaggedParam] = []
    for arg in every:
        verdict = classify_parameter(arg.arg)
        if verdict is None:
            continue
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if annotation in ("bool", "Optional[bool]", "bool | None", "str", "Optional[str]", "torch.dtype"):
            continue
        flagged.append(FlaggedParam(arg.arg, verdict[0], verdict[1], annotation in _INT_ANNOTATIONS))
    return Finding(
        module, qualname, path, node.lineno, decorator, params, tuple(flagged), score_finding(flagged, params, required)
    )


def scan_file(source: SourceFile, exact: bool = False) -> list[Finding]:
    """Findings of one file (empty when it has no candidate decorator or does not parse)."""
    data = source.data
    offsets = [m.start() for m in _CANDIDATE.finditer(data)]
    if not offsets:
        return []
    module = _module_name(source.path)
    trees: list[ast.AST] = []
    ranges = None if exact else _chunks_for(data, offsets)
    if ranges is not None:
        try:
            for begin, end in ranges:
                tree = ast.parse(data[begin:end], filename=source.path)
                ast.increment_lineno(tree, data.count(b"\n", 0, begin))
                trees.append(tree)
        except (SyntaxError, ValueError):
            trees = []
            ranges = None
    if ranges is None:
        try:
            trees = [ast.parse(data, filename=source.path)]
        except (SyntaxError, ValueError):
            return []
    collector = _Collector(module, source.path)
    for tree in trees:
        collector.visit(tree)
    return collector.found


def rank(findings: Iterable[Finding]) -> list[Finding]:
    """Flagged first, highest score first; ties by file and line (stable output)."""
    return sorted(findings, key=lambda f: (-f.score, f.path, f.line))


def scan(sources: Iterable[SourceFile], exact: bool = False) -> tuple[list[Finding], int]:
    """All findings, ranked, and the number of ``.py`` files read."""
    findings: list[Finding] = []
    files = 0
    for source in sources:
        files += 1
        findings.extend(scan_file(source, exact=exact))
    return rank(findings), files
