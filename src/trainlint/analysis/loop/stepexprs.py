"""Reading the expressions of a training step: the names a loss is built from, gradient
attributes, the loss entry of an output dict, the loader under `enumerate(tqdm(...))`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

import libcst as cst

from ..base.names import dotted_name

if TYPE_CHECKING:  # pragma: no cover - typing.TypeGuard is Python 3.10+; annotations are strings
    from typing import TypeGuard


def name_leaves(expr: Optional[cst.CSTNode]) -> Iterator[str]:
    """Dotted names inside an expression (`(loss / k)` -> "loss"; `scaler.scale(loss)` -> ...)."""
    if expr is None:
        return
    text = dotted_name(expr)
    if text is not None:
        yield text
        return
    if type(expr) is cst.BinaryOperation:
        yield from name_leaves(expr.left)
        yield from name_leaves(expr.right)
    elif type(expr) is cst.UnaryOperation:
        yield from name_leaves(expr.expression)
    elif type(expr) is cst.Call and type(expr.func) is cst.Attribute:
        if expr.func.attr.value in ("mean", "sum", "float", "to", "squeeze"):
            yield from name_leaves(expr.func.value)
        elif dotted_name(expr.func) in ("torch.stack", "torch.cat", "torch.sum", "torch.mean"):
            for arg in expr.args:
                yield from name_leaves(arg.value)
    elif type(expr) is cst.Call and dotted_name(expr.func) == "sum":
        for arg in expr.args:
            yield from name_leaves(arg.value)


def is_grad(expr: cst.CSTNode) -> TypeGuard[cst.Attribute]:
    """`p.grad` or `p.grad.data`."""
    if type(expr) is cst.Attribute and expr.attr.value == "data":
        expr = expr.value
    return type(expr) is cst.Attribute and expr.attr.value == "grad"


def grad_owner(expr: cst.Attribute) -> cst.CSTNode:
    """`p.grad` / `p.grad.data` -> `p`."""
    if expr.attr.value == "data" and type(expr.value) is cst.Attribute:
        expr = expr.value
    return expr.value


def is_loss_key(node: cst.Subscript) -> bool:
    """`out["loss"]`, `outputs['loss']`."""
    if len(node.slice) != 1:
        return False
    index = node.slice[0].slice
    if type(index) is not cst.Index:
        return False
    value = index.value
    return type(value) is cst.SimpleString and value.evaluated_value == "loss"


def strip_wrapper(text: str) -> str:
    """`model.module` -> `model`: the module a DataParallel/DDP wrapper holds is the model."""
    return text[: -len(".module")] if text.endswith(".module") else text


def peel_iterable(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`enumerate(tqdm(loader))` -> `loader`."""
    for _ in range(4):
        if type(expr) is cst.Call and expr.args:
            leaf = (dotted_name(expr.func) or "").split(".")[-1]
            if leaf in ("enumerate", "tqdm", "iter", "track", "zip", "islice", "log_every"):
                expr = expr.args[0].value
                continue
        break
    return expr
