"""Training and evaluation loops: what is iterated, the batch names, and what the loop calls.

Two questions several rules ask:

1. Where do batches come from? (`batch_sources()`) A batch source is
   - `for x, y in loader`, `for i, (x, y) in enumerate(loader)`, `for batch in tqdm(loader)`,
     `for step, batch in enumerate(pbar)` where `pbar = tqdm(train_loader)`;
   - `x, y = next(iter(loader))` / `batch = next(it)` where `it = iter(loader)`, also inside a
     `while` loop.
   A loader is the result of `DataLoader(...)` (any callable whose name ends in `DataLoader`), a
   name, attribute or parameter that names a loader (`train_loader`, `self.val_dl`,
   `dataloader`), a parameter annotated `DataLoader`, or a name bound to what a function of this
   file returns when that function builds a DataLoader.
   Each source lists the names bound from the batch, with the path inside the batch
   (`for images, (boxes, labels) in loader` binds labels at (1, 1)) and the names that hold the
   whole batch (`for batch in loader`).

2. What does a loop do? (`calls_in(node)`) Every call inside a statement block, including the
   bodies of functions of this file that it calls (two levels deep), so that a `zero_grad()`
   inside `if step % accum == 0:` or inside a `train_step()` helper is seen. `training_loops()`
   are the loops from which a `.backward()` is reachable.

Other helpers: `under_no_grad(node)` (inside `torch.no_grad()`/`inference_mode()`, or a function
decorated with them), `enclosing_loops(node)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from . import Analysis
from .devices import MOVED, UNPLACED, WRAPPED
from .names import LOCAL_PREFIX, Names, dotted_name
from ..walk import children, own_nodes
from .scopes import Scopes

Path = Tuple[Union[int, str], ...]  # position inside a batch: (1,), (1, 0), ("labels",)

_LOADER_NAME = re.compile(r"(loader|dataloader|(^|_)dls?$|(^|_)dl_|_iter$|^batches$)", re.I)
_NOT_LOADER_NAME = re.compile(
    r"(loader_(kwargs|args|cfg|config|params)|_fn$|_cls$|_class$|_factory$)", re.I
)
# Wrappers that yield what their first argument yields (possibly with an index).
_PASS_THROUGH = {
    "tqdm",
    "track",
    "iter",
    "islice",
    "cycle",
    "zip_longest",
    "prefetch",
    "Prefetcher",
    "DataPrefetcher",
    "CUDAPrefetcher",
    "skip_first_batches",
    "BackgroundGenerator",
    "MetricLogger.log_every",
    "log_every",
    "repeat",
}
_ENUMERATE = {"enumerate"}
_NO_GRAD = (
    "torch.no_grad",
    "torch.inference_mode",
    "torch.autograd.no_grad",
    "torch.autograd.grad_mode.no_grad",
    "torch.set_grad_enabled",
)


@dataclass
class BatchSource:
    """One place where batches from a loader become names."""

    node: cst.CSTNode  # the For / While loop, or the Assign of `next(...)`
    loader: cst.BaseExpression  # the loader expression (unwrapped from tqdm/enumerate)
    loader_text: str
    body: Sequence[cst.BaseStatement]  # statements that see the batch names, in order
    elements: Dict[str, Path] = field(default_factory=dict)  # name -> path inside the batch
    roots: Set[str] = field(default_factory=set)  # names holding the whole batch
    index_names: Set[str] = field(default_factory=set)  # enumerate() counters
    binding_statement: Optional[cst.CSTNode] = None  # where the names are bound (For or Assign)
    function: Optional[cst.FunctionDef] = None


class Loops(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self._sources: Optional[List[BatchSource]] = None
        self._loader_functions: Optional[Set[str]] = None
        self._functions: Optional[Dict[str, List[cst.FunctionDef]]] = None

    # -- loaders ------------------------------------------------------------------------------

    def is_loader(self, expr: cst.CSTNode, _depth: int = 0) -> bool:
        """Does `expr` evaluate to a DataLoader (or something that yields its batches)?"""
        if _depth > 4:
            return False
        if type(expr) is cst.Call:
            if self._is_loader_call(expr):
                return True
            inner = self._pass_through_arg(expr)
            if inner is not None:
                return self.is_loader(inner, _depth + 1)
            return False
        if type(expr) is cst.Attribute:
            if _LOADER_NAME.search(expr.attr.value) and not _NOT_LOADER_NAME.search(
                expr.attr.value
            ):
                return True
            return self._self_attribute_is_loader(expr, _depth)
        if type(expr) is cst.Name:
            name = expr.value
            bindings = self.scopes.lookup(name, expr)
            for binding in bindings:
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    if self.is_loader(binding.value, _depth + 1):
                        return True
                if binding.kind == "param":
                    annotation = getattr(binding.node, "annotation", None)
                    if annotation is not None and self._annotation_is_loader(annotation.annotation):
                        return True
            if _LOADER_NAME.search(name) and not _NOT_LOADER_NAME.search(name):
                # A name that says it is a loader, unless it is bound to something that clearly
                # is not one (a dict of loader kwargs, a class).
                return not any(b.kind in ("class", "def", "import") for b in bindings)
        return False

    def _self_attribute_is_loader(self, expr: cst.Attribute, depth: int) -> bool:
        """`self.train_data` assigned a loader in the class (`self.train_data = train_data`
        with `train_data: DataLoader`, or `= DataLoader(...)`)."""
        if not (type(expr.value) is cst.Name and expr.value.value == "self"):
            return False
        cls = next((a for a in self.ctx.ancestors(expr) if type(a) is cst.ClassDef), None)
        if cls is None:
            return False
        for node in self.ctx.tree.descendants(cls.body):
            if type(node) is cst.Assign and any(
                type(t.target) is cst.Attribute
                and type(t.target.value) is cst.Name
                and t.target.value.value == "self"
                and t.target.attr.value == expr.attr.value
                for t in node.targets
            ):
                if type(node.value) is not cst.Attribute and self.is_loader(
                    node.value, depth + 1
                ):
                    return True
        return False

    def _is_loader_call(self, call: cst.Call) -> bool:
        func = call.func
        dotted = dotted_name(func) or ""
        leaf = dotted.split(".")[-1]
        if leaf.endswith("DataLoader") or leaf in ("build_dataloader", "build_loader"):
            return True
        if any(q.endswith("DataLoader") for q in self.names.qualified(func)):
            return True
        # A function of this file that builds and returns a DataLoader.
        if type(func) is cst.Name and func.value in self._loader_functions_in_file():
            return True
        return False

    def _pass_through_arg(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        dotted = dotted_name(call.func) or ""
        leaf = dotted.split(".")[-1]
        if (leaf in _PASS_THROUGH or dotted in _PASS_THROUGH or leaf in _ENUMERATE) and call.args:
            return call.args[0].value
        return None

    def _annotation_is_loader(self, annotation: cst.BaseExpression) -> bool:
        dotted = dotted_name(annotation) or ""
        if dotted.endswith("DataLoader"):
            return True
        if type(annotation) is cst.SimpleString:
            return "DataLoader" in annotation.value
        if type(annotation) is cst.Subscript:  # Optional[DataLoader]
            return any(
                type(e.slice) is cst.Index and self._annotation_is_loader(e.slice.value)
                for e in annotation.slice
            )
        return False

    def _loader_functions_in_file(self) -> Set[str]:
        if self._loader_functions is None:
            found: Set[str] = set()
            # Each `return value` of the file with the function it returns from (one pass over
            # the file's Return nodes, not a walk of every function's body).
            for ret in self.ctx.nodes(cst.Return):
                if ret.value is None:
                    continue
                function = self.scopes.enclosing_function(ret)
                if function is None:
                    continue
                value = ret.value
                exprs = value.elements if type(value) is cst.Tuple else [value]
                for element in exprs:
                    expr = getattr(element, "value", element)
                    if type(expr) is cst.Call and self._is_loader_call_shallow(expr):
                        found.add(function.name.value)
                    elif type(expr) is cst.Name and self._name_bound_to_loader(expr):
                        found.add(function.name.value)
            self._loader_functions = found
        return self._loader_functions

    def _is_loader_call_shallow(self, call: cst.Call) -> bool:
        leaf = (dotted_name(call.func) or "").split(".")[-1]
        return leaf.endswith("DataLoader") or any(
            q.endswith("DataLoader") for q in self.names.qualified(call.func)
        )

    def _name_bound_to_loader(self, name: cst.Name) -> bool:
        for binding in self.scopes.lookup(name.value, name):
            value = binding.value
            if type(value) is cst.Call and self._is_loader_call_shallow(value):
                return True
        return False

    # -- batch sources ------------------------------------------------------------------------

    def batch_sources(self) -> List[BatchSource]:
        if self._sources is None:
            sources: List[BatchSource] = []
            for loop in self.ctx.nodes(cst.For):
                source = self._from_for(loop)
                if source is not None:
                    sources.append(source)
            for assign in self.ctx.nodes(cst.Assign):
                source = self._from_next(assign)
                if source is not None:
                    sources.append(source)
            self._sources = sources
        return self._sources

    def _from_for(self, loop: cst.For) -> Optional[BatchSource]:
        iterable = loop.iter
        target = loop.target
        index_names: Set[str] = set()
        # Peel enumerate(...) (its counter is not a batch element) and tqdm(...)-like wrappers.
        for _ in range(4):
            if type(iterable) is not cst.Call:
                break
            leaf = (dotted_name(iterable.func) or "").split(".")[-1]
            if leaf in _ENUMERATE and iterable.args:
                if type(target) in (cst.Tuple, cst.List) and len(target.elements) == 2:
                    first = target.elements[0].value
                    if type(first) is cst.Name:
                        index_names.add(first.value)
                    target = target.elements[1].value
                iterable = iterable.args[0].value
                continue
            inner = self._pass_through_arg(iterable)
            if inner is None or self._is_loader_call(iterable):
                break
            iterable = inner
        if type(iterable) is cst.Name and not self.is_loader(iterable):
            # `pbar = tqdm(train_loader)`; `for step, batch in enumerate(pbar)`
            unwrapped = self._unwrap_name(iterable)
            if unwrapped is None:
                return None
            iterable = unwrapped
        elif not self.is_loader(iterable):
            return None
        source = BatchSource(
            node=loop,
            loader=iterable,
            loader_text=self.ctx.code(iterable),
            body=_block(loop.body),
            index_names=index_names,
            binding_statement=loop,
            function=self.scopes.enclosing_function(loop),
        )
        _bind(target, (), source)
        return source

    def _unwrap_name(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        for binding in self.scopes.lookup(name.value, name):
            value = binding.value
            if type(value) is cst.Call:
                inner = self._pass_through_arg(value)
                if inner is not None and self.is_loader(inner):
                    return inner
        return None

    def _from_next(self, assign: cst.Assign) -> Optional[BatchSource]:
        value = assign.value
        if not (type(value) is cst.Call and dotted_name(value.func) == "next" and value.args):
            return None
        arg = value.args[0].value
        loader: Optional[cst.BaseExpression] = None
        if type(arg) is cst.Call and dotted_name(arg.func) == "iter" and arg.args:
            if self.is_loader(arg.args[0].value):
                loader = arg.args[0].value
        elif type(arg) is cst.Name:
            for binding in self.scopes.lookup(arg.value, arg):
                bound = binding.value
                if type(bound) is cst.Call and dotted_name(bound.func) == "iter" and bound.args:
                    if self.is_loader(bound.args[0].value):
                        loader = bound.args[0].value
            if loader is None and self.is_loader(arg):
                loader = arg
        if loader is None:
            return None
        statement = self.ctx.parent(assign)
        source = BatchSource(
            node=assign,
            loader=loader,
            loader_text=self.ctx.code(loader),
            body=_following(self.ctx, statement),
            binding_statement=assign,
            function=self.scopes.enclosing_function(assign),
        )
        for target in assign.targets:
            _bind(target.target, (), source)
        return source

    # -- what a loop does ---------------------------------------------------------------------

    def functions_named(self, name: str) -> List[cst.FunctionDef]:
        if self._functions is None:
            table: Dict[str, List[cst.FunctionDef]] = {}
            for function in self.ctx.nodes(cst.FunctionDef):
                table.setdefault(function.name.value, []).append(function)
            self._functions = table
        return self._functions.get(name, [])

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function of this file a call runs (`helper(...)`, `self.helper(...)`), if unique."""
        func = call.func
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) is cst.FunctionDef:
                    return binding.node
            return None
        if type(func) is cst.Attribute and type(func.value) is cst.Name:
            if func.value.value == "self":
                candidates = self.functions_named(func.attr.value)
                if len(candidates) == 1:
                    return candidates[0]
        return None

    def calls_in(
        self, node: cst.CSTNode, follow: int = 2
    ) -> List[Tuple[cst.Call, Tuple[cst.FunctionDef, ...]]]:
        """Every call under `node`, plus those in same-file functions it calls (`follow` levels).

        Each call comes with the chain of helper functions it was reached through (empty when it
        is directly under `node`). Nested function and class definitions under `node` are not
        entered (their code does not run here).
        """
        out: List[Tuple[cst.Call, Tuple[cst.FunctionDef, ...]]] = []
        self._collect_calls(node, (), follow, out, set())
        return out

    def _collect_calls(self, node, via, follow, out, seen) -> None:
        for child in self._own_descendants(node):
            if type(child) is cst.Call:
                out.append((child, via))
                if follow > 0:
                    target = self.callee(child)
                    if target is not None and target not in seen and target not in via:
                        seen.add(target)
                        self._collect_calls(target.body, via + (target,), follow - 1, out, seen)

    def _own_descendants(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """Descendants, not entering nested def/class/lambda bodies."""
        stack = [node]
        while stack:
            current = stack.pop()
            if current is not node:
                yield current
                if type(current) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                    continue
            stack.extend(reversed(children(current)))

    def training_loops(self) -> List[cst.CSTNode]:
        """For/While loops from which a `.backward()` call is reachable."""
        loops = []
        for loop in list(self.ctx.nodes(cst.For)) + list(self.ctx.nodes(cst.While)):
            if any(_is_method(call, "backward") for call, _ in self.calls_in(loop.body)):
                loops.append(loop)
        return loops

    # -- context ------------------------------------------------------------------------------

    def under_no_grad(self, node: cst.CSTNode) -> bool:
        """Inside `with torch.no_grad():`/`inference_mode()`, or a function decorated with them."""
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.With:
                for item in ancestor.items:
                    expr = item.item
                    func = expr.func if type(expr) is cst.Call else expr
                    if self.names.is_(func, *_NO_GRAD):
                        if (
                            self.names.is_(func, "torch.set_grad_enabled")
                            and type(expr) is cst.Call
                        ):
                            arg = expr.args[0].value if expr.args else None
                            if not (type(arg) is cst.Name and arg.value == "False"):
                                continue
                        return True
            if type(ancestor) is cst.FunctionDef:
                for decorator in ancestor.decorators:
                    expr = decorator.decorator
                    func = expr.func if type(expr) is cst.Call else expr
                    if self.names.is_(func, *_NO_GRAD):
                        return True
        return False

    def enclosing_loops(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """For/While loops around `node` in its function, innermost first."""
        out = []
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.For, cst.While):
                out.append(ancestor)
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                break
        return out


# -- helpers ----------------------------------------------------------------------------------


def _is_method(call: cst.Call, name: str) -> bool:
    return type(call.func) is cst.Attribute and call.func.attr.value == name


def _block(body: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if type(body) is cst.IndentedBlock:
        return list(body.body)
    return [body]  # type: ignore[list-item]


def _following(ctx, statement: Optional[cst.CSTNode]) -> Sequence[cst.BaseStatement]:
    """The statements after `statement` in its block (the batch is used there)."""
    if statement is None:
        return []
    block = ctx.parent(statement)
    body = getattr(block, "body", None)
    if not isinstance(body, (list, tuple)):
        return []
    items = list(body)
    if statement in items:
        return items[items.index(statement) + 1 :]
    return []


def _bind(target: cst.BaseExpression, path: Path, source: BatchSource) -> None:
    if type(target) is cst.Name:
        if path:
            source.elements[target.value] = path
        else:
            source.roots.add(target.value)
    elif type(target) in (cst.Tuple, cst.List):
        seen_star = False
        for index, element in enumerate(target.elements):
            if type(element) is cst.StarredElement:
                seen_star = True
                _bind(element.value, path + ("*",), source)
            else:
                # After a starred element, positions count from the end; keep them symbolic.
                key: Union[int, str] = index if not seen_star else f"@{index}"
                _bind(element.value, path + (key,), source)


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
                for call in self.callers(function):
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
                        for call in self.callers(function):
                            out.extend(self._unpacked(call, position))
                elif type(holder) is cst.Assign and holder.value is tuple_node:
                    for target in holder.targets:
                        if type(target.target) in (cst.Tuple, cst.List):
                            elements = target.target.elements
                            if position < len(elements):
                                out.extend(self._target_references(elements[position].value))
        elif type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is cst.Call and parent.value is node:
                out.extend(self._parameter_references(call, parent))
        return out

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
                if type(target.target) in (cst.Tuple, cst.List):
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
        params = list(function.params.posonly_params) + list(function.params.params)
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
        callee = self.loops.callee(call)
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
        if type(parent) in (cst.For, cst.CompFor) and parent.target is name:
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

    def _use_at(self, reference: cst.CSTNode) -> Optional[LoaderUse]:
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
        if type(parent) in (cst.For, cst.CompFor) and parent.iter is node:
            return LoaderUse(parent, "loop", reference)
        if type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is not cst.Call or parent.value is not node:
                return None
            leaf = (dotted_name(call.func) or "").split(".")[-1]
            if leaf == "next":
                return LoaderUse(call, "loop", reference)
            if leaf in _NOT_ITERATING or self._called_function(call)[0] is not None:
                return None
            return LoaderUse(call, "call", reference)
        if type(parent) is cst.Assign and node is not reference:
            # `pbar = tqdm(loader)` / `it = iter(loader)`: the wrapper's own references iterate.
            for target in parent.targets:
                for alias in self._target_references(target.target):
                    use = self._use_at(alias)
                    if use is not None:
                        return LoaderUse(use.site, use.kind, reference)
        return None

    def is_training_use(self, use: LoaderUse) -> bool:
        """Is the loader iterated where a `.backward()` is reachable (or handed to a function
        whose name says it trains)?"""
        if use.kind == "call":
            leaf = (dotted_name(use.site.func) or "").split(".")[-1].lower()  # type: ignore
            return "train" in leaf or leaf.startswith("fit")
        if type(use.site) is cst.For:
            body = use.site.body
        else:
            loops = self.loops.enclosing_loops(use.site)
            if not loops:
                return False
            body = loops[0].body
        return any(_is_method(call, "backward") for call, _ in self.loops.calls_in(body, 3))

    # -- loops around, through callers --------------------------------------------------------

    def callers(self, function: cst.FunctionDef) -> List[cst.Call]:
        """Same-file calls of `function`: `name(...)`, or `self.name(...)` in its class."""
        out = []
        cls = None
        parent = self.ctx.parent(function)
        holder = self.ctx.parent(parent) if parent is not None else None
        if type(holder) is cst.ClassDef:
            cls = holder
        name = function.name.value
        for node in self._names_called(name):
            call = self.ctx.parent(node)
            if type(call) is cst.Call and call.func is node:
                if any(b.node is function for b in self.scopes.lookup(name, node)):
                    out.append(call)
            elif (
                cls is not None
                and type(call) is cst.Attribute
                and call.attr is node
                and type(call.value) is cst.Name
                and call.value.value == "self"
            ):
                outer = self.ctx.parent(call)
                if type(outer) is cst.Call and outer.func is call:
                    if any(a is cls for a in self.ctx.ancestors(outer)):
                        out.append(outer)
        return out

    def loops_around(self, node: cst.CSTNode, depth: int = 2) -> List[cst.CSTNode]:
        """Loops enclosing `node` in its function, then (up to `depth` levels) the loops
        enclosing the same-file calls of that function. Innermost first."""
        out: List[cst.CSTNode] = []
        frontier = [node]
        seen: Set[cst.CSTNode] = set()
        for _ in range(depth + 1):
            next_frontier = []
            for current in frontier:
                for loop in self.loops.enclosing_loops(current):
                    if loop not in out:
                        out.append(loop)
                function = self.scopes.enclosing_function(current)
                if function is not None and function not in seen:
                    seen.add(function)
                    next_frontier.extend(self.callers(function))
            frontier = next_frontier
        return out


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


# == Batch-element dataflow (TRL101) ===========================================================
#
# `BatchFlow.flow(source)` follows the names a batch source binds through the statements that see
# them, in order: what is moved to the device (`.to`/`.cuda`/`.type_as`, comprehensions, helpers,
# in-place moves of the whole batch), what is derived from an element without moving it
# (`y = batch["labels"]`, `labels.long()`, `labels[:, 0]`, `x, y = batch`), and what holds a value
# on the device (moved elements, outputs of a model on the device and what is computed from them,
# until `.cpu()`/`.item()`/`.numpy()`). Where an element that was never moved meets the device it
# records a finding: an argument of a moved model (inputs handed to a DataParallel / DDP
# wrapper are moved by it), a loss or criterion call or `F.*loss*` next to a device value,
# arithmetic or a comparison with one, `torch.cat`/`stack` with one. Branches are followed
# separately and joined conservatively: an element moved on one path counts as moved.

_TENSOR_PRESERVING = frozenset(
    {
        "float",
        "double",
        "half",
        "bfloat16",
        "long",
        "int",
        "short",
        "bool",
        "byte",
        "char",
        "type",
        "squeeze",
        "unsqueeze",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "permute",
        "transpose",
        "t",
        "contiguous",
        "flatten",
        "clone",
        "detach",
        "repeat",
        "expand",
        "expand_as",
        "narrow",
        "flip",
        "pin_memory",
        "squeeze_",
        "unsqueeze_",
        "requires_grad_",
        "to",  # only when it is not a move (a dtype cast)
    }
)
_NOT_TENSOR_RESULTS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "cpu",
        "size",
        "dim",
        "numel",
        "nelement",
        "stride",
        "data_ptr",
        "get_device",
        "element_size",
        "is_contiguous",
        "keys",
        "values",
        "items",
        "get",
    }
)
_NOT_TENSOR_ATTRS = frozenset(
    {"shape", "device", "dtype", "ndim", "is_cuda", "requires_grad", "grad_fn", "layout"}
)
_BINARY_METHODS = frozenset(
    {
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "add",
        "sub",
        "mul",
        "div",
        "matmul",
        "mm",
        "bmm",
        "add_",
        "sub_",
        "mul_",
        "div_",
        "masked_fill",
        "masked_fill_",
    }
)
_COMPARISON_OPS = (
    cst.Equal,
    cst.NotEqual,
    cst.LessThan,
    cst.LessThanEqual,
    cst.GreaterThan,
    cst.GreaterThanEqual,
)
_TORCH_JOIN = (
    "torch.cat",
    "torch.concat",
    "torch.concatenate",
    "torch.stack",
    "torch.hstack",
    "torch.vstack",
    "torch.dstack",
)
_FUNCTIONAL_LOSS = re.compile(
    r"^torch\.nn\.functional\.(\w*loss\w*|cross_entropy|binary_cross_entropy\w*|kl_div)$"
)
_LOSS_CALLEE = re.compile(r"(criterion|loss|crit$)", re.I)
_MODEL_WORDS = frozenset(
    {
        "model",
        "models",
        "net",
        "network",
        "encoder",
        "decoder",
        "backbone",
        "generator",
        "discriminator",
        "classifier",
        "detector",
        "segmentor",
        "transformer",
        "unet",
        "vae",
        "policy",
        "critic",
        "actor",
        "head",
        "teacher",
        "student",
        "module",
        "ema",
    }
)
# Module methods that take no batch (calling them is not running the model).
_MODULE_NOT_FORWARD = frozenset(
    {
        "state_dict",
        "load_state_dict",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "train",
        "eval",
        "to",
        "cuda",
        "cpu",
        "apply",
        "zero_grad",
        "modules",
        "named_modules",
        "children",
        "requires_grad_",
        "half",
        "float",
        "double",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_buffer",
        "add_module",
        "get_submodule",
        "no_sync",
        "join",
    }
)
# Batch items that are not tensors, or stay on the CPU by design (pack_padded_sequence lengths).
_NON_TENSOR_WORDS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "filename",
        "filenames",
        "fname",
        "fnames",
        "name",
        "names",
        "caption",
        "captions",
        "text",
        "texts",
        "sentence",
        "sentences",
        "prompt",
        "prompts",
        "question",
        "questions",
        "answer",
        "answers",
        "meta",
        "metas",
        "metadata",
        "info",
        "infos",
        "url",
        "urls",
        "idx",
        "idxs",
        "index",
        "indices",
        "indexes",
        "key",
        "keys",
        "str",
        "string",
        "strings",
        "title",
        "titles",
        "word",
        "words",
        "len",
        "lens",
        "length",
        "lengths",
        "raw",
        "uid",
        "uids",
        "img_metas",
        "n",
        "num",
        "count",
        "counts",
    }
)
_TENSOR_ID_WORDS = frozenset(
    {"input", "token", "position", "type", "label", "labels", "target", "targets", "class"}
)
_TEXT_CALLEE = re.compile(r"(token|tokenize|imread|open|path\.|join$|split$|format$)", re.I)
_TEXT_METHODS = frozenset(
    {"split", "lower", "upper", "strip", "startswith", "endswith", "encode", "format", "replace"}
)
_MOVING_LOADER = re.compile(
    r"prefetch|(device|cuda|gpu).*(loader|iter|batch)|(loader|iter).*(device|cuda|gpu)", re.I
)

