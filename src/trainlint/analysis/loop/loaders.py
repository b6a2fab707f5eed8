"""Where a DataLoader goes: the loops and calls that iterate it (the distributed rules: TRL303,
TRL308).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from ..base.calls import argument, has_star_args, literal_truth
from ..base.names import Names, dotted_name
from ..base.scopes import Scopes
from ..base.vocabulary import EVAL_LOADER
from .structure import Loops, is_method_call
from .. import Analysis
from ..base.nodes import enclosing_class, positional_params


# -- where a DataLoader goes (the distributed rules: TRL303, TRL308) ---------------------------


@dataclass
class LoaderUse:
    """One place where a loader's batches are drawn, or where the loader is handed away."""

    site: cst.CSTNode  # the For that iterates it, the `next(...)` call, or the opaque Call
    kind: str  # "loop": iterated here; "call": handed to a function this file does not define
    reference: cst.CSTNode  # the expression that names the loader there


# Calls that look at a loader without drawing batches from it.
_NOT_ITERATING = {
    "len",
    "print",
    "str",
    "repr",
    "isinstance",
    "hasattr",
    "getattr",
    "setattr",
    "type",
    "id",
    "format",
    "info",
    "debug",
    "warning",
    "log",
    "set_epoch",
    "append",
}


# Builtins whose result is one pass's iterator: `next()` on it continues that pass.
_MAKES_ITERATOR = {"iter", "enumerate"}


