"""The published pre-commit hooks, run by the real `pre-commit try-repo` against a throwaway git
repository holding a buggy training script.

pre-commit builds the hook's virtual environment from this repository (pip install .), which
takes a while; both hooks share one PRE_COMMIT_HOME.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_support import REPO

pytestmark = pytest.mark.slow

BUGGY = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.DataParallel(nn.Linear(8, 2)).to(device)
"""


def _pre_commit():
    exe = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which(
        "pre-commit"
    )
    if exe is None:
        pytest.fail(
            "pre-commit is not installed: install the test extra (pip install -e '.[test]')"
        )
    return exe


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory):
    """A git snapshot of this working tree (what pre-commit needs to install the hooks), so the
    test checks the code under test, committed or not."""
    repo = tmp_path_factory.mktemp("hook-repo")
    for name in ("pyproject.toml", "README.md", "setup.cfg", ".pre-commit-hooks.yaml"):
        shutil.copy2(REPO / name, repo / name)
    shutil.copytree(
        REPO / "src", repo / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    env = _git_env()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "snapshot"], cwd=repo, check=True, env=env)
    return repo


NOTEBOOK = REPO / "fixtures" / "rules" / "TRL201" / "notebook_single_cell_embeddings.ipynb"
NOTEBOOK_FIXED = NOTEBOOK.with_name("notebook_single_cell_embeddings.fixed.ipynb")


@pytest.fixture
def user_repo(tmp_path):
    repo = tmp_path / "user"
    repo.mkdir()
    env = _git_env()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    (repo / "train.py").write_text(BUGGY)
    subprocess.run(["git", "add", "train.py"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "buggy"], cwd=repo, check=True, env=env)
    return repo


def _git_env():
    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }


def try_repo(hook_repo, hook, cwd, home):
    env = {**_git_env(), "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [_pre_commit(), "try-repo", str(hook_repo), hook, "--all-files", "--verbose"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_check_hook_fails_and_shows_trl201(hook_repo, user_repo, home):
    proc = try_repo(hook_repo, "trainlint", user_repo, home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "TRL201" in proc.stdout
    assert "train.py:5:9" in proc.stdout
    assert (user_repo / "train.py").read_text() == BUGGY


def test_fix_hook_rewrites_then_passes(hook_repo, user_repo, home):
    first = try_repo(hook_repo, "trainlint-fix", user_repo, home)
    assert first.returncode == 1, first.stdout + first.stderr  # it changed a file
    fixed = (user_repo / "train.py").read_text()
    assert "model = nn.DataParallel(nn.Linear(8, 2).to(device))" in fixed
    second = try_repo(hook_repo, "trainlint-fix", user_repo, home)
    assert second.returncode == 0, second.stdout + second.stderr
    check = try_repo(hook_repo, "trainlint", user_repo, home)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.fixture
def notebook_repo(tmp_path):
    """A user repository holding only a notebook (the `jupyter` type must reach the hooks)."""
    repo = tmp_path / "nb-user"
    (repo / "notebooks").mkdir(parents=True)
    env = _git_env()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    shutil.copyfile(NOTEBOOK, repo / "notebooks" / "metric.ipynb")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "notebook"], cwd=repo, check=True, env=env)
    return repo


def test_hooks_check_and_fix_a_notebook(hook_repo, notebook_repo, home):
    target = notebook_repo / "notebooks" / "metric.ipynb"
    check = try_repo(hook_repo, "trainlint", notebook_repo, home)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "notebooks/metric.ipynb:cell 8:19:9: TRL201" in check.stdout
    assert target.read_bytes() == NOTEBOOK.read_bytes()
    fixed = try_repo(hook_repo, "trainlint-fix", notebook_repo, home)
    assert fixed.returncode == 1, fixed.stdout + fixed.stderr  # it changed the notebook
    # Only the fixed line changed: the notebook's JSON is otherwise byte for byte the same.
    assert target.read_bytes() == NOTEBOOK_FIXED.read_bytes()
    again = try_repo(hook_repo, "trainlint", notebook_repo, home)
    assert again.returncode == 0, again.stdout + again.stderr
