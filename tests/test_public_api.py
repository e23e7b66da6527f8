"""docs/api.md's API table lists exactly what ``fi_compat`` exports (``__all__``)."""

from __future__ import annotations

import re
from pathlib import Path

import fi_compat

README = Path(__file__).resolve().parents[1] / "docs" / "api.md"  # the README links to it


def api_table() -> list[str]:
    """The names in the first column of docs/api.md's "## API" table, without ``()``."""
    section = README.read_text(encoding="utf-8").split("\n## API\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([A-Za-z_][A-Za-z0-9_]*)(?:\(\))?` \|", row).group(1) for row in rows]


def test_the_readme_api_table_lists_every_exported_name_once():
    listed = api_table()
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert sorted(listed) == sorted(fi_compat.__all__)


def test_functions_are_written_as_calls_and_classes_are_not():
    section = README.read_text(encoding="utf-8").split("\n## API\n", 1)[1]
    for name in fi_compat.__all__:
        value = getattr(fi_compat, name)
        written = f"`{name}()`" if callable(value) and not isinstance(value, type) else f"`{name}`"
        assert f"| {written} |" in section, written
