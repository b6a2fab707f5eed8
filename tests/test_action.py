"""The GitHub Action (action.yml): its steps' shell, run as the runner would run them.

A copy of this working tree plays the action's checkout ($GITHUB_ACTION_PATH); a throwaway git
repository with a buggy training script is the user's ($GITHUB_WORKSPACE, the steps' working
folder); `python` on PATH is a fresh virtual environment, which the install step fills with
`pip install "$GITHUB_ACTION_PATH"`. `${{ inputs.X }}` is replaced as GitHub does, from the
inputs' defaults and the `with:` a user gives. The upload step (`uses:`) is another action and
is only checked for what it is handed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv
from pathlib import Path
from typing import Dict, List

import pytest
import yaml

from fixture_support import REPO

pytestmark = pytest.mark.slow

ACTION = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))

BUGGY = """\
import torch
import torch.nn as nn

device = torch.device(f"cuda:{args.gpu}" if torch.cuda.is_available() else "cpu")
model = nn.DataParallel(nn.Linear(8, 2)).to(device)
"""


def expand(value: str, inputs: Dict[str, str]) -> str:
    return re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: inputs[m.group(1)], value)


def condition_holds(condition: str, inputs: Dict[str, str]) -> bool:
    """The only conditions action.yml uses: `inputs.NAME == 'VALUE'`."""
    match = re.fullmatch(r"inputs\.([\w-]+) == '([^']*)'", condition.strip())
    assert match, f"the test does not know how to evaluate {condition!r}"
    return inputs[match.group(1)] == match.group(2)


@pytest.fixture(scope="module")
def action_path(tmp_path_factory) -> Path:
    """The action's checkout: this working tree's tracked and new files (outside a git checkout,
    as in CI's copy of the tree, every file but virtual environments, caches and build output)."""
    out = tmp_path_factory.mktemp("action")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
    )
    if listed.returncode == 0:
        names = list(filter(None, listed.stdout.decode().split("\0")))
    else:
        skipped = {".venv", "venv", ".git", "build", "dist", "__pycache__", ".mypy_cache"}
        names = [
            path.relative_to(REPO).as_posix()
            for path in REPO.rglob("*")
            if path.is_file()
            and not skipped.intersection(path.relative_to(REPO).parts)
            and not any(part.startswith((".trainlint_cache", ".pytest_cache", ".hypothesis"))
                        for part in path.relative_to(REPO).parts)
            and ".egg-info" not in path.as_posix()
        ]
    for name in names:
        source = REPO / name
        if source.is_file() and not name.startswith(("tests/", "fixtures/", "benchmarks/")):
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, out / name)
    return out


@pytest.fixture(scope="module")
def runner_bin(tmp_path_factory) -> Path:
    """The runner's Python: a fresh virtual environment, put first on PATH."""
    env_dir = tmp_path_factory.mktemp("runner-python")
    venv.EnvBuilder(with_pip=True).create(env_dir)
    return env_dir / "bin"


def run_action(action_path: Path, runner_bin: Path, workspace: Path, given: Dict[str, str]):
    inputs = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    inputs.update(given)
    base_env = {
        **os.environ,
        "PATH": f"{runner_bin}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_ACTIONS": "true",
        "GITHUB_ACTION_PATH": str(action_path),
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_TEMP": str(workspace.parent),
        "VIRTUAL_ENV": str(runner_bin.parent),
    }
    base_env.pop("PYTHONPATH", None)
    results: List[subprocess.CompletedProcess] = []
    uploads = []
    for step in ACTION["runs"]["steps"]:
        if "if" in step and not condition_holds(step["if"], inputs):
            continue
        if "uses" in step:
            uploads.append({k: expand(v, inputs) for k, v in step.get("with", {}).items()})
            continue
        assert step["shell"] == "bash"
        env = {**base_env, **{k: expand(v, inputs) for k, v in step.get("env", {}).items()}}
        # The runner runs `bash --noprofile --norc -eo pipefail {0}` on the step's script.
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", expand(step["run"], inputs)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        results.append(done)
        if done.returncode != 0:
            break  # the job stops at the first failing step
    return results, uploads


@pytest.fixture
def workspace(tmp_path) -> Path:
    repo = tmp_path / "user"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "train.py").write_text(BUGGY, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def test_action_annotates_and_fails_on_findings(action_path, runner_bin, workspace):
    results, uploads = run_action(action_path, runner_bin, workspace, {})
    install, check = results
    assert install.returncode == 0, install.stderr
    assert check.returncode == 1, check.stderr
    assert check.stdout.startswith("::warning title=trainlint TRL201")
    assert "file=src/train.py,line=5," in check.stdout
    assert uploads == []  # no SARIF unless asked


def test_action_writes_and_uploads_sarif(action_path, runner_bin, workspace):
    results, uploads = run_action(
        action_path,
        runner_bin,
        workspace,
        {"sarif": "true", "paths": "src", "args": "--select TRL2 --ignore TRL204"},
    )
    assert [r.returncode for r in results] == [0, 0, 1], [r.stderr for r in results]
    sarif = (workspace / "trainlint.sarif").read_text(encoding="utf-8")
    assert '"ruleId": "TRL201"' in sarif
    assert uploads == [{"sarif_file": "trainlint.sarif", "category": "trainlint"}]
    assert "TRL201" in results[-1].stdout
