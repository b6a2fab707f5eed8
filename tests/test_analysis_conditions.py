"""Branch conditions (analysis/base/conditions.py): which two sites can never run together."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.conditions import Conditions
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def exclusive(code: str) -> bool:
    """Are the calls `a()` and `b()` of `code` exclusive?"""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    calls = {
        call.func.value: call
        for call in ctx.nodes(cst.Call)
        if type(call.func) is cst.Name and call.func.value in ("a", "b")
    }
    return ctx.analysis(Conditions).exclusive(calls["a"], calls["b"])


@pytest.mark.parametrize(
    "code",
    [
        "if x:\n    a()\nelse:\n    b()\n",
        "if RANK == -1:\n    a()\nif RANK != -1:\n    b()\n",
        "if cuda and RANK == -1 and n > 1:\n    a()\n"
        "if sync and cuda and RANK != -1:\n    b()\n",
        "if args.mode == 'dp':\n    a()\nif args.mode == \"ddp\":\n    b()\n",
        "if args.ddp:\n    a()\nif not args.ddp:\n    b()\n",
        "if not (rank != 0):\n    a()\nif rank != 0:\n    b()\n",
        "if rank == 0:\n    a()\nif rank == 0 or other:\n    pass\nelse:\n    b()\n",
    ],
)
def test_exclusive(code):
    assert exclusive(code)


@pytest.mark.parametrize(
    "code",
    [
        "a()\nb()\n",
        "if x:\n    a()\nif y:\n    b()\n",
        "if RANK == -1:\n    a()\nRANK = 0\nif RANK != -1:\n    b()\n",  # reassigned
        "if rank == 0 or debug:\n    a()\nif rank != 0:\n    b()\n",  # `or`: nothing sure
        "if f() == 1:\n    a()\nif f() != 1:\n    b()\n",  # calls may change
        "if n == 1:\n    a()\nif n == 1.0:\n    b()\n",  # the same value
        "if x:\n    a()\n    if y:\n        b()\n",
    ],
)
def test_not_exclusive(code):
    assert not exclusive(code)
