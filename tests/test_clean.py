"""fixtures/clean/ holds realistic, correct training code of many styles: zero findings, with
every rule selected (info-level included)."""

from __future__ import annotations

import pytest

from fixture_support import CLEAN, lint

CLEAN_FILES = sorted(p for p in CLEAN.rglob("*") if p.suffix in (".py", ".ipynb"))


def test_there_is_clean_code_of_many_styles():
    assert len(CLEAN_FILES) >= 5


@pytest.mark.parametrize(
    "path", CLEAN_FILES, ids=[p.relative_to(CLEAN).as_posix() for p in CLEAN_FILES]
)
def test_clean_file_has_no_findings(path):
    result = lint([path], ["ALL"], root=CLEAN)
    assert not result.crashes, [c.describe() for c in result.crashes]
    assert not result.errors, result.errors
    assert not result.diagnostics, "\n".join(
        f"{d.path}:{d.row}:{d.col + 1}: {d.code} {d.message}" for d in result.diagnostics
    )


def test_clean_tree_as_one_project_has_no_findings():
    """Cross-file rules see the whole folder at once."""
    result = lint([CLEAN], ["ALL"], root=CLEAN)
    assert not result.diagnostics, [f"{d.path}:{d.row} {d.code}" for d in result.diagnostics]
