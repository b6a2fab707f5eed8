"""Reports for CI and people: SARIF 2.1.0 (validated against the official schema), GitHub
annotations, --statistics, --show-fixes, colour on terminals only, the progress line."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys

import jsonschema
import pytest

from fixture_support import REPO
from trainlint import cli, rule_url
from trainlint.report.github import escape_data, escape_property
from trainlint.report.sarif import short_title
from trainlint.rules import all_rules

SARIF_SCHEMA = json.loads((REPO / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
INCIDENT = REPO / "fixtures" / "rules" / "TRL201" / "notebook_single_cell_embeddings.ipynb"

DP_BUG = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2)
model = nn.DataParallel(model).to(device)
"""
KNOWN_MISMATCH = """\
import torch
import torch.nn as nn
from mmcv.ops import nms

model = nn.DataParallel(nn.Linear(8, 2)).to("cuda:1")
"""


@pytest.fixture
def repo(tmp_path):
    """A git repository with a project in a sub-folder: SARIF paths start at the repository."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    project = root / "training"
    (project / "notebooks").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (project / "train.py").write_text(DP_BUG)
    (project / "multi gpu.py").write_text(KNOWN_MISMATCH)
    (project / "broken.py").write_text("import torch\nfor x in y\n    pass\n")
    shutil.copyfile(INCIDENT, project / "notebooks" / "metric.ipynb")
    return project


def run_main(monkeypatch, capsys, cwd, *args, env=None):
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NO_COLOR", "1")
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    code = cli.main(["--isolated", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# -- SARIF --------------------------------------------------------------------------------------


def test_sarif_validates_against_the_sarif_2_1_0_schema(repo, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, repo, "--output-format", "sarif", ".")
    assert code == 1, err
    sarif = json.loads(out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(sarif)
    assert sarif["version"] == "2.1.0"
    (run,) = sarif["runs"]
    assert run["columnKind"] == "unicodeCodePoints"
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base.startswith("file://") and base.endswith("/repo/")
    results = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: r for r in run["results"]
    }
    assert set(results) == {
        "training/train.py",
        "training/multi%20gpu.py",
        "training/broken.py",
        "training/notebooks/metric.ipynb",
    }
    train = results["training/train.py"]
    assert train["ruleId"] == "TRL201" and train["level"] == "warning"
    assert train["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
    region = train["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 6, "startColumn": 9, "endLine": 6, "endColumn": 42}
    replacement = train["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert replacement["deletedRegion"]["startColumn"] == 9
    assert replacement["insertedContent"]["text"] == "nn.DataParallel(model.to(device))"
    assert results["training/multi%20gpu.py"]["level"] == "error"
    assert results["training/broken.py"]["ruleId"] == "TRL001"
    # A notebook finding points at the notebook's JSON line holding the cell's line.
    notebook = results["training/notebooks/metric.ipynb"]
    assert notebook["properties"]["cell"] == 8
    assert notebook["properties"]["cellRow"] == 19 and notebook["properties"]["cellColumn"] == 9
    region = notebook["locations"][0]["physicalLocation"]["region"]
    line = INCIDENT.read_text().splitlines()[region["startLine"] - 1]
    assert line[region["startColumn"] - 1 :].startswith("nn.DataParallel(model).to(device)")
    assert "fixes" not in notebook


def test_sarif_rules_carry_descriptions_help_and_urls(repo, monkeypatch, capsys):
    _, out, _ = run_main(monkeypatch, capsys, repo, "--output-format", "sarif", "train.py")
    driver = json.loads(out)["runs"][0]["tool"]["driver"]
    assert driver["name"] == "trainlint" and driver["version"]
    rules = {r["id"]: r for r in driver["rules"]}
    assert set(rules) == set(all_rules())
    for code, rule in all_rules().items():
        descriptor = rules[code]
        # GitHub's alert title: short (the summary's first sentence, or the name made readable).
        assert descriptor["shortDescription"]["text"] == short_title(rule.summary(), rule.name)
        assert len(descriptor["fullDescription"]["text"]) >= len(rule.summary())
        assert descriptor["help"]["markdown"] == rule.explanation()
        assert descriptor["helpUri"] == rule_url(code)
        assert descriptor["helpUri"].endswith(f"docs/rules.md#{code.lower()}")
    result = json.loads(out)["runs"][0]["results"][0]
    assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]


def test_sarif_fingerprints_are_stable_when_lines_move(repo, monkeypatch, capsys):
    def fingerprints():
        _, out, _ = run_main(monkeypatch, capsys, repo, "--output-format", "sarif", "train.py")
        return [
            r["partialFingerprints"]["trainlint/v1"] for r in json.loads(out)["runs"][0]["results"]
        ]

    first = fingerprints()
    assert fingerprints() == first
    (repo / "train.py").write_text("# a comment that moves every line\n\n" + DP_BUG)
    assert fingerprints() == first
    # Two identical findings in one file still get distinct fingerprints.
    (repo / "train.py").write_text(DP_BUG + DP_BUG.split("\n", 5)[-1])
    both = fingerprints()
    assert len(both) == 2 and len(set(both)) == 2 and first[0] in both


# -- GitHub annotations -------------------------------------------------------------------------


def test_github_annotations(repo, monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, repo, "--output-format", "github", ".")
    assert code == 1
    lines = out.splitlines()
    by_file = {line.split("file=")[1].split(",")[0]: line for line in lines}
    train = by_file["training/train.py"]
    assert train.startswith(
        "::warning title=trainlint TRL201 (dataparallel-wrap-then-move),file=training/train.py,"
        "line=6,col=9,endLine=6,endColumn=42::train.py:6:9: TRL201 "
    )
    assert by_file["training/multi gpu.py"].startswith("::error ")
    notebook = by_file["training/notebooks/metric.ipynb"]
    assert "::notebooks/metric.ipynb:cell 8:19:9: TRL201" in notebook
    assert "line=165," in notebook
    for line in lines:  # one annotation per line, nothing unescaped
        head, _, message = line.partition("::")[2].partition("::")
        assert "\n" not in message and "\r" not in message


def test_github_escaping():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


# -- statistics and show-fixes ------------------------------------------------------------------


def test_statistics_text_and_json(repo, monkeypatch, capsys):
    # the rules this report format is shown with (the device rules find more in this repo)
    select = ("--select", "TRL001,TRL201")
    code, out, _ = run_main(monkeypatch, capsys, repo, *select, "--statistics", ".")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split() == ["count", "code", "fixable", "name"]
    assert lines[1].split() == ["3", "TRL201", "2", "dataparallel-wrap-then-move"]
    assert lines[2].split() == ["1", "TRL001", "0", "syntax-error"]
    assert lines[3].startswith("Found 4 findings")
    code, out, _ = run_main(
        monkeypatch, capsys, repo, *select, "--statistics", "--output-format", "json", "."
    )
    assert json.loads(out) == [
        {
            "code": "TRL201",
            "name": "dataparallel-wrap-then-move",
            "count": 3,
            "fixable_count": 2,
            "fixable": True,
        },
        {
            "code": "TRL001",
            "name": "syntax-error",
            "count": 1,
            "fixable_count": 0,
            "fixable": False,
        },
    ]


def test_show_fixes_previews_changes_and_lists_what_was_fixed(repo, monkeypatch, capsys):
    _, out, _ = run_main(monkeypatch, capsys, repo, "--show-fixes", "train.py")
    assert "     - model = nn.DataParallel(model).to(device)\n" in out
    assert "     + model = nn.DataParallel(model.to(device))\n" in out
    _, out, _ = run_main(
        monkeypatch, capsys, repo, "--fix", "--show-fixes", "train.py", "notebooks"
    )
    assert "Fixed 2 findings:\n" in out
    assert "- notebooks/metric.ipynb:\n    1 \u00d7 TRL201 (dataparallel-wrap-then-move)\n" in out
    assert "- train.py:\n    1 \u00d7 TRL201 (dataparallel-wrap-then-move)\n" in out
    _, out, _ = run_main(monkeypatch, capsys, repo, "--fix", "--show-fixes", "train.py")
    assert "No findings were fixed." in out


# -- colour and progress ------------------------------------------------------------------------


def run_cli(args, cwd, extra_env=None, tty=False):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NO_COLOR", "FORCE_COLOR", "CI", "GITHUB_ACTIONS", "TERM")
    }
    env["TERM"] = "xterm"
    env.update(extra_env or {})
    command = [sys.executable, "-m", "trainlint", "--isolated", *args]
    if not tty:
        proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        return proc.returncode, proc.stdout + proc.stderr
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    chunks = []
    while True:
        ready, _, _ = select.select([primary], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def test_colour_on_a_terminal_plain_in_pipes_and_with_no_color(repo):
    code, out = run_cli(["train.py"], repo, tty=True)
    assert code == 1 and "\x1b[" in out
    code, out = run_cli(["train.py"], repo)
    assert code == 1 and "\x1b[" not in out
    code, out = run_cli(["train.py"], repo, {"NO_COLOR": "1"}, tty=True)
    assert "\x1b[" not in out
    code, out = run_cli(["train.py"], repo, {"FORCE_COLOR": "1"})
    assert "\x1b[1;33mTRL201" in out
    code, out = run_cli(["--output-format", "json", "train.py"], repo, {"FORCE_COLOR": "1"})
    assert "\x1b[" not in out
    json.loads(out)


@pytest.fixture
def many_files(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for i in range(30):
        (tmp_path / f"script_{i:02}.py").write_text(DP_BUG)
    return tmp_path


def test_progress_line_on_a_terminal_only(many_files):
    code, out = run_cli(["--output-format", "concise", "."], many_files, tty=True)
    assert code == 1
    assert "/30] script_" in out and "\r\x1b[K" in out
    assert "[30/30] script_29.py" in out
    # Erased before the report: the findings lines are clean.
    assert any(line.startswith("script_00.py:6:9") for line in _visible_lines(out))
    for extra, args in [
        ({}, []),  # pipes
        ({"CI": "true"}, ["tty"]),
        ({}, ["tty", "--no-progress"]),
        ({}, ["tty", "-q"]),
        ({}, ["tty", "--output-format", "json"]),
    ]:
        tty = "tty" in args
        flags = [a for a in args if a != "tty"]
        code, out = run_cli([*flags, "."], many_files, extra, tty=tty)
        assert "/30]" not in out, (extra, args)


def _visible_lines(out):
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out).replace("\r\n", "\n")
    return [line.split("\r")[-1].replace("\x1b[K", "") for line in plain.split("\n")]


def test_small_runs_draw_no_progress(repo):
    code, out = run_cli(["train.py"], repo, tty=True)
    assert "/1]" not in out
