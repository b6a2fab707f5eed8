"""The habits ruff users bring: standard input, .gitignore, --force-exclude, per-file-ignores,
--add-noqa, and TRL002 for a `# noqa` that suppresses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trainlint import cli
from trainlint.rules import all_rules

DP_BUG = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2)
model = nn.DataParallel(model).to(device)
"""
BUG = "model = nn.DataParallel(model).to(device)"
FIXED = "model = nn.DataParallel(model.to(device))"
FIXED_BUG = DP_BUG.replace(BUG, FIXED)


def notebook_text(code):
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": code.splitlines(True),
    }
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1) + "\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    return tmp_path


def trainlint(*args, cwd, input=None):
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trainlint", *map(str, args)],
        cwd=cwd,
        input=input,
        capture_output=True,
        env=env,
    )


def run_main(monkeypatch, capsys, cwd, *args):
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NO_COLOR", "1")
    code = cli.main([*map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def reported(out):
    return sorted({line.split(":")[0] for line in out.splitlines() if ": TRL" in line})


# -- standard input -------------------------------------------------------------------------------


def test_stdin_is_linted_under_the_given_name(project):
    proc = trainlint("--stdin-filename", "models/train.py", cwd=project, input=DP_BUG.encode())
    assert proc.returncode == 1
    assert b"models/train.py:6:9: TRL201" in proc.stdout
    dash = trainlint("-", "--output-format", "concise", cwd=project, input=DP_BUG.encode())
    assert dash.returncode == 1 and dash.stdout.startswith(b"-:6:9: TRL201")
    clean = trainlint("-", cwd=project, input=FIXED_BUG.encode())
    assert clean.returncode == 0 and b"All checks passed!" in clean.stdout


def test_stdin_fix_writes_the_fixed_text_to_stdout_and_the_report_to_stderr(project):
    proc = trainlint("--fix", "--stdin-filename", "train.py", cwd=project, input=DP_BUG.encode())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == FIXED_BUG.encode()
    assert b"Fixed 1 finding, 0 remaining." in proc.stderr
    crlf = DP_BUG.replace("\n", "\r\n").encode()
    proc = trainlint("--fix", "-", cwd=project, input=crlf)
    assert proc.stdout == FIXED_BUG.replace("\n", "\r\n").encode()
    # Nothing to fix: the input comes back unchanged.
    proc = trainlint("--fix", "-", cwd=project, input=b"import torch\nx = 1\n")
    assert proc.returncode == 0 and proc.stdout == b"import torch\nx = 1\n"
    assert not (project / "train.py").exists()  # nothing was written anywhere


def test_stdin_diff_and_notebooks(project):
    proc = trainlint("--diff", "-", cwd=project, input=DP_BUG.encode())
    assert proc.returncode == 1
    assert f"+{FIXED}".encode() in proc.stdout
    nb = notebook_text(DP_BUG)
    proc = trainlint("--stdin-filename", "nb.ipynb", cwd=project, input=nb.encode())
    assert proc.returncode == 1 and b"nb.ipynb:cell 1:6:9: TRL201" in proc.stdout
    proc = trainlint("--fix", "--stdin-filename", "nb.ipynb", cwd=project, input=nb.encode())
    assert proc.stdout.decode() == nb.replace(BUG, FIXED)


def test_stdin_filename_picks_config_per_file_ignores_and_force_exclude(project):
    (project / "pyproject.toml").write_text(
        "[tool.trainlint]\n"
        "per-file-ignores = { 'legacy/*' = ['TRL2'] }\n"
        "extend-exclude = ['vendored']\n"
    )
    ignored = trainlint("--stdin-filename", "legacy/old.py", cwd=project, input=DP_BUG.encode())
    assert ignored.returncode == 0, ignored.stdout
    checked = trainlint("--stdin-filename", "new/train.py", cwd=project, input=DP_BUG.encode())
    assert checked.returncode == 1
    # Excluded names are linted unless --force-exclude (editors pass every buffer)...
    named = ("--stdin-filename", "vendored/x.py")
    assert trainlint(*named, cwd=project, input=DP_BUG.encode()).returncode == 1
    excluded = trainlint("--force-exclude", *named, cwd=project, input=DP_BUG.encode())
    assert excluded.returncode == 0 and excluded.stdout == b""
    # ... and with --fix an excluded buffer comes back untouched.
    fixed = trainlint("--force-exclude", "--fix", *named, cwd=project, input=DP_BUG.encode())
    assert fixed.returncode == 0 and fixed.stdout == DP_BUG.encode()


def test_stdin_refuses_add_noqa(project):
    proc = trainlint("--add-noqa", "-", cwd=project, input=DP_BUG.encode())
    assert proc.returncode == 2 and b"standard input" in proc.stderr


# -- .gitignore -----------------------------------------------------------------------------------


@pytest.fixture
def git_project(project):
    (project / ".git" / "info").mkdir(parents=True)
    (project / ".git" / "info" / "exclude").write_text("scratch_*.py\n")
    (project / ".gitignore").write_text(
        "# generated code\n/generated/\noutputs/\n*_backup.py\n!keep_backup.py\nruns/**/*.ipynb\n"
    )
    files = [
        "train.py",
        "generated/model.py",
        "src/generated/model.py",  # /generated/ is anchored to the root
        "outputs/run1/eval.py",
        "src/outputs/eval.py",  # outputs/ matches at any depth
        "train_backup.py",
        "keep_backup.py",
        "scratch_1.py",
        "runs/a/b/analysis.ipynb",
        "runs/a/notes.py",
        "pkg/sub/ignored_here.py",
        "pkg/sub/kept.py",
    ]
    for name in files:
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(notebook_text(DP_BUG) if name.endswith(".ipynb") else DP_BUG)
    (project / "pkg" / ".gitignore").write_text("sub/ignored_here.py\n")
    return project


KEPT = [
    "keep_backup.py",
    "pkg/sub/kept.py",
    "runs/a/notes.py",
    "src/generated/model.py",
    "train.py",
]


def test_gitignore_is_respected_when_walking(git_project, monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, git_project, "--output-format", "concise", ".")
    assert reported(out) == KEPT


def test_gitignore_of_parent_folders_applies_to_a_sub_folder_run(git_project, monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, git_project / "src", "--output-format", "concise")
    assert reported(out) == ["generated/model.py"]  # src/outputs/ is ignored from the root


def test_explicit_files_and_opting_out(git_project, monkeypatch, capsys):
    code, out, _ = run_main(monkeypatch, capsys, git_project, "train_backup.py")
    assert code == 1  # named explicitly: checked
    code, out, _ = run_main(
        monkeypatch, capsys, git_project, "--no-respect-gitignore", "--output-format", "concise"
    )
    assert len(reported(out)) == 12
    (git_project / "pyproject.toml").write_text("[tool.trainlint]\nrespect-gitignore = false\n")
    code, out, _ = run_main(monkeypatch, capsys, git_project, "--output-format", "concise")
    assert len(reported(out)) == 12


# -- --force-exclude and per-file-ignores ---------------------------------------------------------


def test_force_exclude_applies_excludes_to_explicit_paths(project, monkeypatch, capsys):
    (project / "pyproject.toml").write_text(
        "[tool.trainlint]\nextend-exclude = ['third_party', 'notebooks/scratch_*.ipynb']\n"
    )
    (project / "third_party").mkdir()
    (project / "third_party" / "lib.py").write_text(DP_BUG)
    (project / "notebooks").mkdir()
    (project / "notebooks" / "scratch_1.ipynb").write_text(notebook_text(DP_BUG))
    (project / "notebooks" / "train.ipynb").write_text(notebook_text(DP_BUG))
    (project / "train.py").write_text(DP_BUG)
    # What pre-commit does: every file named explicitly.
    names = ["third_party/lib.py", "notebooks/scratch_1.ipynb", "notebooks/train.ipynb", "train.py"]
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "concise", *names)
    assert len(reported(out)) == 4
    code, out, _ = run_main(
        monkeypatch, capsys, project, "--force-exclude", "--output-format", "concise", *names
    )
    assert reported(out) == ["notebooks/train.ipynb", "train.py"]
    # An excluded folder given explicitly, and the config key.
    code, out, _ = run_main(monkeypatch, capsys, project, "--force-exclude", "third_party")
    assert code == 0 and "All checks passed!" in out
    (project / "pyproject.toml").write_text(
        "[tool.trainlint]\nextend-exclude = ['third_party']\nforce-exclude = true\n"
    )
    code, out, _ = run_main(monkeypatch, capsys, project, "third_party/lib.py")
    assert code == 0


def test_per_file_ignores_globs(project, monkeypatch, capsys):
    (project / "pyproject.toml").write_text(
        "[tool.trainlint]\n"
        "[tool.trainlint.per-file-ignores]\n"
        "'tests/**/*.py' = ['TRL201']\n"
        "'*.ipynb' = ['TRL2']\n"
        "'scripts/legacy_*.py' = ['ALL']\n"
        "'examples/' = ['TRL001']\n"
    )
    files = {
        "tests/unit/test_model.py": DP_BUG,
        "tests/conftest.py": DP_BUG,
        "nb/explore.ipynb": notebook_text(DP_BUG),
        "scripts/legacy_train.py": DP_BUG + "for x in y\n",
        "scripts/train.py": DP_BUG,
        "examples/broken.py": "for x in y\n",
        "examples/train.py": DP_BUG,
    }
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "concise", ".")
    assert reported(out) == ["examples/train.py", "scripts/train.py"]
    # Run from a sub-folder: patterns stay relative to the project root.
    code, out, _ = run_main(monkeypatch, capsys, project / "tests", "--output-format", "concise")
    assert code == 0, out


