"""TRL204 state-dict-module-prefix."""

from __future__ import annotations

from typing import List, Optional, Union

import libcst as cst

from ...analysis.base.callgraph import CallGraph
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
    reported, nor a save guarded by `hasattr(model, "module")` / `isinstance(model, DDP)` or
    made in the `except` of a `try` that saves `model.module.state_dict()`, nor
    the checkpoint of a model wrapped on every path when every load of the file that may read
    it (one naming a file any save of it names, or a path chosen at run time such as
    `torch.load(args.resume)`) puts it back into a wrapper: its known consumers expect the
    prefix. A checkpoint saved as a list, `[model.state_dict(), optimizer.state_dict()]`, is
    matched by position: `optimizer.load_state_dict(states[1])` reads another entry; one saved
    as an entry of a checkpoint (`{"state_dict": ...}`) is not what a load hands on whole
    (`model.module.load_state_dict(checkpoint)` in the `except KeyError:` of the resume is a
    fallback for a bare state dict of another script). A file that
    also loads it into a bare model (an evaluation or export path) is reported, unless every
    load of the file that may read it strips the prefix first
    (`load_state_dict(convert(torch.load(path)))` with a `convert` of the file that drops
    `module.`, a comprehension with `k.replace("module.", "")`,
    `consume_prefix_in_state_dict_if_present`): that consumer takes
    the checkpoint however the run that saved it was launched.

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

    ## Known problems
    A preview rule: on the precision corpus's dev repositories it found 1 true and 1 false
    positive (a resume checkpoint loaded back into the wrapper on every path, which the wrap
    analysis, not following control flow, takes for "some paths"; and consumers of the
    checkpoint in other files are not followed). It joins the default set when its measured
    precision reaches 90 %.
    """

    code = "TRL204"
    preview = True
    name = "state-dict-module-prefix"
    severity = Severity.WARNING
    fix = "safe"
    markers = ("state_dict",)

    def finish(self) -> None:
        self.parallel: Parallel = self.ctx.analysis(Parallel)
        self.callgraph: CallGraph = self.ctx.analysis(CallGraph)
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
            if state.every and self._resumed_into_wrapper(call):
                continue  # the file's own loads of this checkpoint expect the prefix
            if self._loads_strip_prefix(call):
                continue  # the file's own loads of it take either format
            self._report(call, receiver, state)

    def _report(self, call: cst.Call, receiver, state: WrapState) -> None:
        text = self.ctx.code(receiver)
        kind = " / ".join(sorted(state.kinds))
        if len(state.kinds) > 1:  # both: the short names keep the headline short
            kind = kind.replace("DistributedDataParallel", "DDP")
        if state.every:
            what = f"`{text}` is a {kind} wrapper here"
        else:
            what = f"`{text}` is a {kind} wrapper on some paths"
        message = f"{what}: the saved keys all start with `module.`"
        help_text = (
            "It then loads only into a wrapped model; a bare model raises \"Missing key(s) in "
            'state_dict ... Unexpected key(s) in state_dict: "module.…"". Save '
            f"`{text}.module.state_dict()`"
            + ("" if state.every else f' (or `getattr({text}, "module", {text}).state_dict()`)')
            + "."
        )
        fix = None
        if state.every and not self._loads_into_wrappers():
            fix = self._fix(receiver, text)
        related = [(site, f"wrapped in {kind} here") for site in state.sites[:1]]
        self.report(call, message, fix=fix, related=related, help=help_text)

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
        """Inside an `if`/conditional expression that handles the wrapper itself, or in the
        `except` of a `try` that saves `model.module` (the except runs when there is none)."""
        text = self.ctx.code(receiver)
        child: cst.CSTNode = call
        for ancestor in self.ctx.ancestors(call):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                return False
            if type(ancestor) is cst.Try and child in ancestor.handlers:
                if f"{text}.module" in self.ctx.code(ancestor.body):
                    return True
            child = ancestor
            if type(ancestor) in (cst.If, cst.IfExp):
                code = self.ctx.code(ancestor)
                test = self.ctx.code(ancestor.test)
                if f"{text}.module" in code:
                    return True
                if ("hasattr" in test or "isinstance" in test) and text in test:
                    return True
        return False

    def _resumed_into_wrapper(self, call: cst.Call) -> bool:
        """Is the checkpoint this state dict is saved to loaded back in this file, and only
        into wrappers? Then the `module.` keys are what its one known consumer expects. A load
        may read it when it names the same file (`"checkpoint.pth"`), or a path chosen at run
        time (`torch.load(args.model_path)`) where either side names no file."""
        names = self._saved_file_names(call)
        key = self._saved_under(call)
        loads = [
            (found[0], load)
            for load in self.ctx.nodes(cst.Call)
            for found in [method_call(load, "load_state_dict")]
            if found is not None and load.args
            and _entry(load.args[0].value) in (key, None)
            and not (key is not None and self._whole_file(load.args[0].value))
            and self._may_read(names, load.args[0].value)
        ]
        return bool(loads) and all(
            type(receiver) in (cst.Name, cst.Attribute)
            and self.parallel.wrapper_state(receiver, load).every
            for receiver, load in loads
        )

    def _whole_file(self, loaded: cst.CSTNode) -> bool:
        """Is `loaded` what a load call read, as it is (`torch.load(path)`, or a name bound to
        it)? A state dict saved as one entry of a checkpoint (`{"state_dict": ...}`) is not
        what such a load hands to `load_state_dict`: that is a fallback for another format."""
        if type(loaded) not in (cst.Name, cst.Call):
            return False
        source = self._loaded_from(loaded)
        return type(source) is cst.Call and _is_load(source)

    def _loads_strip_prefix(self, call: cst.Call) -> bool:
        """Does every load of this file that may read the checkpoint hand what it reads
        through code that strips `module.` from the keys (`load_state_dict(convert(torch.load(
        path)))` with a `convert` of the file that drops the prefix, a comprehension with
        `k.replace("module.", "")`, `consume_prefix_in_state_dict_if_present`)? Then its one
        known consumer loads the checkpoint whether it was saved wrapped or not."""
        names = self._saved_file_names(call)
        found = False
        for load in self.ctx.nodes(cst.Call):
            if method_call(load, "load_state_dict") is None or not load.args:
                continue
            loaded = load.args[0].value
            source = self._read_by(loaded, 3)
            if source is None:
                continue
            read = self._file_names(source)
            if names and read and not names & read:
                continue
            if not self._strips_prefix(loaded, 3):
                return False
            found = True
        return found

    def _read_by(self, expr: cst.CSTNode, depth: int) -> Optional[cst.Call]:
        """The load call (`torch.load(...)`) whose result `expr` is built from, through names
        bound to it (`depth` levels)."""
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if type(node) is cst.Call and _is_load(node):
                return node
            if type(node) is cst.Name and depth > 0:
                for binding in self.ctx.scopes.lookup(node.value, node):
                    if binding.value is not None:
                        found = self._read_by(binding.value, depth - 1)
                        if found is not None:
                            return found
        return None

    def _strips_prefix(self, expr: cst.CSTNode, depth: int) -> bool:
        """Is `expr` built by code that names the `module.` prefix (in itself, in a function of
        the file it calls, or in what its names are bound to)?"""
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if type(node) is cst.SimpleString and "module." in str(node.evaluated_value):
                return True
            if type(node) is cst.Call:
                leaf = (dotted_name(node.func) or "").split(".")[-1]
                if leaf == "consume_prefix_in_state_dict_if_present":
                    return True
                callee = self.callgraph.callee(node)
                if callee is not None and _names_module_prefix(callee, self.ctx):
                    return True
            if type(node) is cst.Name and depth > 0:
                for binding in self.ctx.scopes.lookup(node.value, node):
                    if binding.value is not None and self._strips_prefix(binding.value, depth - 1):
                        return True
        return False

    def _may_read(self, saved_names: set, loaded: cst.CSTNode) -> bool:
        """Can the load of `loaded` read a checkpoint saved under one of `saved_names`?"""
        source = self._loaded_from(loaded)
        if type(source) is not cst.Call or not _is_load(source):
            return False  # a state dict built in the file, not read from a file
        read_names = self._file_names(source)
        if saved_names and read_names:
            return bool(saved_names & read_names)
        return True

    def _saved_under(self, call: cst.Call) -> Union[str, int, None]:
        """The checkpoint entry the state dict is saved as: `dict(model=...)`,
        `{"model": ...}`, a position of a list or tuple (`[model.state_dict(),
        optimizer.state_dict()]`: 0); None when it is saved as it is."""
        parent = self.ctx.parent(call)
        if type(parent) is cst.Arg and parent.keyword is not None:
            return parent.keyword.value
        if type(parent) is cst.DictElement and type(parent.key) is cst.SimpleString:
            value = parent.key.evaluated_value
            return value if isinstance(value, str) else None
        sequence = self.ctx.parent(parent) if type(parent) is cst.Element else None
        if type(sequence) in (cst.List, cst.Tuple):
            return list(sequence.elements).index(parent)  # type: ignore[union-attr]
        return None

    def _saved_file_names(self, call: cst.Call) -> set:
        """The file names the save calls that write `call`'s state dict name (directly, or
        through a name: `states = [...]` saved as both `checkpoint_{}.pth` and
        `checkpoint.pth`)."""
        names: set = set()
        for save in self._save_calls(call):
            names |= self._file_names(save)
        return names

    def _save_calls(self, call: cst.Call) -> List[cst.Call]:
        """The save calls that write `call`'s state dict (directly, or through a name)."""
        node: cst.CSTNode = call
        for _ in range(8):
            parent = self.ctx.parent(node)
            if type(parent) is cst.Call and _is_save(parent):
                return [parent]
            if type(parent) is cst.Assign:
                targets = [t.target for t in parent.targets]
                name = targets[0].value if type(targets[0]) is cst.Subscript else targets[0]
                if type(name) is not cst.Name:
                    return []
                return [
                    save
                    for save in self.ctx.nodes(cst.Call)
                    if _is_save(save)
                    and any(
                        type(n) is cst.Name and n.value == name.value
                        for arg in save.args
                        for n in [arg.value, *self.ctx.tree.descendants(arg.value)]
                    )
                ]
            if parent is None:
                return []
            node = parent
        return []

    def _loaded_from(self, expr: cst.CSTNode) -> Optional[cst.CSTNode]:
        """`ckpt["model"]` with `ckpt = torch.load(path)`: the load call."""
        while type(expr) is cst.Subscript:
            expr = expr.value
        if type(expr) is cst.Name:
            for binding in self.ctx.scopes.lookup(expr.value, expr):
                if binding.value is not None:
                    return binding.value
            return None
        return expr

    def _file_names(self, node: Optional[cst.CSTNode]) -> set:
        """File-name literals in a save or load call (`"checkpoint.pth"`, `f"{d}/last.pt"`)."""
        if node is None:
            return set()
        found = set()
        for inner in [node, *self.ctx.tree.descendants(node)]:
            if type(inner) is cst.SimpleString:
                value = inner.evaluated_value
            elif type(inner) is cst.FormattedStringText:
                value = inner.value
            else:
                continue
            if isinstance(value, str) and "." in value and len(value) > 3:
                found.add(value.strip("/").split("/")[-1])
        return found

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


def _names_module_prefix(function: cst.FunctionDef, ctx) -> bool:
    """Does the function's body name the `module.` prefix (`k.replace("module.", "")`)?"""
    return any(
        type(node) is cst.SimpleString and "module." in str(node.evaluated_value)
        for node in ctx.tree.descendants(function.body)
    )


def _is_save(call: cst.Call) -> bool:
    leaf = (dotted_name(call.func) or "").split(".")[-1].lower()
    return "save" in leaf and leaf != "save_pretrained"


def _is_load(call: cst.Call) -> bool:
    leaf = (dotted_name(call.func) or "").split(".")[-1].lower()
    return leaf == "load" or "load_checkpoint" in leaf


def _entry(expr: cst.CSTNode) -> Union[str, int, None]:
    """`ckpt["model"]` -> "model", `states[0]` -> 0; None for anything else."""
    if type(expr) is cst.Subscript and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if type(index) is cst.Index and type(index.value) is cst.SimpleString:
            value = index.value.evaluated_value
            return value if isinstance(value, str) else None
        if type(index) is cst.Index and type(index.value) is cst.Integer:
            return int(index.value.value, 0)
    return None
