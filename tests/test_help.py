"""A finding's headline stays short; what happens at run time and how to fix it travel as its
`help`, shown as `= help:` in text output, as `help` in JSON, after the headline in SARIF and
GitHub annotations, and not at all in the concise format or under flake8."""

from __future__ import annotations

import json

import jsonschema
import libcst as cst

from fixture_support import REPO
from trainlint import cli
from trainlint.diagnostics import Diagnostic, Severity
from trainlint.rules.base import Rule

HELP = 'fails with "Expected all tensors to be on the same device"; move it first'


class _Helpful(Rule):
    """Reports every call of `probe()` (a rule made for this test)."""

    code = "TRL998"
    name = "helpful-probe"
    severity = Severity.WARNING
    markers = ("probe",)

    def visit_Call(self, node: cst.Call) -> None:
        if type(node.func) is cst.Name and node.func.value == "probe":
            self.report(node, "`probe()` is called", help=HELP)


def _run(tmp_path, capsys, fmt):
    (tmp_path / "train.py").write_text("import torch\nprobe()\n")
    code = cli.main(["check", "--isolated", "--no-cache", "--output-format", fmt, str(tmp_path)])
    assert code == 1
    return capsys.readouterr().out


def test_help_in_every_output_format(tmp_path, capsys, register_rule):
    register_rule(_Helpful)
    assert f"   = help: {HELP}" in _run(tmp_path, capsys, "text")
    concise = _run(tmp_path, capsys, "concise")
    assert "`probe()` is called" in concise and HELP not in concise
    findings = json.loads(_run(tmp_path, capsys, "json"))
    schema = json.loads((REPO / "tests" / "data" / "json_output.schema.json").read_text())
    jsonschema.validate(findings, schema)
    (finding,) = findings
    assert finding["message"] == "`probe()` is called" and finding["help"] == HELP
    sarif = json.loads(_run(tmp_path, capsys, "sarif"))
    assert sarif["runs"][0]["results"][0]["message"]["text"].endswith(HELP)
    assert "%0Afails with" in _run(tmp_path, capsys, "github")


def test_help_survives_the_cache():
    d = Diagnostic("TRL998", "headline", "t.py", 1, 0, 1, 5, Severity.WARNING, help=HELP)
    assert Diagnostic.from_dict(d.to_dict()) == d
    # Entries written before `help` existed read back without one.
    old = {k: v for k, v in d.to_dict().items() if k != "help"}
    assert Diagnostic.from_dict(old).help == ""


HEADLINE_LIMIT = 110  # "about 100 characters": what a reader takes in at a glance


def test_every_headline_over_the_fixtures_is_short(capsys):
    """Every rule's headline, on every fixture (good, bad, fixed goldens, oracles), fits in
    HEADLINE_LIMIT characters; the PyTorch error, the why and the fix belong in `help`."""
    code = cli.main(
        [
            "check",
            "--select",
            "ALL",
            "--preview",
            "--no-cache",
            "--exit-zero",
            "--output-format",
            "json",
            str(REPO / "fixtures"),
        ]
    )
    assert code == 0
    findings = json.loads(capsys.readouterr().out)
    assert len({f["code"] for f in findings}) >= 20  # the fixtures exercise most rules
    too_long = sorted(
        {
            (len(f["message"].split("\n")[0]), f["code"], f["message"].split("\n")[0])
            for f in findings
            if len(f["message"].split("\n")[0]) > HEADLINE_LIMIT
        }
    )
    assert too_long == []
