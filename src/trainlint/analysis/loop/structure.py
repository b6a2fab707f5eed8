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
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union, cast

import libcst as cst

from ..base.callgraph import CallGraph
from ..base.names import Names, dotted_name
from ..base.nodes import is_self_attr
from ..base.scopes import Scopes
from ..base.vocabulary import disables_grad
from .. import Analysis


Path = Tuple[Union[int, str], ...]  # position inside a batch: (1,), (1, 0), ("labels",)

_LOADER_NAME = re.compile(r"(loader|dataloader|(^|_)dls?$|(^|_)dl_|_iter$|^batches$)", re.I)
# A name for several loaders, kept in a dict or list (`dataloaders[phase]`).
_LOADERS_NAME = re.compile(r"(loaders|(^|_)dls)$", re.I)
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


@dataclass
class BatchSource:
    """One place where batches from a loader become names."""

    node: Union[cst.For, cst.Assign]  # the For loop, or the Assign of `next(...)`
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
        self.callgraph: CallGraph = ctx.analysis(CallGraph)

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
        if type(expr) is cst.Subscript:
            # `for inputs, labels in dataloaders[phase]`, `self.loaders["test"]`
            return self._holds_loaders(expr.value, _depth + 1)
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

    def _holds_loaders(self, container: cst.BaseExpression, depth: int) -> bool:
        """Is `container` a dict or list of loaders: built from them (`{x: DataLoader(...) for
        x in ("train", "val")}`, `{"train": train_loader, ...}`, `dict(train=...)`), bound to
        one, or a parameter or attribute named for several (`dataloaders`, `self.loaders`)?"""
        if depth > 4:
            return False
        if type(container) is cst.Dict:
            return any(
                type(e) is cst.DictElement and self.is_loader(e.value, depth)
                for e in container.elements
            )
        if type(container) is cst.DictComp:
            return self.is_loader(container.value, depth)
        if type(container) in (cst.List, cst.Tuple):
            return any(
                self.is_loader(e.value, depth)
                for e in cast(Union[cst.List, cst.Tuple], container).elements
            )
        if type(container) is cst.ListComp:
            return self.is_loader(container.elt, depth)
        if type(container) is cst.Call and dotted_name(container.func) == "dict":
            return any(
                a.keyword is not None and self.is_loader(a.value, depth) for a in container.args
            )
        if type(container) is cst.Name:
            bindings = self.scopes.lookup(container.value, container)
            for binding in bindings:
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    if self._holds_loaders(binding.value, depth + 1):
                        return True
            return bool(_LOADERS_NAME.search(container.value)) and not any(
                b.kind in ("assign", "annassign", "class", "def", "import") for b in bindings
            )
        if type(container) is cst.Attribute and is_self_attr(container, container.attr.value):
            values = self.self_assigned(container)
            if values:
                return any(self._holds_loaders(v, depth + 1) for v in values)
            return bool(_LOADERS_NAME.search(container.attr.value))
        return False

    def self_assigned(self, attr: cst.Attribute) -> List[cst.BaseExpression]:
        """What the class around `attr` assigns to `self.<attr>` (also by tuple: `self.dl,
        self.alpha = dl, alpha`)."""
        cls = next((a for a in self.ctx.ancestors(attr) if type(a) is cst.ClassDef), None)
        if cls is None:
            return []
        out: List[cst.BaseExpression] = []
        for node in self.ctx.tree.descendants(cls.body):
            if type(node) is not cst.Assign:
                continue
            for target in node.targets:
                pairs: List[Tuple[cst.CSTNode, cst.BaseExpression]] = [(target.target, node.value)]
                if type(target.target) is cst.Tuple and type(node.value) is cst.Tuple:
                    if len(target.target.elements) == len(node.value.elements):
                        pairs = [
                            (t.value, v.value)
                            for t, v in zip(target.target.elements, node.value.elements)
                        ]
                out.extend(value for t, value in pairs if is_self_attr(t, attr.attr.value))
        return out

    def _self_attribute_is_loader(self, expr: cst.Attribute, depth: int) -> bool:
        """`self.train_data` assigned a loader in the class (`self.train_data = train_data`
        with `train_data: DataLoader`, or `= DataLoader(...)`)."""
        if not (type(expr.value) is cst.Name and expr.value.value == "self"):
            return False
        return any(
            type(value) is not cst.Attribute and self.is_loader(value, depth + 1)
            for value in self.self_assigned(expr)
        )

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
        target: cst.BaseExpression = loop.target
        index_names: Set[str] = set()
        # Peel enumerate(...) (its counter is not a batch element) and tqdm(...)-like wrappers.
        for _ in range(4):
            if type(iterable) is not cst.Call:
                break
            leaf = (dotted_name(iterable.func) or "").split(".")[-1]
            if leaf in _ENUMERATE and iterable.args:
                if (
                    type(target) is cst.Tuple or type(target) is cst.List
                ) and len(target.elements) == 2:
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
            body=statements_of(loop.body),
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
            body=following_statements(self.ctx, statement),
            binding_statement=assign,
            function=self.scopes.enclosing_function(assign),
        )
        for target in assign.targets:
            _bind(target.target, (), source)
        return source

    # -- what a loop does ---------------------------------------------------------------------

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function of this file a call runs (see `CallGraph`)."""
        return self.callgraph.callee(call)

    def calls_in(
        self, node: cst.CSTNode, follow: int = 2
    ) -> List[Tuple[cst.Call, Tuple[cst.FunctionDef, ...]]]:
        """Every call under `node`, through the same-file functions it calls (see `CallGraph`)."""
        return self.callgraph.calls_in(node, follow)

    def training_loops(self) -> List[cst.CSTNode]:
        """For/While loops from which a `.backward()` call is reachable."""
        loops = []
        for loop in list(self.ctx.nodes(cst.For)) + list(self.ctx.nodes(cst.While)):
            if any(is_method_call(call, "backward") for call, _ in self.calls_in(loop.body)):
                loops.append(loop)
        return loops

    # -- context ------------------------------------------------------------------------------

    def under_no_grad(self, node: cst.CSTNode) -> bool:
        """Inside `with torch.no_grad():`/`inference_mode()`, or a function decorated with them."""
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.With:
                for item in ancestor.items:
                    if disables_grad(self.names, item.item):
                        return True
            if type(ancestor) is cst.FunctionDef:
                for decorator in ancestor.decorators:
                    if disables_grad(self.names, decorator.decorator):
                        return True
        return False

    def enclosing_loops(self, node: cst.CSTNode) -> List[Union[cst.For, cst.While]]:
        """For/While loops around `node` in its function, innermost first."""
        out = []
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.For or type(ancestor) is cst.While:
                out.append(ancestor)
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                break
        return out


# -- helpers ----------------------------------------------------------------------------------


def is_method_call(call: cst.Call, name: str) -> bool:
    return type(call.func) is cst.Attribute and call.func.attr.value == name


def statements_of(body: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    if type(body) is cst.IndentedBlock:
        return list(body.body)
    return [body]  # type: ignore[list-item]


def following_statements(ctx, statement: Optional[cst.CSTNode]) -> Sequence[cst.BaseStatement]:
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
    elif type(target) is cst.Tuple or type(target) is cst.List:
        seen_star = False
        for index, element in enumerate(target.elements):
            if type(element) is cst.StarredElement:
                seen_star = True
                _bind(element.value, path + ("*",), source)
            else:
                # After a starred element, positions count from the end; keep them symbolic.
                key: Union[int, str] = index if not seen_star else f"@{index}"
                _bind(element.value, path + (key,), source)
