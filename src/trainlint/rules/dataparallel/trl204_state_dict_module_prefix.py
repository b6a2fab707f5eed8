"""TRL204 state-dict-module-prefix."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ...analysis.base.calls import method_call
from ...analysis.base.names import dotted_name
from ...analysis.parallel.parallel import Parallel, WrapState
from ...diagnostics import Severity
from ..base import PendingFix, Rule

# Containers a state dict passes through on its way into a checkpoint.
_CONTAINERS = (cst.DictElement, cst.Dict, cst.Element, cst.List, cst.Tuple, cst.Arg)


class StateDictModulePrefix(Rule):
    """## What it does
    Reports `model.state_dict()` saved to a checkpoint (`torch.save(...)`, a `save_checkpoint`
    helper, directly or through a dict) when `model` is a `DataParallel` or
    `DistributedDataParallel` wrapper at that point.

    ## Why is this bad
    A wrapper keeps the real model as its `module` attribute, so every key of its state dict
    starts with `module.`. The checkpoint then only loads into an identically wrapped model;
    loading it into the bare model (evaluation on one GPU, export, fine-tuning elsewhere) fails:

        RuntimeError: Error(s) in loading state_dict for ResNet:
            Missing key(s) in state_dict: "conv1.weight", ...
            Unexpected key(s) in state_dict: "module.conv1.weight", ...

    When the model is wrapped only on some paths (`if args.distributed: model = DDP(model)`),
    the checkpoint's format depends on how the run was launched.

    Saving `model.module.state_dict()`, a reference taken before wrapping (`model_without_ddp`),
    `getattr(model, "module", model).state_dict()` or the result of an unwrap helper is not
    reported, nor a save guarded by `hasattr(model, "module")` / `isinstance(model, DDP)`.

    ## Example
    ```python
    model = DDP(model, device_ids=[local_rank])
    ...
    torch.save({"model": model.state_dict(), "epoch": epoch}, "last.pt")
    ```

    ## Use instead
    ```python
    model = DDP(model, device_ids=[local_rank])
    ...
    torch.save({"model": model.module.state_dict(), "epoch": epoch}, "last.pt")
    ```

    ## Fix safety
    When every assignment of the name that reaches the save is a wrapper, the fix inserts
    `.module`. It is safe then: the saved tensors are the same, only the `module.` prefix goes.
    It is not offered when the model is wrapped only on some paths, or when the file loads a
    state dict back into a wrapper (that load expects the prefix).
    """

    code = "TRL204"
    name = "state-dict-module-prefix"
    severity = Severity.WARNING
    fix = "safe"
    markers = ("state_dict",)

    def finish(self) -> None:
        self.parallel: Parallel = self.ctx.analysis(Parallel)
        if not self.parallel.wrap_calls():
            return
        self._loads_into_wrapper: Optional[bool] = None
        for call in self.ctx.nodes(cst.Call):
            found = method_call(call, "state_dict")
            if found is None or call.args:
                continue
            receiver = found[0]
            if type(receiver) not in (cst.Name, cst.Attribute):
                continue  # getattr(m, "module", m).state_dict(), unwrap(m).state_dict()
            if type(receiver) is cst.Attribute and receiver.attr.value == "module":
                continue
            state = self.parallel.wrapper_state(receiver, call)
            if not state.some or not self._saved(call) or self._guarded(call, receiver):
                continue
            self._report(call, receiver, state)

    def _report(self, call: cst.Call, receiver, state: WrapState) -> None:
        text = self.ctx.code(receiver)
        kind = " / ".join(sorted(state.kinds))
        if state.every:
            what = f"`{text}` is a {kind} wrapper here"
        else:
            what = f"`{text}` is a {kind} wrapper on some paths"
        message = (
            f"{what}: its state_dict() keys all start with `module.`, so the checkpoint only "
            'loads into a wrapped model ("Unexpected key(s) in state_dict: module.…"); save '
            f"`{text}.module.state_dict()`"
            + ("" if state.every else f' (or `getattr({text}, "module", {text})`)')
        )
        fix = None
        if state.every and not self._loads_into_wrappers():
            fix = self._fix(receiver, text)
        related = [(site, f"wrapped in {kind} here") for site in state.sites[:1]]
        self.report(call, message, fix=fix, related=related)

    def _fix(self, receiver, text: str) -> Optional[PendingFix]:
        return self.safe_fix(
            f"Save the wrapped module: `{text}.module.state_dict()`",
            self.ctx.insert_after(receiver, ".module"),
        )

    # -- is it saved? -------------------------------------------------------------------------

    def _saved(self, call: cst.Call) -> bool:
        node: cst.CSTNode = call
        for _ in range(8):
            parent = self.ctx.parent(node)
            if type(parent) is cst.Call:
                if _is_save(parent):
                    return True
                leaf = (dotted_name(parent.func) or "").split(".")[-1]
                if leaf not in ("dict", "OrderedDict"):
                    return False
                node = parent
                continue
            if isinstance(parent, _CONTAINERS):
                node = parent
                continue
            if type(parent) is cst.Assign and parent.value is node:
                return any(self._name_saved(t.target, parent) for t in parent.targets)
            return False
        return False

    def _name_saved(self, target: cst.CSTNode, assign: cst.Assign) -> bool:
        """`ckpt = {...}` / `ckpt["model"] = ...` followed by a save call that mentions `ckpt`."""
        while type(target) is cst.Subscript:
            target = target.value
        if type(target) is not cst.Name:
            return False
        name = target.value
        function = self.ctx.scopes.enclosing_function(assign)
        index = self.ctx.tree.index
        start = index.get(assign, -1)
        for call in self.ctx.nodes(cst.Call):
            if not _is_save(call) or index.get(call, -1) <= start:
                continue
            if self.ctx.scopes.enclosing_function(call) is not function:
                continue
            for arg in call.args:
                for node in [arg.value, *self.ctx.tree.descendants(arg.value)]:
                    if type(node) is cst.Name and node.value == name:
                        return True
        return False

    # -- guards and loads ---------------------------------------------------------------------

    def _guarded(self, call: cst.Call, receiver) -> bool:
        """Inside an `if`/conditional expression that handles the wrapper itself."""
        text = self.ctx.code(receiver)
        for ancestor in self.ctx.ancestors(call):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                return False
            if type(ancestor) in (cst.If, cst.IfExp):
                code = self.ctx.code(ancestor)
                test = self.ctx.code(ancestor.test)
                if f"{text}.module" in code:
                    return True
                if ("hasattr" in test or "isinstance" in test) and text in test:
                    return True
        return False

    def _loads_into_wrappers(self) -> bool:
        if self._loads_into_wrapper is None:
            found = False
            for call in self.ctx.nodes(cst.Call):
                loaded = method_call(call, "load_state_dict")
                if loaded is None or type(loaded[0]) not in (cst.Name, cst.Attribute):
                    continue
                if self.parallel.wrapper_state(loaded[0], call).some:
                    found = True
                    break
            self._loads_into_wrapper = found
        return self._loads_into_wrapper


def _is_save(call: cst.Call) -> bool:
    leaf = (dotted_name(call.func) or "").split(".")[-1].lower()
    return "save" in leaf and leaf != "save_pretrained"
