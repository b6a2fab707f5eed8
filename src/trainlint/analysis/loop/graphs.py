"""Which values hold an autograd graph in a loop, and which graphs cross iterations: the facts
behind the loop rules about graphs kept alive (TRL401 totals, TRL402 states, TRL403
`retain_graph`).

`AutogradGraphs` is a part of `TrainingSteps` (it uses its flows, events and grad mode):

- `graph_names(loop)`: names holding a tensor with a graph inside the loop (backpropagated
  losses and what is computed from them or from loss functions), `graph_leaves(expr, names)`
  the parts of an expression that carry one;
- `recorded_without_grad(leaf)` / `holds_no_graph(value)`: bound only under `no_grad()`, from a
  detaching read, a number, or a same-file helper whose every return holds no graph;
- `numpy_element(target)`: `losses[i]` of a numpy array, which stores numbers, not graphs;
- `freed_names(loop)`: what a `backward()` of the iteration frees (its saved activations);
- `carried_graph_names(loop)`: values fed back into what computes them and so carried, with
  their graph, into the next iteration;
- `frozen_modules()` / `frozen_at(module, node)`: modules whose every parameter the file sets to
  need no gradient (before `node`, in its function), which record no graph of their own;
  `unfrozen_after(module, loop)`: whether their gradients can be switched back on once the
  loop runs.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from ...walk import children
from ..base.calls import keyword
from ..base.dataflow import events_of
from ..base.names import dotted_name, dotted_targets
from ..base.nodes import enclosing_class, is_name
from ..base.vocabulary import GRAPHLESS_READS, LOSS_FUNCTIONS, LOSS_NAME
from ..parallel.parallel import module_root
from .stepexprs import is_loss_key, name_leaves

# Calls that make (or may return) tensors that require grad, or modules.
_GRAD_SOURCE_PREFIXES = (
    "torch.optim.",
    "torch.autograd.",
    "torch.hub.",
    "torch.load",
    "torch.jit.",
    "torch.compile",
    "torch.func.",
)
# Packages whose functions make data, plots and numbers, never a module or a grad tensor.
_PLAIN_DATA_PACKAGES = frozenset(
    getattr(__import__("sys"), "stdlib_module_names", frozenset())
) | frozenset(
    {
        "torch", "torchvision", "numpy", "pandas", "matplotlib", "seaborn", "PIL", "tqdm",
        "IPython", "sklearn", "scipy",
    }
)
# Methods of modules and of tensors with a graph (unless a plain class of the file defines them:
# a from-scratch network's hand-written `backward`).
_MODULE_OR_AUTOGRAD_METHODS = frozenset(
    {
        "backward", "parameters", "named_parameters", "zero_grad", "load_state_dict",
        "modules", "children", "forward", "train", "eval", "register_forward_hook",
    }
)
_GRAD_SOURCE_LIBRARIES = ("torchvision.models", "torchvision.ops")
_BUILTIN_NAMES = frozenset(dir(__import__("builtins")))

_DETACHING_CALLS = {"float", "int", "bool", "round", "len", "str", "repr"}
# Builtins whose result is one of their arguments, or arithmetic on them: it holds a graph only
# when an argument does.
_PASSING_BUILTINS = frozenset({"max", "min", "abs", "sum"})
# numpy functions that make a new array of numbers: an element written into it is converted to
# the array's dtype (a tensor with a graph becomes a float, as `float(loss)` does).
_NUMPY_ARRAY_MAKERS = frozenset(
    {
        "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
        "array", "asarray", "arange", "linspace",
    }
)


class AutogradGraphs:
    """Graph facts of `TrainingSteps` (mixed into it; see the module docstring)."""

    # What `TrainingSteps` provides (annotations only: no class attributes are created).
    ctx: Any
    scopes: Any
    names: Any
    loops: Any
    flow: Callable[[cst.CSTNode], Any]
    backward_tensor: Callable[[cst.Call], Optional[cst.BaseExpression]]
    grad_disabled: Callable[..., bool]
    conditions: Any
    _attribute_writes_found: Dict[str, List[Tuple[cst.CSTNode, Optional[cst.CSTNode]]]]

    def graph_names(self, loop: cst.CSTNode, seeds: Iterable[str] = ()) -> Set[str]:
        """Names (dotted) that hold a tensor with an autograd graph inside the loop: what is
        backpropagated there, what a loss function or loss attribute returns, `seeds` (names
        the caller knows to hold one: a helper's summary says it returns its loss), and what
        is computed from those without detaching."""
        names: Set[str] = set(seeds)
        for event in events_of(self.flow(loop)):
            if event.kind == "backward" and not event.via and type(event.node) is cst.Call:
                tensor = self.backward_tensor(event.node)
                for leaf in name_leaves(tensor):
                    names.add(leaf)
        assigns = [
            n
            for n in self.ctx.tree.descendants(loop)
            if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign)
        ]
        for _ in range(3):
            grown = False
            for assign in assigns:
                value = assign.value
                if value is None:
                    continue
                if not self.carries_graph(value, names):
                    continue
                targets = (
                    [t.target for t in assign.targets]
                    if type(assign) is cst.Assign
                    else [assign.target]
                )
                for target in targets:
                    if type(target) is cst.Tuple or type(target) is cst.List:
                        # `loss, logs = compute(...)`: only loss-named parts.
                        for element in target.elements:
                            text = dotted_name(element.value)
                            if text and LOSS_NAME.search(text.split(".")[-1]):
                                if text not in names:
                                    names.add(text)
                                    grown = True
                        continue
                    text = dotted_name(target)
                    if text and text not in names:
                        names.add(text)
                        grown = True
            if not grown:
                break
        return names

    def carried_graph_names(self, loop: cst.CSTNode) -> Set[str]:
        """Names that carry an autograd graph from one iteration of `loop` to the next: a value
        fed back into what computes it (`out, hidden = rnn(x, hidden)`, `total += loss` with a
        graph-carrying `loss`), recorded with grad on and never re-bound otherwise in the loop
        (a reset or `.detach()` each iteration cuts the chain)."""
        names = self.graph_names(loop)
        fed: Dict[str, List[cst.CSTNode]] = {}
        others: Set[str] = set()
        if type(loop) is cst.For:
            others.update(dotted_targets(loop.target))
        for node in self.ctx.tree.descendants(loop):
            if type(node) is cst.For:
                others.update(dotted_targets(node.target))
                continue
            if type(node) is cst.AugAssign:
                target = dotted_name(node.target)
                if target and self.carries_graph(node.value, names):
                    fed.setdefault(target, []).append(node)
                elif target:
                    others.add(target)
                continue
            if type(node) is cst.Call and type(node.func) is cst.Attribute:
                if node.func.attr.value in ("detach_", "zero_", "fill_", "copy_"):
                    root = node.func.value
                    while type(root) is cst.Subscript:
                        root = root.value
                    root_name = dotted_name(root)
                    if root_name:
                        others.add(root_name)
                continue
            if type(node) is not cst.Assign:
                continue
            bound: List[str] = []
            for assign_target in node.targets:
                bound.extend(dotted_targets(assign_target.target))
            mentioned = _read_names(node.value)
            # `iters = iters + 1`: arithmetic on names and constants carries a graph only when
            # a part of it does; a call (`out, hidden = rnn(x, hidden)`) may make one.
            may_carry = self._calls_in(node.value) or self.carries_graph(node.value, names)
            for name in bound:
                if name in mentioned and may_carry and not self._detaching(node.value):
                    fed.setdefault(name, []).append(node)
                else:
                    others.add(name)
        return {
            name
            for name, sites in fed.items()
            if name not in others and not all(self.grad_disabled(site) for site in sites)
        }

    def _calls_in(self, expr: cst.CSTNode) -> bool:
        """Does `expr` call something that may return a graph (not `.item()`, `float(...)`, nor
        `max(best, acc)`, whose result is one of its arguments or made of them)?"""
        return any(
            type(node) is cst.Call and not self._detaching(node) and not self._passing(node)
            for node in [expr, *self.ctx.tree.descendants(expr)]
        )

    def _passing(self, call: cst.Call) -> bool:
        """A builtin (not rebound in the file) whose result holds a graph only when an argument
        does: `max`, `min`, `abs`, `sum`."""
        func = call.func
        return (
            type(func) is cst.Name
            and func.value in _PASSING_BUILTINS
            and not self.scopes.lookup(func.value, call)
        )

    def freed_names(self, loop: cst.CSTNode) -> Set[str]:
        """Names whose graph a `backward()` in the loop's iteration frees (no `retain_graph`):
        the backpropagated tensor, the terms it was computed from in the loop
        (`loss = cls_loss + box_loss`) and the other outputs of the call that returned it. A
        running total of such a value keeps only the freed autograd nodes alive (host
        bookkeeping), not the saved activations."""
        found: Set[str] = set()
        for event in events_of(self.flow(loop)):
            if event.kind != "backward" or event.via or type(event.node) is not cst.Call:
                continue
            retain = keyword(event.node, "retain_graph")
            if retain is not None and not (
                type(retain) is cst.Name and retain.value in ("False", "None")
            ):
                continue
            tensor = self.backward_tensor(event.node)
            found.update(name_leaves(tensor))
            while type(tensor) is cst.Subscript:
                # `out["loss"].backward()`: the graph of what `out` holds is freed
                tensor = tensor.value
                if dotted_name(tensor):
                    found.add(dotted_name(tensor))  # type: ignore[arg-type]
        if not found:
            return found
        assigns = [n for n in self.ctx.tree.descendants(loop) if type(n) is cst.Assign]
        for _ in range(3):
            grown = False
            for assign in assigns:
                unpacked = [n for t in assign.targets for n in dotted_targets(t.target)]
                if type(assign.value) is cst.Call and any(n in found for n in unpacked):
                    # `loss, box_loss, cls_loss = criterion(...)`: the outputs of one call
                    # share the graph its backpropagated output frees.
                    for name in unpacked:
                        if name not in found:
                            found.add(name)
                            grown = True
                if not any(dotted_name(t.target) in found for t in assign.targets):
                    continue
                for node in [assign.value, *self.ctx.tree.descendants(assign.value)]:
                    text = dotted_name(node)
                    if text and text not in found and type(node) in (cst.Name, cst.Attribute):
                        found.add(text)
                        grown = True
            if not grown:
                break
        return found

    def recorded_without_grad(
        self, leaf: cst.CSTNode, _depth: int = 5
    ) -> bool:
        """Is `leaf` (a name, `outputs.loss`, `out["loss"]`) bound only where autograd was off,
        or from a detaching read? (`with torch.no_grad(): outputs = model(**batch)` then
        `loss = outputs.loss` outside the block holds no graph.)"""
        root = leaf
        while (type(root) is cst.Attribute or type(root) is cst.Subscript):
            root = root.value
        if type(root) is not cst.Name or _depth <= 0:
            return False
        bindings = [b for b in self.scopes.lookup(root.value, root) if b.statement is not None]
        if not bindings:
            return False
        # Bound earlier in the same iteration: that binding is the one in effect.
        earlier = self._earlier_in_iteration(root, [b.statement for b in bindings])
        inside = [b for b in bindings if b.statement in earlier]
        if inside:
            index = self.ctx.tree.index
            last = max(inside, key=lambda b: index.get(b.statement, -1))
            # `total += x` adds to what came before: every binding in the iteration counts.
            bindings = inside if last.kind == "augassign" else [last]
        for binding in bindings:
            if binding.kind not in ("assign", "augassign", "unpack", "annassign", "with", "for"):
                return False
            statement = binding.statement
            if self.grad_disabled(statement):
                continue
            value = getattr(statement, "value", None)
            if binding.kind in ("assign", "unpack") and value is not None:
                # `loss_b, metric_b = loss_batch(...)` with `return loss.item(), metric_b`:
                # no part of a value that holds no graph as a whole holds one.
                if self.holds_no_graph(value, _depth - 1):
                    continue
            return False
        return True

    def _earlier_in_iteration(
        self, node: cst.CSTNode, statements: List[cst.CSTNode]
    ) -> List[cst.CSTNode]:
        """Those of `statements` that come before `node` inside the innermost loop around it
        (none outside a loop): in one iteration, the last of them is what `node` reads."""
        loops = self.loops.enclosing_loops(node)
        if not loops:
            return []
        index = self.ctx.tree.index
        at = index.get(node, -1)
        return [
            s
            for s in statements
            if index.get(s, -1) < at and loops[0] in set(self.ctx.ancestors(s))
        ]

    def holds_no_graph(
        self, value: cst.CSTNode, _depth: int = 2, itself: Optional[str] = None
    ) -> bool:
        """Is `value` known to hold no autograd graph: a number, a detaching read, a name bound
        only without grad, a dict/tuple/list of such values, arithmetic on such values, a
        method of a detached tensor (`z.data.mean()`) given such values, or the result of a
        same-file function whose every return is such a value (`res = evaluate(...)` returning
        a dict of losses computed under `torch.no_grad()`)? `itself` is the running total being
        written (`self.loss_sum = self.loss_sum + score * n`): its own earlier value counts as
        holding none, since every write of it is checked the same way."""
        if _depth < 0:
            return False
        if itself is not None and dotted_name(value) == itself:
            return True
        if type(value) in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString):
            return True
        if type(value) is cst.Name and value.value in ("None", "True", "False"):
            return True
        if type(value) is cst.UnaryOperation:
            return self.holds_no_graph(value.expression, _depth, itself)
        if type(value) is cst.BinaryOperation:
            return self.holds_no_graph(value.left, _depth, itself) and self.holds_no_graph(
                value.right, _depth, itself
            )
        if self._detaching(value):
            return True
        if type(value) in (cst.Name, cst.Attribute, cst.Subscript):
            return self.recorded_without_grad(value, _depth)
        if type(value) is cst.Dict:
            return all(
                type(e) is cst.DictElement and self.holds_no_graph(e.value, _depth)
                for e in value.elements
            )
        if isinstance(value, (cst.Tuple, cst.List)):
            return all(
                type(e) is cst.Element and self.holds_no_graph(e.value, _depth)
                for e in value.elements
            )
        if type(value) is cst.Call and type(value.func) is cst.Attribute:
            # `z.data.mean()`, `loss.detach().sum(0)`: a tensor method of a detached value,
            # given nothing that holds a graph, makes none.
            receiver = value.func.value
            if (self._detaching(receiver) or self.holds_no_graph(receiver, _depth - 1)) and all(
                self.holds_no_graph(a.value, _depth - 1) for a in value.args
            ):
                return True
        if type(value) is cst.Call:
            function = self.loops.callgraph.callee(value)
            if function is None or function is self.scopes.enclosing_function(value):
                return False
            returns = [
                n
                for n in self.ctx.tree.descendants(function)
                if type(n) is cst.Return and self.scopes.enclosing_function(n) is function
            ]
            return bool(returns) and all(
                r.value is not None
                and (self.grad_disabled(r) or self.holds_no_graph(r.value, _depth - 1))
                for r in returns
            )
        return False

    def frozen_modules(self) -> Dict[str, List[cst.CSTNode]]:
        """The modules (as written: `model`, `self.backbone`) whose parameters the file freezes,
        with the statements that freeze them:
        `model.requires_grad_(False)`, or a loop over `model.parameters()` (or
        `named_parameters()`) that sets each `p.requires_grad = False` or calls
        `p.requires_grad_(False)`. Such a module records no graph of its own: run on inputs that
        need no gradient it builds none, with autograd on or off."""
        cached = getattr(self, "_frozen_modules", None)
        if cached is not None:
            return cached
        found: Dict[str, List[cst.CSTNode]] = {}
        for call in self.ctx.nodes(cst.Call):
            receiver = _grad_switched_off(call)
            text = dotted_name(receiver) if receiver is not None else None
            if text:
                found.setdefault(text, []).append(call)
        for loop in self.ctx.nodes(cst.For):
            iterated = loop.iter
            if not (
                type(iterated) is cst.Call
                and type(iterated.func) is cst.Attribute
                and iterated.func.attr.value in ("parameters", "named_parameters")
            ):
                continue
            target = loop.target
            if type(target) is cst.Tuple and target.elements:
                target = target.elements[-1].value
            if type(target) is not cst.Name:
                continue
            module = dotted_name(iterated.func.value)
            if module and _freezes(loop.body, target.value):
                found.setdefault(module, []).append(loop)
        self._frozen_modules = found
        return found

    def unfrozen_after(self, module: str, loop: cst.CSTNode) -> bool:
        """Can gradients of `module` be switched back on once the loop runs: a
        `requires_grad_()` / `requires_grad_(True)` of it, or any `p.requires_grad = True`, in
        the loop, after it, or in another function? (The setup before the loop in the same
        function, `text_encoder.requires_grad_(train_text_encoder)`, only sets the start.)"""
        index = self.ctx.tree.index
        start = index.get(loop, -1)
        home = self.scopes.enclosing_function(loop)

        def may_run_later(node) -> bool:
            return (
                index.get(node, -1) > start
                or self.scopes.enclosing_function(node) is not home
            )

        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "requires_grad_":
                if dotted_name(module_root(func.value)) != module or not may_run_later(call):
                    continue
                arg = call.args[0].value if call.args else None
                if not (type(arg) is cst.Name and arg.value == "False"):
                    return True
        for assign in self.ctx.nodes(cst.Assign):
            target = assign.targets[0].target
            if type(target) is cst.Attribute and target.attr.value == "requires_grad":
                if not (type(assign.value) is cst.Name and assign.value.value == "False"):
                    if may_run_later(assign):
                        return True  # a loop that unfreezes some parameters: not followed
        return False

    def frozen_at(self, module: str, node: cst.CSTNode, same: Callable[[str, str], bool]) -> bool:
        """Has a freeze of `module` (or of a module `same` takes for it) run before `node` in
        its function, with nothing rebinding the module between them?"""
        for frozen, sites in self.frozen_modules().items():
            if not same(frozen, module):
                continue
            root = frozen.split(".")[0]
            for site in sites:
                owner = enclosing_class(self.ctx, site) if root == "self" else None
                if owner is not None and owner is enclosing_class(self.ctx, node):
                    # `self.teacher.requires_grad_(False)` in `__init__`: the attribute keeps
                    # its frozen parameters in every method of the class
                    return True
                if self.conditions.still_holds(frozen, site, node) and (
                    root == frozen or self.conditions.still_holds(root, site, node)
                ):
                    return True
        return False

    def records_autograd_graphs(self) -> bool:
        """Can anything in this file hold an autograd graph? A graph needs a tensor that
        requires grad: an `nn.Module` (or any class with a base the analysis cannot rule out),
        a `torch.nn` layer or `nn.Parameter`, `requires_grad`, an optimizer, `torch.autograd`,
        a loaded or library-built object (`torch.load`, `timm.create_model`, a function imported
        from the project), or a name the file does not define. Without any of these (a
        from-scratch network in a plain class, `torch.zeros(...).normal_()` weights updated by
        hand-written gradients) no value carries a graph, whatever the names say."""
        cached = getattr(self, "_records_graphs", None)
        if cached is None:
            cached = self._records_graphs = self._find_grad_source()
        return cached

    def _find_grad_source(self) -> bool:
        if "requires_grad" in self.ctx.source.text:
            return True
        for cls in self.ctx.nodes(cst.ClassDef):
            if any(
                not (type(b.value) is cst.Name and b.value.value == "object") for b in cls.bases
            ):
                return True  # nn.Module, or a base from elsewhere that may be one
        names = self.names
        callgraph = self.loops.callgraph
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            qualified = names.qualified(func)
            for qualname in qualified:
                if qualname.startswith(_GRAD_SOURCE_PREFIXES):
                    return True
                if qualname.startswith("torch.nn."):
                    leaf = qualname.split(".")[-1]
                    if leaf[:1].isupper():
                        return True  # nn.Linear(...), nn.Parameter(...)
            if type(func) is cst.Attribute and func.attr.value in _MODULE_OR_AUTOGRAD_METHODS:
                if callgraph.member_kind(func) == "method":
                    continue
                if self._plain_class_defines(func.attr.value):
                    continue  # `model.backward(x, ...)` on a parameter: the file's own method
                return True  # a tensor's backward(), a module's parameters()
            if type(self.ctx.parent(call)) is cst.Expr:
                continue  # `check_packages(d)`: a result nobody keeps can hold no graph here
            root = func
            while type(root) is cst.Attribute:
                root = root.value
            if type(root) is not cst.Name:
                continue
            bindings = self.scopes.lookup(root.value, root)
            if not bindings:
                if root.value not in _BUILTIN_NAMES:
                    return True  # defined where the analysis cannot see (a star import)
                continue
            for binding in bindings:
                if binding.kind == "import":
                    top = (binding.qualname or ".").split(".")[0]
                    if top not in _PLAIN_DATA_PACKAGES or any(
                        q.startswith(_GRAD_SOURCE_LIBRARIES) for q in qualified
                    ):
                        return True  # a library or project function may build a model
                elif func is root and binding.kind not in ("def", "class"):
                    return True  # a value called (`net(images)`): it may be a module
        return False

    def _plain_class_defines(self, name: str) -> bool:
        """Is `name` a method of a class of this file with no base (or only `object`): a
        from-scratch network's hand-written `forward`/`backward`?"""
        for function in self.loops.callgraph.functions_named(name):
            owner = self.ctx.parent(self.ctx.parent(function))
            if type(owner) is cst.ClassDef and all(
                type(b.value) is cst.Name and b.value.value == "object" for b in owner.bases
            ):
                return True
        return False

    def carries_graph(self, expr: cst.CSTNode, names: Set[str]) -> bool:
        """Does `expr` hold a graph: a graph name, a loss function call or `.loss`, not detached?"""
        return any(True for _ in self.graph_leaves(expr, names))

    def graph_leaves(
        self, expr: cst.CSTNode, names: Set[str]
    ) -> Iterator[cst.CSTNode]:
        """The parts of `expr` that carry a graph into its value (not under a detaching read);
        none in a file where nothing can require grad (`records_autograd_graphs`)."""
        if not self.records_autograd_graphs():
            return
        yield from self.argument_leaves(expr, names)

    def argument_leaves(
        self, expr: cst.CSTNode, names: Set[str]
    ) -> Iterator[cst.CSTNode]:
        """`graph_leaves` where `names` hold values that come from elsewhere (a function's
        parameters, which its callers in other files fill): what the file itself can make does
        not matter, so there is no file-level guard."""
        stack = [expr]
        while stack:
            node = stack.pop()
            if self._detaching(node):
                continue
            text = dotted_name(node)
            if text is not None and text in names:
                yield node
                continue
            if type(node) is cst.Call and self._is_loss_call(node):
                yield node
                continue
            if type(node) is cst.Attribute and re.search(r"(^|_)loss", node.attr.value):
                if not self._written_without_graph(node):
                    yield node
                continue
            if type(node) is cst.Subscript and is_loss_key(node):
                if not self._written_without_graph(node):
                    yield node
                continue
            if type(node) in (cst.Lambda, cst.FunctionDef):
                continue
            if type(node) in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
                # `[l.item() for l in losses]` holds values; `sum(l for l in losses)` a graph:
                # a comprehension carries what its element carries, its variables bound from
                # graph-holding iterables.
                comprehension: Any = node
                inner = set(names)
                clause = comprehension.for_in
                while clause is not None:
                    if any(True for _ in self.argument_leaves(clause.iter, inner)):
                        inner.update(dotted_targets(clause.target))
                    clause = clause.inner_for_in
                # (a dict comprehension's keys are names: its values carry what it holds)
                part = comprehension.value if type(node) is cst.DictComp else comprehension.elt
                yield from self.argument_leaves(part, inner)
                continue
            if type(node) is cst.Call:
                # Arguments of an unknown call may or may not reach its result: follow only
                # tensor arithmetic and torch reductions (`torch.stack(losses).mean()`).
                func = node.func
                if type(func) is cst.Attribute:
                    stack.append(func.value)
                if self._tensor_function(node):
                    stack.extend(a.value for a in node.args)
                continue
            stack.extend(children(node))

    def _written_without_graph(self, attribute: cst.Attribute | cst.Subscript) -> bool:
        """Does the file write this loss-named attribute (`self.p_loss_avg`, `self.loss_counter`)
        or slot (`self.iter_info["loss"]`) itself, and only with values that hold no graph
        (`0.0`, `loss.data.numpy()`, `loss.data.item()`, `+= 1`)? Its name then says what it
        counts, not that it is a loss tensor. One the file never writes (`outputs.loss` from a
        library's model) keeps its name's meaning."""
        text = _written_text(attribute)
        if text is None:
            return False
        writes = self._attribute_writes().get(text, [])
        if text.startswith("self."):
            # `self.p_loss_avg` in a worker's method is the worker's attribute: another class
            # of the file (a master holding an `mp.Value` of that name) writes a different one.
            own_class = self._enclosing_class(attribute)
            writes = [w for w in writes if self._enclosing_class(w[0]) is own_class]
        if not writes:
            return False
        # Written earlier in the same iteration (`info["loss"] = loss.item()` two lines up):
        # that write is the one read, whatever other methods store there.
        earlier = self._earlier_in_iteration(
            attribute, [w[0] for w in writes if type(w[0]) is cst.Assign]
        )
        if earlier:
            index = self.ctx.tree.index
            writes = [max((w for w in writes if w[0] in earlier), key=lambda w: index[w[0]])]
        return all(
            value is not None
            and (self.grad_disabled(write) or self.holds_no_graph(value, 4, itself=text))
            for write, value in writes
        )

    def numpy_element(self, target: cst.CSTNode) -> bool:
        """Is `target` (`losses[i]`) an element of a numpy array: is every binding of its
        container that reaches it made by a numpy constructor (`losses = np.zeros(n)`)? numpy
        converts what is stored into the array's dtype, so `losses[i] += loss` keeps a number,
        never the loss's graph."""
        if type(target) is not cst.Subscript or type(target.value) is not cst.Name:
            return False
        container = target.value
        bindings = self.scopes.lookup(container.value, container)
        return bool(bindings) and all(
            binding.kind == "assign"
            and type(getattr(binding.statement, "value", None)) is cst.Call
            and self._makes_numpy_array(binding.statement.value)
            for binding in bindings
        )

    def _makes_numpy_array(self, call: cst.Call) -> bool:
        # `numpy.zeros`, or `np.zeros` through a star import (`from fastai.conv_learner import
        # *` resolves it to `fastai.conv_learner.np.zeros`) or from nowhere: the name is numpy's
        # everywhere, as the detaching reads above also assume. A local `np` (`np = torch`) is
        # not.
        qualified: Iterable[str] = self.names.qualified(call.func) or {
            dotted_name(call.func) or ""
        }
        for name in qualified:
            parts = name.split(".")
            if parts[-1] not in _NUMPY_ARRAY_MAKERS or name.startswith("<") or len(parts) < 2:
                continue
            if parts[-2] == "np" or parts[:-1] == ["numpy"]:
                return True
        return False

    def _enclosing_class(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return next((a for a in self.ctx.ancestors(node) if type(a) is cst.ClassDef), None)

    def _attribute_writes(self) -> Dict[str, List[Tuple[cst.CSTNode, Optional[cst.CSTNode]]]]:
        """Every write of a dotted attribute, by its text: the statement and the value it
        stores (the whole right-hand side for a tuple target; None when the value cannot be
        told, as for a `for` or `with` target)."""
        found = getattr(self, "_attribute_writes_found", None)
        if found is None:
            found = {}

            def add(target: cst.CSTNode, statement: cst.CSTNode, value) -> None:
                if type(target) in (cst.Tuple, cst.List):
                    for element in target.elements:  # type: ignore[attr-defined]
                        add(element.value, statement, value)
                elif type(target) is cst.StarredElement:
                    add(target.value, statement, value)
                elif type(target) in (cst.Attribute, cst.Subscript):
                    text = _written_text(target)
                    if text:
                        found.setdefault(text, []).append((statement, value))

            for node in self.ctx.nodes(cst.Assign):
                for target in node.targets:
                    add(target.target, node, node.value)
            for node in self.ctx.nodes(cst.AugAssign):
                add(node.target, node, node.value)
            for node in self.ctx.nodes(cst.AnnAssign):
                if node.value is not None:
                    add(node.target, node, node.value)
            for node in self.ctx.nodes(cst.For):
                add(node.target, node, None)
            for node in self.ctx.nodes(cst.AsName):
                add(node.name, node, None)
            self._attribute_writes_found = found
        return found

    def _detaching(self, node: cst.CSTNode) -> bool:
        if type(node) is cst.Attribute and node.attr.value in GRAPHLESS_READS:
            return True
        if type(node) is cst.Call:
            func = node.func
            if type(func) is cst.Attribute and func.attr.value in GRAPHLESS_READS:
                return True
            if type(func) is cst.Name and func.value in _DETACHING_CALLS:
                return True
            dotted = dotted_name(func) or ""
            if dotted.startswith(("np.", "numpy.", "math.")):
                return True
        return False

    def _is_loss_call(self, call: cst.Call) -> bool:
        dotted = dotted_name(call.func) or ""
        leaf = dotted.split(".")[-1]
        if leaf in LOSS_FUNCTIONS:
            return True
        if not re.search(r"loss|criterion", leaf, re.I) or leaf.startswith(
            ("get_", "build_", "make_", "create_", "log", "print", "record", "update", "plot")
        ):
            return False
        return not self._returns_without_graph(call)

    def _returns_without_graph(self, call: cst.Call) -> bool:
        """`estimate_loss(...)` where `estimate_loss` is a function of this file that returns
        only with autograd off (decorated with `@torch.no_grad()`, or every `return` inside
        `with torch.no_grad():`): its result holds no graph whatever its name says."""
        if type(call.func) is not cst.Name:
            return False
        bindings = self.scopes.lookup(call.func.value, call)
        functions = [b.node for b in bindings if b.kind == "def"]
        if not functions or len(functions) != len(bindings):
            return False
        for function in functions:
            if type(function) is not cst.FunctionDef:
                return False
            returns = [
                n
                for n in self.ctx.tree.descendants(function)
                if type(n) is cst.Return and self.scopes.enclosing_function(n) is function
            ]
            if not returns or not all(self.grad_disabled(n, 0) for n in returns):
                return False
        return True

    def _tensor_function(self, call: cst.Call) -> bool:
        dotted = dotted_name(call.func) or ""
        return dotted in ("sum", "torch.stack", "torch.cat", "torch.sum", "torch.mean")


def _written_text(node: cst.CSTNode) -> Optional[str]:
    """The text that names an attribute (`self.loss_avg`) or a string-keyed slot of one
    (`self.iter_info["loss"]`, whatever its quotes) wherever the file writes or reads it."""
    if type(node) is not cst.Subscript:
        return dotted_name(node)
    owner = dotted_name(node.value)
    if owner is None or len(node.slice) != 1:
        return None
    index = node.slice[0].slice
    key = getattr(index, "value", None)
    if type(key) is not cst.SimpleString or not isinstance(key.evaluated_value, str):
        return None
    return f"{owner}[{key.evaluated_value!r}]"


def _read_names(expr: cst.CSTNode) -> Set[str]:
    """Dotted names read in `expr` (`self.pi(s, h)` reads "self.pi", "s", "h"; not "pi")."""
    out: Set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        text = dotted_name(node)
        if text is not None:
            out.add(text)
            continue
        if type(node) is cst.Attribute:
            stack.append(node.value)
            continue
        stack.extend(children(node))
    return out


def _freezes(body: cst.CSTNode, param: str) -> bool:
    """Does the loop body set `param.requires_grad = False` or call
    `param.requires_grad_(False)` at its top level (not under a condition that picks some)?"""
    statements = getattr(body, "body", ())
    for statement in statements:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.Assign and is_name(small.value, "False"):
                for target in small.targets:
                    attr = target.target
                    if (
                        type(attr) is cst.Attribute
                        and attr.attr.value == "requires_grad"
                        and type(attr.value) is cst.Name
                        and attr.value.value == param
                    ):
                        return True
            if type(small) is cst.Expr and type(small.value) is cst.Call:
                receiver = _grad_switched_off(small.value)
                if receiver is not None and is_name(receiver, param):
                    return True
    return False


def _grad_switched_off(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The receiver of `x.requires_grad_(False)`; None for any other call."""
    func = call.func
    if (
        type(func) is cst.Attribute
        and func.attr.value == "requires_grad_"
        and call.args
        and is_name(call.args[0].value, "False")
    ):
        return func.value
    return None
