"""Line numbers for values read out of a TOML file.

:mod:`tomllib` returns values without positions; messages should still say
``pyproject.toml:14``.  :class:`LineIndex` finds the physical line where a
string value (or a ``key = "value"`` line) is written, searching from a
table's header, and hands each line out once, so two identical requirements
get their own lines.  When the text cannot be found (an escaped string, a
dotted key instead of a header) the caller falls back to a description such
as ``[project] dependencies``.  Cost: one pass over the lines per lookup.
"""

from __future__ import annotations

import re
from typing import Optional


class LineIndex:
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._claimed: set[int] = set()

    def header(self, table: str) -> int:
        """0-based index of ``[table]`` (or ``[[table]]``), 0 when absent."""
        parts = [re.escape(p) for p in table.split(".")]
        pattern = re.compile(r"^\s*\[\[?\s*" + r"\s*\.\s*".join(parts) + r"\s*\]\]?\s*(#.*)?$")
        return next((i for i, line in enumerate(self.lines) if pattern.match(line)), 0)

    def string(self, value: str, *, table: Optional[str] = None) -> Optional[int]:
        """1-based line of the first unclaimed ``"value"`` / ``'value'`` at or after ``[table]``."""
        quoted = (f'"{value}"', f"'{value}'")
        return self._claim(lambda line: any(q in line for q in quoted), self.header(table) if table else 0)

    def assignment(self, key: str, value: str) -> Optional[int]:
        """1-based line of the first unclaimed ``key = "value"``."""
        pattern = re.compile(r"^\s*" + re.escape(key) + r"\s*=\s*[\"']" + re.escape(value) + r"[\"']", re.IGNORECASE)
        return self._claim(pattern.match, 0)

    def matching(self, pattern: "re.Pattern[str]") -> Optional[int]:
        """1-based line of the first unclaimed line that ``pattern`` matches at its start."""
        return self._claim(pattern.match, 0)

    def _claim(self, matches, start: int) -> Optional[int]:
        for index in range(start, len(self.lines)):
            if index not in self._claimed and matches(self.lines[index]):
                self._claimed.add(index)
                return index + 1
        return None