# -- --add-noqa -----------------------------------------------------------------------------------

BASELINE = '''\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
a = nn.DataParallel(nn.Linear(2, 2)).to(device)
b = nn.DataParallel(nn.Linear(2, 2)).to(device)  # noqa: E501
c = nn.DataParallel(nn.Linear(2, 2)).to(device)  # why this is fine
d = nn.DataParallel(
    nn.Linear(2, 2)
).to(device)
e = nn.DataParallel(nn.Linear(2, 2)).to(device)  # noqa
f = [nn.DataParallel(nn.Linear(2, 2)).to(device), """
text"""]
g = 1 + \\
    nn.DataParallel(nn.Linear(2, 2)).to(device)
h = nn.DataParallel(nn.Linear(2, 2)).to(device) if device else \\
    None
'''


def test_add_noqa_baselines_and_merges(project, monkeypatch, capsys):
    path = project / "train.py"
    path.write_text(BASELINE)
    code, out, err = run_main(monkeypatch, capsys, project, "--add-noqa", "train.py")
    assert code == 0, err
    assert "Added 5 noqa directives in 1 file." in err
    assert "train.py:12: the line ends inside a string" in err
    assert "train.py:16: the line ends inside a string or with a backslash" in err
    assert err.count("warning:") == 2
    lines = path.read_text().splitlines()
    assert lines[4].endswith(").to(device)  # noqa: TRL201")
    assert lines[5].endswith(").to(device)  # noqa: E501, TRL201")
    assert lines[6].endswith("# why this is fine  # noqa: TRL201")
    assert lines[7] == "d = nn.DataParallel(  # noqa: TRL201"
    assert lines[10].endswith("# noqa")
    assert lines[11] == 'f = [nn.DataParallel(nn.Linear(2, 2)).to(device), """'
    assert lines[13] == "g = 1 + \\"  # the finding is on the continuation line
    assert lines[14].endswith(").to(device)  # noqa: TRL201")
    # What remains is what could not be baselined; a second run adds nothing.
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "concise", "train.py")
    remaining = [line.split(":")[1] for line in out.splitlines() if ": TRL" in line]
    assert remaining == ["12", "16"]
    before = path.read_text()
    code, out, err = run_main(monkeypatch, capsys, project, "--add-noqa", "train.py")
    assert "Added 0 noqa directives" in err and path.read_text() == before


