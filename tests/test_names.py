"""Qualified names through imports and aliases (analysis/base/names.py), and the scopes under
them."""

from __future__ import annotations

import libcst as cst
import pytest

from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str) -> FileContext:
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


def call_names(code: str):
    """Qualified names of the function of every call named `target(...)`-ish: last call wins."""
    ctx = context(code)
    calls = [c for c in ctx.nodes(cst.Call)]
    return ctx, calls


@pytest.mark.parametrize(
    "code",
    [
        "import torch.nn as nn\nx = nn.DataParallel(m)\n",
        "from torch import nn\nx = nn.DataParallel(m)\n",
        "from torch.nn import DataParallel as DP\nx = DP(m)\n",
        "import torch\nx = torch.nn.parallel.DataParallel(m)\n",
        "import torch\nx = torch.nn.parallel.data_parallel.DataParallel(m)\n",
        "from torch.nn.parallel.data_parallel import DataParallel\nx = DataParallel(m)\n",
        "import torch.nn.parallel\nx = torch.nn.DataParallel(m)\n",
        "from torch.nn import *\nx = DataParallel(m)\n",
        "import torch.nn as nn\nWrap = nn.DataParallel\nx = Wrap(m)\n",
        "def f(m):\n    from torch.nn import DataParallel\n    return DataParallel(m)\n",
        "import torch.nn as nn\nclass T:\n    def f(self, m):\n        return nn.DataParallel(m)\n",
    ],
)
def test_dataparallel_spellings_resolve_to_one_name(code):
    ctx, calls = call_names(code)
    assert ctx.names.is_(calls[-1].func, "torch.nn.DataParallel"), ctx.names.qualified(
        calls[-1].func
    )


@pytest.mark.parametrize(
    "code",
    [
        "class DataParallel:\n    pass\nx = DataParallel(m)\n",
        "def DataParallel(m):\n    return m\nx = DataParallel(m)\n",
        "import torch.nn as nn\nnn = object()\nx = nn.DataParallel(m)\n",
        "x = DataParallel(m)\n",
        "from mylib import DataParallel\nx = DataParallel(m)\n",
        "def f(DataParallel):\n    return DataParallel(m)\n",
        "def f(m):\n    from torch.nn import DataParallel\n\nx = DataParallel(m)\n",
    ],
)
def test_lookalikes_are_not_torch(code):
    ctx, calls = call_names(code)
    assert not ctx.names.is_(calls[-1].func, "torch.nn.DataParallel"), ctx.names.qualified(
        calls[-1].func
    )


def test_ddp_and_friends_canonical_names():
    code = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "import torch.nn.parallel.distributed as dist_mod\n"
        "from torch.utils.data.distributed import DistributedSampler\n"
        "from torch.utils.data.dataloader import DataLoader\n"
        "a = DDP(m)\nb = dist_mod.DistributedDataParallel(m)\nc = DistributedSampler(d)\n"
        "e = DataLoader(d)\n"
    )
    ctx, calls = call_names(code)
    names = [sorted(ctx.names.qualified(c.func)) for c in calls]
    assert names == [
        ["torch.nn.parallel.DistributedDataParallel"],
        ["torch.nn.parallel.DistributedDataParallel"],
        ["torch.utils.data.DistributedSampler"],
        ["torch.utils.data.DataLoader"],
    ]


def test_relative_import_keeps_its_dots():
    ctx, calls = call_names("from .models.head import DetrHead\nh = DetrHead()\n")
    assert ctx.names.qualified(calls[0].func) == frozenset({".models.head.DetrHead"})


def test_conditional_imports_give_every_candidate():
    code = (
        "try:\n    from apex.parallel import DistributedDataParallel as DDP\n"
        "except ImportError:\n    from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "m = DDP(model)\n"
    )
    ctx, calls = call_names(code)
    assert ctx.names.qualified(calls[-1].func) == frozenset(
        {"apex.parallel.DistributedDataParallel", "torch.nn.parallel.DistributedDataParallel"}
    )


def test_imports_query():
    ctx = context("import lightning.pytorch as pl\nfrom accelerate import Accelerator\n")
    assert ctx.names.imports("lightning")
    assert ctx.names.imports("accelerate")
    assert not ctx.names.imports("torch")


def test_scopes_class_body_is_skipped_by_methods():
    code = (
        "x = 'module'\n" "class A:\n" "    x = 'class'\n" "    def f(self):\n" "        return x\n"
    )
    ctx = context(code)
    name = [n for n in ctx.nodes(cst.Name) if n.value == "x"][-1]
    (binding,) = ctx.scopes.lookup("x", name)
    assert binding.scope.kind == "module"


