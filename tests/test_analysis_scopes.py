"""analysis/base/scopes.py: which bindings of a name reach a read (`Scopes.lookup`), the
question every flow in the analysis layer asks before it follows a value."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def reaching_lines(code: str, marker: str = "model(z)") -> list:
    """The lines of the bindings of `z` that reach the `z` read in the line holding `marker`."""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    line = next(n for n, text in enumerate(code.splitlines(), 1) if marker in text)
    read = next(
        name
        for name in ctx.nodes(cst.Name)
        if name.value == "z"
        and ctx.span(name)[0] == line
        and type(ctx.parent(name)) is cst.Arg
    )
    return sorted(ctx.span(b.node)[0] for b in ctx.scopes.lookup("z", read))


@pytest.mark.parametrize(
    "code, expected",
    [
        pytest.param(
            """
            for x in loader:
                z = torch.randn(2, 4)
                z = Variable(z).to(device)
                model(z)
            """,
            [4],
            id="rebound-earlier-in-the-same-loop-body",
        ),
        pytest.param(
            """
            def train(loader):
                for x in loader:
                    with torch.no_grad():
                        z = torch.randn(2, 4)
                        z = z.cuda()
                        model(z)
            """,
            [6],
            id="rebound-in-the-same-with-block",
        ),
        pytest.param(
            """
            for x in loader:
                z = torch.randn(2, 4)
                if use_cuda:
                    z = z.cuda()
                model(z)
            """,
            [3, 5],
            id="rebound-under-a-condition-both-reach",
        ),
        pytest.param(
            """
            z = torch.randn(2, 4)
            for x in loader:
                model(z)
                z = z.cuda()
            """,
            [2, 5],
            id="rebound-later-in-the-loop-reaches-the-next-iteration",
        ),
        pytest.param(
            """
            z = torch.randn(2, 4)
            try:
                z = z.cuda()
            except RuntimeError:
                model(z)
            """,
            [2, 4],
            id="a-try-body-binding-may-not-have-run-in-its-handler",
        ),
        pytest.param(
            """
            z = torch.randn(2, 4)
            for x in loader:
                z = z.cuda()
            else:
                model(z)
            """,
            [2, 4],
            id="a-loop-body-binding-may-not-have-run-in-its-else",
        ),
        pytest.param(
            """
            z = torch.randn(2, 4)
            if n_gpu > 1:
                z = nn.DataParallel(z)
            else:
                model(z)
            """,
            [2],
            id="an-if-arm-binding-has-not-run-in-its-else",
        ),
        pytest.param(
            """
            z = torch.randn(2, 4)
            if n_gpu > 1:
                z = nn.DataParallel(z)
            elif n_gpu == 1:
                z = z.cuda()
            else:
                model(z)
            """,
            [2],
            id="no-earlier-arm-of-an-elif-chain-has-run-in-its-else",
        ),
        pytest.param(
            """
            z = torch.randn(2, 4)
            for x in loader:
                if x is None:
                    z = z.cuda()
                else:
                    model(z)
            """,
            [2, 5],
            id="in-a-loop-the-other-arm-ran-in-an-earlier-iteration",
        ),
    ],
)
def test_bindings_that_reach_a_read(code, expected):
    assert reaching_lines(code) == expected
