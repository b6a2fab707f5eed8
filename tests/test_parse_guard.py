"""parse_guard.parse_checked: the same tree as libcst's parse, and libcst's validation restored."""

from __future__ import annotations

import libcst as cst
import pytest
from fixture_support import REPO

from trainlint.parse_guard import parse_checked


def test_parse_checked_builds_the_tree_libcst_builds():
    for path in sorted((REPO / "fixtures" / "clean").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert parse_checked(text).deep_equals(cst.parse_module(text)), path.name


def test_validation_is_back_after_a_parse_and_after_a_failed_parse():
    parse_checked("x = 1\n")
    with pytest.raises(cst.ParserSyntaxError):
        parse_checked("x = = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not an identifier")


def test_pythons_warnings_about_the_analysed_code_are_not_shown():
    import warnings

    from trainlint.parse_guard import python_parse

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        verdict = python_parse('pattern = "\\d+"\nassert (pattern, "not empty")\n')
    assert verdict.problem is None
    assert shown == []
