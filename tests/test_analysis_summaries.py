"""analysis/loop/summaries.py: what a function returns (a graph tensor, a holder, plain values,
its own argument) and what it keeps, as the callers of TRL401 and TRL303 read it."""

from __future__ import annotations

import textwrap

import libcst as cst

from trainlint.analysis.base.scopes import Scopes
from trainlint.analysis.loop.loaders import LoaderFlow, is_torch_dataloader
from trainlint.analysis.loop.summaries import FunctionSummaries
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def context(code: str) -> FileContext:
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    return FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())


def summaries(code: str):
    return context(code).analysis(FunctionSummaries).all()


def test_step_helper_that_backpropagates_returns_its_loss_tensor():
    found = summaries(
        """
        def train_step(model, batch, optimizer, criterion):
            x, y = batch
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss
        """
    )
    assert found["train_step"]["returns"] == "tensor"
    assert found["train_step"]["backward"] is True


def test_item_and_no_grad_returns_are_plain():
    found = summaries(
        """
        import torch

        def train_step(model, batch, criterion):
            loss = criterion(model(batch[0]), batch[1])
            loss.backward()
            return loss.item()

        @torch.no_grad()
        def evaluate(model, batch, criterion):
            out = model(batch[0])
            return {"loss": criterion(out, batch[1]), "acc": (out.argmax(1) == batch[1]).float()}
        """
    )
    assert found["train_step"]["returns"] == "plain"
    assert found["evaluate"]["returns"] == "plain"


def test_output_dict_with_the_loss_is_a_holder_without_backward():
    found = summaries(
        """
        import torch.nn.functional as F

        def training_step(model, batch):
            logits = model(batch[0])
            loss = F.cross_entropy(logits, batch[1])
            return {"loss": loss, "logits": logits}
        """
    )
    assert found["training_step"]["returns"] == "holder"
    assert "backward" not in found["training_step"]


def test_unknown_and_mixed_returns_have_no_kind():
    found = summaries(
        """
        import torch.nn.functional as F

        def maybe(model, batch, skip):
            if skip:
                return None
            return F.cross_entropy(model(batch[0]), batch[1])

        def wrapped(model, batch):
            return postprocess(F.cross_entropy(model(batch[0]), batch[1]))
        """
    )
    # (a summary that knows nothing beyond the parameters is left out of the table)
    assert "returns" not in found.get("maybe", {})
    assert "returns" not in found.get("wrapped", {})


def test_a_function_returning_its_argument_keeps_identity():
    found = summaries(
        """
        def announce(loader, name):
            print(name, len(loader))
            return loader

        def rebinds(loader):
            loader = iter(loader)
            return loader
        """
    )
    assert found["announce"]["returns"] == "param:0"
    assert "returns" not in found.get("rebinds", {})


def test_meter_method_keeps_its_argument_values_on_self():
    found = summaries(
        """
        class Meter:
            def __init__(self):
                self.sums = {}
                self.last = None

            def update(self, losses, n=1):
                for name, value in losses.items():
                    self.sums[name] = self.sums.get(name, 0.0) + value * n

            def update_values(self, losses):
                for name, value in losses.items():
                    self.sums[name] = self.sums.get(name, 0.0) + value.item()

            def remember(self, loss):
                self.last = loss
        """
    )
    assert found["Meter.update"]["params"] == ["losses", "n"]
    # `value * n` keeps `n` too when it is a tensor: the caller's argument decides
    assert found["Meter.update"]["keeps"] == {"0": "self.sums", "1": "self.sums"}
    assert "keeps" not in found.get("Meter.update_values", {})
    assert "keeps" not in found.get("Meter.remember", {})  # one value, replaced: nothing grows


def test_function_keeping_into_another_argument():
    found = summaries(
        """
        def accumulate(totals, losses):
            for key, value in losses.items():
                totals[key] += value
        """
    )
    assert found["accumulate"]["keeps"] == {"1": "param:0"}


def test_a_name_read_in_its_own_rebinding_reaches_the_earlier_binding():
    ctx = context(
        """
        loader = make()
        loader = wrap(loader)
        """
    )
    scopes = ctx.analysis(Scopes)
    read = [n for n in ctx.nodes(cst.Name) if n.value == "loader"][-1]
    (binding,) = scopes.lookup("loader", read)
    assert ctx.code(binding.value) == "make()"


def test_loader_kept_in_a_dict_is_read_back_by_its_key():
    ctx = context(
        """
        from torch.utils.data import DataLoader

        loaders = {"train": DataLoader(a, batch_size=2), "val": DataLoader(b)}
        for x in loaders["train"]:
            pass
        for x in loaders["val"]:
            pass
        """
    )
    flow = ctx.analysis(LoaderFlow)
    train, val = [c for c in ctx.nodes(cst.Call) if is_torch_dataloader(ctx.names, c)]
    assert [ctx.code(r) for r in flow.references(train)][1:] == ['loaders["train"]']
    assert [ctx.code(r) for r in flow.references(val)][1:] == ['loaders["val"]']
