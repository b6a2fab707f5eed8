"""analysis/loop/graphs.py: records_autograd_graphs, whether anything in a file can require grad
(and so hold an autograd graph), checked against what CPU PyTorch does with the same code."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.loop.steps import TrainingSteps
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def _context(code: str) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


def records(code: str) -> bool:
    ctx = _context(code)
    return ctx.analysis(TrainingSteps).records_autograd_graphs()


SCRATCH = """
import torch

class Scratch:
    def __init__(self):
        self.w = torch.zeros(3, 4).normal_(0.0, 0.1)

    def forward(self, x):
        return torch.sigmoid(x @ self.w.t())

    def backward(self, x, out, y):
        return ((out - y) * out * (1 - out)).t() @ x

model = Scratch()
total = 0.0
for step in range(3):
    x, y = torch.randn(5, 4), torch.rand(5, 3)
    out = model.forward(x)
    loss = torch.mean((out - y) ** 2)
    total += loss
    model.w -= 0.1 * model.backward(x, out, y)
"""


def test_hand_written_gradients_record_no_graph():
    assert not records(SCRATCH)


def test_hand_written_gradients_have_no_grad_fn_at_run_time():
    torch = pytest.importorskip("torch")
    scope: dict = {}
    exec(compile(SCRATCH, "scratch", "exec"), scope)  # the test's own code, not analysed code
    assert isinstance(scope["total"], torch.Tensor)
    assert scope["total"].grad_fn is None and not scope["total"].requires_grad
    assert scope["model"].w.grad_fn is None and not scope["model"].w.requires_grad


@pytest.mark.parametrize(
    "line",
    [
        "w = torch.zeros(3, requires_grad=True)",
        "w = torch.zeros(3).requires_grad_()",
        "layer = torch.nn.Linear(3, 3)",
        "p = torch.nn.Parameter(torch.zeros(3))",
        "model = torch.load('model.pt')",
        "import timm\nmodel = timm.create_model('resnet18')",
        "from torchvision import models\nmodel = models.resnet18()",
        "from mypackage.nets import build\nmodel = build()",
        "class Net(torch.nn.Module):\n    pass",
        "def run(model, x):\n    return model(x)",
        "loss = torch.zeros(3)\nloss.backward()",
        "from utils import *\nmodel = make_model()",
    ],
)
def test_sources_of_grad(line):
    assert records(f"import torch\n{line}\n")


@pytest.mark.parametrize(
    "line",
    [
        "x = torch.randn(3).normal_()\ny = torch.nn.functional.one_hot(torch.arange(3), 3)",
        "import numpy as np\nfrom torchvision import datasets\nds = datasets.MNIST('d')\n"
        "a = np.zeros(3)",
        "print(len(range(3)))",
    ],
)
def test_plain_tensor_code(line):
    assert not records(f"import torch\n{line}\n")


def numpy_element(code: str) -> bool:
    """numpy_element of the target of the file's last `+=`."""
    ctx = _context(code)
    target = list(ctx.nodes(cst.AugAssign))[-1].target
    return ctx.analysis(TrainingSteps).numpy_element(target)


@pytest.mark.parametrize(
    "code, expected",
    [
        # numpy converts what is stored (CPU PyTorch: `a[0] += loss` leaves a float64)
        ("import numpy as np\nlosses = np.zeros(3)\nlosses[0] += loss\n", True),
        ("import numpy\nlosses = numpy.full(3, 0.0)\nlosses[0] += loss\n", True),
        ("from numpy import zeros\nlosses = zeros(3)\nlosses[0] += loss\n", True),
        # a star import leaves `np` unresolved: the name is numpy's
        ("from fastai.imports import *\nlosses = np.zeros(3)\nlosses[0] += loss\n", True),
        # a torch tensor records the in-place add: it keeps the graph
        ("import torch\nlosses = torch.zeros(3)\nlosses[0] += loss\n", False),
        ("losses = [0.0] * 3\nlosses[0] += loss\n", False),
        # a binding that may be something else reaches the slot
        (
            "import numpy as np\nlosses = np.zeros(3)\nif reuse:\n    losses = []\n"
            "losses[0] += loss\n",
            False,
        ),
        # a whole name, an attribute's slot: not an element of a known array
        ("import numpy as np\nlosses = np.zeros(3)\nlosses += loss\n", False),
        ("import numpy as np\nself.losses = np.zeros(3)\nself.losses[0] += loss\n", False),
        ("import numpy as np\nnp = torch\nlosses = np.zeros(3)\nlosses[0] += loss\n", False),
        (
            "import numpy as np\nimport torch\nnp = torch\nlosses = np.zeros(3)\n"
            "losses[0] += loss\n",
            False,
        ),
    ],
)
def test_numpy_element(code, expected):
    assert numpy_element(code) is expected


def written_without_graph(code: str) -> bool:
    """Is the loss-keyed slot or attribute read by the file's last `append(...)` known to hold
    no graph (written by the file only with values that hold none)?"""
    ctx = _context(code)
    append = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func).endswith(".append")][-1]
    read = append.args[0].value
    return not list(ctx.analysis(TrainingSteps).argument_leaves(read, set()))


STEP = """
import torch
class Runner:
    def train(self, loader):
        values = []
        for x, y in loader:
            loss = self.criterion(self.model(x), y)
            loss.backward()
            {write}
            values.append({read})
"""


@pytest.mark.parametrize(
    "write, read, expected",
    [
        ('self.info["loss"] = loss.data.item()', 'self.info["loss"]', True),
        ("self.info['loss'] = loss.item()", 'self.info["loss"]', True),
        ('self.info["loss"] = loss', 'self.info["loss"]', False),
        ("self.loss_avg = loss.detach()", "self.loss_avg", True),
        ("self.loss_avg = loss", "self.loss_avg", False),
        # a slot the file never writes keeps its name's meaning
        ("pass", 'self.info["loss"]', False),
        # another slot than the one written
        ('self.info["acc"] = loss.item()', 'self.info["loss"]', False),
    ],
)
def test_loss_named_slot_written_without_graph(write, read, expected):
    assert written_without_graph(STEP.format(write=write, read=read)) is expected


def test_last_write_in_the_iteration_is_the_one_read():
    # another method stores a tensor in the same slot; the read follows this loop's own write
    code = STEP.format(write='self.info["loss"] = loss.item()', read='self.info["loss"]')
    test = '\n    def test(self, x, y):\n        self.info["loss"] = self.criterion(x, y)\n'
    assert written_without_graph(code + test)


def holds_no_graph(code: str) -> bool:
    """holds_no_graph of the value of the file's last assignment."""
    ctx = _context(code)
    value = list(ctx.nodes(cst.Assign))[-1].value
    return ctx.analysis(TrainingSteps).holds_no_graph(value)


HELPER = """
import torch
def batch_loss(criterion, out, y):
    loss = criterion(out, y)
    loss.backward()
    return {returned}
part, other = batch_loss(criterion, model(x), y)
"""


@pytest.mark.parametrize(
    "returned, expected",
    [
        ("loss.item(), None", True),
        ("loss.item(), (out.argmax(1) == y).sum().item()", True),
        ("loss.item(), True", True),
        ("loss, None", False),
        ("loss.item(), out", False),
    ],
)
def test_helper_pair_holds_no_graph(returned, expected):
    assert holds_no_graph(HELPER.format(returned=returned)) is expected