class LoaderFlow(Analysis):
    """Where the value of an expression (a DataLoader, a sampler) goes in this file.

    `references(expr)` follows the value through assignments (`loader = DataLoader(...)`),
    `self.attr` stores (read in every method of the class), same-file function and class calls
    (to the parameter it lands in), and returns (to the callers' assignment, tuple positions
    included), a few levels deep. `uses(expr)` lists where the loader is iterated (`for b in
    loader`, through enumerate/tqdm/iter, `next(iter(loader))`) or handed to a function defined
    elsewhere. `loops_around(node)` are the loops enclosing `node`, then those enclosing the
    same-file calls of its function (the epoch loop of `for epoch ...: train_one_epoch(loader)`).
    """

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.loops: Loops = ctx.analysis(Loops)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.names: Names = ctx.analysis(Names)
        self._name_index: Optional[Dict[str, List[cst.Name]]] = None

    # -- references ---------------------------------------------------------------------------

    def references(self, expr: cst.CSTNode, depth: int = 4) -> List[cst.CSTNode]:
        """Expressions that evaluate to the object `expr` evaluates to (itself included)."""
        out: List[cst.CSTNode] = []
        seen: Set[cst.CSTNode] = set()
        todo: List[Tuple[cst.CSTNode, int]] = [(expr, 0)]
        while todo and len(out) < 200:
            node, level = todo.pop(0)
            if node in seen:
                continue
            seen.add(node)
            out.append(node)
            if level >= depth:
                continue
            for alias in self._aliases(node):
                if alias not in seen:
                    todo.append((alias, level + 1))
        return out

    def _aliases(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """Expressions one step away that hold the same object."""
        node, parent = self._climb(node)
        out: List[cst.CSTNode] = []
        if type(parent) is cst.Assign and parent.value is node:
            for target in parent.targets:
                out.extend(self._target_references(target.target))
        elif type(parent) is cst.AnnAssign and parent.value is node:
            out.extend(self._target_references(parent.target))
        elif type(parent) is cst.Return:
            function = self.scopes.enclosing_function(parent)
            if function is not None:
                for call in self.loops.callgraph.callers(function):
                    out.append(call)
        elif type(parent) is cst.Element:
            # An element of a returned / assigned tuple: follow that position.
            tuple_node = self.ctx.parent(parent)
            holder = self.ctx.parent(tuple_node) if tuple_node is not None else None
            if type(tuple_node) is cst.Tuple:
                position = list(tuple_node.elements).index(parent)
                if type(holder) is cst.Return:
                    function = self.scopes.enclosing_function(holder)
                    if function is not None:
                        for call in self.loops.callgraph.callers(function):
                            out.extend(self._unpacked(call, position))
                elif type(holder) is cst.Assign and holder.value is tuple_node:
                    for target in holder.targets:
                        if type(target.target) is cst.Tuple or type(target.target) is cst.List:
                            elements = target.target.elements
                            if position < len(elements):
                                out.extend(self._target_references(elements[position].value))
        elif type(parent) is cst.Arg:
            holder = self.ctx.parent(parent)
            if type(holder) is cst.Call and parent.value is node:
                out.extend(self._parameter_references(holder, parent))
        elif type(parent) is cst.DictElement and parent.value is node:
            # `loaders = {"train": DataLoader(...)}` -> `loaders["train"]`
            key = _string_key(parent.key)
            dict_node = self.ctx.parent(parent)
            holder = self.ctx.parent(dict_node) if dict_node is not None else None
            if key is not None and type(holder) is cst.Assign and holder.value is dict_node:
                for target in holder.targets:
                    for ref in self._target_references(target.target):
                        out.extend(self._keyed(ref, key))
        return out

    def _keyed(self, ref: cst.CSTNode, key: str) -> List[cst.CSTNode]:
        """`ref["train"]` where `ref` is a reference of a dict: the entry read with `key`."""
        parent = self.ctx.parent(ref)
        if type(parent) is cst.Subscript and parent.value is ref and len(parent.slice) == 1:
            index = parent.slice[0].slice
            if type(index) is cst.Index and _string_key(index.value) == key:
                if type(self.ctx.parent(parent)) is not cst.AssignTarget:
                    return [parent]
        return []

    def _climb(self, node: cst.CSTNode) -> Tuple[cst.CSTNode, Optional[cst.CSTNode]]:
        """Step out of value-preserving wrappers: `x if c else y`, `(x)`."""
        parent = self.ctx.parent(node)
        while type(parent) is cst.IfExp and node in (parent.body, parent.orelse):
            node = parent
            parent = self.ctx.parent(node)
        return node, parent

    def _unpacked(self, call: cst.Call, position: int) -> List[cst.CSTNode]:
        """For `a, b = f(...)`: the references of the name at `position`."""
        parent = self.ctx.parent(call)
        if type(parent) is cst.Assign and parent.value is call:
            out = []
            for target in parent.targets:
                if type(target.target) is cst.Tuple or type(target.target) is cst.List:
                    elements = target.target.elements
                    if position < len(elements):
                        out.extend(self._target_references(elements[position].value))
            return out
        return []

    def _target_references(self, target: cst.CSTNode) -> List[cst.CSTNode]:
        if type(target) is cst.Name:
            return self.name_references(target)
        if (
            type(target) is cst.Attribute
            and type(target.value) is cst.Name
            and target.value.value == "self"
        ):
            return self.self_attribute_references(target)
        return []

    def name_references(self, bound: cst.Name) -> List[cst.CSTNode]:
        """Name nodes that read the binding made at `bound` (an assignment target or param)."""
        scope = self.scopes.scope_of(bound)
        if type(self.ctx.parent(bound)) is cst.Param:
            for ancestor in self.ctx.ancestors(bound):
                if type(ancestor) in (cst.FunctionDef, cst.Lambda):
                    scope = self.scopes.by_node.get(ancestor, scope)
                    break
        binding = None
        for candidate in scope.bindings.get(bound.value, []):
            if candidate.node is bound or (
                type(candidate.node) is cst.Param and candidate.node.name is bound
            ):
                binding = candidate
                break
        if binding is None:
            return []
        out: List[cst.CSTNode] = []
        for name in self._names_called(bound.value):
            if name is bound or not self._is_read(name):
                continue
            if binding in self.scopes.lookup(name.value, name):
                out.append(name)
        return out

    def self_attribute_references(self, target: cst.Attribute) -> List[cst.CSTNode]:
        cls = None
        for ancestor in self.ctx.ancestors(target):
            if type(ancestor) is cst.ClassDef:
                cls = ancestor
                break
        if cls is None:
            return []
        attr = target.attr.value
        out: List[cst.CSTNode] = []
        for node in self.ctx.tree.descendants(cls.body):
            if (
                type(node) is cst.Attribute
                and node is not target
                and node.attr.value == attr
                and type(node.value) is cst.Name
                and node.value.value == "self"
                and type(self.ctx.parent(node)) is not cst.AssignTarget
            ):
                out.append(node)
        return out

    def _parameter_references(self, call: cst.Call, arg: cst.Arg) -> List[cst.CSTNode]:
        """Where an argument lands in a same-file function or class (its parameter's reads)."""
        function, skip_self = self._called_function(call)
        if function is None or arg.star:
            return []
        params = positional_params(function)
        if skip_self and params:
            params = params[1:]
        target: Optional[cst.Param] = None
        if arg.keyword is not None:
            for param in params + list(function.params.kwonly_params):
                if param.name.value == arg.keyword.value:
                    target = param
        else:
            positional = [a for a in call.args if a.keyword is None]
            if any(a.star for a in positional[: positional.index(arg)]):
                return []
            index = positional.index(arg)
            if index < len(params):
                target = params[index]
        if target is None:
            return []
        return self.name_references(target.name)

    def _called_function(self, call: cst.Call) -> Tuple[Optional[cst.FunctionDef], bool]:
        """(the same-file function a call runs, whether its first parameter is `self`)."""
        func = call.func
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) is cst.FunctionDef:
                    return binding.node, False
                if type(binding.node) is cst.ClassDef:
                    init = _method(binding.node, "__init__")
                    return init, True
            return None, False
        callee = self.loops.callgraph.callee(call)
        if callee is not None:
            return callee, True
        return None, False

    def _names_called(self, name: str) -> List[cst.Name]:
        if self._name_index is None:
            index: Dict[str, List[cst.Name]] = {}
            for node in self.ctx.nodes(cst.Name):
                index.setdefault(node.value, []).append(node)
            self._name_index = index
        return self._name_index.get(name, [])

    def _is_read(self, name: cst.Name) -> bool:
        parent = self.ctx.parent(name)
        if type(parent) is cst.Attribute and parent.attr is name:
            return False
        if type(parent) in (cst.Arg, cst.Param) and getattr(parent, "keyword", None) is name:
            return False
        if type(parent) in (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias):
            return False
        if type(parent) in (cst.AssignTarget, cst.AsName):
            return False
        if (type(parent) is cst.For or type(parent) is cst.CompFor) and parent.target is name:
            return False
        return True

    # -- uses ---------------------------------------------------------------------------------

    def uses(self, expr: cst.CSTNode) -> List[LoaderUse]:
        """Where the loader `expr` evaluates to is iterated, or handed to an unknown function."""
        out: List[LoaderUse] = []
        for reference in self.references(expr):
            use = self._use_at(reference)
            if use is not None:
                out.append(use)
        return out

    def every_read_draws(self, target: cst.Name) -> Optional[List[LoaderUse]]:
        """The uses of the object bound at `target` (`batches = wrap(loader)`), when every read
        of the name is one (an iteration, or a hand-off); None when some read only looks at it
        or none reads it."""
        uses = [self._use_at(ref) for ref in self._target_references(target)]
        if not uses or any(use is None for use in uses):
            return None
        return [use for use in uses if use is not None]

    def _use_at(self, reference: cst.CSTNode) -> Optional[LoaderUse]:
        """The first use of the loader found from `reference`, through the wrappers it is
        assigned to (`w1 = tqdm(loader)`, `w2 = iter(w1)`, ...), depth first in source order.
        The chain of wrappers is as long as the file makes it: walked with a stack, not
        recursion, and each reference is looked at once (a wrapper rebound in a loop,
        `it = iter(it)`, reads its own assignment)."""
        pending = [reference]
        seen: Set[cst.CSTNode] = set()
        while pending:
            current = pending.pop()
            if current in seen:
                continue
            seen.add(current)
            use, aliases = self._use_here(current)
            if use is not None:
                return LoaderUse(use.site, use.kind, reference)
            pending.extend(reversed(aliases))
        return None

    def _use_here(
        self, reference: cst.CSTNode
    ) -> Tuple[Optional[LoaderUse], List[cst.CSTNode]]:
        """The use of the loader at `reference`, or the references of the wrapper it is
        assigned to (to look at next, in order)."""
        node = reference
        # Step out of wrappers that yield what they wrap: enumerate(tqdm(loader)), iter(loader).
        for _ in range(4):
            parent = self.ctx.parent(node)
            call = self.ctx.parent(parent) if type(parent) is cst.Arg else None
            if type(call) is cst.Call and call.args and call.args[0] is parent:
                if self.loops._pass_through_arg(call) is not None:
                    if (dotted_name(call.func) or "") == "iter":
                        holder = self.ctx.parent(call)
                        if type(holder) is cst.Arg:  # next(iter(loader))
                            node = call
                            continue
                    node = call
                    continue
            break
        parent = self.ctx.parent(node)
        if (type(parent) is cst.For or type(parent) is cst.CompFor) and parent.iter is node:
            return LoaderUse(parent, "loop", reference), []
        if type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is not cst.Call or parent.value is not node:
                return None, []
            leaf = (dotted_name(call.func) or "").split(".")[-1]
            if leaf == "next":
                return LoaderUse(call, "loop", reference), []
            if leaf in _NOT_ITERATING or self._called_function(call)[0] is not None:
                return None, []
            return LoaderUse(call, "call", reference), []
        if type(parent) is cst.Assign and node is not reference:
            # `pbar = tqdm(loader)` / `it = iter(loader)`: the wrapper's own references iterate.
            return None, [
                alias
                for target in parent.targets
                for alias in self._target_references(target.target)
            ]
        return None, []

    def is_training_use(
        self, use: LoaderUse, loader_refs: Sequence[cst.CSTNode] = ()
    ) -> bool:
        """Is the loader iterated where a `.backward()` is reachable (or handed to a function
        whose name says it trains)? With the loader's references, a backward that a switch of
        the function turns off for every call handing it this loader does not count (see
        `_switched_off`)."""
        if use.kind == "call":
            leaf = (dotted_name(use.site.func) or "").split(".")[-1].lower()  # type: ignore
            if not ("train" in leaf or leaf.startswith("fit")):
                return False
            # `Trainer(cfg, train_loader, test_loader)`, `fit(model, val_dataloaders=dl)`: a
            # trainer is handed its held-out data too, which it does not train on
            return not self._handed_as_held_out(use)
        if type(use.site) is cst.For:
            body = use.site.body
        else:
            loops = self.loops.enclosing_loops(use.site)
            if not loops:
                return False
            body = loops[0].body
        return any(
            is_method_call(call, "backward")
            and not (not chain and self._switched_off(call, use.site, loader_refs))
            for call, chain in self.loops.calls_in(body, 3)
        )

    @staticmethod
    def _handed_as_held_out(use: LoaderUse) -> bool:
        """Is the loader handed to the call under a name for evaluation data: the keyword it is
        passed as (`val_dataloaders=`), or its own name there (`test_loader`, `self.val_dl`)?"""
        arg = next(
            (a for a in use.site.args if a.value is use.reference),  # type: ignore
            None,
        )
        words = [dotted_name(use.reference) or ""]
        if arg is not None and arg.keyword is not None:
            words.append(arg.keyword.value)
        return any(EVAL_LOADER.search(word) for word in words)

    def _switched_off(
        self, call: cst.Call, site: cst.CSTNode, loader_refs: Sequence[cst.CSTNode]
    ) -> bool:
        """`def one_epoch(model, loader, is_train=True)` whose `loss.backward()` sits under `if
        is_train:`, when every call of `one_epoch` in the file that hands it this loader passes
        `is_train=False` (a literal, or the parameter's literal default): the evaluation pass
        of a shared epoch function, which never backpropagates."""
        function = self.scopes.enclosing_function(site)
        if function is None or not loader_refs:
            return False
        params = list(positional_params(function)) + list(function.params.kwonly_params)
        names = [param.name.value for param in params]
        switches: List[Tuple[str, bool]] = []  # (parameter, the truth the backward needs)
        child: cst.CSTNode = call
        for ancestor in self.ctx.ancestors(call):
            if ancestor is function:
                break
            if type(ancestor) is cst.If:
                test, needs = ancestor.test, child is ancestor.body
                if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                    test, needs = test.expression, not needs
                if type(test) is cst.Name and test.value in names:
                    switches.append((test.value, needs))
            child = ancestor
        if not switches:
            return False
        wanted = {id(ref) for ref in loader_refs}
        arrivals = [
            caller
            for caller in self.loops.callgraph.callers(function)
            if any(id(arg.value) in wanted for arg in caller.args)
        ]
        if not arrivals:
            return False
        skip_self = bool(names) and names[0] in ("self", "cls")
        for name, needs in switches:
            index = names.index(name) - (1 if skip_self else 0)
            default = params[names.index(name)].default
            truths = [
                None if has_star_args(caller) else literal_truth(
                    argument(caller, index, name) or default
                )
                for caller in arrivals
            ]
            if all(truth is not None and truth != needs for truth in truths):
                return True
        return False

    # -- loops around, through callers --------------------------------------------------------

    def loops_around(self, node: cst.CSTNode, depth: int = 2) -> List[cst.CSTNode]:
        """Loops enclosing `node` in its function, then (up to `depth` levels) the loops
        enclosing the same-file calls of that function. Innermost first."""
        return self._loops_through_callers([node], depth + 1)

    def loops_drawing(
        self, site: cst.CSTNode, loader_refs: Sequence[cst.CSTNode]
    ) -> List[cst.CSTNode]:
        """The loops that start the loader drawn at `site` over: those around it, through the
        same-file calls of its function. For a draw inside a class of this file that objects
        made from this loader keep (`self.batches = iter(loader)` in a prefetcher,
        `self.train_ds` in a trainer), the climb goes through calls inside the class and
        through calls on those objects only: the training loop's prefetcher is another object
        than the one `validate()` makes, and the loop around where the object is made (the
        epoch loop around `train()`, which makes a new prefetcher) starts the loader over."""
        made = self.objects_made_from(site, loader_refs)
        owner = enclosing_class(self.ctx, site)
        if not made or owner is None:
            return self._loops_through_callers(self._iterator_made_at(site), 3)
        objects = {id(ref) for call in made for ref in self.references(call)}

        def through(function: cst.FunctionDef, caller: cst.Call) -> bool:
            if not any(a is owner for a in self.ctx.ancestors(function)):
                return True
            func = caller.func
            if type(func) is cst.Attribute and id(func.value) in objects:
                return True
            return any(a is owner for a in self.ctx.ancestors(caller))

        return self._loops_through_callers([site, *made], 4, through)

    def _iterator_made_at(self, site: cst.CSTNode) -> List[cst.CSTNode]:
        """Where the batches drawn at `site` start: a `next(it)` draws from the pass begun
        where `it = iter(loader)` was bound (every binding that reaches the draw, one restarting
        the loader on StopIteration included), so only loops around those bindings start the
        loader over, not the `while` that draws a pass batch by batch. Any other draw (a `for`,
        `next(iter(loader))`) starts where it is."""
        if type(site) is not cst.Call or (dotted_name(site.func) or "") != "next":
            return [site]
        arg = site.args[0].value if site.args else None
        if type(arg) is not cst.Name:
            return [site]
        bindings = self.scopes.lookup(arg.value, site)
        if not bindings or not all(
            binding.kind == "assign"
            and type(binding.value) is cst.Call
            and (dotted_name(binding.value.func) or "") in _MAKES_ITERATOR
            and binding.statement is not None
            for binding in bindings
        ):
            return [site]
        return [binding.statement for binding in bindings]  # type: ignore[misc]

    def objects_made_from(
        self, site: cst.CSTNode, loader_refs: Sequence[cst.CSTNode]
    ) -> List[cst.Call]:
        """The calls making objects of the class of this file that `site` is in, from the
        loader (`CudaPrefetcher(val_loader)`); none when `site` is in no class."""
        owner = enclosing_class(self.ctx, site)
        if owner is None:
            return []
        made: List[cst.Call] = []
        for ref in loader_refs:
            _, parent = self._climb(ref)
            call = self.ctx.parent(parent) if type(parent) is cst.Arg else None
            if type(call) is not cst.Call or type(call.func) is not cst.Name:
                continue
            bindings = self.scopes.lookup(call.func.value, call.func)
            if any(binding.node is owner for binding in bindings) and call not in made:
                made.append(call)
        return made

    def _loops_through_callers(
        self,
        starts: List[cst.CSTNode],
        rounds: int,
        through: Optional[Callable[[cst.FunctionDef, cst.Call], bool]] = None,
    ) -> List[cst.CSTNode]:
        """Loops enclosing `starts`, then those enclosing the same-file calls of their
        functions (`through` picks which calls), for `rounds` levels. Innermost first."""
        out: List[cst.CSTNode] = []
        frontier = list(starts)
        seen: Set[cst.CSTNode] = set()
        for _ in range(rounds):
            next_frontier: List[cst.CSTNode] = []
            for current in frontier:
                for loop in self.loops.enclosing_loops(current):
                    if loop not in out:
                        out.append(loop)
                function = self.scopes.enclosing_function(current)
                if function is not None and function not in seen:
                    seen.add(function)
                    next_frontier.extend(
                        caller
                        for caller in self.loops.callgraph.callers(function)
                        if through is None or through(function, caller)
                    )
            frontier = next_frontier
        return out


def _string_key(node: Optional[cst.CSTNode]) -> Optional[str]:
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _method(cls: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    body = cls.body
    if type(body) is cst.IndentedBlock:
        for statement in body.body:
            if type(statement) is cst.FunctionDef and statement.name.value == name:
                return statement
    return None


# Libraries whose DataLoader is torch's (a subclass taking the same arguments).
_TORCH_LOADER_ROOTS = ("torch", "torch_geometric", "monai", "timm")


def is_torch_dataloader(names: Names, call: cst.CSTNode) -> bool:
    """`torch.utils.data.DataLoader(...)` or a subclass with its arguments (not a project's own
    `build_dataloader`, and not a local class that happens to be called DataLoader)."""
    if type(call) is not cst.Call:
        return False
    qualified = names.qualified(call.func)
    for qualname in qualified:
        if qualname == "torch.utils.data.DataLoader":
            return True
        if qualname.endswith("DataLoader") and qualname.split(".")[0] in _TORCH_LOADER_ROOTS:
            return True
    if not qualified:
        return (dotted_name(call.func) or "").split(".")[-1] == "DataLoader"
    return False
