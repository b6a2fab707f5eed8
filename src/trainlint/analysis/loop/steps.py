"""What one iteration of a training or evaluation loop does: the facts the loop rules share.

Built on `structure.py` (`Loops`: batch sources, `under_no_grad`), the same-file call graph
(`base/callgraph.py`) and the dataflow kernel (`base/dataflow.py`).

1. Events. `event(node)` says what a call or assignment does to training state:
   - `backward`: `loss.backward()`, `scaler.scale(loss).backward()`, `torch.autograd.backward`,
     `accelerator.backward(loss)` / `engine.backward(loss)` (the receiver tells them apart);
   - `step`: an optimizer step, `optimizer.step()`, `scaler.step(optimizer)`; with a closure
     argument (LBFGS) the step runs its own forward/backward (`closure=True`);
   - `zero`: `optimizer.zero_grad()`, `model.zero_grad()`, `p.grad = None`, `p.grad.zero_()`,
     `del p.grad`, `torch._foreach_zero_`, a call to a helper named like `zero_grad`/`reset_grad`;
     `full` is False for one parameter's gradient (freezing tricks between backward and step);
   - `eval` / `train`: `model.eval()`, `model.train()`, `model.train(False)`,
     `model = Net().eval()`.
   Receivers are given in the analysed loop's own terms: inside a helper, a parameter is replaced
   by the argument of the call that reached it (`evaluate(net, ...)` -> `net.eval()`).

2. Flows. `flow(node)` turns a loop body (or any block) into a tree of the dataflow kernel
   (`base/dataflow.py`), with the bodies of same-file functions it calls two levels deep, so
   that a rule's transfer function decides on the loop as a whole. An `if` whose test the code
   before the loop settles (`base/conditions.py`: `self.is_test = False` at the start of
   `train()`, read in a helper the loop calls) keeps only the branch that runs.

3. Grad mode. `grad_disabled(node)`: under `torch.no_grad()`/`inference_mode()` (lexically, by
   decorator, `torch.set_grad_enabled(False)`/`stack.enter_context(torch.no_grad())` earlier in
   the function, or because every same-file caller of the enclosing function is), or a call
   given a legacy `Variable(x, volatile=True)` input (PyTorch < 0.4's way to the same end), or
   anywhere in a script or notebook that uses no PyTorch at all (`Frameworks.without_torch`:
   a NumPy-only homework framework records no graph).

4. Loops. `step_loops()` (loops that run `backward()` and an optimizer `step()`),
   `is_step_loop(loop)` (a `backward()` runs in the loop's own iteration, not only in a nested
   loop: the "hot" loop), and the graph facts of `graphs.py` (`graph_names(loop)`,
   `freed_names(loop)`, `carried_graph_names(loop)`, `recorded_without_grad(leaf)`),
   `eval_loops()` (evaluation loops: over a validation/test loader or in an evaluation function,
   calling a model, with no backward/step).

5. The file. `file_backpropagates()` (anything calls `backward`, in a file that uses PyTorch),
   `file_may_update_weights()`
   (False only when nothing in the file can change weights: no step, no optimizer, no call
   named for training or updating, no gradient written into a weight by hand).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Set, Tuple, Union

import libcst as cst

from ...walk import SCOPE_NODE_TYPES, children, own_nodes
from ..base.calls import is_true, keyword, positional, string_value
from ..base.conditions import Conditions, is_constant, never_empty
from ..base.dataflow import Alt, Ev, Event, Exit, Helper, Repeat, Seq, events_of, own_events
from ..base.frameworks import Frameworks
from ..base.names import LOCAL_PREFIX, Names, dotted_name
from ..base.nodes import follows_exit, mentions, names_in, positional_params, target_names
from ..base.scopes import Scopes, bound_value
from ..base.vocabulary import (
    EVAL_FUNCTION,
    EVAL_LOADER,
    MODEL_NAME,
    NOT_MODEL_NAME,
    NOT_OPTIMIZER_NAME,
    OPTIMIZER_CLASSES,
    OPTIMIZER_NAME,
    disables_grad,
)
from ..parallel.parallel import module_root
from .stepexprs import grad_owner, is_grad, peel_iterable, strip_wrapper
from .graphs import AutogradGraphs
from .structure import Loops
from .. import Analysis


# -- recognising things ---------------------------------------------------------------------------

_SCALER_NAME = re.compile(r"scaler", re.I)
_ZERO_HELPER = re.compile(r"(zero|clear|reset)_?grads?$", re.I)
_TRAIN_WORD = re.compile(r"train", re.I)
# Calls that walk a model's layers one by one.
_SUBMODULE_WALKS = frozenset({"modules", "children", "named_modules", "named_children"})
# What PyTorch 0.4 added (and code written for it uses): a file using any of these runs where
# `Variable(x, volatile=True)` no longer turns the graph off.
_POST_04_API = frozenset({"item", "no_grad", "inference_mode", "device", "to"})
# Words of call names for what changes weights (`train_step`, `agent.update`, `fit`,
# `learnStep`), not `from_pretrained`.
_UPDATE_WORDS = frozenset(
    {"train", "training", "update", "updates", "fit", "optimize", "optimise", "learn", "step"}
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


_EMPTY = Seq(())
# The arguments of a loop's own flow (`flow()`): no parameter mapping, no call site, not reached
# through a helper, helpers followed two levels deep.
_TOP = (None, None, (), 2)


class TrainingSteps(AutogradGraphs, Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.loops: Loops = ctx.analysis(Loops)
        self.conditions: Conditions = ctx.analysis(Conditions)
        self._flows: Dict[cst.CSTNode, object] = {}
        self._mode_texts: Optional[Set[str]] = None
        self._optimizer_cache: Dict[Tuple[str, int], bool] = {}
        self._module_like: Optional[Set[str]] = None
        self._trained: Optional[Set[str]] = None
        self._no_grad_functions: Dict[Tuple[cst.FunctionDef, int], bool] = {}
        self._without_torch: Optional[bool] = None
        self._backpropagates: Optional[bool] = None
        self._may_update: Optional[bool] = None
        self._disablers: Optional[Dict[Optional[cst.FunctionDef], List[int]]] = None
        self._post_04: Optional[bool] = None
        # (node id, depth) -> whether `_volatile_value` found the flag: names rebound through
        # many conditional assignments (`img = aug(img)` a few hundred times) fan out, and
        # without it one 21 KB file took more than a minute.
        self._volatile_memo: Dict[Tuple[int, int], bool] = {}

    # -- recognising calls --------------------------------------------------------------------

    def is_backward(self, call: cst.CSTNode) -> bool:
        if type(call) is not cst.Call:
            return False
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "backward":
            return True
        return self.names.is_(func, "torch.autograd.backward")

    def is_autograd_grad(self, call: cst.CSTNode) -> bool:
        return type(call) is cst.Call and (
            self.names.is_(call.func, "torch.autograd.grad")
            or (dotted_name(call.func) or "").endswith("autograd.grad")
        )

    def backward_tensor(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        """What is backpropagated: `x` of `x.backward()`, `scaler.scale(x).backward()`,
        `accelerator.backward(x)`, `torch.autograd.backward(x)`."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "backward":
            receiver = func.value
            if type(receiver) is cst.Call and type(receiver.func) is cst.Attribute:
                if receiver.func.attr.value == "scale" and receiver.args:  # GradScaler
                    return receiver.args[0].value
            if self._is_engine(receiver) and call.args:
                return call.args[0].value
            return receiver
        if call.args:
            return call.args[0].value
        return None

    def _is_engine(self, expr: cst.BaseExpression) -> bool:
        """`accelerator.backward(loss)`, `engine.backward(loss)`, `fabric.backward(loss)`."""
        text = (dotted_name(expr) or "").split(".")[-1].lower()
        return any(word in text for word in ("accelerat", "engine", "fabric", "trainer"))

    def is_optimizer(self, expr: cst.CSTNode) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        key = (dotted, self.ctx.tree.index.get(expr, -1))
        found = self._optimizer_cache.get(key)
        if found is None:
            found = self._optimizer_cache[key] = self._is_optimizer(expr, dotted)
        return found

    def _is_optimizer(self, expr: cst.CSTNode, dotted: str) -> bool:
        leaf = dotted.split(".")[-1]
        if type(expr) is cst.Name:
            for binding in self.scopes.lookup(expr.value, expr):
                value = binding.value
                if type(value) is cst.Call:
                    if self._optimizer_constructor(value):
                        return True
                    if self._scheduler_constructor(value):
                        return False
        if NOT_OPTIMIZER_NAME.search(leaf):
            return False
        return bool(OPTIMIZER_NAME.search(leaf))

    def _optimizer_constructor(self, call: cst.Call) -> bool:
        for qualname in self.names.qualified(call.func):
            if qualname.startswith("torch.optim.") and ".lr_scheduler" not in qualname:
                if "swa_utils" not in qualname:
                    return True
        leaf = (dotted_name(call.func) or "").split(".")[-1]
        return leaf in OPTIMIZER_CLASSES

    def _scheduler_constructor(self, call: cst.Call) -> bool:
        for qualname in self.names.qualified(call.func):
            if "lr_scheduler" in qualname:
                return True
        leaf = (dotted_name(call.func) or "").split(".")[-1]
        return "Scheduler" in leaf or leaf.endswith("LR") or "schedule" in leaf

    def stepped_modules(
        self, optimizer: str, at: cst.CSTNode, depth: int = 0
    ) -> Optional[Set[str]]:
        """The modules whose parameters an optimizer (its dotted text, a name looked up where
        `at` is) holds, when every assignment to it shows all it holds: `.parameters()` of
        modules, param-group dicts, lists, `list(...)`, `chain(...)`, `+`, a comprehension
        over `.parameters()`, and single tensors of the file (`Adam([latent])` with `latent =
        torch.ones(...).cuda()`: no module's). An optimizer that is a parameter of a function
        holds what every same-file caller hands in, named in the function's own terms. None
        when something it holds is not readable (`Adam(params)`) or the optimizer is not built
        here."""
        values: List[Optional[cst.BaseExpression]]
        if "." not in optimizer:
            bindings = self.scopes.lookup(optimizer, at)
            if bindings and all(b.kind == "param" for b in bindings):
                return self._stepped_by_callers(optimizer, bindings[0], depth)
            values = [
                bound_value(b) if b.kind == "assign" else None
                for b in self.scopes.lookup(optimizer, at)
            ]
        else:
            values = [
                assign.value
                for assign in self.ctx.nodes(cst.Assign)
                if any(dotted_name(t.target) == optimizer for t in assign.targets)
            ]
        found: Set[str] = set()
        for value in values:
            if type(value) is not cst.Call or not self._optimizer_constructor(value):
                return None
            params = positional(value, 0) or keyword(value, "params")
            if params is None or not self._held_parameters(params, found, 0):
                return None
        return found if values else None

    def _stepped_by_callers(self, optimizer: str, param, depth: int) -> Optional[Set[str]]:
        """`def train(loader, model, controller, optimizer)`, called with an optimizer over
        `model.parameters()`: inside `train`, it holds `model` (the parameter the caller's
        `model` arrives in), not `controller`. None when a caller hands in an optimizer whose
        holdings are unknown, passes none, or there is no caller in the file."""
        function = param.statement
        if type(function) is not cst.FunctionDef or depth > 2:
            return None
        callers = self.callers(function)
        if not callers:
            return None
        found: Set[str] = set()
        for call in callers:
            passed = self._parameter_map(call, function, None)
            handed = passed.get(optimizer)
            if handed is None:
                return None
            held = self.stepped_modules(handed, call, depth + 1)
            if held is None:
                return None
            for module in held:
                for name, text in passed.items():
                    if module == text or module.startswith(text + "."):
                        found.add(name + module[len(text):])
                bindings = self.scopes.lookup(module.split(".")[0], function.body)
                if bindings and all(
                    b.scope is not None and b.scope.kind == "module" for b in bindings
                ):
                    found.add(module)  # a global the function reads under the same name
        return found

    def _held_parameters(self, expr: cst.BaseExpression, found: Set[str], depth: int) -> bool:
        """Add the modules whose parameters `expr` (an optimizer's params) holds to `found`;
        False when some part of it cannot be read."""
        if depth > 6:
            return False
        if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value in ("parameters", "named_parameters"):
                owner = dotted_name(expr.func.value)
                if owner is None:
                    return False
                found.add(strip_wrapper(owner))
                return True
        if type(expr) is cst.Call and (dotted_name(expr.func) or "").split(".")[-1] in (
            "list", "tuple", "chain", "filter"
        ):
            parts = [a.value for a in expr.args if not a.keyword and not a.star]
            if (dotted_name(expr.func) or "").endswith("filter"):
                parts = parts[1:]  # filter(lambda p: p.requires_grad, model.parameters())
            return bool(parts) and all(self._held_parameters(p, found, depth + 1) for p in parts)
        if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Add:
            return self._held_parameters(expr.left, found, depth + 1) and self._held_parameters(
                expr.right, found, depth + 1
            )
        if type(expr) in (cst.ListComp, cst.GeneratorExp):
            return self._held_parameters(expr.for_in.iter, found, depth + 1)  # type: ignore
        if type(expr) is cst.Name:
            # `d_params = list(D_A.parameters()) + list(D_B.parameters())`; `Adam(d_params)`
            bindings = self.scopes.lookup(expr.value, expr)
            values = [bound_value(b) if b.kind == "assign" else None for b in bindings]
            if not values or any(v is None for v in values) or self._grown_in_place(expr):
                return False
            return all(self._held_parameters(v, found, depth + 1) for v in values)  # type: ignore
        if type(expr) is cst.Dict:
            params = [
                e.value
                for e in expr.elements
                if type(e) is cst.DictElement
                and type(e.key) is cst.SimpleString
                and string_value(e.key) == "params"
            ]
            return len(params) == 1 and self._held_parameters(params[0], found, depth + 1)
        if type(expr) in (cst.List, cst.Tuple):
            elements = expr.elements  # type: ignore[attr-defined]
            if not elements or any(type(e) is not cst.Element for e in elements):
                return False
            for element in elements:
                value = element.value
                if type(value) is cst.Name and self._one_tensor(value):
                    continue  # a tensor of the file's own, no module's parameter
                if not self._held_parameters(value, found, depth + 1):
                    return False
            return True
        return False

    def _grown_in_place(self, name: cst.Name) -> bool:
        """Does the file add to the list `name` holds (`params.append(...)`, `.extend(...)`,
        `.insert(...)`)? Its assignment then does not show all it holds (`params += ...` is a
        binding of its own, which the lookup already returns)."""
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if (
                type(func) is cst.Attribute
                and func.attr.value in ("append", "extend", "insert")
                and type(func.value) is cst.Name
                and func.value.value == name.value
            ):
                return True
        return False

    def _one_tensor(self, name: cst.Name) -> bool:
        """Is every binding of `name` a tensor made by torch (`torch.ones(1, 256).normal_()
        .cuda()`, `nn.Parameter(torch.zeros(8))`)?"""
        bindings = self.scopes.lookup(name.value, name)
        if not bindings:
            return False
        for binding in bindings:
            value = bound_value(binding) if binding.kind == "assign" else None
            while type(value) is cst.Call and type(value.func) is cst.Attribute:
                if any(q.startswith("torch.") for q in self.names.qualified(value.func)):
                    break
                value = value.func.value  # `.cuda()`, `.normal_(...)`, `.to(device)`
            if type(value) is not cst.Call or not any(
                q.startswith("torch.") for q in self.names.qualified(value.func)
            ):
                return False
        return True

    def optimizer_modules(self, optimizer: str) -> Set[str]:
        """Texts of the modules whose parameters an optimizer (by its dotted text) updates."""
        found: Set[str] = set()
        for assign in self.ctx.nodes(cst.Assign):
            if type(assign.value) is not cst.Call:
                continue
            if not any(dotted_name(t.target) == optimizer for t in assign.targets):
                continue
            if not self._optimizer_constructor(assign.value):
                continue
            params = positional(assign.value, 0) or keyword(assign.value, "params")
            if params is None:
                continue
            for node in [params, *self.ctx.tree.descendants(params)]:
                if type(node) is cst.Call and type(node.func) is cst.Attribute:
                    if node.func.attr.value in ("parameters", "named_parameters"):
                        owner = dotted_name(node.func.value)
                        if owner:
                            found.add(strip_wrapper(owner))
                            found.update(self._attribute_aliases(owner, assign))
        return found

    def _attribute_aliases(self, name: str, at: cst.CSTNode) -> Set[str]:
        """`self.model = model` in the function of `at`: "self.model" for "model"."""
        function = self.scopes.enclosing_function(at)
        if function is None or "." in name:
            return set()
        out = set()
        for node in self.ctx.tree.descendants(function):
            if type(node) is cst.Assign and dotted_name(node.value) == name:
                for target in node.targets:
                    text = dotted_name(target.target)
                    if text and text.startswith("self."):
                        out.add(text)
        return out

    # -- events -------------------------------------------------------------------------------

    def event(
        self,
        node: cst.CSTNode,
        mapping: Optional[Dict[str, str]] = None,
        site: Optional[cst.CSTNode] = None,
        via: Tuple[cst.FunctionDef, ...] = (),
    ) -> Optional[Event]:
        """What `node` (a Call, Assign, AugAssign, Del) does to training state, if anything."""
        site = site or node
        if type(node) is cst.Call:
            return self._call_event(node, mapping, site, via)
        if type(node) is cst.Assign or type(node) is cst.AnnAssign:
            targets: List[cst.BaseExpression] = (
                [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            )
            for target in targets:
                if type(target) is cst.Attribute and target.attr.value == "grad":
                    text = dotted_name(target)
                    if node.value is not None and text and mentions(node.value, text):
                        # `p.grad = accelerator.reduce(p.grad)`, `p.grad = p.grad / n`: the
                        # same gradient averaged or scaled, not cleared
                        return None
                    return self._grad_reset(node, target.value, mapping, site, via)
            if len(targets) == 1 and node.value is not None:
                return self._fresh_binding(node, targets[0], node.value, mapping, site, via)
            return None
        if type(node) is cst.Del:
            target = node.target
            if type(target) is cst.Attribute and target.attr.value == "grad":
                return self._grad_reset(node, target.value, mapping, site, via)
        return None

    def _module_instance_test(self, test: cst.BaseExpression) -> bool:
        """`isinstance(x, nn.Module)` (or `torch.nn.Module`)."""
        return (
            type(test) is cst.Call
            and type(test.func) is cst.Name
            and test.func.value == "isinstance"
            and len(test.args) == 2
            and self.names.is_(test.args[1].value, "torch.nn.Module")
        )

    def _mode_receivers(self) -> Set[str]:
        """The texts the file calls `.eval()` or `.train()` on, and what holds them
        (`model` for `model.module.eval()`): only their rebinding matters."""
        if self._mode_texts is None:
            found: Set[str] = set()
            for call in self.ctx.nodes(cst.Call):
                if type(call.func) is cst.Attribute and call.func.attr.value in ("eval", "train"):
                    parts = (dotted_name(call.func.value) or "").split(".")
                    found.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
            found.discard("")
            self._mode_texts = found
        return self._mode_texts

    def _fresh_binding(self, node, target, value, mapping, site, via) -> Optional[Event]:
        """`model = build_model(args)`: the name now holds an object built by a call that was
        not handed the old one, so no mode set on the old object carries over (a loop over
        seeds that builds its model anew each time). `model = model.to(device)`,
        `model = DDP(model)` and `model = train(model, ...)` hand the old object in: the same
        module, or one that holds it, keeps its mode."""
        name = dotted_name(target)
        if name is None or type(value) is not cst.Call or name not in self._mode_receivers():
            return None
        root = name.split(".")[0]
        if root in names_in(value):
            return None
        return Event("fresh", node, self._map(target, mapping), site, via)

    def _grad_reset(self, node, param, mapping, site, via) -> Event:
        """`p.grad = None` / `p.grad.zero_()`: every parameter's gradient when it runs in a loop
        over `model.parameters()`, else one parameter's (a freezing trick)."""
        owner = self.parameters_loop_owner(node, param)
        if owner is not None:
            return Event("zero", node, self._map(owner, mapping), site, via, full=True)
        return Event("zero", node, self._map(param, mapping), site, via, full=False)

    def parameters_loop_owner(self, node, param) -> Optional[cst.CSTNode]:
        """For `for p in model.parameters(): p.grad = None`: `model`."""
        name = dotted_name(param)
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Module):
                return None
            if type(ancestor) in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
                ancestor = ancestor.for_in
            if type(ancestor) in (cst.For, cst.CompFor):
                target = ancestor.target
                if dotted_name(target) != name:
                    continue
                iterable = ancestor.iter
                if type(iterable) is cst.Call and type(iterable.func) is cst.Attribute:
                    if iterable.func.attr.value == "parameters":
                        return iterable.func.value
                return None
        return None

    def _call_event(self, call, mapping, site, via) -> Optional[Event]:
        func = call.func
        if self.is_backward(call):
            receiver = func.value if type(func) is cst.Attribute else None
            if self.names.is_(func, "torch.autograd.backward"):
                receiver = None
            return Event("backward", call, self._map(receiver, mapping), site, via)
        if type(func) is cst.Attribute:
            attr = func.attr.value
            owner = func.value
            if attr == "step":
                if self.is_optimizer(owner):
                    closure = bool(call.args) and not any(
                        a.keyword is not None and a.keyword.value != "closure" for a in call.args
                    )
                    return Event(
                        "step", call, self._map(owner, mapping), site, via, closure=closure
                    )
                leaf = (dotted_name(owner) or "").split(".")[-1]
                if _SCALER_NAME.search(leaf) and call.args:
                    target = call.args[0].value
                    return Event("step", call, self._map(target, mapping), site, via)
                return None
            if attr == "zero_grad":
                return Event("zero", call, self._map(owner, mapping), site, via)
            if attr in ("zero_", "fill_") and is_grad(owner):
                return self._grad_reset(call, grad_owner(owner), mapping, site, via)
            if attr in ("eval", "train") and self._layer_of_a_walk(call, owner):
                return None  # `for m in net.modules(): if isinstance(m, BatchNorm2d): m.eval()`
            if attr == "eval" and not call.args:
                return Event("eval", call, self._mode_receiver(call, owner, mapping), site, via)
            if attr == "train":
                if self.saved_mode(call) is not None:
                    # `model.train(was_training)`, `if training: model.train()`: the mode the
                    # helper found, put back; whatever it was, this call does not choose it
                    return Event(
                        "restore", call, self._mode_receiver(call, owner, mapping), site, via
                    )
                mode = positional(call, 0) or keyword(call, "mode")
                if mode is None or (type(mode) is cst.Name and mode.value == "True"):
                    return Event(
                        "train", call, self._mode_receiver(call, owner, mapping), site, via
                    )
                if type(mode) is cst.Name and mode.value == "False":
                    return Event("eval", call, self._mode_receiver(call, owner, mapping), site, via)
                return None
            if _ZERO_HELPER.search(attr):
                return Event("zero", call, None, site, via)
            return None
        if type(func) is cst.Name:
            if func.value == "_foreach_zero_" or self.names.is_(func, "torch._foreach_zero_"):
                return Event("zero", call, None, site, via, full=False)
            if _ZERO_HELPER.search(func.value):
                return Event("zero", call, None, site, via)
        elif self.names.is_(func, "torch._foreach_zero_"):
            return Event("zero", call, None, site, via, full=False)
        return None

    def _layer_of_a_walk(self, call: cst.Call, owner: cst.CSTNode) -> bool:
        """Is `owner` the variable of a loop over a model's submodules (`.modules()`,
        `.children()`, `.named_modules()`, `.named_children()`)? Setting the mode of such a
        layer (freezing a backbone's BatchNorm) is a choice per layer, not the model's mode."""
        if type(owner) is not cst.Name:
            return False
        for ancestor in self.ctx.ancestors(call):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                return False
            if type(ancestor) is not cst.For:
                continue
            if owner.value not in target_names(ancestor.target):
                continue
            for node in self.ctx.tree.descendants(ancestor.iter):
                if type(node) is cst.Attribute and node.attr.value in _SUBMODULE_WALKS:
                    return True
            return False
        return False

    def saved_mode(self, call: cst.Call) -> Optional[Tuple[cst.CSTNode, cst.CSTNode]]:
        """For a `module.train(...)` that puts back a mode saved from `module.training`: (the
        statement that saved it, the node that restores it). Two shapes:
        `was_training = model.training` ... `model.train(was_training)` (or `mode=`), and
        `training = self.model.training` ... `if training: self.model.train()` (the `if`). The
        flag must be bound once in the function, to the same module's `.training`."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value != "train":
            return None
        module = dotted_name(func.value)
        if module is None:
            return None
        flag = positional(call, 0) or keyword(call, "mode")
        restoring: cst.CSTNode = call
        if flag is None:
            statement = self.ctx.parent(self.ctx.parent(call))
            block = self.ctx.parent(statement) if statement is not None else None
            holder = self.ctx.parent(block) if block is not None else None
            if (
                type(statement) is not cst.SimpleStatementLine
                or type(holder) is not cst.If
                or holder.body is not block
            ):
                return None
            flag, restoring = holder.test, holder
        if type(flag) is not cst.Name:
            return None
        bindings = self.scopes.lookup(flag.value, flag)
        if len(bindings) != 1 or bindings[0].kind != "assign":
            return None
        saved, statement = bound_value(bindings[0]), bindings[0].statement
        if (
            statement is None
            or type(saved) is not cst.Attribute
            or saved.attr.value != "training"
            or dotted_name(saved.value) != module
            or self.scopes.enclosing_function(bindings[0].node)
            is not self.scopes.enclosing_function(call)
        ):
            return None
        return statement, restoring

    def _mode_receiver(self, call, owner, mapping) -> Optional[str]:
        """`model.eval()` -> "model"; `model = Net().eval()` -> "model";
        `model.to(device).train()` -> "model"; `_ = net.eval()` -> "net" (the result thrown
        away into `_`, as notebooks do to silence the echo of the module)."""
        parent = self.ctx.parent(call)
        if type(parent) is cst.Assign and parent.value is call and len(parent.targets) == 1:
            target = parent.targets[0].target
            discarded = type(target) is cst.Name and target.value == "_"
            if not (discarded and dotted_name(module_root(owner))):
                return self._map(target, mapping)
        return self._map(module_root(owner), mapping)

    def _rename(self, text: str, mapping: Optional[Dict[str, str]]) -> Optional[str]:
        """A helper's name or attribute chain in the analysed block's terms (None: a parameter
        nothing was passed for)."""
        mapped = _mapped(text, mapping)
        return None if mapped.startswith("<param:") else mapped

    def _map(self, expr, mapping: Optional[Dict[str, str]]) -> Optional[str]:
        if expr is None:
            return None
        text = dotted_name(expr)
        if text is None:
            return None
        return _mapped(text, mapping)

    # -- flows --------------------------------------------------------------------------------

    def flow(self, node: cst.CSTNode):
        """The flow of one iteration of a For/While loop, or of any statement or block."""
        found = self._flows.get(node)
        if found is None:
            if type(node) is cst.For:
                found = self._block(node.body, None, None, (), 2)
            elif type(node) is cst.While:
                found = Seq(
                    (
                        self._expr(node.test, None, None, (), 2),
                        self._block(node.body, None, None, (), 2),
                    )
                )
            else:
                found = self._statement(node, None, None, (), 2)
            self._flows[node] = found
        return found

    def _block(self, body, mapping, site, via, follow):
        if type(body) in (cst.IndentedBlock, cst.SimpleStatementSuite):
            statements = body.body
        elif isinstance(body, (list, tuple)):
            statements = body
        else:
            statements = [body]
        return Seq(tuple(self._statement(s, mapping, site, via, follow) for s in statements))

    def _statement(self, stmt, mapping, site, via, follow):
        args = (mapping, site, via, follow)
        if type(stmt) in (cst.SimpleStatementLine, cst.SimpleStatementSuite):
            return Seq(tuple(self._small(s, *args) for s in stmt.body))
        if type(stmt) is cst.If:
            test = self._expr(stmt.test, *args)
            settled = self.conditions.settled(
                stmt.test,
                site if site is not None else stmt,
                lambda text: self._rename(text, mapping),
            )
            if settled is None and self._module_instance_test(stmt.test):
                # `if isinstance(net, nn.Module): net.train()` (d2l's helpers also take plain
                # functions as nets): an object that is no module has no mode, no parameters
                # and no gradients for these events, so only the module's path is followed
                settled = True
            orelse = _EMPTY
            if settled is not True:
                if type(stmt.orelse) is cst.If:
                    orelse = self._statement(stmt.orelse, *args)
                elif type(stmt.orelse) is cst.Else:
                    orelse = self._block(stmt.orelse.body, *args)
            if settled is False:
                return Seq((test, orelse))  # `if self.is_test:` inside `train()`'s loop
            body = self._block(stmt.body, *args)
            guard = _mode_guard(stmt.test)
            if guard is not None:
                # `if model.training: loss.backward()`: the branch runs only in that mode
                module, training = guard
                receiver = self._map(module, mapping)
                site_of = site if site is not None else stmt
                body = Seq((Ev(Event(_MODE_GUARDS[training], stmt.test, receiver, site_of, via)),
                            body))
                orelse = Seq((Ev(Event(_MODE_GUARDS[not training], stmt.test, receiver, site_of,
                                       via)), orelse))
            if self.conditions.last_iteration(stmt):
                body = Seq((body, Exit("break")))  # `if i == len(loader) - 1:` ends the loop
            if settled is True:
                return Seq((test, body))
            return Seq((test, Alt((body, orelse))))
        if type(stmt) is cst.For:
            if args == _TOP:
                body = self.flow(stmt)  # a nested loop's own flow: built once, shared
            else:
                body = self._block(stmt.body, *args)
            # A loop that backpropagates is the training itself: a run that trains (the run the
            # script is written for) goes through it at least once, so the path that skips it
            # (`range(cfg.acc_steps)` with no step, an empty loader) is not one to report on.
            once = never_empty(self.scopes, stmt.iter) or any(
                event.kind == "backward" for event in events_of(body)
            )
            items = [self._expr(stmt.iter, *args), Repeat(body, stmt, at_least_once=once)]
            if stmt.orelse is not None:
                items.append(self._block(stmt.orelse.body, *args))
            return Seq(tuple(items))
        if type(stmt) is cst.While:
            if args == _TOP:
                body = self.flow(stmt)
            else:
                body = Seq((self._expr(stmt.test, *args), self._block(stmt.body, *args)))
            items = [Repeat(body, stmt)]
            if stmt.orelse is not None:
                items.append(self._block(stmt.orelse.body, *args))
            return Seq(tuple(items))
        if type(stmt) is cst.With:
            items = [self._expr(item.item, *args) for item in stmt.items]
            return Seq(tuple(items) + (self._block(stmt.body, *args),))
        if type(stmt) is cst.Try or type(stmt).__name__ == "TryStar":
            main = [self._block(stmt.body, *args)]
            if stmt.orelse is not None:
                main.append(self._block(stmt.orelse.body, *args))
            branches = [Seq(tuple(main))]
            for handler in stmt.handlers:
                branches.append(self._block(handler.body, *args))
            items = [Alt(tuple(branches))]
            if stmt.finalbody is not None:
                items.append(self._block(stmt.finalbody.body, *args))
            return Seq(tuple(items))
        if type(stmt).__name__ == "Match":
            return Seq(
                (
                    self._expr(stmt.subject, *args),
                    Alt(tuple(self._block(case.body, *args) for case in stmt.cases) + (_EMPTY,)),
                )
            )
        return _EMPTY  # def, class: their bodies do not run here

    def _small(self, small, mapping, site, via, follow):
        items = []
        own = self.event(small, mapping, site, via) if site is not None else self.event(small)
        if own is not None:
            items.append(Ev(own))
        items.append(self._expr(small, mapping, site, via, follow))
        if type(small) is cst.Continue:
            items.append(Exit("continue"))
        elif type(small) is cst.Break:
            # `keep_training = False; break` under `while ... and keep_training:` ends both
            items.append(Exit("break_outer" if self.conditions.ends_outer_loop(small) else "break"))
        elif type(small) is cst.Return:
            items.append(Exit("return"))
        elif type(small) is cst.Raise:
            items.append(Exit("raise"))
        elif type(small) is cst.Assert and type(small.test) is cst.Name:
            if small.test.value == "False":  # `else: assert False`: an unreachable branch
                items.append(Exit("raise"))
        return Seq(tuple(items))

    def _expr(self, node, mapping, site, via, follow):
        items = []
        for child in _calls_in_evaluation_order(node):
            event = self.event(child, mapping, site or child, via)
            target = self.loops.callgraph.callee(child) if follow > 0 else None
            followed = target is not None and target not in via
            if event is None:
                event = self._forward_event(child, mapping, site or child, via, followed)
            if event is not None:
                items.append(Ev(event))
            if followed:
                assert target is not None
                inner_map = self._parameter_map(child, target, mapping)
                body = self._block(
                    target.body, inner_map, site or child, via + (target,), follow - 1
                )
                items.append(Helper(body, child))
        return Seq(tuple(items))

    def _forward_event(self, call: cst.Call, mapping, site, via, followed: bool) -> Optional[Event]:
        """A call that may run a module's forward with autograd on: `model(x)`,
        `model.forward(x)`, and the modules handed to a call whose body is not followed here
        (`data_parallel(model, x)`, `engine.run(model, batch)`: it may run them). What it runs
        is named in the analysed block's terms. Under `no_grad()` nothing is recorded for a
        backward, so such a call is no forward of a training step."""
        func = call.func
        runs: List[str] = []
        if type(func) is cst.Attribute and func.attr.value == "forward":
            text = self._map(func.value, mapping)
            if text is not None:
                runs.append(text)
        elif type(func) in (cst.Name, cst.Attribute) and all(
            q.startswith(LOCAL_PREFIX) for q in self.names.qualified(func)
        ):  # not an imported function: a name of this file, or one nothing is known of
            text = self._map(func, mapping)
            if text is not None:
                runs.append(text)
        if not followed:
            for arg in call.args:
                if type(arg.value) in (cst.Name, cst.Attribute):
                    text = self._map(arg.value, mapping)
                    if text is not None:
                        runs.append(text)
        if not runs or self.loops.under_no_grad(call) or self._spelled_no_grad(call):
            return None
        return Event("forward", call, None, site, via, runs=tuple(runs))

    def _parameter_map(self, call: cst.Call, target: cst.FunctionDef, mapping) -> Dict[str, str]:
        """Parameter name -> the caller's argument text (in the caller's own terms)."""
        params = positional_params(target)
        out: Dict[str, str] = {}
        if (
            params
            and params[0].name.value in ("self", "cls")
            and type(call.func) is cst.Attribute
        ):
            # `agent.act(x)`: the method's `self` is `agent` (for `self.act(x)`, `self`)
            receiver = self._map(call.func.value, mapping)
            if receiver is not None:
                out[params[0].name.value] = receiver
            params = params[1:]
        index = 0
        passed = set()
        for arg in call.args:
            if arg.star:
                break
            if arg.keyword is not None:
                name = arg.keyword.value
            elif index < len(params):
                name = params[index].name.value
                index += 1
            else:
                continue
            passed.add(name)
            if is_constant(arg.value):
                text: Optional[str] = self.ctx.code(arg.value)  # `mode="eval"` settles `if mode`
            else:
                text = self._map(arg.value, mapping)
            if text is not None:
                out[name] = text
        for param in params + list(target.params.kwonly_params):
            default = param.default
            if (
                param.name.value not in passed
                and default is not None
                and is_constant(default)
                and not any(a.star for a in call.args)
            ):
                # `def run_epoch(self, epoch, cross_valid=False)` (or `mode="train"`) called
                # without it: a branch on the flag is settled (base/conditions.py)
                out.setdefault(param.name.value, self.ctx.code(default))
            # Unbound parameters keep their own name only if it cannot be confused.
            out.setdefault(param.name.value, "<param:" + param.name.value + ">")
        return out

    # -- grad mode ----------------------------------------------------------------------------

    def grad_disabled(self, node: cst.CSTNode, _depth: int = 5) -> bool:
        """Does `node` run with autograd off (no graph is recorded)? Also when every chain of
        same-file calls that reaches it starts under `torch.no_grad()` (up to five calls up:
        a `__main__` block's `with torch.no_grad(): eval_single_ckpt()` that calls
        `eval_one_epoch()`, which calls `eval_one_epoch_rpn()`)."""
        if self.loops.under_no_grad(node) or self._spelled_no_grad(node):
            return True
        if self._without_torch is None:
            self._without_torch = self.ctx.analysis(Frameworks).without_torch()
        if self._without_torch:
            return True  # no PyTorch in the file: nothing records a graph
        if type(node) is cst.Call and self._volatile_input(node):
            return True
        function = self.scopes.enclosing_function(node)
        if self._disabled_before(node, function):
            return True
        if function is None or _depth <= 0:
            return False
        key = (function, _depth)
        cached = self._no_grad_functions.get(key)
        if cached is None:
            self._no_grad_functions[key] = False  # a cycle of calls: not known to be off
            callers = self.callers(function)
            cached = bool(callers) and all(self.grad_disabled(c, _depth - 1) for c in callers)
            self._no_grad_functions[key] = cached
        return cached

    def _volatile_input(self, call: cst.Call) -> bool:
        """Legacy code (PyTorch before 0.4) turned the graph off per input:
        `net(Variable(x, volatile=True))`, an input name bound to such a Variable, one made by
        a helper given the flag (`make_variable(x, volatile=True)`, which wraps it in a
        Variable), or the output of a model run on such an input (`classifier(encoder(x))`:
        volatility spreads through every operation). It counts only in a file written for that
        PyTorch: one that uses none of 0.4's API (`.item()`, `torch.no_grad`,
        `torch.device(...)`, `.to(...)`). From 0.4 on the flag is ignored (with a warning) and a
        graph is recorded; a file on the old API (`loss.data[0]`) fails on a newer PyTorch
        before it gets there."""
        if any(self._volatile_value(arg.value, 0) for arg in call.args):
            # the file-wide question last: most calls have no such input
            return not self._uses_post_04_api()
        return False

    def _volatile_value(self, value: Optional[cst.BaseExpression], depth: int) -> bool:
        # Deep enough for an input rebound through an op and chains of methods:
        # `points = gather(points.transpose(1, 2).contiguous(), idx).transpose(1, 2)`.
        if depth > 10 or value is None:
            return False
        key = (id(value), depth)
        found = self._volatile_memo.get(key)
        if found is None:
            found = self._volatile_memo[key] = self._volatile_here(value, depth)
        return found

    def _volatile_here(self, value: cst.BaseExpression, depth: int) -> bool:
        if type(value) is cst.Name:
            return any(
                self._volatile_value(bound_value(b), depth + 1)
                for b in self.scopes.lookup(value.value, value)
            )
        if type(value) is not cst.Call:
            return False
        if is_true(keyword(value, "volatile")):
            return True
        if type(value.func) is cst.Attribute and self._volatile_value(value.func.value, depth + 1):
            return True  # `Variable(x, volatile=True).cuda()`: a method keeps the flag
        return any(
            self._volatile_value(arg.value, depth + 1) for arg in value.args if not arg.keyword
        )

    def _uses_post_04_api(self) -> bool:
        if self._post_04 is None:
            # The method's own name, whatever it is called on (`loss(x, y).item()` too).
            self._post_04 = any(
                (
                    call.func.attr.value
                    if type(call.func) is cst.Attribute
                    else (dotted_name(call.func) or "")
                ).split(".")[-1]
                in _POST_04_API
                for call in self.ctx.nodes(cst.Call)
            )
        return self._post_04

    def _spelled_no_grad(self, node: cst.CSTNode) -> bool:
        """`with torch.no_grad():` where `torch` comes from a star import (names do not
        resolve): trust the spelling."""
        for ancestor in self.ctx.ancestors(node):
            items = []
            if type(ancestor) is cst.With:
                items = [item.item for item in ancestor.items]
            elif type(ancestor) is cst.FunctionDef:
                items = [d.decorator for d in ancestor.decorators]
            for expr in items:
                func = expr.func if type(expr) is cst.Call else expr
                text = dotted_name(func) or ""
                if text.split(".")[-1] in ("no_grad", "inference_mode"):
                    return True
        return False

    def _disabled_before(self, node, function) -> bool:
        """`torch.set_grad_enabled(False)` or `stack.enter_context(torch.no_grad())` earlier in
        the same function (or module), at the function's top level."""
        at = self.ctx.tree.index.get(node, -1)
        return any(place < at for place in self._grad_disablers().get(function, ()))

    def _grad_disablers(self) -> Dict[Optional[cst.FunctionDef], List[int]]:
        """Function (None: the module) -> document positions of the calls in it that turn
        autograd off for the rest of it. Found once per file: every grad-mode question of
        every node asks."""
        if self._disablers is None:
            found: Dict[Optional[cst.FunctionDef], List[int]] = {}
            index = self.ctx.tree.index
            for call in self.ctx.nodes(cst.Call):
                if self._disables_for_the_rest(call):
                    function = self.scopes.enclosing_function(call)
                    found.setdefault(function, []).append(index.get(call, -1))
            self._disablers = found
        return self._disablers

    def _disables_for_the_rest(self, call: cst.Call) -> bool:
        if self.names.is_(call.func, "torch.set_grad_enabled", "torch.autograd.set_grad_enabled"):
            arg = positional(call, 0)
            parent = self.ctx.parent(call)
            return type(arg) is cst.Name and arg.value == "False" and type(parent) is cst.Expr
        if type(call.func) is cst.Attribute and call.func.attr.value == "enter_context":
            inner = positional(call, 0)
            return type(inner) is cst.Call and disables_grad(self.names, inner)
        return False

    def callers(self, function: cst.FunctionDef) -> List[cst.Call]:
        """Same-file call sites that run `function` (see `CallGraph`)."""
        return self.loops.callgraph.callers(function)

    # -- loops --------------------------------------------------------------------------------

    def library_owned(self, node: cst.CSTNode) -> Optional[str]:
        """The framework that runs the loop, the optimizer and the train/eval modes around
        `node`: Lightning `LightningModule` hooks, HF Trainer / MMEngine / detectron2
        subclasses, ignite handlers. Accelerate, Fabric and DeepSpeed run the user's own loop
        (they do not detach totals, reset gradients for Accelerate/Fabric, or set eval mode), so
        their code is not owned; DeepSpeed's `engine.backward`/`engine.step` is recognised by
        the rules themselves."""

        frameworks: Frameworks = self.ctx.analysis(Frameworks)
        reason = frameworks.managed(node)
        if reason in ("transformers", "mmengine", "detectron2", "ignite"):
            return reason
        if reason == "lightning":
            for ancestor in self.ctx.ancestors(node):
                if type(ancestor) is cst.ClassDef and frameworks.class_framework(ancestor):
                    return reason
        return None

    def file_backpropagates(self) -> bool:
        """Cheap: does anything in the file call `.backward(...)` or `autograd.backward`, in a
        file that uses PyTorch? A script or notebook that uses none (`Frameworks.without_torch`:
        a course's NumPy framework, `mlp.backward(dLdA)`) computes its gradients its own way:
        nothing accumulates in `.grad`, and no graph is kept."""
        found = self._backpropagates
        if found is None:
            found = self._backpropagates = any(
                type(call.func) is cst.Attribute and call.func.attr.value == "backward"
                for call in self.ctx.nodes(cst.Call)
            ) and not self.ctx.analysis(Frameworks).without_torch()
        return found

    def file_may_update_weights(self) -> bool:
        """Could anything in the file change a model's weights? False only when nothing does
        what an update needs: no `.step()` call of any kind (optimizer, scaler, scheduler, a
        trainer's), no optimizer built or named (`optimizer`, `opt_g`: one handed to a helper
        of another file still steps there), no call named for training or updating
        (`train_step`, `agent.update`, `fit`), and no gradient written into weights by hand
        (`p.data -= lr * p.grad`, `w.sub_(lr * w.grad)`). A file that only runs a model, even
        with `backward()` for saliency or head importance, leaves the weights as they were."""
        found = self._may_update
        if found is None:
            found = self._may_update = self._may_update_weights()
        return found

    def _may_update_weights(self) -> bool:
        for node in self.ctx.nodes(cst.Name):
            if OPTIMIZER_NAME.search(node.value) and not NOT_OPTIMIZER_NAME.search(node.value):
                return True
        for call in self.ctx.nodes(cst.Call):
            leaf = (dotted_name(call.func) or "").split(".")[-1]
            words = {word.lower() for word in _WORD.findall(leaf)}
            if words & _UPDATE_WORDS or self._optimizer_constructor(call):
                return True
            func = call.func
            if type(func) is cst.Attribute and func.attr.value.endswith("_"):
                if any(_writes_own_grad(func.value, arg.value) for arg in call.args):
                    return True  # w.sub_(lr * w.grad), p.data.add_(p.grad, alpha=-lr)
        for node in self.ctx.nodes(cst.Attribute):
            if OPTIMIZER_NAME.search(node.attr.value) and not NOT_OPTIMIZER_NAME.search(
                node.attr.value
            ):
                return True
        return any(_writes_own_grad(a.target, a.value) for a in self.ctx.nodes(cst.AugAssign))

    def all_loops(self) -> List[Union[cst.For, cst.While]]:
        loops = list(self.ctx.nodes(cst.For)) + list(self.ctx.nodes(cst.While))
        index = self.ctx.tree.index
        loops.sort(key=lambda n: index.get(n, 0))
        return loops

    def has_backward(self, loop: cst.CSTNode) -> bool:
        return any(e.kind == "backward" for e in events_of(self.flow(loop)))

    def is_step_loop(self, loop: cst.CSTNode) -> bool:
        """A backward runs in the loop's own iteration (not only inside a nested loop)."""
        return any(e.kind == "backward" for e in own_events(self.flow(loop)))

    def is_batch_loop(self, loop: cst.CSTNode) -> bool:
        """A `for` over a DataLoader (each iteration is one batch)."""
        return any(source.node is loop for source in self.loops.batch_sources())

    def enclosing_loops(self, node: cst.CSTNode) -> List[Union[cst.For, cst.While]]:
        return self.loops.enclosing_loops(node)

    # -- models -------------------------------------------------------------------------------

    def module_like(self) -> Set[str]:
        """Dotted texts used like nn.Modules in this file (`.eval()`, `.train()`,
        `.parameters()`, `.state_dict()`, `.load_state_dict()`, `.zero_grad()`)."""
        if self._module_like is None:
            found: Set[str] = set()
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in (
                    "eval",
                    "train",
                    "parameters",
                    "named_parameters",
                    "state_dict",
                    "load_state_dict",
                    "zero_grad",
                    "modules",
                    "children",
                ):
                    text = dotted_name(func.value)
                    if text and not self.is_optimizer(func.value):
                        found.add(text)
            self._module_like = found
        return self._module_like

    def resets_own_gradients(self, cls: cst.ClassDef) -> bool:
        """Does the class's `forward` reset the module's gradients (`self.zero_grad()`), itself
        or in a method of the class it calls? Then every call of the model starts a step from
        zero gradients: a loop around it needs no `zero_grad()` of its own."""
        methods = {
            statement.name.value: statement
            for statement in cls.body.body
            if type(statement) is cst.FunctionDef
        }
        todo = [methods["forward"]] if "forward" in methods else []
        seen: Set[str] = set()
        while todo:
            method = todo.pop()
            if method.name.value in seen:
                continue
            seen.add(method.name.value)
            params = positional_params(method)
            if not params:
                continue
            receiver = params[0].name.value
            for node in own_nodes(method.body):
                if (
                    type(node) is cst.Call
                    and type(node.func) is cst.Attribute
                    and type(node.func.value) is cst.Name
                    and node.func.value.value == receiver
                ):
                    called = node.func.attr.value
                    if called == "zero_grad":
                        return True
                    if called in methods:
                        todo.append(methods[called])
        return False

    def grad_resetting_classes(self) -> List[str]:
        """The module-level classes of this file whose `forward` resets their own gradients
        (`resets_own_gradients`): what files importing them ask in the project phase."""
        return sorted(
            statement.name.value
            for statement in self.ctx.module.body
            if type(statement) is cst.ClassDef
            and statement.bases
            and self.resets_own_gradients(statement)
        )

    def made_in_helper(self, event: Event) -> bool:
        """Is the event's receiver an object the innermost followed helper makes for itself?

        `def evaluate_split(...): model = train(...); model.eval()` evaluates a model that
        `train(...)` built in this call of the helper: the name is bound only there, and only
        to what a call returns that is not reached through a parameter or `self` (no alias
        of the caller's `model = self.model`, no `model = model_fn()` of a passed factory,
        no `model = net.cuda()` of the file's `net`).
        Such an object is not the caller's module of the same name, and what the helper does
        to it ends with the call (a helper's own loops are analysed as loops of their own)."""
        if not event.via or event.receiver is None:
            return False
        helper = event.via[-1]
        root = event.receiver.split(".")[0]
        scope = self.scopes.by_node.get(helper)
        if scope is None or root in scope.globals_ or root in scope.nonlocals:
            return False
        bindings = scope.bindings.get(root)
        if not bindings:
            return False
        reached = {p.name.value for p in positional_params(helper)} | {"self", "cls"}
        reached |= {p.name.value for p in helper.params.kwonly_params}
        for binding in bindings:
            value = binding.value if binding.kind == "assign" else None
            if type(value) is not cst.Call:
                return False
            callee: cst.BaseExpression = value.func
            while isinstance(callee, (cst.Attribute, cst.Call)):
                callee = callee.value if isinstance(callee, cst.Attribute) else callee.func
            if type(callee) is not cst.Name or callee.value in reached or callee.value == root:
                return False
            # `net.cuda()` hands back the file's `net` itself: only a function, a class or an
            # imported module makes something new
            made_by = self.scopes.lookup(callee.value, callee)
            if any(b.kind not in ("def", "class", "import") for b in made_by):
                return False
        return True

    def is_model(self, expr: cst.CSTNode) -> bool:
        text = dotted_name(expr)
        if text is None:
            return False
        leaf = text.split(".")[-1]
        if NOT_MODEL_NAME.search(leaf) or leaf.startswith("_"):
            return False
        if text in self.module_like():
            return True
        return bool(MODEL_NAME.search(leaf))

    def trained_models(self) -> Set[str]:
        """Modules trained in this file: `.train()` is called on them, or their parameters go
        to an optimizer."""
        if self._trained is None:
            found: Set[str] = set()
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if type(func) is not cst.Attribute:
                    continue
                if func.attr.value == "train":
                    mode = positional(call, 0) or keyword(call, "mode")
                    if mode is None or (type(mode) is cst.Name and mode.value == "True"):
                        text = dotted_name(func.value)
                        if text:
                            found.add(strip_wrapper(text))
                elif self._optimizer_constructor(call):
                    params = positional(call, 0) or keyword(call, "params")
                    if params is None:
                        continue
                    for node in [params, *self.ctx.tree.descendants(params)]:
                        if type(node) is cst.Call and type(node.func) is cst.Attribute:
                            if node.func.attr.value in ("parameters", "named_parameters"):
                                owner = dotted_name(node.func.value)
                                if owner:
                                    found.add(strip_wrapper(owner))
            # Modules called in a loop that backpropagates in its own iteration (a call under
            # `no_grad()` there, like sampling from an EMA copy, trains nothing).
            for loop in self.all_loops():
                if not self.file_backpropagates() or not self.is_step_loop(loop):
                    continue
                for node in own_nodes(loop.body):
                    if (
                        type(node) is cst.Call
                        and self.is_model(node.func)
                        and not self.grad_disabled(node)
                    ):
                        text = dotted_name(node.func)
                        if text:
                            found.add(strip_wrapper(text))
            self._trained = found
        return self._trained

    # -- evaluation loops ---------------------------------------------------------------------

    def eval_loops(self) -> List[Tuple[cst.For, cst.Call]]:
        """(loop, first model call) for evaluation loops: over a validation/test loader or in an
        evaluation function, calling a model, with no backward/step/autograd.grad."""
        out = []
        seen: Set[cst.Call] = set()
        for loop in self.ctx.nodes(cst.For):
            call = self.eval_loop_model_call(loop)
            if call is not None and call not in seen:
                # Nested evaluation loops share their model call: one finding, the outer loop's.
                seen.add(call)
                out.append((loop, call))
        return out

    def eval_loop_model_call(self, loop: cst.For) -> Optional[cst.Call]:
        if follows_exit(self.ctx, loop):
            return None  # `def test(): return` above it: no run reaches the loop
        function = self.scopes.enclosing_function(loop)
        function_name = function.name.value if function is not None else ""
        if _TRAIN_WORD.search(function_name):
            return None
        iterable = peel_iterable(loop.iter)
        root = _root_name(iterable)
        if root is not None and self.scopes.unbound(root):
            return None  # `for batch in testing_data_loader:` bound nowhere: NameError first
        loader_text = dotted_name(iterable) or self.ctx.code(iterable)
        over_loader = self.loops.is_loader(iterable) or bool(self._loader_name_unwrapped(loop))
        eval_named = bool(EVAL_FUNCTION.search(function_name))
        eval_loader = over_loader and bool(EVAL_LOADER.search(loader_text))
        if not (eval_loader or (eval_named and over_loader)):
            return None
        if _TRAIN_WORD.search(loader_text):
            return None
        for event in events_of(self.flow(loop)):
            if event.kind in ("backward", "step"):
                return None
        for node in self.ctx.tree.descendants(loop.body):
            if type(node) is cst.Call and (
                self.is_autograd_grad(node) or self._runs_imported_tool_of_model(node)
            ):
                return None
        for node in own_nodes(loop.body):
            if type(node) is cst.Call and self.is_model(node.func):
                if type(node.func) is cst.Attribute and (
                    self.loops.callgraph.member_kind(node.func) != "attribute"
                ):
                    # `proto.run_model(net, x)`: a bound method has no eval(); a member the
                    # class inherits from outside the file, or of an object whose class is not
                    # known, may be either: only a `self.name = ...` member is a submodule.
                    continue
                return node
        return None

    def _runs_imported_tool_of_model(self, call: cst.Call) -> bool:
        """Is `call` a use of an object that a library outside torch built around a model
        (`cam = GradCAM(model, layer)` ... `cam(x)`, `attack = torchattacks.PGD(model)` ...
        `attack(images, labels)`)? What it does with the model's modes and with autograd is
        not in this file: Grad-CAM and adversarial attacks need gradients."""
        func = call.func
        root = func.value if type(func) is cst.Attribute else func
        if type(root) is not cst.Name or self.is_model(root):
            return False  # the model itself, even rebuilt by a library (`amp.initialize(net)`)
        for binding in self.scopes.lookup(root.value, call):
            built = binding.value if binding.kind == "assign" else None
            if type(built) is not cst.Call or not self._imported_outside_torch(built.func):
                continue
            for arg in built.args:
                if type(arg.value) is cst.Name and self.is_model(arg.value):
                    return True
        return False

    def _imported_outside_torch(self, func: cst.BaseExpression) -> bool:
        root = func
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is not cst.Name:
            return False
        bindings = self.scopes.lookup(root.value, func)
        qualified = self.names.qualified(func)
        return (
            bool(bindings)
            and all(b.kind == "import" for b in bindings)
            and bool(qualified)
            and not any(q.split(".")[0] in ("torch", "torchvision") for q in qualified)
        )

    def _loader_name_unwrapped(self, loop: cst.For) -> Optional[str]:
        for source in self.loops.batch_sources():
            if source.node is loop:
                return source.loader_text
        return None