def test_add_noqa_refuses_fix(project, monkeypatch, capsys):
    (project / "train.py").write_text(DP_BUG)
    code, _, err = run_main(monkeypatch, capsys, project, "--add-noqa", "--fix", "train.py")
    assert code == 2 and "--add-noqa" in err


# -- TRL002 unused-noqa ---------------------------------------------------------------------------

NOQA_LINES = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.DataParallel(nn.Linear(2, 2)).to(device)  # noqa: TRL201
x = 1  # noqa: TRL201
y = 2  # noqa: E501, TRL201
z = 3  # noqa: TRL201  # keep this comment
w = 4  # noqa: TRL201 a reason
v = 5  # noqa: TRL299
u = 6  # noqa
t = 7  # noqa: E501
s = "# noqa: TRL201"
    # noqa: TRL306
"""
# (A prefix such as `TRL3` would also name TRL305, a preview rule not enabled here, and a code
# that may be meant for a rule that is off is left alone: see the next tests.)
NOQA_FIXED = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.DataParallel(nn.Linear(2, 2)).to(device)  # noqa: TRL201
x = 1
y = 2  # noqa: E501
z = 3  # keep this comment
w = 4  # a reason
v = 5
u = 6  # noqa
t = 7  # noqa: E501
s = "# noqa: TRL201"
"""


def test_unused_noqa_is_off_by_default_and_documented():
    rule = all_rules()["TRL002"]
    assert rule.name == "unused-noqa" and not rule.default_enabled() and rule.fix == "safe"


def test_unused_noqa_findings_and_fix(project, monkeypatch, capsys):
    path = project / "train.py"
    path.write_text(NOQA_LINES)
    code, out, _ = run_main(monkeypatch, capsys, project, "train.py")
    assert code == 0, out
    code, out, _ = run_main(
        monkeypatch,
        capsys,
        project,
        "--extend-select",
        "TRL002",
        "--output-format",
        "concise",
        path,
    )
    assert code == 1
    found = [line for line in out.splitlines() if "TRL002" in line]
    rows = [line.split(":")[1] for line in found]
    assert rows == ["6", "7", "8", "9", "10", "13", "14"]
    assert "train.py:6:8: TRL002 [*] warning: unused `noqa` code TRL201" in found[0]
    assert "unknown code TRL299 in `noqa`" in found[4]
    assert "[*]" not in found[5]  # inside a string: reported, never edited
    code, out, _ = run_main(
        monkeypatch, capsys, project, "--extend-select", "TRL002", "--fix", path
    )
    assert path.read_text() == NOQA_FIXED
    assert "Fixed 6 findings, 1 remaining." in out


def test_unused_noqa_leaves_codes_of_rules_that_are_not_enabled(project, monkeypatch, capsys):
    path = project / "train.py"
    path.write_text("import torch\nx = 1  # noqa: TRL201\n")
    code, out, _ = run_main(
        monkeypatch, capsys, project, "--select", "TRL002", "--ignore", "TRL201", path
    )
    assert code == 0, out
