"""`trainlint check --watch`, run for real in a subprocess: each round is read off its output
(bounded waits for the "Watching for file changes." line, never a sleep), then Ctrl-C ends it.

watchfiles comes with the `test` extra (and the `watch` extra for users)."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trainlint.cli.watch import CLEAR_SCREEN

pytest.importorskip("watchfiles")  # the module's import is what --watch needs

BUGGY = 'import torch.nn as nn\nmodel = nn.DataParallel(nn.Linear(4, 2)).to(f"cuda:{args.gpu}")\n'
FIXED = 'import torch.nn as nn\nmodel = nn.DataParallel(nn.Linear(4, 2).to(f"cuda:{args.gpu}"))\n'
ROUND_END = "Watching for file changes."
WAIT = 120  # seconds: an upper bound for one round on a loaded machine, not an expectation


def _sigint_as_from_a_terminal() -> None:
    # A suite started as a background job (`pytest &`) runs with SIGINT ignored, and a child
    # inherits that: the watcher would then never see the Ctrl-C this test sends it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watcher:
    def __init__(self, cwd: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainlint", "check", "--watch", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_sigint_as_from_a_terminal,
        )
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the process ended

    def next_round(self) -> str:
        """Everything printed up to the end of the next round."""
        seen = []
        while True:
            line = self.lines.get(timeout=WAIT)
            assert line, "trainlint --watch ended early:\n" + "".join(seen)
            seen.append(line)
            if ROUND_END in line:
                return "".join(seen)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=WAIT)


@pytest.fixture
def project(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BUGGY)
    (tmp_path / "pkg" / "other.py").write_text("x = 1\n")
    return tmp_path


def test_watch_checks_again_after_each_change(project):
    watcher = Watcher(project, "--output-format", "concise", "--cache-dir", "cache", ".")
    try:
        first = watcher.next_round()
        assert first.startswith(CLEAR_SCREEN)
        assert "watch mode" in first and "pkg/train.py:2:9: TRL201" in first

        (project / "pkg" / "train.py").write_text(FIXED)
        second = watcher.next_round()
        assert CLEAR_SCREEN in second and "File change detected (train.py)" in second
        assert "All checks passed!" in second

        (project / "pkg" / "other.py").write_text(BUGGY)
        third = watcher.next_round()
        assert "pkg/other.py:2:9: TRL201" in third and "pkg/train.py" not in third.split(
            "detected"
        )[1].split("\n", 1)[1]

        # The configuration is read again each round.
        (project / "pyproject.toml").write_text('[tool.trainlint]\nignore = ["TRL201"]\n')
        fourth = watcher.next_round()
        assert "pyproject.toml" in fourth and "All checks passed!" in fourth
    finally:
        code = watcher.stop()
    assert code == 0
    # Rounds go through the per-file cache, as a check without --watch does.
    assert any((project / "cache").rglob("*"))


def test_watch_refuses_what_it_cannot_watch(project):
    done = subprocess.run(
        [sys.executable, "-m", "trainlint", "check", "--watch", "-", "--stdin-filename", "t.py"],
        cwd=project,
        input="",
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2 and "--watch cannot be used with standard input" in done.stderr
