"""nn.Module classes as plain data (analysis/project/modules.py) and DP/DDP wrap sites
(analysis/parallel/wraps.py): the facts TRL301 and TRL203 join across files."""

from __future__ import annotations

import json
import textwrap

import libcst as cst

from trainlint.analysis.parallel.wraps import Wraps
from trainlint.analysis.project.hierarchy import file_facts
from trainlint.analysis.project.modules import ALL, Modules
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


HEAD = """
import random
import torch
import torch.nn as nn
from .base import BaseHead
from .extra import Extra


class Head(BaseHead):
    def __init__(self, dims):
        super().__init__()
        self.class_embed = nn.Parameter(torch.zeros(dims, 512))
        self.fc = nn.Linear(dims, 10)
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(dims, elementwise_affine=False)
        self.blocks = nn.ModuleList([nn.Linear(dims, dims) for _ in range(3)])
        self.register_parameter("scale", nn.Parameter(torch.ones(1)))
        self.register_buffer("running", torch.zeros(1))
        self.add_module("extra", Extra(dims))
        self.frozen = nn.Linear(dims, dims).requires_grad_(False)
        self.backbone = nn.Conv2d(3, dims, 3)
        self.backbone.requires_grad_(False)
        self._init_layers()
        nn.init.normal_(self.class_embed)

    def _init_layers(self):
        self.aux = nn.Linear(4, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        if random.random() < 0.5:
            x = self.aux(x)
        return self.fc(self.drop(x)) * self.scale + self._helper(x)

    def _helper(self, x):
        return getattr(self, f"stage{1}")(x)
"""


def test_module_classes_are_plain_data():
    modules = context(HEAD).analysis(Modules)
    head = modules.classes["Head"]
    assert head.bases == [".base.BaseHead"]
    assert {name: attr.kind for name, attr in head.attrs.items()} == {
        "class_embed": "parameter",
        "fc": "module",
        "blocks": "container",
        "scale": "parameter",
        "extra": "call",
        "frozen": "module",
        "backbone": "module",
        "aux": "module",
    }
    assert head.attrs["frozen"].frozen and head.attrs["backbone"].frozen
    assert head.init_methods == {"__init__", "_init_layers"}
    forward = head.methods["forward"]
    assert {"blocks", "fc", "drop", "scale"} <= forward.reads
    assert "class_embed" not in head.reads()  # nn.init in __init__ is not a use
    assert forward.branch_reads == {"aux"} and "_helper" in forward.calls
    assert head.escapes == {"stage"} and head.has_forward
    json.dumps(modules.facts())  # plain data


def test_escapes_and_freezes_of_the_whole_module():
    ctx = context(
        """
        import torch.nn as nn


        class Frozen(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2)
                for p in self.parameters():
                    p.requires_grad = False


        class Walks(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2)

            def forward(self, x):
                device = next(self.parameters()).device
                return sum(m(x.to(device)) for m in self.children())
        """
    )
    classes = ctx.analysis(Modules).classes
    assert classes["Frozen"].frozen == {ALL}
    assert classes["Walks"].escapes == {""}


def test_wrap_sites_know_the_wrapped_class_and_the_ddp_options():
    ctx = context(
        """
        import os
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        import torch.nn as nn
        from models.head import Head


        class Net(nn.Module):
            pass


        def build_model():
            return Head(4)


        dist.init_process_group("nccl")
        model = build_model().to(int(os.environ["LOCAL_RANK"]))
        model = DDP(model, device_ids=[0], static_graph=cfg.static)
        other = DDP(Net())
        for p in model.module.backbone.parameters():
            p.requires_grad = False
        """
    )
    wraps = ctx.analysis(Wraps)
    assert [(s.kind, sorted(s.classes), s.options) for s in wraps.sites] == [
        ("DistributedDataParallel", ["models.head.Head"], {"static_graph": "unknown"}),
        ("DistributedDataParallel", ["<local>.Net"], {}),
    ]
    assert wraps.signals == {"a DistributedDataParallel wrap", "init_process_group", "LOCAL_RANK"}
    assert wraps.frozen == {"backbone"}
    assert wraps.finds_unused  # static_graph from the config: maybe on, never guessed off
    facts = file_facts(ctx)
    assert facts["imports"]["Head"] == "models.head.Head"
    json.dumps(facts)
