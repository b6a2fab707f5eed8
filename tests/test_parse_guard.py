"""parse_guard.parse_checked: the same tree as libcst's parse, and libcst's validation restored."""

from __future__ import annotations

import json

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


def _depth_cases():
    import ast

    texts = [p.read_text(encoding="utf-8") for p in sorted((REPO / "fixtures").rglob("*.py"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted((REPO / "src").rglob("*.py"))]
    texts += [
        "x = " + " and ".join(["a"] * 250),
        "x = " + " + ".join(["a"] * 250),
        "x = [a " + " ".join(f"for a{i} in b" for i in range(110)) + "]",
        "x = f(" * 90 + ")" * 90,
        "",
    ]
    trees = []
    for text in texts:
        try:
            trees.append(ast.parse(text))
        except SyntaxError:  # TRL001's fixtures do not parse, by design
            continue
    return trees


def test_deepest_is_nesting_depth_without_its_position():
    """precheck decides with `_deepest`; it must agree with `nesting_depth` on every tree."""
    from trainlint.parse_guard import _deepest, nesting_depth

    for tree in _depth_cases():
        for limit in (200, 40, 5):
            exact = nesting_depth(tree, limit)[0]
            fast = _deepest(tree, limit)
            assert (fast > limit) == (exact > limit)
            if exact <= limit:
                assert fast == exact


def test_too_deep_is_reported_where_nesting_depth_says():
    from trainlint.parse_guard import precheck

    verdict = precheck("x = 1\ny = " + " + ".join(["a"] * 250) + "\n")
    assert verdict.tree is None
    assert verdict.problem.row == 2
    assert "nested more than 200 levels" in verdict.problem.message


# An indent of spaces then a tab: Python resolves it at tab stops of 8 (the same block as the
# 8-space lines around it); libcst's tokenizer refuses the file.
SPACES_THEN_TAB = (
    "import torch\n"
    "\n"
    "def fit(model, loader):\n"
    "    for x, y in loader:\n"
    "        if x is None:\n"
    "    \t    continue\n"
    '        model = torch.nn.DataParallel(model).to("cuda:1")\n'
)


def test_a_tab_indent_python_reads_is_analysed_with_rows_kept_and_no_fix(tmp_path):
    from fixture_support import lint

    compile(SPACES_THEN_TAB, "spaces_then_tab.py", "exec")  # Python reads it
    with pytest.raises(cst.ParserSyntaxError):
        cst.parse_module(SPACES_THEN_TAB)  # libcst does not
    path = tmp_path / "spaces_then_tab.py"
    path.write_text(SPACES_THEN_TAB, encoding="utf-8")
    result = lint([path], ["ALL"], fix=True, unsafe=True)
    found = {(d.code, d.row) for d in result.diagnostics}
    assert ("TRL201", 7) in found and ("TRL102", 7) in found
    assert not any(d.code == "TRL001" for d in result.diagnostics)
    assert all(d.fix is None for d in result.diagnostics)
    assert path.read_text(encoding="utf-8") == SPACES_THEN_TAB  # nothing written


def test_a_tab_indent_python_refuses_is_still_a_syntax_error(tmp_path):
    from fixture_support import lint

    text = "def f():\n        x = 1\n\treturn x\n"  # TabError: ambiguous at tab size 1
    with pytest.raises(SyntaxError):
        compile(text, "t.py", "exec")
    path = tmp_path / "tab_error.py"
    path.write_text(text, encoding="utf-8")
    result = lint([path], ["TRL001"])
    assert [d.code for d in result.diagnostics] == ["TRL001"]


def test_a_notebook_cell_indented_with_a_tab_then_spaces_is_analysed_in_its_cell(tmp_path):
    from fixture_support import lint

    cell = (
        "def fit(model, loader):\n"
        "\t  for x, y in loader:\n"
        "\t\t    if x is None:\n"
        "\t\t\t      continue\n"
        '\t  return torch.nn.DataParallel(model).to("cuda:1")\n'
    )
    compile(cell, "cell", "exec")  # Python reads it
    with pytest.raises(cst.ParserSyntaxError):
        cst.parse_module(cell)  # libcst does not
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": ["import torch\n", "!nvidia-smi"]},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
             "source": cell.splitlines(keepends=True)},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    path = tmp_path / "train.ipynb"
    text = json.dumps(notebook, indent=1)
    path.write_text(text, encoding="utf-8")
    result = lint([path], ["ALL"], fix=True, unsafe=True)
    found = {(d.code, d.cell, d.row) for d in result.diagnostics}
    assert ("TRL201", 3, 5) in found
    assert not any(d.code == "TRL001" for d in result.diagnostics)
    assert all(d.fix is None for d in result.diagnostics)
    assert path.read_text(encoding="utf-8") == text  # nothing written
