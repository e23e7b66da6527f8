"""Provenance lines name fi_compat's release, and fail here when it moves on (issue #25).

A commit id in a measured-figures section went stale with the next change to
fi_compat; a release cannot change under the figures without this test
asking for them to be re-measured (or the line restated)."""

from __future__ import annotations

import re
from pathlib import Path

import fi_compat

ROOT = Path(__file__).resolve().parent.parent
MEASURED = {"docs/integration/tensorrt_llm.md": "## Measured with TensorRT-LLM's real file"}


def test_measured_sections_name_the_current_fi_compat_release():
    for relative, heading in MEASURED.items():
        text = (ROOT / relative).read_text(encoding="utf-8")
        assert heading in text, f"{relative}: heading {heading!r} not found"
        section = text.split(heading, 1)[1]
        named = re.findall(r"Measured with fi_compat (\S+) \(`fi_compat.__version__`", section)
        assert named == [fi_compat.__version__], (
            f"{relative}: the figures name fi_compat {named or 'no release'}, the code is "
            f"{fi_compat.__version__}: re-measure them (the section says how) and update the line")
