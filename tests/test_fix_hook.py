"""The `trainlint-fix` pre-commit hook applies safe fixes only, even in a project whose
configuration says `unsafe-fixes = true` (a commit must never apply a fix that may change
behaviour unasked). The hook's command is read from .pre-commit-hooks.yaml and run as pre-commit
would (the real pre-commit run is in test_precommit.py, marked slow)."""

from __future__ import annotations

import shlex
import subprocess
import sys

import yaml

from fixture_support import REPO

# TRL404's fix (insert the missing `optimizer.zero_grad()`) is unsafe; nothing here has a safe one.
MISSING_ZERO_GRAD = """\
import torch

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(4, 2), torch.randn(4, 1)) for _ in range(3)]
for x, y in batches:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""


def _hook_command(hook_id):
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    entry = next(h["entry"] for h in hooks if h["id"] == hook_id)
    words = shlex.split(entry)
    assert words[0] == "trainlint"
    return [sys.executable, "-m", "trainlint", *words[1:]]


def _run(command, project):
    return subprocess.run(
        [*command, "train.py"], cwd=project, capture_output=True, text=True, timeout=120
    )


def test_fix_hook_applies_no_unsafe_fix_whatever_the_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nunsafe-fixes = true\n")
    script = tmp_path / "train.py"
    script.write_text(MISSING_ZERO_GRAD)
    hook = _run(_hook_command("trainlint-fix"), tmp_path)
    assert "TRL404" in hook.stdout, hook.stdout + hook.stderr
    assert script.read_text() == MISSING_ZERO_GRAD
    # The configuration alone does apply it: the hook's command line is what keeps it out.
    _run([sys.executable, "-m", "trainlint", "check", "--fix"], tmp_path)
    assert "optimizer.zero_grad()" in script.read_text()
