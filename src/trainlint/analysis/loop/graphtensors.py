"""Which values of a training step are known to be tensors holding an autograd graph: where a
`.detach()` or `.item()` may be written without changing what the code reads.

A name is not a type. `res = estimate_loss(...)` may hold a dict of Python floats, `outputs.aux`
may be None, `compute_loss(batch)` may return a tuple: a rewrite that assumes a tensor breaks
such code (`res.detach()["train_loss"]` raises AttributeError). Only what the code itself shows
to be a tensor counts: what it backpropagates, PyTorch's own losses, and arithmetic on those.
"""

from __future__ import annotations

from typing import Set

import libcst as cst

from .. import Analysis
from ..base.names import Names, dotted_name
from ..base.scopes import Scopes
from ..base.vocabulary import GRAPHLESS_READS, is_functional_loss


class GraphTensors(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)

    def read_through(self, leaf: cst.CSTNode) -> bool:
        """Is `leaf` only the container a value is read from (`res` in `res["train_loss"]`,
        `out` in `out.logits`)? The value read is of unknown type: a rewrite of the container
        is wrong, and one of the item may be too (a dict of `.item()` floats)."""
        parent = self.ctx.parent(leaf)
        if type(parent) is cst.Subscript and parent.value is leaf:
            return True
        return (
            type(parent) is cst.Attribute
            and parent.value is leaf
            and parent.attr.value not in GRAPHLESS_READS
        )

    def known(self, expr: cst.CSTNode, backpropagated: Set[str], _depth: int = 3) -> bool:
        """Is `expr` known to be a tensor with a graph? Known: a name the code backpropagates
        (`loss.backward()`), a PyTorch loss (`F.cross_entropy(...)`, a call of a name bound to an
        `nn.*Loss` module), arithmetic on one, and a name bound only to such values. Not known:
        a call of unknown type (a helper named `compute_loss`) and what is bound to one."""
        text = dotted_name(expr)
        if text is not None and text in backpropagated:
            return True
        if _depth <= 0:
            return False
        if type(expr) is cst.Call:
            return self._torch_loss(expr)
        if type(expr) is cst.BinaryOperation:
            sides = (expr.left, expr.right)
            return any(self.known(side, backpropagated, _depth - 1) for side in sides)
        if type(expr) is cst.UnaryOperation:
            return self.known(expr.expression, backpropagated, _depth - 1)
        if type(expr) is not cst.Name:
            return False
        bindings = [b for b in self.scopes.lookup(expr.value, expr) if b.statement is not None]
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind not in ("assign", "annassign") or binding.value is None:
                return False
            if not self.known(binding.value, backpropagated, _depth - 1):
                return False
        return True

    def _torch_loss(self, call: cst.Call) -> bool:
        """`F.cross_entropy(...)`, `torch.nn.functional.mse_loss(...)`, or `criterion(...)` with
        `criterion = nn.CrossEntropyLoss()`: PyTorch's own losses return tensors."""
        func = call.func
        if any(is_functional_loss(q) for q in self.names.qualified(func)):
            return True
        if type(func) is not cst.Name:
            return False
        bindings = self.scopes.lookup(func.value, func)
        if not bindings:
            return False
        for binding in bindings:
            value = binding.value
            if binding.kind != "assign" or type(value) is not cst.Call:
                return False
            qualified = self.names.qualified(value.func)
            if not any(q.startswith("torch.nn.") and q.endswith("Loss") for q in qualified):
                return False
        return True
