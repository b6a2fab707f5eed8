"""The command line as a user runs it: real subprocesses for the end-to-end paths, `main()` in
process where a test needs to reach inside (a crashing rule)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import jsonschema
import libcst as cst
import pytest

from fixture_support import REPO
from trainlint import cli
from trainlint.diagnostics import Severity
from trainlint.rules.base import Rule

EXAMPLE = REPO / "examples" / "train_buggy.py"
SCHEMA = json.loads((REPO / "tests" / "data" / "json_output.schema.json").read_text())

DP_BUG = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2)
model = nn.DataParallel(model).to(device)
"""
FIXED_LINE = "model = nn.DataParallel(model.to(device))"
FIXED_BUG = DP_BUG.replace("model = nn.DataParallel(model).to(device)", FIXED_LINE)


def trainlint(*args, cwd=None, input=None):
    return subprocess.run(
        [sys.executable, "-m", "trainlint", *map(str, args)],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )


@pytest.fixture
def project(tmp_path):
    """An empty project folder (with a pyproject.toml, so no outer config leaks in)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    return tmp_path


def test_example_reports_trl201_with_position_severity_and_message():
    proc = trainlint(EXAMPLE, cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    line_no = next(
        i
        for i, line in enumerate(EXAMPLE.read_text().splitlines(), 1)
        if "DataParallel(model)" in line
    )
    col = EXAMPLE.read_text().splitlines()[line_no - 1].index("nn.DataParallel") + 1
    expected = f"examples/train_buggy.py:{line_no}:{col}: TRL201 [*] warning: "
    assert expected in proc.stdout
    assert "device_ids[0]" in proc.stdout
    assert "DistributedDataParallel" in proc.stdout
    assert proc.stderr == ""


def test_fix_rewrites_then_second_run_is_clean_for_trl201(project):
    target = project / "train.py"
    shutil.copyfile(EXAMPLE, target)
    fixed = trainlint("--fix", "--select", "TRL201", target, cwd=project)
    assert fixed.returncode in (0, 1), fixed.stderr
    assert "Fixed 1 finding" in fixed.stdout
    assert "nn.DataParallel(model.to(device))" in target.read_text()
    again = trainlint("check", "--select", "TRL201", target, cwd=project)
    assert again.returncode == 0, again.stdout
    assert "TRL201" not in again.stdout


def test_diff_prints_and_writes_nothing(project):
    target = project / "train.py"
    target.write_text(DP_BUG)
    proc = trainlint("--diff", target, cwd=project)
    assert proc.returncode == 1
    assert f"+{FIXED_LINE}" in proc.stdout
    assert proc.stdout.startswith("--- a/")
    assert target.read_text() == DP_BUG
    target.write_text(FIXED_BUG)
    clean = trainlint("--diff", target, cwd=project)
    assert clean.returncode == 0 and clean.stdout == ""


def test_exit_codes(project):
    clean = project / "clean.py"
    clean.write_text("import torch\nx = torch.zeros(3)\n")
    assert trainlint(clean, cwd=project).returncode == 0
    buggy = project / "buggy.py"
    buggy.write_text(DP_BUG)
    assert trainlint(buggy, cwd=project).returncode == 1
    assert trainlint("--exit-zero", buggy, cwd=project).returncode == 0
    usage = trainlint("--select", "TRL999", buggy, cwd=project)
    assert usage.returncode == 2
    assert usage.stderr.count("\n") == 1 and "TRL999" in usage.stderr
    assert "Traceback" not in usage.stderr
    missing = trainlint(project / "nope.py", cwd=project)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    bad_flag = trainlint("--frobnicate", cwd=project)
    assert bad_flag.returncode == 2 and "Traceback" not in bad_flag.stderr


def test_fix_exit_non_zero_on_fix(project):
    target = project / "train.py"
    target.write_text(DP_BUG)
    proc = trainlint("--fix", "--exit-non-zero-on-fix", target, cwd=project)
    assert proc.returncode == 1
    assert FIXED_LINE in target.read_text()
    proc = trainlint("--fix", "--exit-non-zero-on-fix", target, cwd=project)
    assert proc.returncode == 0


def test_default_path_is_current_directory_and_skips_virtualenvs(project):
    (project / "train.py").write_text(DP_BUG)
    for skipped in (".venv/lib", "venv", "build", "dist", "node_modules/x", "__pycache__", "myenv"):
        folder = project / skipped
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "vendored.py").write_text(DP_BUG)
    (project / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (project / "pkg").mkdir()
    (project / "pkg" / "model.py").write_text(DP_BUG)
    proc = trainlint("--output-format", "concise", cwd=project)
    assert proc.returncode == 1
    reported = sorted({line.split(":")[0] for line in proc.stdout.splitlines() if "TRL201" in line})
    assert reported == ["pkg/model.py", "train.py"]


def test_directory_with_unparsable_file_reports_trl001_and_the_rest(project):
    (project / "a_broken.py").write_text("import torch\n\nfor epoch in range(3)\n    pass\n")
    (project / "b_train.py").write_text(DP_BUG)
    (project / "c_nul.py").write_bytes(b"import torch\nx = 1\0\n")
    (project / "d_latin.py").write_bytes(b"import torch\nname = '\xe9t\xe9'\n")
    # A comment on line 1 makes tokenize look for a coding cookie on line 2, which is not UTF-8.
    (project / "e_comment.py").write_bytes(b"# Train a ResNet\n# caf\xe9 notes\nimport torch\n")
    proc = trainlint("--output-format", "concise", ".", cwd=project)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "a_broken.py:3:22: TRL001 error: SyntaxError: expected ':'" in out
    assert "b_train.py:6:9: TRL201" in out
    assert "c_nul.py:2:6: TRL001 error: source contains a NUL byte" in out
    assert "d_latin.py:2:9: TRL001 error: cannot decode the file as utf-8" in out
    assert "e_comment.py:2:6: TRL001 error: cannot decode the file as utf-8: byte 0xe9" in out


def test_a_file_with_old_mac_line_ends_is_read_as_python_reads_it(project):
    # Lines end with a bare CR: a plain readline sees one long first line, where the config's
    # `positional_encoding=dict(` would look like a coding cookie; Python sees three lines.
    data = (
        b"# DETR-style config\rimport torch\r"
        b"model = dict(positional_encoding=dict(num_feats=128))\r"
    )
    assert compile(data, "config.py", "exec")
    (project / "config.py").write_bytes(data)
    proc = trainlint("--output-format", "concise", "config.py", cwd=project)
    assert "Traceback" not in proc.stderr
    assert "TRL001" not in proc.stdout, proc.stdout
    assert proc.returncode == 0


def test_select_ignore_extend_select(project):
    target = project / "train.py"
    target.write_text(DP_BUG)
    assert trainlint("--ignore", "TRL201", target, cwd=project).returncode == 0
    assert trainlint("--ignore", "TRL2", target, cwd=project).returncode == 0
    assert trainlint("--select", "TRL001", target, cwd=project).returncode == 0
    assert trainlint("--select", "TRL0,TRL2", target, cwd=project).returncode == 1
    assert (
        trainlint("--select", "ALL", "--ignore", "TRL201,TRL502", target, cwd=project).returncode
        == 0
    )
    assert (
        trainlint("--select", "TRL", "--ignore", "TRL2,TRL5", target, cwd=project).returncode == 0
    )
    assert (
        trainlint("--ignore", "TRL2", "--extend-select", "TRL201", target, cwd=project).returncode
        == 1
    )


def test_json_output_validates_against_schema(project):
    target = project / "train.py"
    target.write_text(DP_BUG)
    (project / "broken.py").write_text("import torch\nx = (1,\n")
    proc = trainlint("--output-format", "json", ".", cwd=project)
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    by_code = {d["code"]: d for d in data}
    dp = by_code["TRL201"]
    assert dp["location"] == {"row": 6, "column": 9}
    assert dp["severity"] == "warning"
    assert dp["filename"] == str(target)
    assert dp["fix"]["applicability"] == "safe"
    assert dp["fix"]["edits"][0]["content"] == "nn.DataParallel(model.to(device))"
    assert dp["url"].endswith("#trl201")
    assert by_code["TRL001"]["location"]["row"] == 2


def test_noqa_forms(project):
    target = project / "train.py"
    base = DP_BUG.replace(
        "nn.DataParallel(model).to(device)\n", "nn.DataParallel(model).to(device)"
    )
    for comment, suppressed in [
        ("  # noqa", True),
        ("  # noqa: TRL201", True),
        ("  # noqa:TRL201", True),
        ("  # NOQA: TRL2", True),
        ("  # noqa: E501, TRL201", True),
        ("  # noqa: TRL101", False),
        ("  # noqa: TRL3", False),
        ("  # not a noqa", False),
    ]:
        target.write_text(base + comment + "\n")
        proc = trainlint(target, cwd=project)
        assert (proc.returncode == 0) is suppressed, (comment, proc.stdout)


def test_a_bare_noqa_does_not_hide_a_file_that_was_not_analysed(project):
    # A file that does not parse is one TRL001 on the row where parsing stopped; a bare
    # `# noqa` there (written for findings the file can no longer get) must not make the run
    # say all is well. Naming the code does silence it.
    target = project / "train.py"
    for comment, suppressed in [
        ("  # noqa", False),
        ("  # noqa: TRL2", False),
        ("  # noqa: TRL001", True),
        ("  # noqa: TRL0", True),
    ]:
        target.write_text(" from .vit import *" + comment + "\n")
        proc = trainlint("--output-format", "json", target, cwd=project)
        codes = [f["code"] for f in json.loads(proc.stdout)]
        assert (codes == []) is suppressed, (comment, codes)
        assert suppressed or codes == ["TRL001"], (comment, codes)


def test_noqa_suppresses_fix_too(project):
    target = project / "train.py"
    text = DP_BUG.replace("to(device)\n", "to(device)  # noqa: TRL201\n")
    target.write_text(text)
    trainlint("--fix", target, cwd=project)
    assert target.read_text() == text


def test_rule_and_rules_commands():
    proc = trainlint("rule", "trl201")
    assert proc.returncode == 0
    assert "## What it does" in proc.stdout and "## Fix safety" in proc.stdout
    assert "module must have its parameters and buffers on device cuda:0" in proc.stdout
    table = trainlint("rules")
    assert table.returncode == 0
    assert "TRL201  dataparallel-wrap-then-move" in table.stdout
    assert trainlint("rule", "TRL999").returncode == 2
    version = trainlint("--version")
    assert version.returncode == 0 and version.stdout.startswith("trainlint ")


def test_config_in_pyproject(project):
    target = project / "train.py"
    target.write_text(DP_BUG)
    (project / "pyproject.toml").write_text("[tool.trainlint]\nignore = ['TRL201']\n")
    assert trainlint(target, cwd=project).returncode == 0
    (project / "pyproject.toml").write_text(
        "[tool.trainlint]\nper-file-ignores = { 'train.py' = ['TRL2'] }\n"
    )
    assert trainlint(target, cwd=project).returncode == 0
    (project / "pyproject.toml").write_text("[tool.trainlint]\nextend-exclude = ['train.py']\n")
    assert trainlint(project, cwd=project).returncode == 0
    # Explicit paths are checked unless --force-exclude (what pre-commit passes).
    assert trainlint(target, cwd=project).returncode == 1
    assert trainlint("--force-exclude", target, cwd=project).returncode == 0
    # --isolated ignores the configuration.
    assert trainlint("--isolated", project, cwd=project).returncode == 1


@pytest.mark.parametrize(
    "table, fragment",
    [
        ("selekt = ['TRL2']", "unknown key 'selekt'"),
        ("select = 'TRL2'", "'select' must be a list"),
        ("ignore = ['XYZ1']", "unknown rule selector 'XYZ1'"),
        ("select = [", "invalid TOML"),
        # Legal TOML the reader cannot follow: it recurses once per level (issue 21).
        ("select = " + "[" * 5000 + "]" * 5000, "nested too deeply to read"),
    ],
    ids=["unknown-key", "not-a-list", "unknown-rule", "broken", "nested-5000-deep"],
)
def test_bad_config_is_one_line_and_exit_2(project, table, fragment):
    (project / "pyproject.toml").write_text(f"[tool.trainlint]\n{table}\n")
    (project / "train.py").write_text(DP_BUG)
    proc = trainlint("train.py", cwd=project)
    assert proc.returncode == 2
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_config_option_points_at_a_file(project):
    (project / "train.py").write_text(DP_BUG)
    config = project / "lint.toml"
    config.write_text("ignore = ['TRL201']\n")
    assert trainlint("--config", config, "train.py", cwd=project).returncode == 0
    assert trainlint("--config", project / "missing.toml", "train.py", cwd=project).returncode == 2


def test_fix_keeps_crlf_bom_encoding_and_mode(project):
    crlf = project / "crlf.py"
    crlf.write_bytes(DP_BUG.replace("\n", "\r\n").encode())
    bom = project / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + DP_BUG.encode())
    latin = project / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + DP_BUG).encode("latin-1"))
    os.chmod(crlf, 0o750)
    proc = trainlint("--fix", crlf, bom, latin, cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert crlf.read_bytes() == FIXED_BUG.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(crlf.stat().st_mode) == 0o750
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf")
    assert FIXED_LINE.encode() in bom.read_bytes()
    assert latin.read_bytes().startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    assert FIXED_LINE.encode() in latin.read_bytes()


def test_read_only_file_is_reported_not_crashed(project):
    target = project / "train.py"
    target.write_text(DP_BUG)
    os.chmod(target, 0o444)
    proc = trainlint("--fix", target, cwd=project)
    assert proc.returncode == 2
    assert "read-only" in proc.stderr
    assert target.read_text() == DP_BUG


# -- in process: a rule that raises --------------------------------------------------------


class Exploding(Rule):
    """Test rule: raises on every call it visits (also used by test_cache and test_parallel)."""

    code = "TRL999"
    name = "exploding"
    severity = Severity.ERROR

    def visit_Call(self, node: cst.Call) -> None:
        raise ValueError("boom")


def test_a_crashing_rule_is_reported_and_the_run_goes_on(
    project, monkeypatch, capsys, register_rule
):
    register_rule(Exploding)
    (project / "a.py").write_text(DP_BUG)
    (project / "b.py").write_text(DP_BUG)
    monkeypatch.chdir(project)
    code = cli.main(["--output-format", "concise", "."])
    out, err = capsys.readouterr()
    assert code == 2
    assert "a.py: internal error in rule TRL999: ValueError: boom" in err
    assert "b.py: internal error in rule TRL999" in err
    assert "a.py:6:9: TRL201" in out and "b.py:6:9: TRL201" in out
