"""Applying edits and writing files: never lose a line."""

from __future__ import annotations

import os

import libcst as cst
import pytest

from trainlint import cli
from trainlint.diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from trainlint.fixes import WriteError, apply_edits, apply_fixes, write_atomic
from trainlint.rules.base import Rule


def diag(code, edits, applicability=Applicability.SAFE):
    return Diagnostic(
        code=code,
        message="m",
        path="x.py",
        row=1,
        col=0,
        end_row=1,
        end_col=0,
        severity=Severity.WARNING,
        fix=Fix(applicability, "fix", tuple(edits)),
    )


def test_apply_edits_keeps_everything_outside_the_spans():
    text = "a = 1\nb = 2\nc = 3\n"
    out = apply_edits(text, [Edit(4, 5, "10"), Edit(12, 12, "# new\n")])
    assert out == "a = 10\nb = 2\n# new\nc = 3\n"


def test_overlapping_fixes_wait_for_the_next_round():
    text = "x = foo(bar)\n"
    first = diag("TRL201", [Edit(4, 12, "baz()")])
    second = diag("TRL101", [Edit(8, 11, "qux")])
    out, applied = apply_fixes(text, [first, second], unsafe=False)
    assert out == "x = baz()\n"
    assert applied == [first]


def test_unsafe_fixes_need_the_flag():
    text = "x = 1\n"
    unsafe = diag("TRL101", [Edit(4, 5, "2")], Applicability.UNSAFE)
    assert apply_fixes(text, [unsafe], unsafe=False) == (text, [])
    assert apply_fixes(text, [unsafe], unsafe=True)[0] == "x = 2\n"


def test_same_fix_from_two_findings_is_applied_once():
    text = "x = 1\n"
    a = diag("TRL101", [Edit(0, 0, "import torch\n")])
    b = diag("TRL102", [Edit(0, 0, "import torch\n")])
    out, applied = apply_fixes(text, [a, b], unsafe=False)
    assert out == "import torch\nx = 1\n"
    assert len(applied) == 2


def test_write_atomic_keeps_mode_and_writes_through_symlinks(tmp_path):
    target = tmp_path / "real.py"
    target.write_bytes(b"old\n")
    os.chmod(target, 0o640)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    write_atomic(link, b"new\n", b"old\n")
    assert link.is_symlink()
    assert target.read_bytes() == b"new\n"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_write_atomic_refuses_a_file_changed_during_the_run(tmp_path):
    target = tmp_path / "t.py"
    target.write_bytes(b"edited by someone else\n")
    with pytest.raises(WriteError, match="changed on disk"):
        write_atomic(target, b"ours\n", b"what we read\n")
    assert target.read_bytes() == b"edited by someone else\n"


def test_write_atomic_refuses_read_only(tmp_path):
    target = tmp_path / "t.py"
    target.write_bytes(b"old\n")
    os.chmod(target, 0o444)
    with pytest.raises(WriteError, match="read-only"):
        write_atomic(target, b"new\n", b"old\n")
    assert target.read_bytes() == b"old\n"


def test_a_fix_that_breaks_the_file_is_rolled_back(tmp_path, monkeypatch, capsys, register_rule):

    class Breaker(Rule):
        code = "TRL998"
        name = "breaker"
        fix = "safe"

        def visit_Call(self, node: cst.Call) -> None:
            self.report(
                node, "breaks", fix=self.safe_fix("break it", self.ctx.replace(node, "((("))
            )

    register_rule(Breaker)
    target = tmp_path / "t.py"
    original = "import torch\nx = torch.zeros(3)\n"
    target.write_text(original)
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["--fix", "--select", "TRL998", "t.py"])
    err = capsys.readouterr().err
    assert code == 2
    assert "does not parse; it was rolled back" in err
    assert target.read_text() == original


def test_fixes_reach_a_fixpoint_in_rounds(tmp_path, monkeypatch, capsys, register_rule):
    """A fix that makes a second finding appear (or overlap) is applied in a later round."""

    class Wrap(Rule):
        code = "TRL997"
        name = "wrap"
        fix = "safe"

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == "x" and isinstance(self.ctx.parent(node), cst.AssignTarget):
                value = self.ctx.parent(self.ctx.parent(node)).value
                if isinstance(value, cst.Integer) and int(value.value) < 3:
                    new = str(int(value.value) + 1)
                    self.report(
                        value, "grow", fix=self.safe_fix("grow", self.ctx.replace(value, new))
                    )

    register_rule(Wrap)
    target = tmp_path / "t.py"
    target.write_text("import torch\nx = 0\n")
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["--fix", "--select", "TRL997", "t.py"])
    assert code == 0, capsys.readouterr()
    assert target.read_text() == "import torch\nx = 3\n"
    assert "Fixed 3 findings, 0 remaining." in capsys.readouterr().out


@pytest.mark.parametrize(
    "call, fixed",
    [
        ("torch.ones((n, 4))", "torch.ones((n, 4), device=d)"),
        ("torch.ones([n, 4])", "torch.ones([n, 4], device=d)"),
        ("torch.ones((n))", "torch.ones((n), device=d)"),
        ("torch.ones(n, 4,)", "torch.ones(n, 4, device=d,)"),
        ("torch.ones(*shape)", "torch.ones(*shape, device=d)"),
        ("torch.ones(n, dtype=torch.half)", "torch.ones(n, dtype=torch.half, device=d)"),
        (
            "torch.ones(\n    (n, 4)  # rows, cols\n)",
            "torch.ones(\n    (n, 4), device=d  # rows, cols\n)",
        ),
    ],
)
def test_an_appended_argument_goes_after_the_last_argument_as_written(
    call, fixed, tmp_path, monkeypatch, capsys, register_rule
):
    """Edits that add a keyword are placed on the call, never inside a literal tuple or list
    argument (whose own span stops inside its parentheses)."""

    class AddDevice(Rule):
        code = "TRL998"
        name = "add-device"
        fix = "safe"

        def visit_Call(self, node: cst.Call) -> None:
            done = any(a.keyword is not None and a.keyword.value == "device" for a in node.args)
            if self.ctx.code(node.func) == "torch.ones" and not done:
                edit = self.ctx.append_argument(node, "device=d")
                self.report(node, "add device", fix=self.safe_fix("add device", edit))

    register_rule(AddDevice)
    target = tmp_path / "t.py"
    target.write_text(f"import torch\nx = {call}\n")
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--fix", "--select", "TRL998", "--no-cache", "t.py"]) == 0, capsys.readouterr()
    assert target.read_text() == f"import torch\nx = {fixed}\n"
