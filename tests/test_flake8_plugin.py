"""The flake8 plugin, through real flake8 in a subprocess where possible."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixture_support import REPO, RULE_FIXTURES
from test_cli import Exploding
from trainlint.diagnostics import Severity
from trainlint.flake8_plugin import TrainlintChecker
from trainlint.rules.base import Rule

EXAMPLE = REPO / "examples" / "train_buggy.py"


def flake8(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def trainlint_concise(path, cwd, *extra):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainlint",
            "--isolated",
            "--output-format",
            "concise",
            *extra,
            str(path),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    return [line for line in proc.stdout.splitlines() if ": TRL" in line]


def test_flake8_reports_the_same_finding_at_the_same_column():
    proc = flake8("--select", "TRL", "examples/train_buggy.py", cwd=REPO)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    # flake8's `--select TRL` runs every rule, preview rules included.
    ours = trainlint_concise("examples/train_buggy.py", REPO, "--select", "TRL", "--preview")
    assert len(lines) == len(ours) >= 1, (proc.stdout, ours)
    # flake8 prints path:row:col: CODE message with col 1-based, like our text output.
    flake8_where = sorted(
        line.split(": TRL")[0] + line[line.index(": TRL") :][:8] for line in lines
    )
    ours_where = sorted(line.split(": TRL")[0] + line[line.index(": TRL") :][:8] for line in ours)
    assert flake8_where == ours_where
    (dp_line,) = [line for line in lines if "TRL201 " in line]
    row, col = map(int, dp_line.split(": TRL")[0].split(":")[1:3])
    source_line = EXAMPLE.read_text().splitlines()[row - 1]
    assert source_line[col - 1 :].startswith("nn.DataParallel(model).to(device)")


def test_flake8_keeps_going_past_a_broken_file(tmp_path):
    (tmp_path / "a_broken.py").write_text("import torch\nfor x in y\n    pass\n")
    (tmp_path / "b_train.py").write_text(
        "import torch.nn as nn\nmodel = nn.DataParallel(nn.Linear(2, 2)).cuda(args.gpu)\n"
    )
    proc = flake8("--select", "TRL,E999", ".", cwd=tmp_path)
    assert "Traceback" not in proc.stderr
    assert "a_broken.py:2:" in proc.stdout and "E999" in proc.stdout
    assert "b_train.py:2:9: TRL201" in proc.stdout


def test_plugin_yields_trl001_when_only_libcst_cannot_parse():
    # Python accepts this (3.11 grammar), libcst may not for some constructs; either way the
    # plugin must answer with findings, not raise. A NUL-free but undecodable case is flake8's.
    checker = TrainlintChecker(None, ["import torch\n", "x = (\n"], "broken.py")
    results = list(checker.run())
    assert results and results[0][2].startswith("TRL001 ")
    assert results[0][:2] == (2, 4)


def test_plugin_survives_a_crashing_rule(register_rule, capsys):
    register_rule(Exploding)
    lines = [
        "import torch\n",
        "import torch.nn as nn\n",
        "torch.cuda.set_device(args.gpu)\n",
        "m = nn.DataParallel(nn.Linear(2, 2)).cuda()\n",
    ]
    results = list(TrainlintChecker(None, lines, "train.py").run())
    # Info-level rules (TRL502 here) are left to flake8's default ignore list, not the checker.
    assert [r[2].split()[0] for r in results if not r[2].startswith("TRL5")] == ["TRL000", "TRL201"]
    # The crash is a finding on line 1 that names the rule and the error, not a line on stderr.
    assert results[0][:2] == (1, 0)
    assert results[0][2].startswith("TRL000 trainlint internal error in rule TRL999: ValueError")
    assert results[1][:2] == (4, 4)


def test_info_rules_are_default_ignored(register_rule):

    class Chatty(Rule):
        code = "TRL599"
        name = "chatty"
        severity = Severity.INFO

    register_rule(Chatty)

    class Manager:
        ignored = []

        def extend_default_ignore(self, codes):
            self.ignored.extend(codes)

    manager = Manager()
    TrainlintChecker.add_options(manager)
    # Every rule that is off by default (info level, preview, and TRL002 unused-noqa).
    assert manager.ignored == [
        "TRL002", "TRL104", "TRL105", "TRL107", "TRL204", "TRL305", "TRL401", "TRL405",
        "TRL501", "TRL502", "TRL599",
    ]


def test_entry_point_is_registered():
    from importlib.metadata import entry_points

    eps = entry_points(group="flake8.extension")
    assert any(
        ep.name == "TRL" and ep.value == "trainlint.flake8_plugin:TrainlintChecker" for ep in eps
    )


def test_flake8_reads_rule_options_from_the_configuration(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "import torch.nn as nn\n"
        "import torch.nn.functional as F\n"
        "from torch.utils.data import DataLoader\n\n"
        'wrapped = nn.DataParallel(nn.Linear(4, 2)).to("cuda:1")\n\n\n'
        "def train(model, path, shipper, device):\n"
        "    model.to(device)\n"
        "    for batch in DataLoader(torch.load(path), batch_size=8):\n"
        "        shipper.ship(batch)\n"
        '        loss = F.cross_entropy(model(batch["x"]), batch["y"])\n'
    )
    (tmp_path / ".git").mkdir()
    before = flake8("--select", "TRL101,TRL201", "train.py", cwd=tmp_path)
    assert before.stdout.count("TRL101") == 2, before.stdout + before.stderr
    assert before.stdout.count("TRL201") == 1
    (tmp_path / "trainlint.toml").write_text('device-movers = ["ship"]\nignore = ["TRL2"]\n')
    after = flake8("--select", "TRL101,TRL201", "train.py", cwd=tmp_path)
    # The rule's option is read; `ignore` is flake8's to decide, so it is not.
    assert after.stdout.count("TRL101") == 0, after.stdout + after.stderr
    assert after.stdout.count("TRL201") == 1
    (tmp_path / "trainlint.toml").write_text('device-movers = "ship"\n')
    wrong = flake8("--select", "TRL101", "train.py", cwd=tmp_path)
    assert "device-movers" in wrong.stderr and wrong.stdout.count("TRL101") == 2


def test_internal_errors_fail_the_flake8_run(register_rule, tmp_path, monkeypatch, capsys):
    """Through flake8 itself (in this process, so the registered rule is seen): a rule that
    raises makes flake8 report TRL000 and exit 1; it used to print to stderr and exit 0."""
    from flake8.main import cli as flake8_cli

    register_rule(Exploding)
    (tmp_path / "train.py").write_text("import torch.nn as nn\nm = nn.Linear(2, 2)\n")
    monkeypatch.chdir(tmp_path)
    try:
        code = flake8_cli.main(["--isolated", "-j", "1", "--select", "TRL", "train.py"])
    except SystemExit as exc:  # flake8 before 6 exits instead of returning
        code = exc.code
    out = capsys.readouterr().out
    assert code == 1
    [line] = out.splitlines()
    assert line.startswith("train.py:1:1: TRL000 trainlint internal error in rule TRL999: ")
    assert "ValueError: boom" in line
    assert line.endswith("its findings are missing (please report it)")


def test_a_failing_checker_is_one_trl000_finding(monkeypatch):
    def overflow(self):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(TrainlintChecker, "_check", overflow)
    results = list(TrainlintChecker(None, ["x = 1\n"], "train.py").run())
    assert [r[:3] for r in results] == [
        (
            1,
            0,
            "TRL000 trainlint internal error: RecursionError: maximum recursion depth exceeded; "
            "this file was not checked (please report it)",
        )
    ]


def test_unused_parameter_without_ddp_in_view_is_a_warning_under_flake8_only():
    # flake8 sees one file: the DDP launch may be in another, so TRL301 warns; the CLI reads
    # the whole project, finds no DDP and stays quiet (fixtures/rules/TRL301/good_no_ddp_*).
    path = RULE_FIXTURES / "TRL301" / "good_no_ddp_anywhere.py"
    lines = path.read_text().splitlines(keepends=True)
    results = list(TrainlintChecker(None, lines, str(path)).run())
    assert [r[2].split()[0] for r in results if r[2].startswith("TRL301")] == ["TRL301"]


@pytest.mark.parametrize(
    "fixture, script, code",
    [
        # the model's class, in tagger.py, resets the gradients in its forward
        ("TRL404/good_tagger_resets_gradients_in_another_file_project", "train.py", "TRL404"),
        # dist_utils.py, which train.py imports, reads LOCAL_RANK
        ("TRL306/good_local_rank_read_by_helper_project", "train.py", "TRL306"),
        # the parser factory's flag is read only by the script that imports it
        (
            "TRL306/quantization_examples_parser_read_by_a_worker_project",
            "examples/__init__.py",
            "TRL306",
        ),
    ],
)
def test_a_finding_that_waits_on_another_file_is_left_out_under_flake8(fixture, script, code):
    # flake8 hands over one file: what the other file says is unknown, so no finding is made
    # (the CLI reads that file: quiet for the good fixtures, a finding for the factory's).
    path = RULE_FIXTURES / fixture / script
    lines = path.read_text().splitlines(keepends=True)
    results = list(TrainlintChecker(None, lines, str(path)).run())
    assert not [r for r in results if r[2].startswith(code)], results
