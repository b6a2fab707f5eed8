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


def test_builtin_typing_and_subscripted_bases_are_named():
    ctx = context(
        """
        import abc
        from typing import Generic, TypeVar
        import torch.nn as nn

        T = TypeVar("T")
        dict = nn.ModuleDict


        class A(nn.Module, object, abc.ABC, Generic[T]):
            pass


        class B(dict):
            pass


        class C(make_base()):
            pass
        """
    )
    classes = ctx.analysis(Modules).classes
    assert classes["A"].bases == ["torch.nn.Module", "builtins.object", "abc.ABC", "typing.Generic"]
    assert classes["B"].bases == ["torch.nn.ModuleDict"]  # rebound in the file: not the builtin
    assert classes["C"].bases == ["?"]


def test_star_imports_and_all_are_facts():
    ctx = context(
        """
        from .heads import *
        from . import *
        __all__ = ["DETRHead"]
        __all__ += ["BaseHead"]
        __all__.append("Mixin")
        """
    )
    facts = file_facts(ctx)
    assert facts["star_imports"] == [".heads", "."]
    assert facts["exports"] == ["DETRHead", "BaseHead", "Mixin"]
    computed = context("from .a import names\n__all__ = list(names)\n")
    assert file_facts(computed)["exports"] is None
    assert file_facts(context("x = 1\n"))["exports"] is None


def test_find_unused_parameters_read_from_configuration():
    ctx = context(
        """
        import argparse
        from mmcv import Config
        from torch.nn.parallel import DistributedDataParallel as DDP

        parser = argparse.ArgumentParser()
        parser.add_argument("--find-unused-parameters", action="store_true")
        parser.add_argument("--static", dest="static_graph", default=True)
        args = parser.parse_args()
        cfg = Config.fromfile(args.config)
        yaml_cfg = load_yaml(args.config)

        find_unused = cfg.get("find_unused_parameters", False)
        a = DDP(model, find_unused_parameters=find_unused)
        b = DDP(model, find_unused_parameters=args.find_unused_parameters)
        c = DDP(model, static_graph=args.static_graph)
        d = DDP(model, find_unused_parameters=yaml_cfg.get("find_unused_parameters", False))
        e = DDP(model, find_unused_parameters=getattr(cfg, "find_unused_parameters", None))
        """
    )
    sites = ctx.analysis(Wraps).ddp_sites()
    assert [site.options for site in sites] == [
        {"find_unused_parameters": "config"},
        {"find_unused_parameters": "config"},
        {"static_graph": "config"},
        {"find_unused_parameters": "unknown"},  # a YAML dict: its source is not shown
        {"find_unused_parameters": "config"},
    ]
    a, b, c, _, e = (site.settings for site in sites)
    assert a["find_unused_parameters"]["source"] == "mm"
    assert a["find_unused_parameters"]["default"] is False
    assert b["find_unused_parameters"]["source"] == "argparse"
    assert b["find_unused_parameters"]["flags"] == ["--find-unused-parameters"]
    assert b["find_unused_parameters"]["default"] is False
    assert c["static_graph"]["default"] is True
    assert e["find_unused_parameters"]["default"] is False
    # Config reads are decided in the project phase, never counted as "tolerates" per file.
    assert ctx.analysis(Wraps).finds_unused is True  # the YAML read may be True


def test_rebinding_through_identity_calls_keeps_the_wrapper():
    from trainlint.analysis.parallel.parallel import Parallel

    ctx = context(
        """
        import torch
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model = model.to(device).train()
        keep = model
        compiled = torch.compile(model)
        print(keep, compiled)
        """
    )
    parallel = ctx.analysis(Parallel)
    printed = [n for n in ctx.nodes(cst.Call) if getattr(n.func, "value", None) == "print"][0]
    keep, compiled = (arg.value for arg in printed.args)
    assert parallel.wrapper_state(keep, printed).every
    assert not parallel.wrapper_state(compiled, printed).some


def test_an_option_read_from_another_namespace_is_not_the_command_line():
    ctx = context(
        """
        import argparse
        from torch.nn.parallel import DistributedDataParallel as DDP

        def main(opts):
            cfg = load_yaml(opts.config)
            a = DDP(model, find_unused_parameters=cfg.find_unused_parameters)
            b = DDP(model, find_unused_parameters=opts.find_unused_parameters)

        parser = argparse.ArgumentParser()
        parser.add_argument("--find_unused_parameters", action="store_true")
        main(parser.parse_args())
        """
    )
    a, b = ctx.analysis(Wraps).ddp_sites()
    assert a.options == {"find_unused_parameters": "unknown"}  # the YAML config may set it
    assert b.options == {"find_unused_parameters": "config"}


def test_registrations_see_through_identity_calls():
    ctx = context(
        """
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.SyncBatchNorm.convert_sync_batchnorm(
                    nn.Sequential(nn.Conv2d(3, 8, 3))
                )
                self.fc = nn.Linear(8, 2).cuda().train()
                self.aux = nn.Linear(8, 2).requires_grad_(False)
                self.compiled = torch.compile(nn.Linear(8, 2))
        """
    )
    attrs = ctx.analysis(Modules).classes["Net"].attrs
    assert attrs["body"].kind == "container"
    assert attrs["fc"].kind == "module"
    assert attrs["aux"].frozen
    assert "compiled" not in attrs  # an OptimizedModule: not known to own these parameters


def test_attributes_kept_straight_from_init_parameters():
    from trainlint.analysis.project.modules import attributes_from_init

    code = textwrap.dedent(
        """
        class Consensus(nn.Module):
            def __init__(self, segments, backbone, head=None, *, scale=1.0):
                super().__init__()
                self.segments = segments
                self.backbone = backbone
                self.head = head
                self.scale = scale
                self.width = segments * 2

            def reset(self, head):
                self.head = head
        """
    )
    cls = cst.parse_module(code).body[0]
    assert isinstance(cls, cst.ClassDef)
    # `head` is set again by reset(); `scale` is keyword-only; `width` is computed.
    assert attributes_from_init(cls) == {"segments": [0, "segments"], "backbone": [1, "backbone"]}
