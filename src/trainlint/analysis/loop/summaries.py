"""What each function and method of a file does with autograd graphs and with its arguments,
summarised as plain data that a caller reads: in the same file directly, and in another file of
the project through a project rule's facts (TRL401's join). One level: a summary reads its own
function's body only, never the functions it calls.

A summary (a dict, so that it can be cached and joined) holds:

- `params`: the parameter names callers bind by position (a method's `self` left out);
- `returns`: what every `return` gives back, when all agree and the body shows it:
  - "tensor": a tensor holding an autograd graph (a loss computed with autograd on, or what a
    `backward()` in the function was called on), not detached;
  - "holder": a dict, list or tuple built in the function with such a tensor inside (the step's
    output dict `{"loss": loss, "logits": logits}`): keeping the holder keeps the graph, and
    `.detach()` does not apply to it;
  - "plain": nothing with a graph (numbers, `.item()`, a dict of floats, computed under
    `no_grad()`): a caller that keeps it keeps no graph;
  - "param:<i>": its i-th parameter, unchanged (`def distribute(loader): ...; return loader`);
  - absent: unknown (mixed returns, a library call's result, no return).
- `backward`: the returned tensor was backpropagated in the function (a step helper that runs
  `loss.backward()` and returns `loss`): its saved activations are freed, what a caller keeps
  is the graph's autograd nodes;
- `keeps`: {parameter position: where} for arguments whose value (or whose dict values, in a
  loop over `.items()` / `.values()`) the function adds or appends, undetached, to state that
  outlives the call: "self.<attr>" (`self.sums[k] += v` in a meter's `update`) or
  "param:<j>" (another argument, a container of the caller's: `totals[k] += v`).

Summaries are keyed "function" for module-level functions and "Class.method" for methods of
module-level classes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

import libcst as cst

from ...walk import own_nodes
from .. import Analysis
from ..base.names import dotted_name
from ..base.nodes import mentions
from ..base.scopes import Scopes
from ..base.vocabulary import GRAPHLESS_READS
from .steps import TrainingSteps
from .stepexprs import name_leaves

Summary = Dict[str, object]

_APPENDS = ("append", "extend", "insert")


class FunctionSummaries(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.steps: TrainingSteps = ctx.analysis(TrainingSteps)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self._by_node: Dict[cst.FunctionDef, Summary] = {}
        self._all: Optional[Dict[str, Summary]] = None

    # -- the table ----------------------------------------------------------------------------

    def all(self) -> Dict[str, Summary]:
        """key ("f" / "Class.m") -> summary, for the module-level functions and classes."""
        if self._all is None:
            table: Dict[str, Summary] = {}
            for statement in self.ctx.module.body:
                if type(statement) is cst.FunctionDef:
                    table[statement.name.value] = self.of(statement)
                elif type(statement) is cst.ClassDef and type(statement.body) is cst.IndentedBlock:
                    for member in statement.body.body:
                        if type(member) is cst.FunctionDef:
                            key = f"{statement.name.value}.{member.name.value}"
                            table[key] = self.of(member, method=True)
            self._all = {k: v for k, v in table.items() if len(v) > 1}
        return self._all

    def of(self, function: cst.FunctionDef, method: Optional[bool] = None) -> Summary:
        found = self._by_node.get(function)
        if found is None:
            if method is None:
                block = self.ctx.parent(function)
                method = block is not None and type(self.ctx.parent(block)) is cst.ClassDef
            found = self._by_node[function] = self._summarise(function, method)
        return found

    # -- what a call runs ---------------------------------------------------------------------

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function or method of this file a call runs: `helper(...)`, `self.helper(...)`,
        and `obj.method(...)` where every binding of `obj` is `Cls(...)` of a class of this
        file (or `self.obj`, bound so in the class's methods)."""
        function = self.steps.loops.callgraph.callee(call)
        if function is not None:
            return function
        func = call.func
        if type(func) is not cst.Attribute:
            return None
        cls = self.instance_class(func.value)
        if type(cls) is cst.ClassDef and type(cls.body) is cst.IndentedBlock:
            for member in cls.body.body:
                if type(member) is cst.FunctionDef and member.name.value == func.attr.value:
                    return member
        return None

    def instance_class(self, expr: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The `Cls(...)` call's class every binding of `expr` (a name, or `self.attr`) comes
        from: a ClassDef of this file, or the Name/Attribute the class is called by (an
        imported class); None when unknown or bound otherwise."""
        constructors = self._constructors(expr)
        if not constructors:
            return None
        classes: List[cst.CSTNode] = []
        for call in constructors:
            func = call.func
            if type(func) is cst.Name:
                bindings = self.scopes.lookup(func.value, func)
                if len(bindings) == 1 and bindings[0].kind == "class":
                    classes.append(bindings[0].node)
                    continue
            classes.append(func)
        first = classes[0]
        if all(c is first for c in classes):
            return first
        texts = {dotted_name(c) for c in classes}
        return first if len(texts) == 1 and None not in texts else None

    def _constructors(self, expr: cst.CSTNode) -> List[cst.Call]:
        values: List[Optional[cst.CSTNode]] = []
        if type(expr) is cst.Name:
            bindings = self.scopes.lookup(expr.value, expr)
            if not bindings or any(b.kind not in ("assign", "annassign") for b in bindings):
                return []
            values = [b.value for b in bindings]
        elif (
            type(expr) is cst.Attribute
            and type(expr.value) is cst.Name
            and expr.value.value == "self"
        ):
            cls = next((a for a in self.ctx.ancestors(expr) if type(a) is cst.ClassDef), None)
            if cls is None:
                return []
            for node in self.ctx.tree.descendants(cls):
                if type(node) is cst.Assign:
                    for target in node.targets:
                        if dotted_name(target.target) == f"self.{expr.attr.value}":
                            values.append(node.value)
        if not values or any(type(v) is not cst.Call for v in values):
            return []
        return [v for v in values if type(v) is cst.Call]

    def argument_position(self, call: cst.Call, arg: cst.Arg, summary: Summary) -> Optional[int]:
        """The parameter position `arg` binds in the summarised callee (None: unknown)."""
        params = summary.get("params")
        if not isinstance(params, list) or arg.star:
            return None
        if arg.keyword is not None:
            name = arg.keyword.value
            return params.index(name) if name in params else None
        positional = [a for a in call.args if a.keyword is None]
        before = positional[: positional.index(arg)]
        if any(a.star for a in before):
            return None
        return len(before)

    # -- one function -------------------------------------------------------------------------

    def _summarise(self, function: cst.FunctionDef, method: bool) -> Summary:
        params = [p.name.value for p in function.params.posonly_params]
        params += [p.name.value for p in function.params.params]
        if method and params and not _static(function):
            params = params[1:]
        summary: Summary = {"params": params}
        own = list(own_nodes(function.body))
        returns = [n for n in own if type(n) is cst.Return]
        if not returns and not any(type(n) in (cst.AugAssign, cst.Assign, cst.Call) for n in own):
            return summary
        backpropagated = self._backpropagated(own)
        kind = self._returns(own, returns, params, backpropagated)
        if kind is not None:
            summary["returns"] = kind
            if kind in ("tensor", "holder") and all(
                set(self._return_leaves(r, backpropagated)) & backpropagated for r in returns
            ):
                summary["backward"] = True
        keeps = self._keeps(function, own, params)
        if keeps:
            summary["keeps"] = keeps
        return summary

    def _backpropagated(self, own: List[cst.CSTNode]) -> Set[str]:
        found: Set[str] = set()
        for node in own:
            if type(node) is cst.Call and self.steps.is_backward(node):
                found.update(name_leaves(self.steps.backward_tensor(node)))
        return found

    def _graph_names(self, own: List[cst.CSTNode], seed: Set[str]) -> Set[str]:
        names = set(seed)
        assigns = [n for n in own if type(n) is cst.Assign]
        for _ in range(3):
            grown = False
            for assign in assigns:
                if not self.steps.carries_graph(assign.value, names):
                    continue
                if self.steps.grad_disabled(assign, 0):
                    continue
                for target in assign.targets:
                    text = dotted_name(target.target)
                    if text and text not in names:
                        names.add(text)
                        grown = True
            if not grown:
                break
        return names

    def _returns(self, own, returns, params, backpropagated) -> Optional[str]:
        if not returns or any(r.value is None for r in returns):
            return None
        values = [r.value for r in returns if r.value is not None]
        # Its own parameter, never re-bound in the function.
        first = values[0]
        if all(type(v) is cst.Name for v in values) and type(first) is cst.Name:
            if all(dotted_name(v) == first.value for v in values) and first.value in params:
                bindings = self.scopes.lookup(first.value, first)
                if bindings and all(b.kind == "param" for b in bindings):
                    return f"param:{params.index(first.value)}"
        if all(self.steps.grad_disabled(r, 0) or _plain(r.value) for r in returns):
            return "plain"
        names = self._graph_names(own, backpropagated)
        kinds = set()
        for ret in returns:
            if self.steps.grad_disabled(ret, 0):
                return None
            value = ret.value
            holder = self._holder(value)
            if holder is not None:
                if not self._holds_graph(holder, names):
                    return None
                kinds.add("holder")
                continue
            leaves = list(self.steps.graph_leaves(value, names))
            if not leaves or type(value) not in (
                cst.Name,
                cst.Attribute,
                cst.BinaryOperation,
                cst.Call,
                cst.Subscript,
            ):
                return None
            if type(value) is cst.Call and not any(leaf is value for leaf in leaves):
                return None  # `wrap(loss)`: what a call of unknown type returns is unknown
            kinds.add("tensor")
        return kinds.pop() if len(kinds) == 1 else None

    def _holder(self, value) -> Optional[cst.CSTNode]:
        """A dict/list/tuple literal, or a name bound (only) to one in this function."""
        if type(value) in (cst.Dict, cst.List, cst.Tuple):
            return value
        if type(value) is cst.Name:
            bindings = self.scopes.lookup(value.value, value)
            if bindings and all(
                b.kind == "assign" and type(b.value) in (cst.Dict, cst.List, cst.Tuple)
                for b in bindings
            ):
                return bindings[0].value if len(bindings) == 1 else None
        return None

    def _holds_graph(self, holder: cst.CSTNode, names: Set[str]) -> bool:
        elements: List[cst.CSTNode] = []
        if type(holder) is cst.Dict:
            elements = [e.value for e in holder.elements if type(e) is cst.DictElement]
        elif type(holder) in (cst.List, cst.Tuple):
            sequence: Any = holder
            elements = [e.value for e in sequence.elements if type(e) is cst.Element]
        return any(
            type(e) in (cst.Name, cst.Attribute, cst.Subscript, cst.Call)
            and any(leaf is e for leaf in self.steps.graph_leaves(e, names))
            for e in elements
        )

    def _return_leaves(self, ret: cst.Return, backpropagated: Set[str]) -> List[str]:
        value = ret.value
        holder = self._holder(value)
        if holder is not None:
            return [t for n in self.ctx.tree.descendants(holder) if (t := dotted_name(n))]
        return list(name_leaves(value))

    # -- what the function keeps --------------------------------------------------------------

    def _keeps(self, function, own, params) -> Dict[str, str]:
        """Positions of parameters whose value the function adds to lasting state."""
        derived = self._derived(function, own, params)
        if not derived:
            return {}
        kept: Dict[str, str] = {}
        for node in own:
            if type(node) not in (cst.AugAssign, cst.Assign, cst.Call):
                continue
            target: Optional[cst.CSTNode] = None
            value: Optional[cst.CSTNode] = None
            if type(node) is cst.AugAssign and type(node.operator) in (
                cst.AddAssign,
                cst.SubtractAssign,
            ):
                target, value = node.target, node.value
            elif type(node) is cst.Assign and len(node.targets) == 1:
                target = node.targets[0].target
                root = _root(target)
                if self._lasting(root, params) is None:
                    continue
                if root is None or not mentions(node.value, root):
                    continue  # a plain store keeps one value, it does not grow
                value = node.value
            elif (
                type(node) is cst.Call
                and type(node.func) is cst.Attribute
                and node.func.attr.value in _APPENDS
                and node.args
            ):
                target, value = node.func.value, node.args[-1].value
            if target is None or value is None:
                continue
            where = self._lasting(_root(target), params)
            if where is None or self.steps.grad_disabled(node, 0):
                continue
            names = set(derived)
            for leaf in self.steps.argument_leaves(value, names):
                text = dotted_name(leaf)
                if text in derived:
                    position = str(derived[text])
                    if where != f"param:{position}":
                        kept.setdefault(position, where)
        return kept

    def _derived(self, function, own, params) -> Dict[str, int]:
        """Names holding a parameter's value or one of its dict values: the parameter itself
        (never re-bound) and the loop variables of `for k, v in p.items()` / `for v in
        p.values()` (never re-bound either)."""
        out: Dict[str, int] = {}
        for position, name in enumerate(params):
            bindings = self.scopes.lookup(name, function.body)
            if bindings and all(b.kind == "param" for b in bindings):
                out[name] = position
        for node in own:
            if type(node) is not cst.For:
                continue
            source = node.iter
            if not (
                type(source) is cst.Call
                and type(source.func) is cst.Attribute
                and source.func.attr.value in ("items", "values")
                and not source.args
            ):
                continue
            owner = dotted_name(source.func.value)
            if owner not in out:
                continue
            target: Any = node.target
            if source.func.attr.value == "items":
                if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != 2:
                    continue
                target = target.elements[1].value
            if type(target) is not cst.Name:
                continue
            bindings = self.scopes.lookup(target.value, target)
            if bindings and all(b.kind in ("for", "unpack") for b in bindings):
                out[target.value] = out[owner]
        return out

    def _lasting(self, root: Optional[str], params: List[str]) -> Optional[str]:
        if root is None:
            return None
        if root.startswith("self.") and root.count(".") == 1:
            return root
        if root in params:
            return f"param:{params.index(root)}"
        return None


_DETACHING_FUNCTIONS = {"float", "int", "bool", "round", "len", "str"}


def _plain(value: Optional[cst.CSTNode]) -> bool:
    """A value that holds no graph whatever its inputs: a literal, a detaching read
    (`loss.item()`, `float(loss)`), or a display of such values (`{"loss": loss.item()}`).
    (Names are not chased here: a summary stays cheap, and an unknown return is no claim.)"""
    if value is None:
        return False
    if type(value) in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString):
        return True
    if type(value) is cst.Name and value.value in ("None", "True", "False"):
        return True
    if type(value) is cst.Call:
        func = value.func
        if type(func) is cst.Attribute and func.attr.value in GRAPHLESS_READS:
            return True
        return type(func) is cst.Name and func.value in _DETACHING_FUNCTIONS
    if type(value) is cst.Dict:
        return all(type(e) is cst.DictElement and _plain(e.value) for e in value.elements)
    if type(value) in (cst.Tuple, cst.List):
        sequence: Any = value
        return all(type(e) is cst.Element and _plain(e.value) for e in sequence.elements)
    if type(value) is cst.BinaryOperation:
        return _plain(value.left) and _plain(value.right)
    return False


def _static(function: cst.FunctionDef) -> bool:
    return any(dotted_name(d.decorator) == "staticmethod" for d in function.decorators)


def _root(target: Optional[cst.CSTNode]) -> Optional[str]:
    """`self.sums[k]` -> "self.sums"; `totals[k]` -> "totals"; `self.total` -> "self.total"."""
    while type(target) is cst.Subscript:
        target = target.value
    return dotted_name(target) if target is not None else None


class LoopGraphs:
    """What the summaries of the functions a loop calls say about the names it binds: names
    bound to a graph-holding result (`loss = train_step(...)` of a helper returning its loss),
    those among them whose graph the helper already freed with `backward()`, and the holders
    (dicts, lists, tuples with a graph tensor inside) that `.detach()` does not apply to."""

    def __init__(self, summaries: FunctionSummaries, loop: cst.CSTNode) -> None:
        self.seeds: Set[str] = set()
        self.freed: Set[str] = set()
        self.holders: Set[str] = set()
        ctx = summaries.ctx
        for node in ctx.tree.descendants(loop):
            if type(node) is not cst.Assign or type(node.value) is not cst.Call:
                continue
            if summaries.steps.grad_disabled(node):
                continue
            function = summaries.callee(node.value)
            if function is None:
                continue
            summary = summaries.of(function)
            kind = summary.get("returns")
            if kind not in ("tensor", "holder"):
                continue
            for target in node.targets:
                text = dotted_name(target.target)
                if text is None:
                    continue
                self.seeds.add(text)
                if summary.get("backward"):
                    self.freed.add(text)
                if kind == "holder":
                    self.holders.add(text)


def element_loop(loop: cst.CSTNode, names: Set[str]) -> Optional[str]:
    """For `for k, v in losses.items():` / `for v in losses.values():` over a name of `names`
    (a dict of graph tensors), the name each element is bound to; else None."""
    if type(loop) is not cst.For:
        return None
    source = loop.iter
    if not (
        type(source) is cst.Call
        and type(source.func) is cst.Attribute
        and source.func.attr.value in ("items", "values")
        and not source.args
        and dotted_name(source.func.value) in names
    ):
        return None
    target: Any = loop.target
    if source.func.attr.value == "items":
        if type(target) not in (cst.Tuple, cst.List) or len(target.elements) != 2:
            return None
        target = target.elements[1].value
    return target.value if type(target) is cst.Name else None