DEVICE = "<on the device>"  # the abstract value of anything on the device
_MOVING_NODES = (cst.Call, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_MOVING_TYPES = frozenset(_MOVING_NODES)  # exact types: the parser builds exactly these


@dataclass(eq=False)
class Element:
    """A value taken from a batch that has not been moved to the device."""

    name: str  # what the code calls it: labels, batch["labels"], batch
    source: "BatchSource" = field(repr=False)
    # the For, or the statement line that bound the name
    bound_at: Optional[cst.CSTNode] = field(repr=False)
    root: bool = False  # the whole batch
    fix_target: Optional[str] = None  # what a fix may assign (`labels`, `batch["labels"]`)
    # the element this one was computed from
    origin: Optional["Element"] = field(default=None, repr=False)
    helper: Optional[Tuple[str, int]] = None  # imported helper (qualname, arg) that may move it
    # `labels.to(device)` whose result was thrown away
    discarded: Optional[cst.Call] = field(default=None, repr=False)
    # the call that handed it to a helper of this file
    via: Optional[cst.Call] = field(default=None, repr=False)
    moved_keys: Set[str] = field(default_factory=set)
    children: Dict[str, "Element"] = field(default_factory=dict, repr=False)

    def lineage(self) -> List["Element"]:
        out: List[Element] = []
        current: Optional[Element] = self
        while current is not None and current not in out:
            out.append(current)
            current = current.origin
        return out

    def derive(self, name: str, bound_at, root: bool = False, fix_target=None) -> "Element":
        return Element(
            name=name,
            source=self.source,
            bound_at=bound_at,
            root=root,
            fix_target=fix_target,
            origin=self,
            helper=self.helper,
        )


@dataclass
class Unmoved:
    """An element that never reached the device, at its first use next to the device."""

    element: Element
    use: cst.CSTNode  # the expression that carries the element into the sink
    sink: cst.CSTNode  # the model call, loss call, operation or torch.cat/stack
    kind: str  # model, loss, arithmetic, comparison, cat


@dataclass
class Flow:
    source: "BatchSource"
    findings: List[Unmoved] = field(default_factory=list)
    moves: list = field(default_factory=list)  # devices.Move of this batch's elements
    quiet: Optional[str] = None  # why nothing is reported for this source
    helper: Optional[Tuple[str, int]] = None  # an imported collate_fn that may move the batch
    bound_names: Set[str] = field(default_factory=set)  # names (re)bound in the body


class BatchFlow(Analysis):
    """Batch elements through the loop body (see the section comment above)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        from .devices import Moves
        from .frameworks import Frameworks

        self.loops: Loops = ctx.analysis(Loops)
        self.moves = ctx.analysis(Moves)
        self.frameworks = ctx.analysis(Frameworks)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self._flows: Dict[cst.CSTNode, Flow] = {}
        # id(callee expression) -> (it, may be a model, its placement, named like a model);
        # the entry keeps the node alive, so the id stays its own.
        self._callees: Dict[int, Tuple[cst.CSTNode, bool, FrozenSet[str], bool]] = {}
        from .frameworks import loaders_prepared_by_framework

        self._prepared = loaders_prepared_by_framework(ctx)

    def flows(self) -> List[Flow]:
        return [self.flow(source) for source in self.loops.batch_sources()]

    def flow(self, source: BatchSource) -> Flow:
        found = self._flows.get(source.node)
        if found is None:
            found = self._flows[source.node] = self._run(source)
        return found

    # -- one source ---------------------------------------------------------------------------

    def _run(self, source: BatchSource) -> Flow:
        flow = Flow(source)
        managed = self.frameworks.managed(source.node) or self._prepared
        if managed is not None:
            flow.quiet = f"managed by {managed}"
            return flow
        reason = self._loader_moves(source, flow)
        if reason is not None:
            flow.quiet = reason
            return flow
        body = self._body(source)
        walker = _Walker(self, source, flow, body)
        walker.start()
        walker.block(body)
        flow.bound_names = _bound_names(walker.body_nodes())
        return flow

    def _body(self, source: BatchSource) -> List[cst.BaseStatement]:
        """The statements that see the batch: the loop body, or what follows `next(...)` (also
        after the `try`/`if` that holds it, up to the enclosing loop or function)."""
        body = list(source.body)
        if type(source.node) is cst.For:
            return body
        statement = self.ctx.parent(source.node)
        current = statement
        for _ in range(3):
            block = self.ctx.parent(current) if current is not None else None
            owner = self.ctx.parent(block) if block is not None else None
            if type(owner) not in (cst.Try, cst.If, cst.ExceptHandler, cst.Else, cst.Finally):
                break
            if type(owner) in (cst.ExceptHandler, cst.Else, cst.Finally):
                owner = self.ctx.parent(owner)
            if type(owner) is cst.If and type(self.ctx.parent(owner)) is cst.If:
                break
            body.extend(_following(self.ctx, owner))
            current = owner
        return body

    # -- loaders that deliver batches on the device -------------------------------------------

    def _loader_moves(self, source: BatchSource, flow: Flow) -> Optional[str]:
        start = source.node.iter if type(source.node) is cst.For else source.node.value
        for call in self._loader_chain(start):
            dotted = dotted_name(call.func) or ""
            leaf = dotted.split(".")[-1]
            if _MOVING_LOADER.search(leaf):
                return f"`{leaf}` delivers batches on the device"
            if any(a.keyword is not None and a.keyword.value == "device" for a in call.args):
                return f"`{leaf}(..., device=...)` delivers batches on the device"
            local = self._local_definition(call.func)
            if type(local) is cst.ClassDef and self.moves.moves_in(local):
                return f"`{leaf}` moves the batches"
            if leaf.endswith("DataLoader") or self.names.matches_suffix(call.func, "DataLoader"):
                reason = self._dataloader_moves(call, flow)
                if reason is not None:
                    return reason
        return None

    def _loader_chain(self, expr: cst.CSTNode, depth: int = 0) -> List[cst.Call]:
        """Calls that make the iterated object: wrappers, the DataLoader, through names."""
        out: List[cst.Call] = []
        if depth > 4 or expr is None:
            return out
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if type(node) is cst.Call:
                out.append(node)
            elif type(node) is cst.Name:
                for binding in self.scopes.lookup(node.value, node):
                    value = binding.value
                    if binding.kind == "unpack" and type(binding.statement) is cst.Assign:
                        value = binding.statement.value  # train_iter, val_iter = make(...)
                    if binding.kind in ("assign", "annassign", "unpack") and value is not None:
                        out.extend(self._loader_chain(value, depth + 1))
            elif type(node) is cst.Attribute and _is_self(node.value):
                for value in self._self_assignments(node):
                    out.extend(self._loader_chain(value, depth + 1))
        return out

    def _self_assignments(self, attr: cst.Attribute) -> List[cst.BaseExpression]:
        cls = next((a for a in self.ctx.ancestors(attr) if type(a) is cst.ClassDef), None)
        if cls is None:
            return []
        out = []
        for node in self.ctx.tree.descendants(cls.body):
            if type(node) is cst.Assign:
                for target in node.targets:
                    t = target.target
                    if (
                        type(t) is cst.Attribute
                        and _is_self(t.value)
                        and t.attr.value == attr.attr.value
                    ):
                        out.append(node.value)
        return out

    def _dataloader_moves(self, call: cst.Call, flow: Flow) -> Optional[str]:
        collate = None
        dataset = call.args[0].value if call.args and call.args[0].keyword is None else None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "collate_fn":
                collate = arg.value
            if arg.keyword is not None and arg.keyword.value == "dataset":
                dataset = arg.value
        if collate is not None:
            if type(collate) is cst.Lambda and self.moves.moves_in(collate.body):
                return "its collate_fn moves the batch"
            local = self._local_definition(collate)
            if local is not None and self.moves.moves_in(local):
                return "its collate_fn moves the batch"
            if local is None and not _in_worker_processes(call):
                # An imported collate_fn of the project may move the batch; with worker
                # processes it cannot (CUDA cannot be used in forked workers).
                helper = self.project_helper(collate)
                if helper is not None:
                    flow.helper = (helper, -1)
        if type(dataset) is cst.Name:
            for binding in self.scopes.lookup(dataset.value, dataset):
                value = binding.value
                if type(value) is cst.Call:
                    local = self._local_definition(value.func)
                    if type(local) is cst.ClassDef and self.moves.moves_in(local):
                        return "its dataset returns tensors on the device"
        return None

    def _local_definition(self, func: cst.BaseExpression) -> Optional[cst.CSTNode]:
        """The def/class of this file that `func` names, if any."""
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) in (cst.FunctionDef, cst.ClassDef):
                    return binding.node
        if type(func) is cst.Attribute and _is_self(func.value):
            found = self.loops.functions_named(func.attr.value)
            if len(found) == 1:
                return found[0]
        return None

    # -- imported helpers ---------------------------------------------------------------------

    def project_helper(self, func: cst.BaseExpression) -> Optional[str]:
        """The qualified name of an imported function that may belong to this project (so that
        only the project phase can tell whether it moves its argument), else None."""
        qualified = self.names.qualified(func)
        if not qualified:
            return None
        for qualname in sorted(qualified):
            if qualname.startswith(LOCAL_PREFIX):
                return None
            if qualname.startswith("."):
                return qualname
            top = qualname.split(".")[0]
            if top in _THIRD_PARTY or top in _STDLIB:
                return None
            return qualname
        return None

    # -- what a callee is ---------------------------------------------------------------------

    def model_call(
        self, call: cst.Call, args_on_device: bool, siblings_moved: bool = False
    ) -> Tuple[bool, bool]:
        """(its output is on the device, its inputs must be) for a call that may run a model.

        A model is on the device when it was moved (or wrapped), or, for a callee named like a
        model (`model`, `net`, `self.encoder`, ...), when it gets moved tensors or the loop
        moves other items of the same batch (DESIGN: "while the model or siblings were
        moved"). Inputs given to a DataParallel/DDP(device_ids)/FSDP wrapper are moved by it."""
        target = call.func
        if type(target) is cst.Attribute and target.attr.value == "forward":
            target = target.value
        # What the callee is does not depend on the call's arguments: the walk of each source
        # (and a helper's body, followed from each call) asks again for the same calls.
        known = self._callees.get(id(target))
        if known is None:
            if self._may_be_model(target):
                known = (target, True, self.moves.placement(target), _model_like(target))
            else:
                known = (target, False, frozenset(), False)
            self._callees[id(target)] = known
        _, may_be_model, placement, modelish = known
        if not may_be_model:
            return False, False
        plain = MOVED in placement
        wrapped = WRAPPED in placement
        # Sibling moves say nothing about a model seen built and never moved (`net =
        # TrainerNet()` whose forward ships inputs elsewhere itself).
        siblings = siblings_moved and UNPLACED not in placement
        evidence = modelish and (args_on_device or siblings)
        on_device = plain or wrapped or (modelish and args_on_device)
        inputs = plain or (evidence and not wrapped)
        return on_device, inputs

    def _may_be_model(self, target: cst.BaseExpression) -> bool:
        dotted = dotted_name(target)
        if dotted is None:
            return False
        if type(target) is cst.Attribute and target.attr.value in _MODULE_NOT_FORWARD:
            return False
        root = dotted.split(".")[0]
        if root in ("self", "cls"):
            if type(target) is cst.Attribute and self.loops.functions_named(target.attr.value):
                return False  # a method of the class, not a submodule
            return True
        head = target
        while type(head) is cst.Attribute:
            head = head.value
        for binding in self.scopes.lookup(root, head):
            if binding.kind in ("import", "def", "class"):
                return False
        return bool(self.scopes.lookup(root, head)) or not self.names.qualified(target)

    def is_loss(self, call: cst.Call) -> bool:
        func = call.func
        if type(func) is cst.Call:  # nn.CrossEntropyLoss()(logits, labels)
            return any(q.endswith("Loss") for q in self.names.qualified(func.func))
        if any(_FUNCTIONAL_LOSS.match(q) for q in self.names.qualified(func)):
            return True
        dotted = dotted_name(func)
        if dotted is None:
            return False
        if not _LOSS_CALLEE.search(dotted.split(".")[-1]):
            return self._bound_to_loss_class(func)
        root = dotted.split(".")[0]
        if root in ("self", "cls"):
            if type(func) is cst.Attribute and self.loops.functions_named(func.attr.value):
                return False
            return True
        head = func
        while type(head) is cst.Attribute:
            head = head.value
        bindings = self.scopes.lookup(root, head)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind in ("import", "def", "class"):
                return False  # a function: it may move or convert what it gets
            if binding.kind in ("assign", "annassign") and type(binding.value) is cst.Call:
                local = self._local_definition(binding.value.func)
                if type(local) is cst.ClassDef and self.moves.moves_in(local):
                    return False  # a criterion of this file that moves its targets itself
        return True

    def _bound_to_loss_class(self, func: cst.BaseExpression) -> bool:
        """`dice = smp.losses.DiceLoss(mode="binary")`, `focal = FocalLoss()`: a name bound
        only to instances of a class named `...Loss` (not one of this file that moves things)."""
        if type(func) is not cst.Name:
            return False
        bindings = self.scopes.lookup(func.value, func)
        if not bindings:
            return False
        for binding in bindings:
            value = binding.value
            if binding.kind not in ("assign", "annassign") or type(value) is not cst.Call:
                return False
            if type(value.func) is cst.Call:
                return False
            names = set(self.names.qualified(value.func))
            dotted = dotted_name(value.func)
            if dotted:
                names.add(dotted)
            if not any(n.split(".")[-1].endswith("Loss") for n in names):
                return False
            local = self._local_definition(value.func)
            if type(local) is cst.ClassDef and self.moves.moves_in(local):
                return False
        return True

    def is_join(self, call: cst.Call) -> bool:
        return self.names.is_(call.func, *_TORCH_JOIN)

    def is_torch_function(self, call: cst.Call) -> bool:
        return any(q.startswith("torch.") for q in self.names.qualified(call.func))


class _Walker:
    """Abstract interpretation of one batch source's statements (names -> Element | DEVICE)."""

    def __init__(
        self,
        analysis: BatchFlow,
        source: BatchSource,
        flow: Flow,
        body: Sequence[cst.CSTNode],
        reported: Optional[Set[int]] = None,
        stack: Tuple[cst.FunctionDef, ...] = (),
    ) -> None:
        self.a = analysis
        self.ctx = analysis.ctx
        self.moves = analysis.moves
        self.source = source
        self.flow = flow
        self.body = body
        self.state: Dict[str, object] = {}
        self.reported: Set[int] = set() if reported is None else reported
        self.textual: Optional[Set[str]] = None
        self.structured: Set[str] = set()
        # Moves seen in the batch's own code (a helper's moves name the helper's variables).
        self.sibling_moves: list = flow.moves if not stack else []
        self.stack = stack
        self.siblings_moved = False  # does the loop move any item of this batch?
        self._nodes: Optional[List[cst.CSTNode]] = None

    def body_nodes(self) -> List[cst.CSTNode]:
        """The nodes of the statements that see the batch (own_nodes of each), walked once."""
        if self._nodes is None:
            self._nodes = [node for statement in self.body for node in own_nodes(statement)]
        return self._nodes

    def start(self) -> None:
        source = self.source
        bound_at = source.binding_statement
        if type(bound_at) is cst.Assign:
            bound_at = self.ctx.parent(bound_at)
        for root in source.roots:
            self.state[root] = Element(
                root, source, bound_at, root=True, fix_target=root, helper=self.flow.helper
            )
        for name, path in source.elements.items():
            fix = name if "*" not in path else None
            self.state[name] = Element(
                name, source, bound_at, fix_target=fix, helper=self.flow.helper
            )
        self.structured = self._structured_roots()
        self.siblings_moved = self._moves_batch_items()

    # -- statements ---------------------------------------------------------------------------

    def block(self, statements) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, stmt: cst.CSTNode) -> None:
        if type(stmt) in (cst.SimpleStatementLine, cst.SimpleStatementSuite):
            for small in stmt.body:
                self.small(small, stmt)
        elif type(stmt) is cst.If:
            self.sinks_in(stmt.test)
            before = dict(self.state)
            self.block(_block(stmt.body))
            after_body = self.state
            self.state = dict(before)
            if type(stmt.orelse) is cst.Else:
                self.block(_block(stmt.orelse.body))
            elif type(stmt.orelse) is cst.If:
                self.statement(stmt.orelse)
            self.state = _join(after_body, self.state)
        elif type(stmt) is cst.For:
            self.sinks_in(stmt.iter)
            for name in _target_names(stmt.target):
                self.state.pop(name, None)
            self.block(_block(stmt.body))
            if stmt.orelse is not None:
                self.block(_block(stmt.orelse.body))
        elif type(stmt) is cst.While:
            self.sinks_in(stmt.test)
            self.block(_block(stmt.body))
        elif type(stmt) is cst.With:
            for item in stmt.items:
                self.sinks_in(item.item)
                if item.asname is not None:
                    for name in _target_names(item.asname.name):
                        self.state.pop(name, None)
            self.block(_block(stmt.body))
        elif type(stmt) is cst.Try:
            before = dict(self.state)
            self.block(_block(stmt.body))
            after_body = self.state
            for handler in stmt.handlers:
                self.state = dict(before)
                self.block(_block(handler.body))
                after_body = _join(after_body, self.state)
            self.state = after_body
            if stmt.orelse is not None:
                self.block(_block(stmt.orelse.body))
            if stmt.finalbody is not None:
                self.block(_block(stmt.finalbody.body))

    def small(self, node: cst.CSTNode, line: cst.CSTNode) -> None:
        self.sinks_in(node)
        if type(node) is cst.Assign:
            self._note_moves(node.value)
            for target in node.targets:
                self.bind(target.target, node.value, line)
        elif type(node) is cst.AnnAssign and node.value is not None:
            self._note_moves(node.value)
            self.bind(node.target, node.value, line)
        elif type(node) is cst.AugAssign:
            left, right = self.value(node.target), self.value(node.value)
            self._pair(left, right, node.target, node.value, node, "arithmetic")
        elif type(node) is cst.Expr and type(node.value) is cst.Call:
            self._statement_call(node.value)
        elif type(node) is cst.Del:
            for name in _target_names(node.target):
                self.state.pop(name, None)

    def _note_moves(self, value: cst.BaseExpression) -> None:
        """Moves of this batch's elements: the device expression a fix should use."""
        if not self.moves.is_moved(value):
            return
        names = {n.value for n in _walk_names(value)}
        if any(isinstance(self.state.get(n), Element) for n in names):
            self.sibling_moves.extend(self.moves.moves_in(value))

    def _statement_call(self, call: cst.Call) -> None:
        move = self.moves.move(call)
        if move is not None and type(move.receiver) is cst.Name:
            current = self.state.get(move.receiver.value)
            if isinstance(current, Element):
                if current.root:
                    # BatchEncoding.to / a dict-like batch moves in place.
                    self.state[move.receiver.value] = DEVICE
                else:
                    changed = _copy(current)
                    changed.discarded = call
                    self.state[move.receiver.value] = changed
            return
        for index, arg in enumerate(call.args):
            if type(arg.value) is not cst.Name:
                continue
            current = self.state.get(arg.value.value)
            if not isinstance(current, Element):
                continue
            if self.moves.mover_call(call, index):
                self.state[arg.value.value] = DEVICE  # moved in place by a helper
                continue
            helper = self.a.project_helper(call.func)
            if helper is not None:
                changed = _copy(current)
                changed.helper = (helper, index)
                self.state[arg.value.value] = changed

    # -- bindings -----------------------------------------------------------------------------

    def bind(self, target: cst.BaseExpression, value: cst.BaseExpression, line) -> None:
        if type(target) is cst.Name:
            new = self.assigned(value, target.value, line)
            if new is None:
                self.state.pop(target.value, None)
            else:
                self.state[target.value] = new
            return
        if type(target) in (cst.Tuple, cst.List):
            self._bind_many(target, value, line)
            return
        if type(target) in (cst.Subscript, cst.Attribute) and type(target.value) is cst.Name:
            base = self.state.get(target.value.value)
            if not isinstance(base, Element) or self.value(value) is not DEVICE:
                return
            key = _key_text(self.ctx, target)
            if key is None:
                self.state[target.value.value] = DEVICE  # batch[k] = v.to(dev) for every k
            else:
                changed = _copy(base)
                changed.moved_keys = set(base.moved_keys) | {key}
                self.state[target.value.value] = changed

    def _bind_many(self, target, value, line) -> None:
        elements = [e.value for e in target.elements]
        if (
            type(value) in (cst.Tuple, cst.List)
            and len(value.elements) == len(elements)
            and not any(type(e) is cst.StarredElement for e in value.elements)
            and not any(type(e) is cst.StarredElement for e in target.elements)
        ):
            for t, v in zip(elements, value.elements):
                self.bind(t, v.value, line)
            return
        current = DEVICE if self.moves.is_moved(value) else self.value(value)
        for t in elements:
            for name in _target_names(t):
                if current is DEVICE:
                    self.state[name] = DEVICE
                elif isinstance(current, Element):
                    fix = name if type(t) is cst.Name else None
                    self.state[name] = current.derive(name, line, fix_target=fix)
                else:
                    self.state.pop(name, None)

    def assigned(self, value: cst.BaseExpression, name: str, line) -> object:
        if self.moves.is_moved(value):
            return DEVICE
        current = self.value(value)
        if current is DEVICE or current is None:
            return current
        assert isinstance(current, Element)
        alias = current.root and type(value) is cst.Name
        derived = current.derive(name, line, root=alias, fix_target=name)
        if alias:
            derived.moved_keys = set(current.moved_keys)
        return derived

    # -- values -------------------------------------------------------------------------------

    def value(self, expr: cst.CSTNode, depth: int = 0) -> object:
        """Element (not on the device), DEVICE, or None (anything else / unknown)."""
        if depth > 12:
            return None
        d = depth + 1
        if type(expr) is cst.Name:
            return self.state.get(expr.value)
        if type(expr) is cst.Attribute:
            return self._attribute(expr, d)
        if type(expr) is cst.Subscript:
            return self._subscript(expr, d)
        if type(expr) is cst.Call:
            return self._call_value(expr, d)
        if type(expr) is cst.BinaryOperation:
            return _combine(self.value(expr.left, d), self.value(expr.right, d))
        if type(expr) is cst.UnaryOperation:
            return self.value(expr.expression, d)
        if type(expr) is cst.Comparison:
            found = self.value(expr.left, d)
            for target in expr.comparisons:
                found = _combine(found, self.value(target.comparator, d))
            return found
        if type(expr) is cst.IfExp:
            body, orelse = self.value(expr.body, d), self.value(expr.orelse, d)
            if DEVICE in (body, orelse):
                return DEVICE
            if isinstance(body, Element) and isinstance(orelse, Element):
                return body
            return None
        if type(expr) in (cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.List, cst.Tuple):
            return DEVICE if self.moves.is_moved(expr) else None
        return None

    def _attribute(self, expr: cst.Attribute, d: int) -> object:
        base = self.value(expr.value, d)
        attr = expr.attr.value
        if isinstance(base, Element):
            if base.root:
                return self._child(base, f"{base.name}.{attr}", attr, None)
            return base if attr in ("T", "mT", "H", "data") else None
        if base is DEVICE:
            return None if attr in _NOT_TENSOR_ATTRS else DEVICE
        return None

    def _subscript(self, expr: cst.Subscript, d: int) -> object:
        base = self.value(expr.value, d)
        if isinstance(base, Element):
            key = _key_text(self.ctx, expr)
            if not base.root:
                if base.moved_keys:  # a list of tensors moved item by item: images[0] = ...
                    return DEVICE if key in base.moved_keys else None
                return base  # a slice of a tensor stays where the tensor is
            display = self.ctx.code(expr)
            if "\n" in display or len(display) > 40:
                return None
            fix = display if key is not None and key.startswith(("'", '"')) else None
            return self._child(base, display, key, fix)
        return DEVICE if base is DEVICE else None

    def _dict_item(self, root: Element, method: str, call: cst.Call) -> object:
        """`batch.pop("labels")` / `batch.get("labels")`: the item, like `batch["labels"]`."""
        if method not in ("pop", "get") or not call.args or call.args[0].keyword is not None:
            return None
        key = call.args[0].value
        if type(key) is not cst.SimpleString:
            return None
        return self._child(root, f"{root.name}[{key.value}]", key.value, None)

    def _child(self, root: Element, display: str, key, fix) -> object:
        if key is not None and key in root.moved_keys:
            return DEVICE
        found = root.children.get(display)
        if found is None:
            found = root.children[display] = Element(
                name=display,
                source=root.source,
                bound_at=root.bound_at,
                fix_target=fix,
                origin=root,
                helper=root.helper,
            )
        elif found.helper != root.helper:
            found = _copy(found)
            found.helper = root.helper
        return found

    def _call_value(self, call: cst.Call, d: int) -> object:
        if self.moves.move(call) is not None or self.moves.is_moved(call):
            return DEVICE
        func = call.func
        if type(func) is cst.Attribute:
            receiver = self.value(func.value, d)
            method = func.attr.value
            if isinstance(receiver, Element):
                if receiver.root:
                    return self._dict_item(receiver, method, call)
                return receiver if method in _TENSOR_PRESERVING else None
            if receiver is DEVICE:
                return None if method in _NOT_TENSOR_RESULTS else DEVICE
        args = [self.value(a.value, d) for a in call.args]
        if self.a.is_torch_function(call):
            if DEVICE in args:
                return DEVICE
            return next((a for a in args if isinstance(a, Element) and not a.root), None)
        on_device, _ = self.a.model_call(call, DEVICE in args)
        return DEVICE if on_device else None

    # -- sinks --------------------------------------------------------------------------------

    def sinks_in(self, node: cst.CSTNode) -> None:
        for child in own_nodes(node):
            if type(child) is cst.Call:
                self._call_sink(child)
            elif type(child) is cst.BinaryOperation:
                left, right = self.value(child.left), self.value(child.right)
                self._pair(left, right, child.left, child.right, child, "arithmetic")
            elif type(child) is cst.Comparison:
                left_expr = child.left
                for target in child.comparisons:
                    if isinstance(target.operator, _COMPARISON_OPS):
                        left, right = self.value(left_expr), self.value(target.comparator)
                        self._pair(left, right, left_expr, target.comparator, child, "comparison")
                    left_expr = target.comparator

    def _pair(self, left, right, left_expr, right_expr, sink, kind) -> None:
        if left is DEVICE and isinstance(right, Element):
            self.report(right, right_expr, sink, kind)
        elif right is DEVICE and isinstance(left, Element):
            self.report(left, left_expr, sink, kind)

    def _call_sink(self, call: cst.Call) -> None:
        move = self.moves.move(call)
        if move is not None:
            if move.receiver is not None and isinstance(self.value(move.receiver), Element):
                self.sibling_moves.append(move)  # `model(images.to(device))`: a sibling move
            return
        func = call.func
        values = [(arg, self.value(arg.value)) for arg in call.args]
        on_device_args = any(v is DEVICE for _, v in values)
        if self.a.is_join(call) and call.args:
            items = call.args[0].value
            if type(items) in (cst.List, cst.Tuple):
                found = [(e.value, self.value(e.value)) for e in items.elements]
                if any(v is DEVICE for _, v in found):
                    for expr, v in found:
                        if isinstance(v, Element):
                            self.report(v, expr, call, "cat")
            return
        if type(func) is cst.Attribute and func.attr.value in _BINARY_METHODS and call.args:
            receiver = self.value(func.value)
            first = values[0][1]
            self._pair(receiver, first, func.value, call.args[0].value, call, "comparison")
            return
        if self.a.is_loss(call):
            if on_device_args:
                for arg, v in values:
                    if isinstance(v, Element) and not arg.star:
                        self.report(v, arg.value, call, "loss")
            return
        if self.a.is_torch_function(call):
            return
        _, inputs = self.a.model_call(call, on_device_args, self.siblings_moved)
        if not inputs:
            self._follow(call, values)
            return
        for arg, v in values:
            if not isinstance(v, Element):
                continue
            if arg.star == "*":
                continue
            if v.root and arg.star != "**" and v.name in self.structured:
                continue  # the model gets the whole structured batch and may place it itself
            self.report(v, arg.value, call, "model")

    def report(self, element: Element, use: cst.CSTNode, sink: cst.CSTNode, kind: str) -> None:
        lineage = element.lineage()
        if any(id(e) in self.reported for e in lineage):
            return
        if not self._tensor_like(lineage):
            return
        # One finding per element and what it was derived from (the whole batch aside: its
        # other items are still reported).
        self.reported.update(id(e) for e in lineage if e is element or not e.root)
        self.flow.findings.append(Unmoved(element, use, sink, kind))

    # -- same-file helpers --------------------------------------------------------------------

    def _follow(self, call: cst.Call, values) -> None:
        """An element handed to a function of this file: follow it into the function's body."""
        if len(self.stack) >= 2:
            return
        function = self.moves._function_for(call.func)
        if function is None or function in self.stack:
            return
        if not any(isinstance(v, Element) and not v.root for _, v in values):
            return
        params = [p.name.value for p in function.params.params]
        offset = (
            1
            if params and params[0] in ("self", "cls") and type(call.func) is cst.Attribute
            else 0
        )
        state: Dict[str, object] = {}
        position = offset
        for arg, value in values:
            if arg.star:
                return  # *args / **kwargs: cannot tell which parameter gets what
            if arg.keyword is not None:
                name = arg.keyword.value
            elif position < len(params):
                name = params[position]
                position += 1
            else:
                continue
            if value is DEVICE:
                state[name] = DEVICE
            elif isinstance(value, Element) and not value.root:
                param = value.derive(name, None)
                param.via = call
                state[name] = param
        if not any(isinstance(v, Element) for v in state.values()):
            return
        body = _block(function.body)
        inner = _Walker(
            self.a, self.source, self.flow, body, self.reported, self.stack + (function,)
        )
        inner.siblings_moved = self.siblings_moved
        inner.state = state
        inner.block(body)

    # -- what an element is -------------------------------------------------------------------

    def _tensor_like(self, lineage: List[Element]) -> bool:
        if self.textual is None:
            self.textual = self._textual_names()
        for element in lineage:
            name = element.name
            if not _looks_tensor(name):
                return False
            if name in self.textual:
                return False
        return True

    def _textual_names(self) -> Set[str]:
        """Batch names used as text: handed to a tokenizer, split, opened, formatted."""
        found: Set[str] = set()
        tracked = set(self.state)
        for node in self.body_nodes():
            if type(node) is not cst.Call:
                continue
            func = node.func
            if type(func) is cst.Attribute and func.attr.value in _TEXT_METHODS:
                if type(func.value) is cst.Name and func.value.value in tracked:
                    found.add(func.value.value)
            dotted = dotted_name(func) or ""
            if dotted and _TEXT_CALLEE.search(dotted):
                for arg in node.args:
                    if type(arg.value) is cst.Name and arg.value.value in tracked:
                        found.add(arg.value.value)
        return found

    def _moves_batch_items(self) -> bool:
        """Does the code that sees the batch move any item of it (anywhere, on any path)?"""
        names = set(self.source.elements) | set(self.source.roots)
        nodes = self.body_nodes()
        # What each assignment's value mentions does not change between the rounds.
        assigns = [(node, _names_of(node.value)) for node in nodes if type(node) is cst.Assign]
        for _ in range(2):  # names taken from the batch: `image, mask = batch["image"], ...`
            for node, mentioned in assigns:
                if mentioned & names:
                    for target in node.targets:
                        names |= _target_names(target.target)
        for node in nodes:
            if type(node) in _MOVING_TYPES and self.moves.is_moved(node):
                if self.moves._data_names(node) & names and not _follows_a_tensor(
                    self.moves, node
                ):
                    return True
        return False

    def _structured_roots(self) -> Set[str]:
        """Whole-batch names the code takes apart (subscripts, unpacking, `.items()`)."""
        roots = set(self.source.roots)
        found: Set[str] = set()
        if not roots:
            return found
        for node in self.body_nodes():
            node_type = type(node)
            if node_type is cst.Subscript or node_type is cst.Attribute:
                value = node.value
                if type(value) is cst.Name and value.value in roots:
                    found.add(value.value)
            elif node_type is cst.Assign and type(node.value) is cst.Name:
                if node.value.value in roots and any(
                    type(t.target) in (cst.Tuple, cst.List) for t in node.targets
                ):
                    found.add(node.value.value)
        return found


# -- helpers for the dataflow -----------------------------------------------------------------

_STDLIB = frozenset(
    getattr(
        __import__("sys"),
        "stdlib_module_names",
        {"os", "sys", "re", "json", "math", "time", "random", "logging", "functools", "copy"},
    )
)
_THIRD_PARTY = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "numpy",
        "scipy",
        "pandas",
        "sklearn",
        "PIL",
        "cv2",
        "tqdm",
        "wandb",
        "tensorboard",
        "tensorboardX",
        "transformers",
        "datasets",
        "tokenizers",
        "accelerate",
        "timm",
        "lightning",
        "pytorch_lightning",
        "mmcv",
        "mmengine",
        "mmdet",
        "mmseg",
        "mmpretrain",
        "detectron2",
        "ignite",
        "deepspeed",
        "apex",
        "einops",
        "matplotlib",
        "yaml",
        "omegaconf",
        "hydra",
        "clip",
        "open_clip",
        "fairseq",
        "peft",
        "evaluate",
        "torchmetrics",
        "kornia",
        "albumentations",
        "h5py",
        "pycocotools",
    }
)


