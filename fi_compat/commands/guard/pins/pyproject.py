"""Find the flashinfer-python requirements in a ``pyproject.toml``.

Read, with the scope each one applies to (see :func:`.found.groups`):

* ``[project] dependencies`` (PEP 621): everywhere;
* ``[project.optional-dependencies] X``: scope ``extra X``, with the main
  dependencies (``pkg[X]`` installs both);
* ``[dependency-groups] X`` (PEP 735), ``{include-group = "Y"}`` followed
  by the ``dependency-groups`` package (the guard's extra; unknown groups
  and cycles are errors): scope ``group X``, on its own
  (``pip install --group X`` installs the group without the project);
  uv's legacy ``[tool.uv] dev-dependencies`` is the group ``dev``;
* ``[tool.uv] constraint-dependencies`` (constraints) and
  ``override-dependencies`` (replace every other flashinfer-python
  requirement, as uv does);
* ``[tool.uv.sources] flashinfer-python``: a git, URL, path or workspace
  source replaces the version requirement (uv installs that instead); an
  ``index`` source keeps it;
* ``[tool.poetry...dependencies] flashinfer-python``: a plain or PEP 440
  version is read; Poetry's ``^``/``~`` syntax is refused with a pointer
  to ``poetry.lock``; a git/path/url table is classified like any direct
  reference.

Names are normalised (``flashinfer_python[cu13]`` is flashinfer-python).
Self-references (``sglang[srt]`` inside sglang's own extras) are not
followed: each extra is checked with the lines it lists itself, which checks
every release the combination could install and possibly more.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from .. import DISTRIBUTION
from .. import extra as guard_extra
from ..errors import RequirementsError
from .direct import classify, is_flashinfer, versioned_direct_reference
from .pin import SPECIFIER, UNCHECKABLE, Pin, Pins
from .toml_file import load_toml
from .toml_lines import LineIndex

_PLAIN_VERSION = re.compile(r"^\s*v?\d[\w.!+-]*\s*$")


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data = load_toml(path)
        self.lines = LineIndex(path.read_bytes().decode("utf-8-sig"))

    def table(self, *keys: str) -> dict[str, Any]:
        node: Any = self.data
        for key in keys:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if not isinstance(node, dict):
            raise RequirementsError(f"{self.path}: [{'.'.join(keys)}] is not a table")
        return node

    def strings(self, value: Any, context: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RequirementsError(f"{self.path}: {context} must be a list of requirement strings")
        return value

    def requirements(self, texts: list[str], *, context: str, table: str, **where: Any) -> list[Pin]:
        out = []
        for text in texts:
            try:
                requirement = Requirement(text)
            except InvalidRequirement as exc:
                line = self.lines.string(text, table=table)
                place = f"{self.path}:{line}" if line else f"{self.path} ({context})"
                refused = versioned_direct_reference(text, [self.path.parent])
                if refused is not None:
                    raise RequirementsError(f"{place}: {refused}") from None
                raise RequirementsError(f"{place}: malformed requirement {text!r}: {exc}") from None
            if not is_flashinfer(requirement, [self.path.parent]):
                continue
            marker = None if requirement.marker is None else str(requirement.marker)
            located = dict(
                source=str(self.path),
                line=self.lines.string(text, table=table),
                text=text,
                marker=marker,
                context=context,
                **where,
            )
            if requirement.url:
                out.append(classify(requirement.url, base_dirs=[self.path.parent], **located))
            else:
                out.append(Pin(kind=SPECIFIER, specifier=requirement.specifier, **located))
        return out


def read_pyproject(path: Path) -> Pins:
    """Every flashinfer-python requirement of a ``pyproject.toml``.  Raises
    :class:`~..errors.RequirementsError` for unreadable TOML, a malformed
    requirement, an unknown or cyclic ``include-group``."""
    reader = _Reader(path)
    pins = Pins()
    project = reader.table("project")
    found = reader.requirements(
        reader.strings(project.get("dependencies", []), "[project] dependencies"),
        context="[project] dependencies",
        table="project",
    )
    for extra, texts in reader.table("project", "optional-dependencies").items():
        context = f"[project.optional-dependencies] {extra}"
        found += reader.requirements(
            reader.strings(texts, context),
            context=context,
            table="project.optional-dependencies",
            scope=f"extra {canonicalize_name(extra)}",
        )
    found += _dependency_groups(reader)
    uv = reader.table("tool", "uv")
    found += reader.requirements(
        reader.strings(uv.get("constraint-dependencies", []), "[tool.uv] constraint-dependencies"),
        context="[tool.uv] constraint-dependencies",
        table="tool.uv",
        constraint=True,
    )
    overrides = reader.requirements(
        reader.strings(uv.get("override-dependencies", []), "[tool.uv] override-dependencies"),
        context="[tool.uv] override-dependencies",
        table="tool.uv",
    )
    if overrides:
        found = [f for f in found if f.kind != SPECIFIER] + overrides
    found = _uv_sources(reader, found)
    found += _poetry(reader, versions_known=bool(found))
    pins.found = found
    dynamic = project.get("dynamic", [])
    if isinstance(dynamic, list) and {"dependencies", "optional-dependencies"} & set(dynamic):
        pins.notes.append(
            f"{path}: [project] dependencies are dynamic (filled in by the build backend): "
            "also pass the files they come from, such as requirements.txt"
        )
    return pins


def _dependency_groups(reader: _Reader) -> list[Pin]:
    """Each group's flashinfer-python requirements, its includes followed by
    ``dependency-groups`` (PEP 735's reference resolver, the guard's extra),
    which refuses unknown groups, cycles and malformed entries.  Each
    requirement is read where it is written (its line, its group) and applies
    to every group that includes it."""
    resolver_module = guard_extra.module("dependency_groups")
    groups: dict[str, list[Any]] = {}
    written_in: dict[str, list[tuple[str, str]]] = {}  # per entry: (context, TOML table)
    for name, entries in reader.table("dependency-groups").items():
        if not isinstance(entries, list):
            raise RequirementsError(f"{reader.path}: [dependency-groups] {name} must be a list")
        groups[name] = list(entries)
        written_in[name] = [(f"[dependency-groups] {name}", "dependency-groups")] * len(entries)
    legacy_dev = reader.table("tool", "uv").get("dev-dependencies")
    if legacy_dev is not None:  # uv's older spelling of the group `dev`
        context = "[tool.uv] dev-dependencies"
        texts = reader.strings(legacy_dev, context)
        dev = next((name for name in groups if canonicalize_name(name) == "dev"), "dev")
        groups.setdefault(dev, [])
        written_in.setdefault(dev, [])
        groups[dev] += texts
        written_in[dev] += [(context, "tool.uv")] * len(texts)
    # Strings first, each where it is written: a malformed one names its line.
    own = {
        name: [
            reader.requirements([entry], context=context, table=table) if isinstance(entry, str) else None
            for entry, (context, table) in zip(entries, written_in[name])
        ]
        for name, entries in groups.items()
    }
    out: list[Pin] = []
    name = ""
    try:
        resolver = resolver_module.DependencyGroupResolver(groups)
        # The resolver hands back the Requirement objects it parsed for
        # lookup(), so each resolved requirement leads back to its entry.
        pins_of: dict[int, list[Pin]] = {}
        for name in groups:
            for item, pins in zip(resolver.lookup(name), own[name]):
                if pins is not None:
                    pins_of[id(item)] = pins
        for name in groups:
            for requirement in resolver.resolve(name):
                pins = pins_of.get(id(requirement))
                if pins is None:  # a resolver that copies: read the requirement as it prints
                    pins = reader.requirements(
                        [str(requirement)], context=f"[dependency-groups] {name}", table="dependency-groups"
                    )
                out += [replace(p, scope=f"group {name}", with_base=False) for p in pins]
    except RecursionError:
        raise RequirementsError(f"{reader.path}: [dependency-groups] {name}: includes nested too deep") from None
    except (LookupError, TypeError, ValueError) as exc:  # CyclicDependencyError is a ValueError
        where = f" {name}" if name else ""
        raise RequirementsError(f"{reader.path}: [dependency-groups]{where}: {exc}") from None
    return out


def _uv_sources(reader: _Reader, found: list[Pin]) -> list[Pin]:
    sources = {canonicalize_name(k): v for k, v in reader.table("tool", "uv", "sources").items()}
    declared = sources.get(DISTRIBUTION)
    if declared is None:
        return found
    entries = declared if isinstance(declared, list) else [declared]
    direct = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise RequirementsError(
                f"{reader.path}: [tool.uv.sources] {DISTRIBUTION} must be a table or a list of tables"
            )
        if "index" in entry:
            continue
        direct.append(_source_entry(reader, entry, "[tool.uv.sources]"))
    if not direct:
        return found
    keep_versions = len(direct) < len(entries)  # some environments still install from an index
    return [f for f in found if keep_versions or f.kind != SPECIFIER] + direct


def _source_entry(reader: _Reader, entry: dict[str, Any], context: str) -> Pin:
    """A git / url / path / workspace table (uv's sources, Poetry's dependency tables)."""
    located = dict(
        source=str(reader.path),
        line=_key_line(reader),
        text=f"{DISTRIBUTION} = {entry}",
        context=context,
        marker=entry.get("marker") if isinstance(entry.get("marker"), str) else None,
    )
    if "git" in entry:
        return classify(f"git+{entry['git']}", **located)
    if "url" in entry:
        return classify(str(entry["url"]), **located)
    if "path" in entry:
        editable = bool(entry.get("editable") or entry.get("develop"))
        return classify(str(entry["path"]), editable=editable, base_dirs=[reader.path.parent], **located)
    return Pin(
        kind=UNCHECKABLE,
        reason=(
            f"{context} {DISTRIBUTION} = {entry} installs flashinfer from a source the guard cannot read "
            "(a workspace member or an unknown source kind); pin a published release or run "
            "`fi-compat guard --wheel PATH` on the wheel it builds"
        ),
        **located,
    )


_KEY = re.compile(r"^\s*[\"']?flashinfer[-_.]python[\"']?\s*=", re.IGNORECASE)


def _key_line(reader: _Reader) -> Optional[int]:
    """The next ``flashinfer-python = ...`` line (a sources or Poetry table entry)."""
    return reader.lines.matching(_KEY)


def _poetry_specifier(text: str) -> Optional[SpecifierSet]:
    """Poetry's version string as PEP 440, when it is one; ``None`` for ``^``/``~``/``||``."""
    text = text.strip()
    if text == "*":
        return SpecifierSet()
    if _PLAIN_VERSION.match(text):
        return SpecifierSet(f"=={text.lstrip('v')}")
    if "^" in text or "||" in text or re.search(r"~(?!=)", text):
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def _poetry(reader: _Reader, versions_known: bool) -> list[Pin]:
    poetry = reader.table("tool", "poetry")
    tables = [
        ("[tool.poetry.dependencies]", poetry.get("dependencies", {}), None),
        ("[tool.poetry.dev-dependencies]", poetry.get("dev-dependencies", {}), "group dev"),
    ]
    groups = poetry.get("group", {}) if isinstance(poetry.get("group"), dict) else {}
    tables += [
        (f"[tool.poetry.group.{g}.dependencies]", t.get("dependencies", {}), f"group {g}")
        for g, t in groups.items()
        if isinstance(t, dict)
    ]
    out = []
    for context, table, scope in tables:
        if not isinstance(table, dict):
            continue
        for key, value in table.items():
            if canonicalize_name(key) != DISTRIBUTION:
                continue
            for entry in value if isinstance(value, list) else [value]:
                found = _poetry_entry(reader, entry, context, versions_known)
                if found is not None:
                    out.append(replace(found, scope=scope, with_base=scope is None))
    return out


def _poetry_entry(reader: _Reader, entry: Any, context: str, versions_known: bool) -> Optional[Pin]:
    if isinstance(entry, dict) and {"git", "url", "path"} & set(entry):
        return _source_entry(reader, entry, context)
    version = entry if isinstance(entry, str) else entry.get("version") if isinstance(entry, dict) else None
    if version is None:
        return None  # a table adding only source/markers/extras: the version comes from [project]
    if versions_known:
        return None  # Poetry 2 takes the version from [project]; this entry only refines it
    line = _key_line(reader)
    located = dict(source=str(reader.path), line=line, text=f"{DISTRIBUTION} = {version!r}", context=context)
    specifier = _poetry_specifier(str(version))
    if specifier is not None:
        return Pin(kind=SPECIFIER, specifier=specifier, **located)
    return Pin(
        kind=UNCHECKABLE,
        reason=(
            f"Poetry's own version syntax ({version!r}) is not read: run the guard on poetry.lock "
            "(`poetry lock` writes the exact release), or write the requirement in [project] dependencies"
        ),
        **located,
    )
