"""TRL104 load-without-map-location."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ...analysis.base.scopes import reads_of_binding
from ...analysis.device.choices import DeviceChoices
from ...diagnostics import Severity
from ..base import PendingFix, Rule

_LOADS = ("torch.load", "torch.serialization.load")
# Uses of a loaded checkpoint that never touch its tensors' devices.
_HARMLESS_METHODS = ("keys", "items", "values")
# Checkpoint entries that are bookkeeping numbers and settings, not tensors to place.
_BOOKKEEPING_KEYS = frozenset(
    {
        "epoch",
        "epochs",
        "step",
        "steps",
        "global_step",
        "iteration",
        "iter",
        "args",
        "config",
        "cfg",
        "hparams",
        "hyper_parameters",
        "meta",
        "version",
        "arch",
        "lr",
    }
)


class LoadWithoutMapLocation(Rule):
    """## What it does
    Reports `torch.load(path)` without `map_location`.

    ## Why is this bad
    `torch.load` restores every tensor onto the device it was saved from. A checkpoint written
    on `cuda:1` cannot be opened on a machine with one GPU, nor one written on a GPU on a
    CPU-only machine:

        RuntimeError: Attempting to deserialize object on CUDA device 1 but
        torch.cuda.device_count() is 1. Please use torch.load with map_location to map your
        storages to an existing device.

        RuntimeError: Attempting to deserialize object on a CUDA device but
        torch.cuda.is_available() is False.

    Under DDP every rank loads the whole checkpoint onto the GPU it was saved from, usually
    GPU 0: N copies on one GPU, out of memory on resume. `map_location="cpu"` (or the rank's
    own device) avoids both; `model.load_state_dict` and `optimizer.load_state_dict` copy the
    values onto the devices of the parameters they fill anyway.

    Whether to pass `weights_only` is a different question (TorchFix's TOR102 asks it); this rule
    does not.

    ## Example
    ```python
    model.load_state_dict(torch.load(args.resume))
    ```

    ## Use instead
    ```python
    model.load_state_dict(torch.load(args.resume, map_location="cpu"))
    ```

    ## Fix safety
    The fix adds `map_location="cpu"`. It is safe when the loaded object only feeds
    `load_state_dict` (directly, through `ckpt["model"]`-style lookups, or through a dict
    comprehension that renames keys), apart from bookkeeping entries such as `ckpt["epoch"]`:
    `load_state_dict` copies each tensor onto its parameter's device. It is
    unsafe otherwise, because code that uses the loaded tensors directly would now get them on
    the CPU.
    """

    code = "TRL104"
    name = "load-without-map-location"
    severity = Severity.WARNING
    fix = "sometimes"
    markers = ("load",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names = ctx.names
        self._choices: Optional[DeviceChoices] = None

    def visit_Call(self, node: cst.Call) -> None:
        if not self.names.is_(node.func, *_LOADS):
            return
        if any(arg.star for arg in node.args) or not node.args:
            return
        if any(
            arg.keyword is not None and arg.keyword.value == "map_location" for arg in node.args
        ):
            return
        positional = [arg for arg in node.args if arg.keyword is None]
        if len(positional) >= 2:
            return  # torch.load(f, "cpu")
        if self._choices is None:
            self._choices = self.ctx.analysis(DeviceChoices)
        if self._choices.in_test_code(node):
            return
        only_state_dict = self._only_feeds_load_state_dict(node, 0)
        self.report(
            node,
            "`torch.load` without `map_location` restores tensors onto the device they were "
            'saved from: on another machine "Attempting to deserialize object on CUDA device '
            '1 but torch.cuda.device_count() is 1", and under DDP every rank loads the '
            'checkpoint onto GPU 0; pass `map_location="cpu"` (load_state_dict copies to the '
            "model's device)",
            fix=self._fix(node, only_state_dict),
        )

    def _fix(self, call: cst.Call, safe: bool) -> Optional[PendingFix]:
        last = call.args[-1]
        quote = '"'
        for arg in call.args:
            if type(arg.value) is cst.SimpleString and arg.value.quote in ("'", '"'):
                quote = arg.value.quote
                break
        text = f", map_location={quote}cpu{quote}"
        edit = self.ctx.insert_after(last.value, text)
        message = f"Add map_location={quote}cpu{quote}"
        return self.safe_fix(message, edit) if safe else self.unsafe_fix(message, edit)

    # -- where the loaded object goes ---------------------------------------------------------

    def _only_feeds_load_state_dict(self, expr: cst.CSTNode, depth: int) -> bool:
        """Does the value of `expr` (a load, or a lookup into one) reach only
        `.load_state_dict(...)` calls?"""
        if depth > 4:
            return False
        parent = self.ctx.parent(expr)
        if type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            return (
                type(call) is cst.Call
                and type(call.func) is cst.Attribute
                and call.func.attr.value == "load_state_dict"
                and parent.keyword is None
                or (parent.keyword is not None and parent.keyword.value == "state_dict")
            )
        if type(parent) is cst.Subscript and parent.value is expr:
            if _bookkeeping_key(parent):
                return True  # ckpt["epoch"]: a number, wherever it goes
            return self._only_feeds_load_state_dict(parent, depth + 1)
        if type(parent) is cst.Attribute and parent.value is expr:
            call = self.ctx.parent(parent)
            if type(call) is cst.Call and call.func is parent and parent.attr.value == "get":
                return self._only_feeds_load_state_dict(call, depth + 1)
            return False
        if type(parent) is cst.Assign and parent.value is expr and len(parent.targets) == 1:
            target = parent.targets[0].target
            if type(target) is cst.Name:
                return self._name_only_feeds(target, parent, depth + 1)
        return False

    def _name_only_feeds(self, target: cst.Name, assign: cst.Assign, depth: int) -> bool:
        uses = reads_of_binding(self.ctx, target, assign)
        if not uses:
            return False
        for use in uses:
            if not self._use_is_harmless(use, depth):
                return False
        return True

    def _use_is_harmless(self, use: cst.Name, depth: int) -> bool:
        parent = self.ctx.parent(use)
        # ckpt["model"], ckpt.get("model")
        if type(parent) is cst.Attribute and parent.value is use:
            call = self.ctx.parent(parent)
            if type(call) is cst.Call and call.func is parent:
                if parent.attr.value in _HARMLESS_METHODS:
                    return self._iteration_is_renaming(call, depth)
        if type(parent) in (cst.Subscript, cst.Attribute):
            return self._only_feeds_load_state_dict(use, depth)
        if type(parent) is cst.ComparisonTarget:
            return True  # "state_dict" in ckpt
        return self._only_feeds_load_state_dict(use, depth)

    def _iteration_is_renaming(self, call: cst.Call, depth: int) -> bool:
        """`{k.replace("module.", ""): v for k, v in sd.items()}` bound to a name that only
        feeds load_state_dict; `"x" in sd.keys()` and `list(sd.keys())` are harmless."""
        parent = self.ctx.parent(call)
        if type(parent) is cst.ComparisonTarget:
            return True
        if type(parent) is cst.CompFor and parent.iter is call:
            comp = self.ctx.parent(parent)
            if type(comp) is cst.DictComp:
                return self._only_feeds_load_state_dict(comp, depth)
            return False
        if type(parent) is cst.For and parent.iter is call:
            return False
        return False


def _bookkeeping_key(subscript: cst.Subscript) -> bool:
    if len(subscript.slice) != 1:
        return False
    element = subscript.slice[0].slice
    value = getattr(element, "value", None)
    if type(value) is cst.SimpleString:
        key = value.evaluated_value
        return isinstance(key, str) and key in _BOOKKEEPING_KEYS
    return False