def _follows_a_tensor(moves, node: cst.CSTNode) -> bool:
    """`target.to(output.device)`: a move to wherever another tensor already is, which says
    nothing about where the model lives (device-agnostic code, model parallelism)."""
    found = moves.moves_in(node)
    return bool(found) and all(
        type(m.device) is cst.Attribute and m.device.attr.value == "device" for m in found
    )


def _names_of(node: cst.CSTNode) -> Set[str]:
    return {n.value for n in _walk_names(node)}


def _walk_names(node: cst.CSTNode):
    return (n for n in own_nodes(node) if type(n) is cst.Name)


def _target_names(target: cst.CSTNode) -> Set[str]:
    if type(target) is cst.Name:
        return {target.value}
    if type(target) in (cst.Tuple, cst.List):
        out: Set[str] = set()
        for element in target.elements:
            out |= _target_names(element.value)
        return out
    if type(target) is cst.StarredElement:
        return _target_names(target.value)
    return set()


def _bound_names(nodes: Sequence[cst.CSTNode]) -> Set[str]:
    """Names bound by `nodes` (the own nodes of some statements)."""
    found: Set[str] = set()
    for node in nodes:
        node_type = type(node)
        if node_type is cst.Assign:
            for t in node.targets:
                found |= _target_names(t.target)
        elif node_type in _TARGET_BINDERS:
            found |= _target_names(node.target)
        elif node_type is cst.AsName:
            found |= _target_names(node.name)
    return found


