"""`import fi_compat` stays cheap (neither torch nor flashinfer), and the package's
imports form no cycle."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fi_compat
from fi_compat.cli import COMMANDS

PACKAGE = Path(fi_compat.__file__).resolve().parent

PROBE = """
import json, sys
import fi_compat, fi_compat.cli, fi_compat.config, fi_compat.model.release_detection, fi_compat.errors
for command in fi_compat.cli.COMMANDS:
    fi_compat.cli.build_parser(command)
fi_compat.detect_release()
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flashinfer'))))
"""


def test_import_fi_compat_and_every_command_parser_import_neither_torch_nor_flashinfer():
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_install_before_flashinfer_import_stays_light():
    # install() with flashinfer not yet imported registers a post-import hook
    # and must not import it itself.
    code = ("import sys, fi_compat; s = fi_compat.install(); "
            "print(s['state'], 'flashinfer' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["pending", "False", "False"]


@pytest.mark.parametrize("name", sorted(set(fi_compat.__all__) - {"__version__"}))
def test_public_names_resolve(name):
    assert getattr(fi_compat, name) is not None
    assert name in dir(fi_compat)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fi_compat.nope  # noqa: B018


# --------------------------------------------------------------------------- import cycles


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def _layer_diagram():
    """scripts/layer_diagram.py: the one reader of fi_compat's import graph."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "layer_diagram.py"
    spec = importlib.util.spec_from_file_location("layer_diagram", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: ``module -> (imported at import time, imported only inside functions or for
#: the type checker)``: the first at module level, also under ``if``/``try``; the
#: second inside functions or under ``if TYPE_CHECKING``; the lazy names of
#: ``fi_compat/__init__.py`` count as deferred imports.
GRAPH = _layer_diagram().module_imports(PACKAGE)


def imports(module: str, deferred: bool) -> set[str]:
    """fi_compat modules ``module`` imports at import time, plus, with
    ``deferred``, those imported inside functions."""
    eager, later = GRAPH[module]
    return (eager | later if deferred else set(eager)) - {module}


def cycles(deferred: bool) -> list[list[str]]:
    graph = {module: sorted(imports(module, deferred)) for module in MODULES}
    found, state, stack = [], {}, []

    def walk(module: str) -> None:
        state[module] = "open"
        stack.append(module)
        for target in graph[module]:
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                walk(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return found


def test_the_import_graph_walk_sees_the_package():
    assert {"fi_compat", "fi_compat.installing.installer", "fi_compat.commands.doctor", "fi_compat.lookup.live"} <= set(MODULES)
    assert "fi_compat.model.specs" in imports("fi_compat.verdict.bounds", deferred=False)
    assert "fi_compat.installing.status_view" in imports("fi_compat.installing.installer", deferred=True)
    assert "fi_compat.public" in imports("fi_compat", deferred=True)
    assert {"fi_compat.installing.installer", "fi_compat.calls.call_api"} <= imports("fi_compat.public", deferred=False)


def test_no_import_cycle_at_import_time():
    assert cycles(deferred=False) == []


def test_no_import_cycle_through_deferred_imports_either():
    """An import inside a function that closes a cycle still makes two modules depend on each other."""
    assert [" -> ".join(cycle) for cycle in cycles(deferred=True)] == []


def test_every_command_module_exists():
    for module in COMMANDS.values():
        assert module[0] in MODULES, module


#: The command line: the one part of the package that may import the commands.
COMMAND_LINE = ("fi_compat.commands", "fi_compat.cli", "fi_compat.__main__")


def test_the_library_never_imports_the_commands():
    """Arrows go from the commands into the library, never back (deferred
    imports and ``fi_compat``'s lazy names included): ``fi_compat.doctor_report``
    lives in ``fi_compat.diagnosis``, which ``fi-compat doctor`` prints."""
    upward = sorted(
        f"{module} -> {target}"
        for module in MODULES
        if not module.startswith(COMMAND_LINE)
        for target in imports(module, deferred=True)
        if target.startswith("fi_compat.commands")
    )
    assert upward == []
