"""The command line reads its arguments once into CheckOptions, and files and standard input end
with the same exit code for the same outcome."""

from __future__ import annotations

import io
import sys

import pytest

from trainlint import cli
from trainlint.cli.options import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    CheckOptions,
    exit_code,
)
from trainlint.cli.parser import build_parser, normalise_argv
from trainlint.diagnostics import Diagnostic, Severity
from trainlint.runner import RunResult

DP_BUG = (
    "import torch\nimport torch.nn as nn\n"
    "model = nn.DataParallel(nn.Linear(2, 2)).to('cuda:1')\n"
)


def options(*argv: str) -> CheckOptions:
    return CheckOptions.from_args(build_parser().parse_args(normalise_argv(list(argv))))


def test_repeated_selectors_are_flattened_and_absent_ones_stay_none():
    given = options("--select", "TRL1, TRL2", "--select", "TRL3", "x.py")
    assert given.select == ["TRL1", "TRL2", "TRL3"]
    assert given.extend_select is None and given.ignore is None
    assert given.paths == ("x.py",) and not given.reads_stdin


def test_standard_input_is_read_for_a_dash_or_a_stdin_filename_without_paths():
    assert options("-").reads_stdin
    assert options("--stdin-filename", "train.py").reads_stdin
    assert not options("--stdin-filename", "train.py", "other.py").reads_stdin


def _finding() -> Diagnostic:
    return Diagnostic(
        code="TRL201", message="m", path="t.py", row=1, col=0, end_row=1, end_col=1,
        severity=Severity.ERROR, name="n",
    )


@pytest.mark.parametrize(
    "argv, findings, fixed, changed, internal, expected",
    [
        ((), False, 0, False, False, EXIT_CLEAN),
        ((), True, 0, False, False, EXIT_FINDINGS),
        (("--exit-zero",), True, 0, False, False, EXIT_CLEAN),
        (("--fix", "--exit-non-zero-on-fix"), False, 2, True, False, EXIT_FINDINGS),
        (("--fix",), False, 2, True, False, EXIT_CLEAN),
        (("--diff",), True, 0, False, False, EXIT_CLEAN),  # nothing to change
        (("--diff",), False, 1, True, False, EXIT_FINDINGS),
        (("--exit-zero",), True, 0, False, True, EXIT_ERROR),
    ],
)
def test_exit_code(argv, findings, fixed, changed, internal, expected):
    result = RunResult(diagnostics=[_finding()] if findings else [], fixed=fixed)
    if changed:
        result.changed.append(("t.py", "a\n", "b\n"))
    assert exit_code(options(*argv), result, internal) == expected


@pytest.mark.parametrize(
    "flags", [(), ("--diff",), ("--exit-zero",), ("--diff", "--select", "TRL1")]
)
def test_a_file_and_the_same_text_on_standard_input_exit_alike(
    tmp_path, monkeypatch, capsys, flags
):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(DP_BUG)
    monkeypatch.chdir(tmp_path)
    from_file = cli.main([*flags, "--no-cache", "train.py"])
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(DP_BUG.encode())))
    from_stdin = cli.main([*flags, "--stdin-filename", "train.py"])
    capsys.readouterr()
    assert from_file == from_stdin