def _mapped(text: str, mapping: Optional[Dict[str, str]]) -> str:
    """`text` with its root name replaced by what `mapping` gives for it (a parameter -> the
    caller's argument text)."""
    if mapping:
        root, _, rest = text.partition(".")
        if root in mapping:
            mapped = mapping[root]
            return f"{mapped}.{rest}" if rest else mapped
    return text


def _calls_in_evaluation_order(node: cst.CSTNode) -> List[cst.Call]:
    """The calls of an expression or small statement in the order they run: a call's callee
    and arguments before the call (`F.cross_entropy(model(x), y).backward()`: the forward
    first, the backward last), not entering nested def/class/lambda bodies."""
    out: List[cst.Call] = []
    stack: List[Tuple[cst.CSTNode, bool]] = [(node, False)]
    while stack:
        current, finished = stack.pop()
        if finished:
            out.append(current)  # type: ignore[arg-type]
            continue
        if type(current) is cst.Call:
            stack.append((current, True))
        if current is not node and type(current) in SCOPE_NODE_TYPES:
            continue
        stack.extend((kid, False) for kid in reversed(children(current)))
    return out


def _writes_own_grad(target: cst.CSTNode, value: cst.CSTNode) -> bool:
    """Is `target` a weight updated from its gradient (`p.data -= lr * p.grad`, `w -= lr *
    w.grad`)? A sum of gradients into another tensor (`importance += mask.grad.abs()`) is not."""
    if type(target) is cst.Attribute and target.attr.value == "data":
        return _grad_owners(value) != set()
    return _root(target) in _grad_owners(value)


def _grad_owners(node: cst.CSTNode) -> Set[Optional[str]]:
    """The root names of the `.grad` attributes the expression reads."""
    found: Set[Optional[str]] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if type(current) is cst.Attribute and current.attr.value == "grad":
            found.add(_root(current.value))
        stack.extend(children(current))
    return found


# Events at the start of a branch whose test reads a module's mode (`if model.training:`).
_MODE_GUARDS = {True: "in_train_mode", False: "in_eval_mode"}


def _mode_guard(test: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, bool]]:
    """`model.training` -> (model, True); `not self.training` -> (self, False)."""
    polarity = True
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test, polarity = test.expression, not polarity
    if type(test) is cst.Attribute and test.attr.value == "training":
        return test.value, polarity
    return None


def _root_name(node: cst.CSTNode) -> Optional[cst.Name]:
    """The name an attribute or subscript chain starts from (`loaders` of `loaders["val"].x`)."""
    while type(node) in (cst.Attribute, cst.Subscript):
        node = node.value  # type: ignore[attr-defined]
    return node if type(node) is cst.Name else None


def _root(node: cst.CSTNode) -> Optional[str]:
    name = _root_name(node)
    return name.value if name is not None else None
