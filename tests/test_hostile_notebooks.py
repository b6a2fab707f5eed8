"""Notebooks whose JSON is legal but hostile: an integer of thousands of digits (Python refuses to
convert more than 4,300 by default), `-Infinity`, nesting deeper than Python's JSON reader goes.
Each notebook is checked, or gets one clear TRL001; the other files of the run are reported."""

from __future__ import annotations

import json

import pytest
from robustness_support import run_main

from test_cli import DP_BUG, FIXED_LINE
from trainlint.notebook import parse_spans

ORIGINAL_LINE = "model = nn.DataParallel(model).to(device)"


def notebook(code: str, **extra) -> str:
    cell = {
        "cell_type": "code",
        "execution_count": 1,
        "metadata": {},
        "outputs": [],
        "source": code.splitlines(True),
    }
    return json.dumps(
        {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5, **extra}
    )


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(DP_BUG)
    return tmp_path


def _huge_number(text: str) -> str:
    return text.replace('"execution_count": 1', '"execution_count": ' + "7" * 5000)


@pytest.mark.parametrize(
    "make",
    [
        _huge_number,
        lambda text: text.replace('"metadata": {}', '"metadata": {"seed": -' + "3" * 6000 + "}", 1),
        lambda text: text.replace('"metadata": {}', '"metadata": {"loss": -Infinity}', 1),
    ],
    ids=["execution_count of 5,000 digits", "metadata of 6,000 digits", "-Infinity"],
)
def test_legal_but_unusual_json_is_checked_and_fixed(project, make):
    text = make(notebook(DP_BUG))
    (project / "nb.ipynb").write_text(text)
    code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], project, 60)
    assert "Traceback" not in err and err == ""
    assert code == 1
    assert "nb.ipynb:cell 1:6:9: TRL201" in out and "train.py:6:9: TRL201" in out
    for output_format in ("sarif", "github"):  # they locate the cell's line in the JSON
        code, out, err = run_main(["--no-cache", "--output-format", output_format], project, 60)
        assert code == 1 and err == ""
    code, out, err = run_main(["--no-cache", "--fix", "nb.ipynb"], project, 60)
    assert code == 0 and err == ""
    fixed = (project / "nb.ipynb").read_text()
    assert FIXED_LINE in fixed
    # Only the cell's code changed: every other byte, the huge number included, is kept.
    assert fixed.replace(FIXED_LINE, ORIGINAL_LINE) == text


def test_parse_spans_keeps_huge_integers_as_digits():
    digits = "9" * 5000
    data, spans = parse_spans('{"n": [%s, 1]}' % digits)
    assert data == {"n": [digits, 1]}
    assert spans[("n", 0)] == (7, 7 + 5000)


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_json_deeper_than_the_reader_goes_is_one_trl001(project, depth):
    text = notebook(DP_BUG).replace(
        '"metadata": {}', '"metadata": {"x": ' + "[" * depth + "]" * depth + "}", 1
    )
    (project / "deep.ipynb").write_text(text)
    code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], project, 60)
    assert "Traceback" not in err and err == ""
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("deep.ipynb")]
    assert lines == [
        "deep.ipynb:1:1: TRL001 error: cannot read the notebook: its JSON nests deeper than "
        "Python's JSON reader goes (RecursionError); not analysed"
    ]
    assert "train.py:6:9: TRL201" in out
