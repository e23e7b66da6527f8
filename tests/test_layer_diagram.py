"""docs/design.md's layer diagram is the one scripts/layer_diagram.py draws from the imports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def diagram():
    spec = importlib.util.spec_from_file_location("layer_diagram", ROOT / "scripts" / "layer_diagram.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["layer_diagram"] = module
    spec.loader.exec_module(module)
    return module


def test_the_design_doc_shows_the_imports_as_they_are(diagram):
    document = diagram.DOC.read_text(encoding="utf-8")
    assert diagram.replaced(document, diagram.render()) == document, (
        "docs/design.md's layer diagram drifted from the imports: run python scripts/layer_diagram.py --write"
    )


def test_a_new_import_moves_the_diagram(diagram, tmp_path):
    """The check can fail: a package whose ``b`` starts importing ``a`` draws ``b`` a layer up,
    whether the import is deferred (listed in brackets) or made at import time."""
    package = tmp_path / "fi_compat"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("X = 1\n")
    (package / "b.py").write_text("Y = 2\n")
    before = diagram.render(package)
    assert "    0  b         -> -\n" in before
    (package / "b.py").write_text("def f():\n    from . import a\n")
    deferred = diagram.render(package)
    assert "    1  b         -> -  [+ a]" in deferred
    (package / "b.py").write_text("from . import a\n")
    after = diagram.render(package)
    assert "    1  b         -> a\n" in after


def test_a_type_only_import_raises_a_layer_too(diagram, tmp_path):
    package = tmp_path / "fi_compat"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("X = 1\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n")
    assert "    1  b         -> -  [+ a]" in diagram.render(package)


def _cycle(tmp_path, sub_body: str):
    package = tmp_path / "fi_compat"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text(sub_body)
    (package / "top.py").write_text("from .sub import x\n")
    return package


def test_an_import_time_cycle_is_refused(diagram, tmp_path):
    with pytest.raises(ValueError, match="cycle"):
        diagram.render(_cycle(tmp_path, "from .. import top\n"))


def test_a_deferred_cycle_is_refused(diagram, tmp_path):
    """An import inside a function that closes a cycle is an arrow back up all the same."""
    with pytest.raises(ValueError, match="cycle between units: sub/ -> top -> sub/"):
        diagram.render(_cycle(tmp_path, "def f():\n    from .. import top\n"))


def test_a_type_only_cycle_is_refused(diagram, tmp_path):
    body = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..top import y\n"
    with pytest.raises(ValueError, match="cycle"):
        diagram.render(_cycle(tmp_path, body))


def test_importing_the_package_root_is_refused(diagram, tmp_path):
    """The facade may import anything, so nothing may import it (not even on first use)."""
    package = tmp_path / "fi_compat"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    import fi_compat\n")
    with pytest.raises(ValueError, match="root fi_compat .* imported by: a"):
        diagram.render(package)


def test_every_module_has_a_row_in_the_job_table(diagram):
    document = diagram.DOC.read_text(encoding="utf-8")
    assert diagram.missing_jobs(document) == [], "docs/design.md's job table misses these modules"


def test_a_module_without_a_row_is_named(diagram, tmp_path):
    """The check can fail: a new module, or a package's ``__init__.py`` nobody names, is listed."""
    package = tmp_path / "fi_compat"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "sub/__init__.py", "sub/c.py", "sub/d.py"):
        (package / name).write_text("")
    document = "| module | job |\n|---|---|\n| `__init__.py` | x |\n| `a.py`, `sub/c.py` | y |\n| `sub/` | z |\n\n| `b.py` |\n"
    assert diagram.missing_jobs(document, package) == ["b.py", "sub/d.py"]
