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
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from . import Analysis
from .names import Names, dotted_name
from ..walk import children
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
        if isinstance(expr, cst.Call):
            if self._is_loader_call(expr):
                return True
            inner = self._pass_through_arg(expr)
            if inner is not None:
                return self.is_loader(inner, _depth + 1)
            return False
        if isinstance(expr, cst.Attribute):
            return bool(_LOADER_NAME.search(expr.attr.value)) and not _NOT_LOADER_NAME.search(
                expr.attr.value
            )
        if isinstance(expr, cst.Name):
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

    def _is_loader_call(self, call: cst.Call) -> bool:
        func = call.func
        dotted = dotted_name(func) or ""
        leaf = dotted.split(".")[-1]
        if leaf.endswith("DataLoader") or leaf in ("build_dataloader", "build_loader"):
            return True
        if any(q.endswith("DataLoader") for q in self.names.qualified(func)):
            return True
        # A function of this file that builds and returns a DataLoader.
        if isinstance(func, cst.Name) and func.value in self._loader_functions_in_file():
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
        if isinstance(annotation, cst.SimpleString):
            return "DataLoader" in annotation.value
        if isinstance(annotation, cst.Subscript):  # Optional[DataLoader]
            return any(
                isinstance(e.slice, cst.Index) and self._annotation_is_loader(e.slice.value)
                for e in annotation.slice
            )
        return False

    def _loader_functions_in_file(self) -> Set[str]:
        if self._loader_functions is None:
            found: Set[str] = set()
            for function in self.ctx.nodes(cst.FunctionDef):
                for ret in self._returns(function):
                    value = ret.value
                    exprs = value.elements if isinstance(value, cst.Tuple) else [value]
                    for element in exprs:
                        expr = getattr(element, "value", element)
                        if isinstance(expr, cst.Call) and self._is_loader_call_shallow(expr):
                            found.add(function.name.value)
                        elif isinstance(expr, cst.Name) and self._name_bound_to_loader(expr):
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
            if isinstance(value, cst.Call) and self._is_loader_call_shallow(value):
                return True
        return False

    def _returns(self, function: cst.FunctionDef) -> Iterator[cst.Return]:
        for node in self.ctx.tree.descendants(function.body):
            if isinstance(node, cst.Return) and node.value is not None:
                if self.scopes.enclosing_function(node) is function:
                    yield node

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
            if not isinstance(iterable, cst.Call):
                break
            leaf = (dotted_name(iterable.func) or "").split(".")[-1]
            if leaf in _ENUMERATE and iterable.args:
                if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
                    first = target.elements[0].value
                    if isinstance(first, cst.Name):
                        index_names.add(first.value)
                    target = target.elements[1].value
                iterable = iterable.args[0].value
                continue
            inner = self._pass_through_arg(iterable)
            if inner is None or self._is_loader_call(iterable):
                break
            iterable = inner
        if isinstance(iterable, cst.Name) and not self.is_loader(iterable):
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
            if isinstance(value, cst.Call):
                inner = self._pass_through_arg(value)
                if inner is not None and self.is_loader(inner):
                    return inner
        return None

    def _from_next(self, assign: cst.Assign) -> Optional[BatchSource]:
        value = assign.value
        if not (isinstance(value, cst.Call) and dotted_name(value.func) == "next" and value.args):
            return None
        arg = value.args[0].value
        loader: Optional[cst.BaseExpression] = None
        if isinstance(arg, cst.Call) and dotted_name(arg.func) == "iter" and arg.args:
            if self.is_loader(arg.args[0].value):
                loader = arg.args[0].value
        elif isinstance(arg, cst.Name):
            for binding in self.scopes.lookup(arg.value, arg):
                bound = binding.value
                if isinstance(bound, cst.Call) and dotted_name(bound.func) == "iter" and bound.args:
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
        if isinstance(func, cst.Name):
            for binding in self.scopes.lookup(func.value, func):
                if isinstance(binding.node, cst.FunctionDef):
                    return binding.node
            return None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
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
            if isinstance(child, cst.Call):
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
                if isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
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
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    expr = item.item
                    func = expr.func if isinstance(expr, cst.Call) else expr
                    if self.names.is_(func, *_NO_GRAD):
                        if self.names.is_(func, "torch.set_grad_enabled") and isinstance(
                            expr, cst.Call
                        ):
                            arg = expr.args[0].value if expr.args else None
                            if not (isinstance(arg, cst.Name) and arg.value == "False"):
                                continue
                        return True
            if isinstance(ancestor, cst.FunctionDef):
                for decorator in ancestor.decorators:
                    expr = decorator.decorator
                    func = expr.func if isinstance(expr, cst.Call) else expr
                    if self.names.is_(func, *_NO_GRAD):
                        return True
        return False

    def enclosing_loops(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """For/While loops around `node` in its function, innermost first."""
        out = []
        for ancestor in self.ctx.ancestors(node):
            if isinstance(ancestor, (cst.For, cst.While)):
                out.append(ancestor)
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
        return out


# -- helpers ----------------------------------------------------------------------------------


def _is_method(call: cst.Call, name: str) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == name


def _block(body: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if isinstance(body, cst.IndentedBlock):
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
    if isinstance(target, cst.Name):
        if path:
            source.elements[target.value] = path
        else:
            source.roots.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        seen_star = False
        for index, element in enumerate(target.elements):
            if isinstance(element, cst.StarredElement):
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
        if isinstance(parent, cst.Assign) and parent.value is node:
            for target in parent.targets:
                out.extend(self._target_references(target.target))
        elif isinstance(parent, cst.AnnAssign) and parent.value is node:
            out.extend(self._target_references(parent.target))
        elif isinstance(parent, cst.Return):
            function = self.scopes.enclosing_function(parent)
            if function is not None:
                for call in self.callers(function):
                    out.append(call)
        elif isinstance(parent, cst.Element):
            # An element of a returned / assigned tuple: follow that position.
            tuple_node = self.ctx.parent(parent)
            holder = self.ctx.parent(tuple_node) if tuple_node is not None else None
            if isinstance(tuple_node, cst.Tuple):
                position = list(tuple_node.elements).index(parent)
                if isinstance(holder, cst.Return):
                    function = self.scopes.enclosing_function(holder)
                    if function is not None:
                        for call in self.callers(function):
                            out.extend(self._unpacked(call, position))
                elif isinstance(holder, cst.Assign) and holder.value is tuple_node:
                    for target in holder.targets:
                        if isinstance(target.target, (cst.Tuple, cst.List)):
                            elements = target.target.elements
                            if position < len(elements):
                                out.extend(self._target_references(elements[position].value))
        elif isinstance(parent, cst.Arg):
            call = self.ctx.parent(parent)
            if isinstance(call, cst.Call) and parent.value is node:
                out.extend(self._parameter_references(call, parent))
        return out

    def _climb(self, node: cst.CSTNode) -> Tuple[cst.CSTNode, Optional[cst.CSTNode]]:
        """Step out of value-preserving wrappers: `x if c else y`, `(x)`."""
        parent = self.ctx.parent(node)
        while isinstance(parent, cst.IfExp) and node in (parent.body, parent.orelse):
            node = parent
            parent = self.ctx.parent(node)
        return node, parent

    def _unpacked(self, call: cst.Call, position: int) -> List[cst.CSTNode]:
        """For `a, b = f(...)`: the references of the name at `position`."""
        parent = self.ctx.parent(call)
        if isinstance(parent, cst.Assign) and parent.value is call:
            out = []
            for target in parent.targets:
                if isinstance(target.target, (cst.Tuple, cst.List)):
                    elements = target.target.elements
                    if position < len(elements):
                        out.extend(self._target_references(elements[position].value))
            return out
        return []

    def _target_references(self, target: cst.CSTNode) -> List[cst.CSTNode]:
        if isinstance(target, cst.Name):
            return self.name_references(target)
        if (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        ):
            return self.self_attribute_references(target)
        return []

    def name_references(self, bound: cst.Name) -> List[cst.CSTNode]:
        """Name nodes that read the binding made at `bound` (an assignment target or param)."""
        scope = self.scopes.scope_of(bound)
        if isinstance(self.ctx.parent(bound), cst.Param):
            for ancestor in self.ctx.ancestors(bound):
                if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                    scope = self.scopes.by_node.get(ancestor, scope)
                    break
        binding = None
        for candidate in scope.bindings.get(bound.value, []):
            if candidate.node is bound or (
                isinstance(candidate.node, cst.Param) and candidate.node.name is bound
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
            if isinstance(ancestor, cst.ClassDef):
                cls = ancestor
                break
        if cls is None:
            return []
        attr = target.attr.value
        out: List[cst.CSTNode] = []
        for node in self.ctx.tree.descendants(cls.body):
            if (
                isinstance(node, cst.Attribute)
                and node is not target
                and node.attr.value == attr
                and isinstance(node.value, cst.Name)
                and node.value.value == "self"
                and not isinstance(self.ctx.parent(node), cst.AssignTarget)
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
        if isinstance(func, cst.Name):
            for binding in self.scopes.lookup(func.value, func):
                if isinstance(binding.node, cst.FunctionDef):
                    return binding.node, False
                if isinstance(binding.node, cst.ClassDef):
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
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            return False
        if isinstance(parent, (cst.Arg, cst.Param)) and getattr(parent, "keyword", None) is name:
            return False
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias)):
            return False
        if isinstance(parent, (cst.AssignTarget, cst.AsName)):
            return False
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is name:
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
            call = self.ctx.parent(parent) if isinstance(parent, cst.Arg) else None
            if isinstance(call, cst.Call) and call.args and call.args[0] is parent:
                if self.loops._pass_through_arg(call) is not None:
                    if (dotted_name(call.func) or "") == "iter":
                        holder = self.ctx.parent(call)
                        if isinstance(holder, cst.Arg):  # next(iter(loader))
                            node = call
                            continue
                    node = call
                    continue
            break
        parent = self.ctx.parent(node)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            return LoaderUse(parent, "loop", reference)
        if isinstance(parent, cst.Arg):
            call = self.ctx.parent(parent)
            if not isinstance(call, cst.Call) or parent.value is not node:
                return None
            leaf = (dotted_name(call.func) or "").split(".")[-1]
            if leaf == "next":
                return LoaderUse(call, "loop", reference)
            if leaf in _NOT_ITERATING or self._called_function(call)[0] is not None:
                return None
            return LoaderUse(call, "call", reference)
        if isinstance(parent, cst.Assign) and node is not reference:
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
        if isinstance(use.site, cst.For):
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
        if isinstance(holder, cst.ClassDef):
            cls = holder
        name = function.name.value
        for node in self._names_called(name):
            call = self.ctx.parent(node)
            if isinstance(call, cst.Call) and call.func is node:
                if any(b.node is function for b in self.scopes.lookup(name, node)):
                    out.append(call)
            elif (
                cls is not None
                and isinstance(call, cst.Attribute)
                and call.attr is node
                and isinstance(call.value, cst.Name)
                and call.value.value == "self"
            ):
                outer = self.ctx.parent(call)
                if isinstance(outer, cst.Call) and outer.func is call:
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
    if isinstance(body, cst.IndentedBlock):
        for statement in body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
    return None


# Libraries whose DataLoader is torch's (a subclass taking the same arguments).
_TORCH_LOADER_ROOTS = ("torch", "torch_geometric", "monai", "timm")


def is_torch_dataloader(names: Names, call: cst.CSTNode) -> bool:
    """`torch.utils.data.DataLoader(...)` or a subclass with its arguments (not a project's own
    `build_dataloader`, and not a local class that happens to be called DataLoader)."""
    if not isinstance(call, cst.Call):
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
