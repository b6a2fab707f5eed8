"""When trainlint itself fails: the report cannot be written, an internal error, a `--fix` that
was killed, a fix whose result Python would not compile. Each is one line on stderr and exit 2
(the code CI and pre-commit read as "the tool failed"), never a traceback and never exit 1
("findings remain"); nothing is left behind and nothing broken is written."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import libcst as cst
import pytest
from robustness_support import run_main

from test_cli import DP_BUG, FIXED_LINE
from trainlint.rules.base import Rule


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(DP_BUG)
    return tmp_path


# -- the report cannot be written --------------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("output_format", ["text", "json", "sarif"])
def test_report_to_a_full_disk_is_one_line_and_exit_2(project, output_format):
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "trainlint", "--no-cache", "--output-format", output_format],
            cwd=project,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: cannot write the report: No space left on device"
    ], proc.stderr


# -- an internal error ---------------------------------------------------------------------------


def test_internal_error_is_one_line_and_exit_2(project, monkeypatch):
    from trainlint import runner

    def broken_run(*args, **kwargs):
        raise RuntimeError("the runner broke")

    monkeypatch.setattr(runner, "run", broken_run)
    code, out, err = run_main(["--no-cache", "."], project, 30)
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith("error: internal error: RuntimeError: the runner broke (at ")
    assert line.endswith("; please report it")
    assert "test_run_failures.py:" in line  # where it failed


# -- temporary files of an interrupted --fix -----------------------------------------------------


def test_a_killed_fix_leaves_nothing_the_next_run_keeps(project):
    stale = project / ".train.py.k3x9_q2a.trainlint"
    stale.write_text("half of a fixed file")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], project, 30)
    assert code == 1 and "train.py:6:9: TRL201" in out
    assert not stale.exists()
    assert err.splitlines() == [
        "warning: .train.py.k3x9_q2a.trainlint: removed (a temporary file left by an "
        "interrupted --fix)"
    ]


def test_a_temporary_file_of_a_running_fix_is_kept(project):
    fcntl = pytest.importorskip("fcntl")
    live = project / ".train.py.a1b2c3d4.trainlint"
    with open(live, "w") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # what write_atomic holds while it writes
        old = time.time() - 3600
        os.utime(live, (old, old))
        code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], project, 30)
        assert live.exists() and err == ""
    # A name that only looks alike is not ours: never touched.
    other = project / ".notes.txt.trainlint"
    other.write_text("mine")
    run_main(["--no-cache", "."], project, 30)
    assert other.exists()


def test_fix_writes_no_temporary_file_behind(project):
    code, out, err = run_main(["--no-cache", "--fix", "."], project, 30)
    assert code == 0 and FIXED_LINE in (project / "train.py").read_text()
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml", "train.py"]


# -- a fix that Python would not compile ---------------------------------------------------------


class ReturnAtTopLevel(Rule):
    """Test rule: its fix turns `x = ...` into `return ...`, which libcst (and Python's parser)
    accept at the top level and Python's compiler rejects ("'return' outside function")."""

    code = "TRL996"
    name = "return-at-top-level"
    fix = "safe"

    def visit_Assign(self, node: cst.Assign) -> None:
        value = self.ctx.code(node.value)
        self.report(
            node, "returns", fix=self.safe_fix("return", self.ctx.replace(node, f"return {value}"))
        )


def test_a_fix_that_does_not_compile_is_rolled_back(project, register_rule):
    register_rule(ReturnAtTopLevel)
    original = "import torch\nx = torch.zeros(3)\n"
    (project / "train.py").write_text(original)
    code, out, err = run_main(["--no-cache", "--fix", "--select", "TRL996", "."], project, 30)
    assert code == 2
    assert err.splitlines() == [
        "error: train.py: the fix for TRL996 produced code that Python does not compile "
        "('return' outside function); "
        "it was rolled back (please report this as a trainlint bug)"
    ]
    assert (project / "train.py").read_text() == original
