"""analysis/device/cuda_only.py: which code of a file can only run on a machine with CUDA."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.device.cuda_only import CudaOnly
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def load_is_cuda_only(code: str) -> bool:
    """Is the file's one `torch.load(...)` call CUDA-only?"""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    loads = [
        call
        for call in ctx.nodes(cst.Call)
        if type(call.func) is cst.Attribute and call.func.attr.value == "load"
    ]
    assert len(loads) == 1
    return ctx.analysis(CudaOnly).only_on_cuda(loads[0])


@pytest.mark.parametrize(
    "code",
    [
        # a bare .cuda() in the same function, before or after the load
        """
        import torch
        def main(path):
            model = Net()
            model.load_state_dict(torch.load(path))
            model.cuda().eval()
        """,
        # at import time (a notebook's cells, a flat script)
        """
        import torch
        net = Net().cuda()
        state = torch.load("ckpt.pt")
        """,
        # the __main__ block of a script
        """
        import torch
        if __name__ == "__main__":
            torch.set_default_tensor_type("torch.cuda.FloatTensor")
            ckpt = torch.load("run/ckpt.tar")
        """,
        # every caller of the loading helper is CUDA-only
        """
        import torch
        def restore(model, path):
            model.load_state_dict(torch.load(path))
        def train(args):
            model = Net().cuda()
            restore(model, args.resume)
        def main(args):
            train(args)
        """,
        # a hard-coded first GPU, through a name
        """
        import torch
        device = torch.device("cuda")
        def run(path):
            model = Net().to(device)
            model.load_state_dict(torch.load(path))
        """,
        # a method of a class whose __init__ moves to the GPU
        """
        import torch
        class Solver:
            def __init__(self):
                self.G = Generator().cuda()
            def restore(self, path):
                self.G.load_state_dict(torch.load(path))
        """,
        # legacy CUDA tensor types
        """
        import torch
        def run(path):
            noise = torch.cuda.FloatTensor(16, 100).normal_()
            return torch.load(path)
        """,
        # .cuda(0) is the first GPU
        """
        import torch
        model = Net().cuda(0)
        sd = torch.load("w.pth")
        """,
        # CUDA_VISIBLE_DEVICES remaps the chosen GPU to cuda:0
        """
        import os, torch
        os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu
        model = Net().cuda()
        state = torch.load(args.resume)
        """,
    ],
)
def test_cuda_only(code):
    assert load_is_cuda_only(code)


@pytest.mark.parametrize(
    "code",
    [
        # `self.cuda(...)` is the class's own method (it moves to the configured device)
        """
        import torch
        class Trainer:
            def load(self, path):
                self.model.load_state_dict(torch.load(path))
                self.cuda()
            def cuda(self):
                self.model.to(self.config.DEVICE)
        """,
        # the move is optional
        """
        import torch
        def main(args, path):
            model = Net()
            model.load_state_dict(torch.load(path))
            if args.cuda:
                model.cuda()
        """,
        # a device that falls back to the CPU
        """
        import torch
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = Net().to(device)
        state = torch.load("ckpt.pt")
        """,
        # a hard-coded device bound only on one branch
        """
        import torch
        if args.gpu:
            device = "cuda"
        def run(path):
            model = Net().to(device)
            return torch.load(path)
        """,
        # try/except around the move: a CPU machine goes on without it
        """
        import torch
        try:
            model = Net().cuda()
        except RuntimeError:
            model = Net()
        state = torch.load("ckpt.pt")
        """,
        # the helper is also called where no GPU is needed
        """
        import torch
        def restore(model, path):
            model.load_state_dict(torch.load(path))
        def train(args):
            model = Net().cuda()
            restore(model, args.resume)
        def predict(args):
            model = Net()
            restore(model, args.weights)
        """,
        # nothing in the file calls the loading helper
        """
        import torch
        def restore(model, path):
            model.load_state_dict(torch.load(path))
        def train(model):
            model.cuda()
        """,
        # the GPU is chosen: a checkpoint may hold cuda:1 tensors
        """
        import torch
        model = Net().cuda(args.gpu)
        state = torch.load(args.resume)
        """,
        # a literal second GPU
        """
        import torch
        model = Net().cuda()
        aux = Aux().to("cuda:1")
        state = torch.load("ckpt.pt")
        """,
        # one process per GPU: every rank loads onto the GPU the checkpoint names
        """
        import torch, torch.distributed as dist
        dist.init_process_group("nccl")
        model = Net().cuda()
        state = torch.load("ckpt.pt")
        """,
        """
        import os, torch
        local_rank = int(os.environ["LOCAL_RANK"])
        model = Net().cuda()
        state = torch.load("ckpt.pt")
        """,
        # the __main__ block's move does not cover an importable function nobody calls
        """
        import torch
        def load(path):
            return torch.load(path)
        if __name__ == "__main__":
            Net().cuda()
        """,
        # after a bare return, the move never runs
        """
        import torch
        def run(path):
            state = torch.load(path)
            return state
            model.cuda()
        """,
        # a function parameter's default is only a default
        """
        import torch
        def run(path, device="cuda"):
            model = Net().to(device)
            return torch.load(path)
        """,
    ],
)
def test_not_cuda_only(code):
    assert not load_is_cuda_only(code)