_TARGET_BINDERS = frozenset({cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor})


def _copy(element: Element) -> Element:
    from dataclasses import replace

    return replace(element, moved_keys=set(element.moved_keys))


def _combine(left: object, right: object) -> object:
    if left is DEVICE or right is DEVICE:
        return DEVICE
    if isinstance(left, Element) and not left.root:
        return left
    if isinstance(right, Element) and not right.root:
        return right
    return None


def _join(a: Dict[str, object], b: Dict[str, object]) -> Dict[str, object]:
    """Two paths meet: an element stays unmoved only where both paths agree it is."""
    out: Dict[str, object] = {}
    for name in set(a) | set(b):
        left, right = a.get(name), b.get(name)
        if left is right:
            value = left
        elif isinstance(left, Element) and isinstance(right, Element):
            value = left if left.source is right.source and left.name == right.name else None
        elif left is DEVICE or right is DEVICE:
            value = (
                DEVICE
                if (left is DEVICE or isinstance(left, Element))
                and (right is DEVICE or isinstance(right, Element))
                else None
            )
        else:
            value = None
        if value is not None:
            out[name] = value
    return out


def _key_text(ctx, node: cst.CSTNode) -> Optional[str]:
    """The literal key of `batch["labels"]` / `batch[2]` / `batch.labels`, else None."""
    if type(node) is cst.Attribute:
        return node.attr.value
    if type(node) is cst.Subscript and len(node.slice) == 1:
        index = node.slice[0].slice
        if type(index) is cst.Index and type(index.value) in (cst.SimpleString, cst.Integer):
            return ctx.code(index.value)
    return None


