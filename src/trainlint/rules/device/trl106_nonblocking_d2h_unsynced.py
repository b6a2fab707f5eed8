"""TRL106 nonblocking-d2h-unsynced."""

from __future__ import annotations

from typing import List, Optional

import libcst as cst

from ...analysis.base.names import dotted_name
from ...analysis.base.scopes import reads_of_binding
from ...analysis.device.expressions import Devices
from ...diagnostics import Severity
from ..base import PendingFix, Rule

# Host-side waits: after one of these, copies queued before it have finished.
_SYNC_FUNCTIONS = (
    "torch.cuda.synchronize",
    "torch.accelerator.synchronize",
    "torch.xpu.synchronize",
    "torch.mps.synchronize",
)
# Blocking device-to-host reads of *other* tensors wait for the stream too.
_BLOCKING_READS = ("item", "tolist", "cpu")
# Storing the copy is not reading it.
_STORES = ("append", "extend", "put", "put_nowait", "add")
# Handing the copy to autograd to keep for the backward is not reading it either: the backward
# reads it later (an activation-offloading checkpoint copies it back to the GPU, which the
# stream orders after the copy to the host).
_KEPT_FOR_BACKWARD = ("save_for_backward",)


class NonBlockingD2HUnsynced(Rule):
    """## What it does
    Reports `t.to("cpu", non_blocking=True)` whose result is read (printed, converted with
    `.numpy()`/`.tolist()`, compared, accumulated) before anything waits for the GPU
    (`torch.cuda.synchronize()`, `event.synchronize()`, `stream.synchronize()`, or a blocking
    `.item()`/`.cpu()` of another tensor). Storing the copy (`outputs.append(copy)`) is not a
    read, and neither is handing it to `ctx.save_for_backward` (activation offloading copies it
    back to the GPU in the backward, which the stream orders after it), and neither is returning
    it, alone or in a tuple (`return preds, labels`: the caller may synchronize first). A
    `device` parameter whose default is "cpu" is not taken for the destination: callers pass
    their own device, and a copy to a GPU is what `non_blocking=True` is for. Also reports
    `t.cpu(non_blocking=True)`, which is not an argument `Tensor.cpu` accepts.

    ## Why is this bad
    A non-blocking copy from the GPU to the host only *queues* the copy: `.to` returns at once
    with a CPU tensor (in pinned memory) whose contents are written later, when the GPU gets to
    it. Reading it before a synchronize reads whatever is there: zeros, stale values of the
    previous batch, garbage. No error is raised; metrics and saved predictions are silently
    wrong, and differently from run to run. PyTorch's guide on `non_blocking` and
    `pin_memory()` shows exactly this. `non_blocking=True` is for host-to-device copies, where
    the stream orders the copy before the kernels that use it.

    `t.cpu(non_blocking=True)` fails outright:

        TypeError: cpu() got an unexpected keyword argument 'non_blocking'

    ## Example
    ```python
    preds = logits.argmax(1).to("cpu", non_blocking=True)
    all_preds.extend(preds.tolist())
    ```

    ## Use instead
    ```python
    preds = logits.argmax(1).to("cpu")
    all_preds.extend(preds.tolist())
    ```

    ## Fix safety
    The fix drops `non_blocking=True`. It is safe: the copy becomes synchronous, which is what
    reading it right away requires; the values can only become correct.
    """

    code = "TRL106"
    name = "nonblocking-d2h-unsynced"
    severity = Severity.ERROR
    fix = "safe"
    markers = ("non_blocking",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names = ctx.names
        self.devices: Optional[Devices] = None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if type(func) is not cst.Attribute or func.attr.value not in ("to", "cpu"):
            return
        flag = _non_blocking_arg(node)
        if flag is None:
            return
        if func.attr.value == "cpu":
            self.report(
                node,
                "`Tensor.cpu()` takes no `non_blocking` argument",
                help=(
                    "This raises \"TypeError: cpu() got an unexpected keyword argument "
                    "'non_blocking'\"; a non-blocking copy to the host would also be read "
                    "before it has arrived. Drop `non_blocking=True`."
                ),
                fix=self._fix(node, flag),
            )
            return
        if not self._to_cpu(node):
            return
        read = self._first_unsynced_read(node)
        if read is None:
            return
        self.report(
            node,
            "non-blocking copy to the CPU is read before any synchronize",
            help=(
                "The returned tensor is filled in later by the GPU, so this reads zeros or stale "
                "values without an error. Drop `non_blocking=True`, or call "
                "`torch.cuda.synchronize()` before reading."
            ),
            fix=self._fix(node, flag),
            related=[(read, "read here")] if read is not node else [],
        )

    # -- is it a device-to-host copy ----------------------------------------------------------

    def _to_cpu(self, call: cst.Call) -> bool:
        target = None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                target = arg.value
        if target is None and call.args and call.args[0].keyword is None:
            target = call.args[0].value
        if target is None:
            return False
        if self.devices is None:
            self.devices = self.ctx.analysis(Devices)
        device = self.devices.device_of(target)
        # A parameter's default is the destination only of calls that leave it out: callers
        # passing their training device (`get_batch(reader, device=cfg.device)`) copy to it.
        return device is not None and device.kind == "cpu" and not device.default

    # -- is it read before a synchronize ------------------------------------------------------

    def _first_unsynced_read(self, call: cst.Call) -> Optional[cst.CSTNode]:
        parent = self.ctx.parent(call)
        function = self.ctx.scopes.enclosing_function(call)
        if self._handed_back(call):
            return None  # the caller reads it; it may synchronize first
        if type(parent) is cst.Assign and parent.value is call and len(parent.targets) == 1:
            target = parent.targets[0].target
            if type(target) is cst.Name:
                return self._unsynced_read_of_name(target, parent, function, 0)
            return None  # stored into an attribute or a container: not read here
        if type(parent) is cst.Arg:
            outer = self.ctx.parent(parent)
            if type(outer) is cst.Call and type(outer.func) is cst.Attribute:
                if outer.func.attr.value in _KEPT_FOR_BACKWARD:
                    return None
                if outer.func.attr.value in _STORES and type(outer.func.value) is cst.Name:
                    return self._unsynced_read_of_container(outer, function)
        return call  # used on the spot

    def _unsynced_read_of_name(self, target: cst.Name, statement, function, depth):
        reads = reads_of_binding(self.ctx, target, statement)
        reads = [r for r in reads if self.ctx.scopes.enclosing_function(r) is function]
        if not reads:
            return None
        first = reads[0]
        if self._synchronized_between(statement, first, function, target.value):
            return None
        parent = self.ctx.parent(first)
        if type(parent) is cst.Arg and depth < 2:
            outer = self.ctx.parent(parent)
            if type(outer) is cst.Call and type(outer.func) is cst.Attribute:
                if outer.func.attr.value in _KEPT_FOR_BACKWARD:
                    return None
                if outer.func.attr.value in _STORES and type(outer.func.value) is cst.Name:
                    return self._unsynced_read_of_container(outer, function)
        if self._handed_back(first):
            return None
        return first

    def _unsynced_read_of_container(self, store: cst.Call, function):
        """`outputs.append(copy)`: the first later read of `outputs` that is not another store."""
        container = store.func.value  # type: ignore[attr-defined]
        index = self.ctx.tree.index
        start = index.get(store, 0)
        for name in self.ctx.nodes(cst.Name):
            if name.value != container.value or index.get(name, 0) <= start:
                continue
            if self.ctx.scopes.enclosing_function(name) is not function:
                continue
            parent = self.ctx.parent(name)
            if type(parent) is cst.Attribute and parent.value is name:
                if parent.attr.value in _STORES:
                    continue
            if type(parent) is cst.AssignTarget:
                return None  # rebound: a new container
            if self._synchronized_between(store, name, function, None):
                return None
            if self._handed_back(name):
                return None
            return name
        return None

    def _handed_back(self, node: cst.CSTNode) -> bool:
        """Is `node` returned or yielded to the caller, alone or in a tuple or list
        (`return x, y`)? The caller reads it, and may synchronize first."""
        parent = self.ctx.parent(node)
        while parent is not None and type(parent) is cst.Element:
            container = self.ctx.parent(parent)
            if container is None or type(container) not in (cst.Tuple, cst.List):
                return False
            parent = self.ctx.parent(container)
        return type(parent) in (cst.Return, cst.Yield)

    def _synchronized_between(self, start, end, function, own: Optional[str]) -> bool:
        index = self.ctx.tree.index
        low, high = index.get(start, 0), index.get(end, 0)
        for call in self.ctx.nodes(cst.Call):
            at = index.get(call, 0)
            if not (low < at < high):
                continue
            if self.ctx.scopes.enclosing_function(call) is not function:
                continue
            if self._is_sync(call, own):
                return True
        return False

    def _is_sync(self, call: cst.Call, own: Optional[str]) -> bool:
        func = call.func
        if self.names.is_(func, *_SYNC_FUNCTIONS):
            return True
        if type(func) is cst.Attribute:
            method = func.attr.value
            if method == "synchronize":
                return True
            if method in _BLOCKING_READS and not call.args:
                receiver = dotted_name(func.value)
                if receiver is not None and receiver.split(".")[0] == own:
                    return False
                return not self._pending_copy(func.value)
        return False

    def _pending_copy(self, expr: cst.CSTNode) -> bool:
        """Is `expr` a name bound to a non-blocking copy to the CPU? (Reading it on the host
        waits for nothing.)"""
        if type(expr) is not cst.Name:
            return False
        for binding in self.ctx.scopes.lookup(expr.value, expr):
            value = binding.value
            if (
                type(value) is cst.Call
                and type(value.func) is cst.Attribute
                and value.func.attr.value == "to"
                and _non_blocking_arg(value) is not None
                and self._to_cpu(value)
            ):
                return True
        return False

    # -- fix ----------------------------------------------------------------------------------

    def _fix(self, call: cst.Call, flag: cst.Arg) -> Optional[PendingFix]:
        args: List[cst.Arg] = [a for a in call.args if a is not flag]
        if args and flag is call.args[-1]:
            trailing = flag.comma
            args[-1] = args[-1].with_changes(
                comma=trailing if type(trailing) is cst.Comma else cst.MaybeSentinel.DEFAULT
            )
        new_call = call.with_changes(args=args)
        return self.safe_fix(
            "Drop `non_blocking=True`",
            self.ctx.replace(call, self.ctx.module.code_for_node(new_call)),
        )


def _non_blocking_arg(call: cst.Call) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "non_blocking":
            value = arg.value
            if type(value) is cst.Name and value.value == "True":
                return arg
    return None
