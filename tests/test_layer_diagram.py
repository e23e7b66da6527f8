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
    """The check can fail: a package whose ``b`` starts importing ``a`` draws ``b`` a layer up."""
    package = tmp_path / "fi_compat"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("X = 1\n")
    (package / "b.py").write_text("def f():\n    from . import a\n")
    before = diagram.render(package)
    assert "    0  b         -> -  [+ a]" in before
    (package / "b.py").write_text("from . import a\n")
    after = diagram.render(package)
    assert after != before and "    1  b         -> a" in after


def test_an_import_time_cycle_is_refused(diagram, tmp_path):
    package = tmp_path / "fi_compat"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .. import top\n")
    (package / "top.py").write_text("from .sub import x\n")
    with pytest.raises(ValueError, match="cycle"):
        diagram.render(package)
