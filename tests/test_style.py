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


def test_exact_node_type_checks_are_isinstance_checks():
    """The analyses test libcst nodes with `type(node) is cst.Call` (isinstance on a libcst
    class goes through ABCMeta, millions of times a run). That equals isinstance only while no
    concrete libcst node class has subclasses: a libcst release that adds one fails here."""
    import inspect

    import libcst as cst

    with_subclasses = [
        name
        for name, obj in vars(cst).items()
        if inspect.isclass(obj)
        and issubclass(obj, cst.CSTNode)
        and not inspect.isabstract(obj)
        and not name.startswith("Base")
        and obj.__subclasses__()
    ]
    assert with_subclasses == []
