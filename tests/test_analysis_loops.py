"""analysis/loop/structure.py, loop/loaders.py and base/frameworks.py on real training code."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.frameworks import Frameworks
from trainlint.analysis.loop.structure import Loops
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


def sources(code: str):
    ctx = context(code)
    return ctx, ctx.analysis(Loops).batch_sources()


@pytest.mark.parametrize(
    "code, elements, roots, index",
    [
        ("for x, y in loader:\n    pass\n", {"x": (0,), "y": (1,)}, set(), set()),
        (
            "for i, (images, (boxes, labels)) in enumerate(train_loader):\n    pass\n",
            {"images": (0,), "boxes": (1, 0), "labels": (1, 1)},
            set(),
            {"i"},
        ),
        ("for batch in tqdm(loader, desc='train'):\n    pass\n", {}, {"batch"}, set()),
        (
            "pbar = tqdm(train_dataloader)\nfor step, batch in enumerate(pbar):\n    pass\n",
            {},
            {"batch"},
            {"step"},
        ),
        ("for img, *rest in self.val_dl:\n    pass\n", {"img": (0,), "rest": ("*",)}, set(), set()),
        (
            "from torch.utils.data import DataLoader\n"
            "dl = DataLoader(ds, batch_size=4)\nfor a, b in dl:\n    pass\n",
            {"a": (0,), "b": (1,)},
            set(),
            set(),
        ),
        (
            "def make(ds):\n    return torch.utils.data.DataLoader(ds)\n"
            "data = make(ds)\nfor a, b in data:\n    pass\n",
            {"a": (0,), "b": (1,)},
            set(),
            set(),
        ),
        (
            "def train(model, source: DataLoader):\n    for a, b in source:\n        pass\n",
            {"a": (0,), "b": (1,)},
            set(),
            set(),
        ),
        ("x, y = next(iter(test_loader))\n", {"x": (0,), "y": (1,)}, set(), set()),
        (
            "it = iter(loader)\nwhile True:\n    batch = next(it)\n",
            {},
            {"batch"},
            set(),
        ),
    ],
)
def test_batch_sources(code, elements, roots, index):
    _, found = sources(code)
    assert len(found) == 1
    (source,) = found
    assert source.elements == elements
    assert source.roots == roots
    assert source.index_names == index


@pytest.mark.parametrize(
    "code",
    [
        "for epoch in range(10):\n    pass\n",
        "for name, param in model.named_parameters():\n    pass\n",
        "for k, v in loader_kwargs.items():\n    pass\n",
        "for x in dataset:\n    pass\n",
        "for line in open('f'):\n    pass\n",
    ],
)
def test_not_batch_sources(code):
    _, found = sources(code)
    assert found == []


def test_calls_in_follows_helpers_and_branches():
    ctx = context("""
        def step(model, opt, loss):
            loss.backward()
            if True:
                opt.step()

        def train(model, loader, opt):
            for i, (x, y) in enumerate(loader):
                loss = model(x).sum()
                step(model, opt, loss)
                if (i + 1) % 4 == 0:
                    opt.zero_grad()
        """)
    loops = ctx.analysis(Loops)
    (loop,) = loops.training_loops()
    names = sorted(
        call.func.attr.value
        for call, via in loops.calls_in(loop.body)
        if isinstance(call.func, cst.Attribute)
    )
    assert names == ["backward", "step", "sum", "zero_grad"]
    via = {
        call.func.attr.value: [f.name.value for f in chain]
        for call, chain in loops.calls_in(loop.body)
        if isinstance(call.func, cst.Attribute)
    }
    assert via["backward"] == ["step"] and via["zero_grad"] == []


def test_under_no_grad():
    ctx = context("""
        import torch

        @torch.no_grad()
        def evaluate(model, x):
            return model(x)

        def other(model, x):
            with torch.inference_mode():
                a = model(x)
            with torch.set_grad_enabled(False):
                b = model(x)
            with torch.set_grad_enabled(True):
                c = model(x)
            return model(x)
        """)
    loops = ctx.analysis(Loops)
    calls = [
        c for c in ctx.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == "model"
    ]
    assert [loops.under_no_grad(c) for c in calls] == [True, True, True, False, False]


@pytest.mark.parametrize(
    "code, framework",
    [
        (
            "import lightning as L\nclass M(L.LightningModule):\n"
            "    def training_step(self, batch, i):\n        x, y = batch\n",
            "lightning",
        ),
        (
            "import pytorch_lightning as pl\nclass M(pl.LightningModule):\n"
            "    def training_step(self, batch, i):\n        x, y = batch\n",
            "lightning",
        ),
        (
            "from accelerate import Accelerator\ndef main():\n    accelerator = Accelerator()\n"
            "    model, loader = accelerator.prepare(model, loader)\n    x, y = batch\n",
            "accelerate",
        ),
        (
            "from transformers import Trainer\nclass T(Trainer):\n"
            "    def compute_loss(self, model, inputs):\n        x, y = batch\n",
            "transformers",
        ),
        (
            "import torch\ntorch.set_default_device('cuda')\nx, y = batch\n",
            "torch.set_default_device",
        ),
        (
            "import torch\nwith torch.device('cuda'):\n    x, y = batch\n",
            "torch.device context",
        ),
        (
            "import deepspeed\ndef main():\n"
            "    engine, *_ = deepspeed.initialize(model=m)\n    x, y = batch\n",
            "deepspeed",
        ),
    ],
)
def test_framework_managed(code, framework):
    ctx = context(code)
    target = [n for n in ctx.nodes(cst.Name) if n.value == "batch"][-1]
    assert ctx.analysis(Frameworks).managed(target) == framework


def test_plain_script_is_not_managed():
    ctx = context("import torch\nfor x, y in loader:\n    out = model(x.cuda())\n")
    target = ctx.nodes(cst.Call)[-1]
    assert ctx.analysis(Frameworks).managed(target) is None