def _in_worker_processes(call: cst.Call) -> bool:
    """Does this DataLoader(...) load in worker processes (num_workers given and not 0)?"""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "num_workers":
            value = arg.value
            return not (type(value) is cst.Integer and int(value.value, 0) == 0)
    return False


def _is_self(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "self"


def _words(name: str) -> List[str]:
    name = re.sub(r"\[.*?\]|\W", "_", name)
    name = re.sub(r"([a-z])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[_\d]+", name.lower()) if w]


def _looks_tensor(name: str) -> bool:
    """False for batch items named like paths, ids, texts, metadata or CPU-side lengths."""
    if "[" in name:  # batch["image_path"]: judge by the key
        inner = re.findall(r"\[['\"]?([^\]'\"]*)['\"]?\]", name)
        name = inner[-1] if inner else name
    elif "." in name:
        name = name.rsplit(".", 1)[-1]
    words = _words(name)
    if not words:
        return True
    if name.lower() in _NON_TENSOR_WORDS:
        return False
    last = words[-1]
    if words[0] in ("num", "n") and len(words) > 1:
        return False  # num_answers, n_boxes: counts
    if last in ("id", "ids"):
        return any(w in _TENSOR_ID_WORDS for w in words[:-1])
    return last not in _NON_TENSOR_WORDS


def _model_like(target: cst.BaseExpression) -> bool:
    dotted = dotted_name(target) or ""
    for part in dotted.split("."):
        if part in ("self", "cls"):
            continue
        for word in _words(part):
            if word in _MODEL_WORDS or word.endswith("net") or word.startswith("model"):
                return True
        if re.match(r"^net[A-Z]", part):
            return True
    return False
