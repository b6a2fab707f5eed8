"""This repository's own code follows its flake8 settings (setup.cfg)."""

from __future__ import annotations

import subprocess
import sys

from fixture_support import REPO


def test_flake8_is_clean_on_our_own_code():
    folders = [name for name in ("src", "tests", "benchmarks") if (REPO / name).is_dir()]
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "E,F,W,C90", *folders],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
