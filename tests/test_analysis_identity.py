"""analysis/base/identity.py: aliases, the names that hold the same module as a name where it
is read (TRL405 finds `eval()` on any of them)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.identity import aliases
from trainlint.analysis.base.names import Names
from trainlint.analysis.base.scopes import Scopes
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def aliases_of_model(code: str):
    """aliases of `model` where the file's last call reads it."""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    read = list(ctx.nodes(cst.Call))[-1]
    return aliases("model", read, ctx.analysis(Scopes), ctx.analysis(Names))


@pytest.mark.parametrize(
    "code, expected",
    [
        ("model = generator\nmodel(x)\n", {"model", "generator"}),
        ("model = net.to(device)\nmodel(x)\n", {"model", "net"}),
        ("model = self.model\nmodel(x)\n", {"model", "self.model"}),
        # the module a DataParallel/DDP wrapper holds: the wrapper's eval() reaches its layers
        ("model = self.model.module\nmodel(x)\n", {"model", "self.model"}),
        (
            "if distributed:\n    model = self.model.module\nelse:\n    model = self.model\n"
            "model(x)\n",
            {"model", "self.model"},
        ),
        # one binding that is no alias: only the name itself
        ("if ema:\n    model = build()\nelse:\n    model = net\nmodel(x)\n", {"model"}),
        ("model = self.models[0]\nmodel(x)\n", {"model"}),
    ],
)
def test_aliases(code, expected):
    assert aliases_of_model(code) == expected
