"""Rules of the package's source: flashinfer's function names spelled only in
``fi_compat/model/specs.py``, and ``sys.modules`` read only through the lookup package.

A module holds one concern whatever its length: where modules split is the job
table's (docs/design.md) and the layer check's (tests/test_layer_diagram.py: no
cycle, no upward import), not a line count."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fi_compat
from fi_compat.model import specs

PACKAGE = Path(fi_compat.__file__).resolve().parent
SPECS = PACKAGE / "model" / "specs.py"


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def flashinfer_names() -> set[str]:
    """Every function name in :data:`fi_compat.model.specs.ALL` (a member also by its own name)."""
    names = set()
    for spec in specs.ALL:
        names.add(spec.name)
        names.add(spec.name.rsplit(".", 1)[-1])
    return names


NAME = re.compile("|".join(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])"
                           for n in sorted(flashinfer_names(), key=len, reverse=True)))


def string_literals(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant in the code, f-string parts included,
    except strings that stand alone as a statement (docstrings, attribute docstrings):
    those document, they are never a value."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    documentation = {id(node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                     and isinstance(node.value.value, str)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documentation]


def test_the_rule_sees_names_in_code_and_not_in_documentation(tmp_path):
    sample = tmp_path / "sample.py"
    config = specs.TUNING_CONFIG.name
    sample.write_text(
        f'"""Module docstring naming {config}."""\n'
        f'def f():\n    """Docstring naming {config}."""\n    return getattr(object, "{config}", None)\n'
        f'KEY = f"flashinfer.mla._core.{{0}}{specs.TUNING_CONFIG_BUILDER.name}"\n'
        'PUBLIC = "build_mla_decode_tuning_config"\n'
        f'"""Attribute docstring naming {config}."""\n'
    )
    hits = sorted((line, NAME.search(text).group(0)) for line, text in string_literals(sample) if NAME.search(text))
    assert hits == [(4, config), (5, specs.TUNING_CONFIG_BUILDER.name)]


def test_no_flashinfer_function_name_is_spelled_outside_specs():
    spelled = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
               for path in sources() if path != SPECS
               for line, text in string_literals(path) if NAME.search(text)]
    assert spelled == []


#: Library modules that may read ``sys.modules`` by name themselves, each with why:
#: the lookup package (the one place), the process's startup hook (fi_compat's
#: own module), release detection (runs at interpreter start: importing the
#: lookup package there would cost its ``ast``/source modules on every start),
#: and the proxies' pickling (the original's own module, whatever it is).
SYS_MODULES_READERS = ("fi_compat/lookup/", "fi_compat/_sitecustomize/", "fi_compat/model/release_detection.py",
                       "fi_compat/memo/proxies.py")


def sys_modules_lookups(source: str) -> list[int]:
    """Lines that look a module up by name in ``sys.modules`` (``sys.modules[x]``
    read, ``sys.modules.get(x)``); ``del`` and assignment are not lookups."""
    found = []
    for node in ast.walk(ast.parse(source)):
        target = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        if target is not None and ast.unparse(target) == "sys.modules":
            found.append(node.lineno)
    return found


def test_sys_modules_lookups_go_through_lookup():
    """Every library lookup of an imported module goes through
    :mod:`fi_compat.lookup` (``lookup.modules.loaded``), so a flashinfer module
    is found by one set of rules.  The command line and the CPU-host shim (which
    patches every flashinfer module, it does not look one up) are not library."""
    root = Path(__file__).resolve().parents[1]
    offending = []
    for path in sorted((root / "fi_compat").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("fi_compat/commands/", "fi_compat/workload/") + SYS_MODULES_READERS):
            continue
        offending += [f"{relative}:{line}" for line in sys_modules_lookups(path.read_text(encoding="utf-8"))]
    assert offending == []


def test_the_sys_modules_rule_can_fail():
    lines = sys_modules_lookups("import sys\na = sys.modules['flashinfer']\nb = sys.modules.get(x)\ndel sys.modules[y]\n")
    assert lines == [2, 3]
