"""This repository's own code follows its flake8 settings (setup.cfg)."""

from __future__ import annotations

import subprocess
import sys

from fixture_support import REPO


def test_flake8_is_clean_on_our_own_code():
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "E,F,W,C90", "src", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
