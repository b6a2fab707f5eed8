"""f-strings only Python 3.12 reads (PEP 701): valid code on whatever Python runs trainlint, and
a syntax error of a notebook whose recorded Python is older, on whatever Python runs trainlint.

The expectations below were taken from CPython 3.11 and 3.12 compiling each snippet; they are
written out so the tests mean the same on every interpreter."""

from __future__ import annotations

import json

import pytest

from trainlint import cli, pep701
from trainlint.fixes import _compile_problem

SETUP = "x = 1; w = 5; p = 2; a = 1; b = 2; d = {'a': 1}; lines = ['u', 'v']\n"

QUOTE = "an f-string's own quote inside its replacement field"
BACKSLASH = "a backslash inside an f-string's replacement field"
COMMENT = "a comment inside an f-string's replacement field"
LINE_BREAK = "a line break inside a single-quoted f-string"

# (snippet, what in it needs Python 3.12, or None when Python 3.8-3.11 read it too)
CASES = [
    ("f'{d['a']}'", QUOTE),
    ("f'{d[\"a\"]}'", None),
    ('f"""{d["a"]}"""', None),
    ('f"""{d["""a"""]}"""', QUOTE),
    ("f'{\"\\n\".join(lines)}'", BACKSLASH),
    ("f'a\\n{x}'", None),
    ("f'''{x # the count\n}'''", COMMENT),
    ("f'{\"#\"}'", None),
    ("f'{x\n}'", LINE_BREAK),
    ("f'''{x\n}'''", None),
    ("f'{f\"{x}\"}'", None),
    ("f'{f'{x}'}'", QUOTE),
    ("f'{x:{w}.{p}}'", None),
    ("f'\\N{BULLET} {x}'", None),
    ("f'{x=!r:>10}'", None),
    ("f'{a!=b}'", None),
    ("f'''{f\"\"\"{f'{f\"{x}\"}'}\"\"\"}'''", None),
    ("f'{ {\"a\": 1}[\"a\"] }'", None),
    ("rf'\\{x}'", None),
    ("y = 1 if x else\"a\"\nf'{d['a']}'", QUOTE),
    ("# it's a comment\nf'{d['a']}'", QUOTE),
    ("f'{d['a']}' 'tail' f\"{x}\"", QUOTE),
    ("b'{x}'", None),
]


@pytest.mark.parametrize("snippet, needs", CASES)
def test_first_feature_names_what_only_python_312_reads(snippet, needs):
    feature = pep701.first_feature(SETUP + snippet + "\n")
    assert (feature.what if feature else None) == needs


@pytest.mark.parametrize("snippet, needs", CASES)
def test_every_case_parses_here(snippet, needs):
    # valid on 3.12: on an older Python only with the f-strings masked
    tree, masked = pep701.parse(SETUP + snippet + "\n")
    assert tree is not None
    if not masked:
        assert needs is None or pep701.sys.version_info >= (3, 12)


def test_an_unterminated_f_string_is_still_an_error():
    with pytest.raises(SyntaxError):
        pep701.parse("print(f'{x')\n")
    assert pep701.masked("print(f'{x')\n") is None


def test_masking_keeps_rows_and_the_width_of_one_line_f_strings():
    text = "a = f'{d['a']}'\nb = f'{x\n}'\nc = 3\n"
    plain = pep701.masked(text)
    assert plain is not None
    assert plain.splitlines()[0] == "a = '" + " " * (len("f'{d['a']}'") - 2) + "'"
    assert plain.count("\n") == text.count("\n")
    assert plain.splitlines()[-1] == "c = 3"
    compile(plain, "<masked>", "exec")  # any Python 3 reads it


def test_the_fix_guard_judges_the_rest_of_a_312_file():
    assert _compile_problem("print(f'{d['a']}')\n") is None
    assert _compile_problem("print(f'{d['a']}')\nreturn 1\n") is not None  # outside a function


def _notebook(version, *sources):
    cells = [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": source.splitlines(True)}
        for source in sources
    ]  # fmt: skip
    metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    }
    if version is not None:
        metadata["language_info"] = {"name": "python", "version": version}
    return json.dumps({"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5})


CELLS = (
    "import torch\nmetrics = {'f1': 0.5}\n",
    "print(f'f1: {metrics['f1']:.2f}')\n",
    "device = torch.device('cuda:1')\n",
)


def _check(monkeypatch, capsys, folder, *names):
    monkeypatch.chdir(folder)
    monkeypatch.setenv("NO_COLOR", "1")
    cli.main(["check", "--isolated", "--no-cache", "--output-format", "concise", *names])
    return capsys.readouterr().out


@pytest.mark.parametrize("version", ["3.13.3", "3.12.0", None])
def test_a_notebook_of_python_312_or_of_no_recorded_version_is_analysed(
    tmp_path, monkeypatch, capsys, version
):
    (tmp_path / "nb.ipynb").write_text(_notebook(version, *CELLS))
    out = _check(monkeypatch, capsys, tmp_path, "nb.ipynb")
    assert "TRL001" not in out
    assert "nb.ipynb:cell 3:1:23: TRL102" in out


def test_a_notebook_that_records_an_older_python_fails_in_that_cell(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "nb.ipynb").write_text(_notebook("3.8.10", *CELLS))
    out = _check(monkeypatch, capsys, tmp_path, "nb.ipynb")
    assert (
        "nb.ipynb:cell 2:1:22: TRL001 error: SyntaxError before Python 3.12: an f-string's own "
        "quote inside its replacement field; this notebook records Python 3.8 (this cell is not "
        "analysed)"
    ) in out
    assert "nb.ipynb:cell 3:1:23: TRL102" in out


def test_a_script_with_312_f_strings_is_analysed(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.py").write_text("".join(CELLS))
    out = _check(monkeypatch, capsys, tmp_path, "train.py")
    assert "TRL001" not in out
    assert "train.py:4:23: TRL102" in out


def test_an_f_string_broken_on_312_too_is_still_reported(tmp_path, monkeypatch, capsys):
    # `!` without a conversion: CPython 3.11 and 3.12 both refuse it
    (tmp_path / "train.py").write_text("x = 1\nprint(f'{d['a']} {x!}')\n")
    out = _check(monkeypatch, capsys, tmp_path, "train.py")
    assert "train.py:2:" in out and "TRL001" in out
