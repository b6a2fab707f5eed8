"""Preview rules: on by default only in preview mode (`--preview`, `preview = true`), or when
their exact code is selected; `ALL` and prefixes leave them off, as ruff does."""

from __future__ import annotations

import textwrap

import libcst as cst

from trainlint import cli
from trainlint.config import Settings
from trainlint.diagnostics import Severity
from trainlint.rules.base import Rule


def test_a_preview_rule_is_off_by_default_and_under_all_and_prefixes():
    s = Settings()
    assert s.selects("TRL104", True, preview=False)
    assert not s.selects("TRL104", True, preview=True)
    for select in (["ALL"], ["TRL"], ["TRL1"], ["TRL10"]):
        assert not Settings(select=select).selects("TRL104", True, preview=True), select
        assert Settings(select=select).selects("TRL104", True, preview=False), select
    assert not Settings(extend_select=["TRL1"]).selects("TRL104", True, preview=True)


def test_a_preview_rule_runs_when_its_code_is_selected_or_in_preview_mode():
    assert Settings(select=["TRL104"]).selects("TRL104", True, preview=True)
    assert Settings(extend_select=["trl104"]).selects("TRL104", True, preview=True)
    assert not Settings(extend_select=["TRL104"], ignore=["TRL104"]).selects(
        "TRL104", True, preview=True
    )
    on = Settings(preview=True)
    assert on.selects("TRL104", True, preview=True)
    assert not Settings(preview=True, ignore=["TRL1"]).selects("TRL104", True, preview=True)
    # Preview mode does not turn on info-level rules: those still need selecting.
    assert not on.selects("TRL501", False, preview=True)
    assert Settings(preview=True, select=["ALL"]).selects("TRL501", False, preview=True)


class _PreviewProbe(Rule):
    """Reports every call of `probe()` (a rule made for this test)."""

    code = "TRL999"
    name = "preview-probe"
    severity = Severity.WARNING
    preview = True
    markers = ("probe",)

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is cst.Name and node.func.value == "probe":
            self.report(node, "probe() called")


def _check(tmp_path, capsys, *args, config=""):
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "train.py").write_text(textwrap.dedent("import torch\nprobe()\n"))
    code = cli.main(["check", "--no-cache", "--output-format", "concise", *args, str(tmp_path)])
    return code, capsys.readouterr().out


def test_preview_from_the_command_line_and_the_configuration(tmp_path, capsys, register_rule):
    register_rule(_PreviewProbe)
    code, out = _check(tmp_path, capsys)
    assert code == 0 and "TRL999" not in out
    code, out = _check(tmp_path, capsys, "--select", "ALL")
    assert code == 0 and "TRL999" not in out
    code, out = _check(tmp_path, capsys, "--preview")
    assert code == 1 and "TRL999" in out
    code, out = _check(tmp_path, capsys, "--extend-select", "TRL999")
    assert code == 1 and "TRL999" in out
    code, out = _check(tmp_path, capsys, config="[tool.trainlint]\npreview = true\n")
    assert code == 1 and "TRL999" in out
    config = "[tool.trainlint]\npreview = true\n"
    code, out = _check(tmp_path, capsys, "--no-preview", config=config)
    assert code == 0 and "TRL999" not in out


def test_the_rules_list_and_the_docs_say_which_rules_are_preview(capsys, register_rule):
    register_rule(_PreviewProbe)
    assert cli.main(["rules"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "TRL999" in line)
    assert "preview" in row.split()
    assert cli.main(["rule", "TRL999"]) == 0
    assert "Default: preview" in capsys.readouterr().out
