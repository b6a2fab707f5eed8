"""trainlint's own types are checked: mypy, configured in pyproject.toml's [tool.mypy], reports no
error over src/trainlint. The test fails with mypy's list of errors."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from fixture_support import REPO


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (it is in the `test` extra: pip install -e '.[test]')",
)
def test_mypy_reports_no_error():
    # The files to check and the flags come from pyproject.toml, as for a contributor who runs
    # `python -m mypy` at the root; no cache is read or left in the checkout.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", f"--cache-dir={os.devnull}", "--no-error-summary"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    assert not errors, f"mypy reports {len(errors)} errors:\n" + "\n".join(errors)
    assert done.returncode == 0, done.stdout + done.stderr
