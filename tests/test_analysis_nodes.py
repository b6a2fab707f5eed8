"""analysis/base/nodes.py: bound_on_every_path, whether every path from a loop's start to a
statement binds a name first (TRL401's accumulator that is re-bound each iteration)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.names import dotted_targets
from trainlint.analysis.base.nodes import bound_on_every_path
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def rebound(body: str) -> bool:
    """Is `loss` bound on every path through the loop before its `loss += extra`?"""
    code = "for x, y in loader:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    loop = next(iter(ctx.nodes(cst.For)))
    accumulation = next(iter(ctx.nodes(cst.AugAssign)))

    def binds(small: cst.CSTNode) -> bool:
        return type(small) is cst.Assign and any(
            "loss" in dotted_targets(t.target) for t in small.targets
        )

    return bound_on_every_path(ctx, accumulation, loop, binds)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("loss = f(x)\nloss += extra\n", True),
        ("loss, aux = f(x)\nloss += extra\n", True),
        ("if a:\n    loss = f(x)\nelse:\n    loss = g(x)\nloss += extra\n", True),
        (
            "if a:\n    loss = f(x)\nelif b:\n    loss = g(x)\nelse:\n    raise ValueError\n"
            "loss += extra\n",
            True,
        ),
        ("if a:\n    loss = f(x)\nelse:\n    continue\nloss += extra\n", True),
        ("if a: loss = f(x)\nelse: loss = g(x)\nloss += extra\n", True),
        ("with ctx():\n    loss = f(x)\n    if b:\n        loss += extra\n", True),
        ("try:\n    loss = f(x)\nexcept E:\n    loss = g(x)\nloss += extra\n", True),
        # a path that keeps the previous iteration's value
        ("if a:\n    loss = f(x)\nloss += extra\n", False),
        ("if a:\n    loss = f(x)\nelif b:\n    loss = g(x)\nloss += extra\n", False),
        ("for part in parts:\n    loss = f(part)\nloss += extra\n", False),
        ("try:\n    loss = f(x)\nexcept E:\n    pass\nloss += extra\n", False),
        ("loss += extra\nloss = f(x)\n", False),
        ("if a:\n    raise ValueError\nloss += extra\n", False),
    ],
)
def test_bound_on_every_path(body, expected):
    assert rebound(body) is expected
