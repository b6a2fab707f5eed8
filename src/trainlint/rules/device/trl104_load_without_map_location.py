"""TRL104 load-without-map-location."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ...analysis.base.callgraph import CallGraph
from ...analysis.base.names import dotted_name
from ...analysis.base.scopes import Scopes, reads_of_binding
from ...analysis.base.vocabulary import never_mentions_accelerator
from ...analysis.device.choices import DeviceChoices
from ...analysis.device.cuda_only import CudaOnly
from ...diagnostics import Severity
from ...walk import children, own_nodes
from ..base import PendingFix, Rule

_LOADS = ("torch.load", "torch.serialization.load")
_SAVES = ("torch.save", "torch.serialization.save")
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

    Not reported when the file itself wrote the path earlier (`torch.save(obj, path)` above, or
    in an earlier notebook cell: the same machine reads its own devices back; also `best =
    self._train(...)` where that function of the file saves to the path it returns), when the
    other branch of the enclosing `if` loads with `map_location` (the branch without it runs
    where the devices exist) or the load sits in a `try` whose handler for `RuntimeError` (or
    any exception) loads again with `map_location`, when a file that writes its own checkpoints
    never mentions an accelerator (what it saves holds CPU tensors), or when the load can only
    run on a machine with CUDA, in one process on the first GPU: a bare `.cuda()`, a hard-coded
    `"cuda"`, or CUDA tensors made the default type, on a line nothing can skip, in the load's
    function, in every caller of it, in its class's `__init__` or at import time, in a file that
    neither chooses a GPU index nor starts one process per GPU. Such a script saves from cuda:0,
    and cuda:0 exists wherever it can run.

    **Preview rule.** Measured on public repositories it was never tuned on, most loads it
    reports cannot fail: whether the file holds GPU tensors (a label cache, downloaded weights,
    a checkpoint the GPU-only script itself wrote) is not in the code. On the dev split it
    reported 5 true, 7 false and 12 debatable findings after the changes above (strict
    precision 42 %), below the 90 % bar of the default set; run it with `--preview` or select
    TRL104.

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
    # Measured on real code it was never tuned on, most loads it reports cannot fail: what a
    # file holds (CPU tensors, a label cache, a GPU checkpoint for a GPU-only script) is not
    # in the code. It earns the default set only with evidence of where the file came from.
    preview = True
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
        if never_mentions_accelerator(self.ctx.source.text) and self._saves_here():
            # This file (notebook) writes its own files and never runs on a GPU: they hold
            # CPU tensors. A CPU-only file that only loads may be reading a GPU run's output.
            return
        if self._saved_earlier_here(node, positional[0].value if positional else None):
            return  # the file written a few lines (or cells) above, on this machine
        if self._other_branch_maps(node):
            return  # `if torch.cuda.is_available(): load(f) else: load(f, map_location=...)`
        if self.ctx.analysis(CudaOnly).only_on_cuda(node):
            return  # where this runs, cuda:0 exists, and one process loads onto it
        only_state_dict = self._only_feeds_load_state_dict(node, 0)
        self.report(
            node,
            "`torch.load` without `map_location` puts tensors back on the device they were "
            "saved from",
            help=(
                "A checkpoint saved on a GPU fails to load on a machine without that GPU "
                '("Attempting to deserialize object on CUDA device 1 but '
                'torch.cuda.device_count() is 1", or "... torch.cuda.is_available() is '
                'False"), and under DDP every rank loads it onto GPU 0. Pass '
                '`map_location="cpu"` (or the rank\'s device): `load_state_dict` copies the '
                "values onto the model's device anyway."
            ),
            fix=self._fix(node, only_state_dict),
        )

    # -- where the file comes from ------------------------------------------------------------

    def _saved_earlier_here(self, load: cst.Call, path: Optional[cst.CSTNode]) -> bool:
        """A `torch.save(obj, <same path>)` earlier in the file (or an earlier notebook cell):
        the process that wrote it loads it, with the devices it saved from."""
        if path is None:
            path = next(
                (a.value for a in load.args if a.keyword is not None and a.keyword.value == "f"),
                None,
            )
        if path is None:
            return False
        wanted = _compact(self.ctx.code(path))
        index = self.ctx.tree.index
        at = index.get(load, 0)
        for call in self.ctx.nodes(cst.Call):
            if index.get(call, at) >= at or not self.names.is_(call.func, *_SAVES):
                continue
            target = self._save_target(call)
            if target is not None and _compact(self.ctx.code(target)) == wanted:
                return True
        return type(path) is cst.Name and self._returned_by_a_saver(path)

    def _save_target(self, save: cst.Call) -> Optional[cst.BaseExpression]:
        """The path of `torch.save(obj, path)` (or `f=path`)."""
        saved = [a.value for a in save.args if a.keyword is None]
        target = saved[1] if len(saved) > 1 else None
        for arg in save.args:
            if arg.keyword is not None and arg.keyword.value == "f":
                target = arg.value
        return target

    def _returned_by_a_saver(self, path: cst.Name) -> bool:
        """`best = self._train(...)` then `torch.load(best)`, where `_train` (a function of
        this file) saves to the path it returns: the process loads what it has just written.
        Every binding of the name must be such a call."""
        bindings = self.ctx.analysis(Scopes).lookup(path.value, path)
        if not bindings:
            return False
        graph = self.ctx.analysis(CallGraph)
        for binding in bindings:
            value = binding.value if binding.kind == "assign" else None
            function = graph.callee(value) if type(value) is cst.Call else None
            if function is None:
                return False
            saved = {
                _compact(self.ctx.code(target))
                for call in own_nodes(function.body)
                if type(call) is cst.Call and self.names.is_(call.func, *_SAVES)
                for target in [self._save_target(call)]
                if target is not None
            }
            returned = [
                node.value
                for node in own_nodes(function.body)
                if type(node) is cst.Return and node.value is not None
            ]
            if not returned or any(_compact(self.ctx.code(r)) not in saved for r in returned):
                return False
        return True

    def _saves_here(self) -> bool:
        return any(self.names.is_(call.func, *_SAVES) for call in self.ctx.nodes(cst.Call))

    def _other_branch_maps(self, load: cst.Call) -> bool:
        """The other branch of the enclosing `if` (or conditional expression) loads with
        `map_location`: the branch without it is the one taken where the devices exist."""
        child: cst.CSTNode = load
        for ancestor in self.ctx.ancestors(load):
            if type(ancestor) is cst.If:
                branch = ancestor.orelse if child is ancestor.body else ancestor.body
                if branch is not None and child is not ancestor.test and self._maps_in(branch):
                    return True
            elif type(ancestor) is cst.Try and child is ancestor.body:
                # `try: load(f) except RuntimeError: load(f, map_location=...)`: the device
                # error is caught and the load retried where the devices do not exist.
                if any(
                    _catches_runtime_error(handler) and self._maps_in(handler.body)
                    for handler in ancestor.handlers
                ):
                    return True
            elif type(ancestor) is cst.IfExp and child is not ancestor.test:
                value = ancestor.orelse if child is ancestor.body else ancestor.body
                if self._maps_in(value):
                    return True
            elif isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            child = ancestor
        return False

    def _maps_in(self, node: cst.CSTNode) -> bool:
        stack = [node]
        while stack:
            current = stack.pop()
            if type(current) is cst.Call and self.names.is_(current.func, *_LOADS):
                if any(a.keyword is not None and a.keyword.value == "map_location" for a in current.args):
                    return True
                if len([a for a in current.args if a.keyword is None]) >= 2:
                    return True
            stack.extend(children(current))
        return False

    def _fix(self, call: cst.Call, safe: bool) -> Optional[PendingFix]:
        quote = '"'
        for arg in call.args:
            if type(arg.value) is cst.SimpleString and arg.value.quote in ("'", '"'):
                quote = arg.value.quote
                break
        edit = self.ctx.append_argument(call, f"map_location={quote}cpu{quote}")
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


def _catches_runtime_error(handler: cst.ExceptHandler) -> bool:
    """Does the handler catch the RuntimeError a load onto a missing device raises (a bare
    `except:`, `RuntimeError`, `Exception`, `BaseException`, alone or in a tuple)?"""
    if handler.type is None:
        return True
    kinds = handler.type
    caught = [e.value for e in kinds.elements] if type(kinds) is cst.Tuple else [kinds]
    names = {dotted_name(kind) for kind in caught}
    return bool(names & {"RuntimeError", "Exception", "BaseException"})


def _bookkeeping_key(subscript: cst.Subscript) -> bool:
    if len(subscript.slice) != 1:
        return False
    element = subscript.slice[0].slice
    value = getattr(element, "value", None)
    if type(value) is cst.SimpleString:
        key = value.evaluated_value
        return isinstance(key, str) and key in _BOOKKEEPING_KEYS
    return False


def _compact(text: str) -> str:
    return "".join(text.split())