def test_scopes_defaults_evaluate_outside_the_function():
    code = "device = 'cuda:1'\ndef f(device=device):\n    return device\n"
    ctx = context(code)
    default = ctx.nodes(cst.Param)[0].default
    (binding,) = ctx.scopes.lookup("device", default)
    assert binding.kind == "assign"
    returned = [n for n in ctx.nodes(cst.Name) if n.value == "device"][-1]
    (binding,) = ctx.scopes.lookup("device", returned)
    assert binding.kind == "param"


def test_global_declaration_reaches_module_binding():
    code = "model = None\ndef build():\n    global model\n    model = make()\n    return model\n"
    ctx = context(code)
    returned = [n for n in ctx.nodes(cst.Name) if n.value == "model"][-1]
    kinds = sorted(b.kind for b in ctx.scopes.lookup("model", returned))
    assert kinds == ["assign"]


def test_straight_line_rebinding_shadows_the_import():
    code = "import torch.nn as nn\nnn = object()\nx = nn.DataParallel(m)\n"
    ctx, calls = call_names(code)
    assert ctx.names.qualified(calls[-1].func) == frozenset({"<local>.nn.DataParallel"})


def test_loop_carried_binding_reaches_the_next_iteration():
    code = (
        "hidden = model.init_hidden(bs)\n"
        "for data, targets in loader:\n"
        "    output, hidden = model(data, hidden)\n"
    )
    ctx = context(code)
    use = [n for n in ctx.nodes(cst.Name) if n.value == "hidden"][-1]
    kinds = sorted(b.kind for b in ctx.scopes.lookup("hidden", use))
    assert kinds == ["assign", "unpack"]


@pytest.mark.parametrize(
    "code, unbound",
    [
        ("out = model(noisy_data)\n", True),  # an exercise's blank
        ("noisy_data = x + 1\nout = model(noisy_data)\n", False),
        ("def f():\n    return model(noisy_data)\nnoisy_data = 1\n", False),  # a later cell
        ("out = len(noisy_data)\n", True),
        ("out = len(xs)\n", True),
        ("out = print(len)\n", False),  # builtins
        ("display(get_ipython)\n", False),  # IPython's namespace
        ("from helpers import *\nout = model(noisy_data)\n", False),  # may come from there
    ],
)
def test_unbound_names(code, unbound):
    ctx = context(code)
    name = [
        n for n in ctx.nodes(cst.Name) if n.value in ("noisy_data", "xs", "len", "get_ipython")
    ][-1]
    assert ctx.scopes.unbound(name) is unbound


def test_method_call_on_an_instance_of_a_class_of_the_file():
    from trainlint.analysis.base.callgraph import CallGraph

    code = (
        "class Base:\n    def fit(self, loader):\n        pass\n"
        "class Trainer(Base):\n    def step(self):\n        pass\n"
        "t = Trainer()\nt.fit(loader)\nt.step()\nt.missing()\n"
        "u = Trainer() if c else Other()\nu.fit(loader)\n"
    )
    ctx = context(code)
    graph = ctx.analysis(CallGraph)
    callees = {
        ctx.code(call.func): graph.callee(call)
        for call in ctx.nodes(cst.Call)
        if type(call.func) is cst.Attribute
    }
    assert callees["t.fit"].name.value == "fit"  # inherited from a same-file base
    assert callees["t.step"].name.value == "step"
    assert callees["t.missing"] is None
    assert callees["u.fit"] is None  # not one known class


def test_bound_value_of_unpacked_names():
    from trainlint.analysis.base.scopes import bound_value

    code = "data, (target, w) = Variable(x, volatile=True), (y, 1)\nuse(data, target, w)\n"
    ctx = context(code)
    use = [n for n in ctx.nodes(cst.Call) if ctx.code(n.func) == "use"][0]
    values = {
        arg.value.value: [ctx.code(bound_value(b)) for b in ctx.scopes.lookup(arg.value.value, use)]
        for arg in use.args
    }
    assert values == {"data": ["Variable(x, volatile=True)"], "target": ["y"], "w": ["1"]}
    star = context("a, *b = xs\nuse(a)\n")
    (binding,) = star.scopes.lookup("a", star.nodes(cst.Call)[0])
    assert bound_value(binding) is None
