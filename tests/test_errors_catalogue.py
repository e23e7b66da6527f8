"""Every row of the bad-input catalogue (tests/helpers/errors_catalogue.py)
gives its clear error, installs nothing, and docs/errors.md lists exactly the
messages the rows produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import errors_catalogue
from helpers.errors_catalogue import ROWS


@pytest.fixture
def gen_errors_doc(load):
    return load("generate_errors_doc")


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input_gives_a_clear_error(row):
    outcome = errors_catalogue.run(row)
    assert outcome.raises == row.raises, (outcome.raises, outcome.message)
    assert row.contains in outcome.message, outcome.message
    if row.entry.startswith(("install(", "FI_COMPAT_")) and row.raises.endswith("Error"):
        # a refused setting installs nothing (mla_decode installs on first use, by design)
        assert outcome.state == "not-installed", outcome.state


def test_row_ids_are_unique():
    assert len({row.id for row in ROWS}) == len(ROWS)


def test_docs_errors_md_is_generated_from_the_catalogue(gen_errors_doc):
    written = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text(encoding="utf-8")
    assert written == gen_errors_doc.render(), (
        "docs/errors.md is out of date: run `python scripts/generate_errors_doc.py`")
