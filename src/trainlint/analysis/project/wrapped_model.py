"""What the code that builds and changes a DataParallel-wrapped model names: a slice of its file.

construction.py asks which classes a wrapped model the analysis cannot name may run. Starting
from everything the wrapping file names is safe but wide: a face-recognition trainer names its
metric losses beside `models_backbones[args.model](...)`, and a loss that keeps a counter is
then taken for a layer of the model. This file follows the wrapped value itself instead, in the
function (or module) that wraps it:

- the value handed to the wrapper, and every assignment of a variable that holds the model or
  a part of it (`model = build(cfg)`, `backbone = ResNet()` then `Net(backbone)`);
- every use of such a variable that may change what the model runs: an attribute assigned
  (`model.fc = Head()`), a method called with arguments (`model.add_module("h", Head())`,
  `model.apply(init)`), the model handed to a function (`patch(model)`, whose code the walk then
  follows), an alias (`net = model`, `for m in model.modules():`), and what the model itself is
  called with (`model(x, aux)`: its `forward` may run a module it is given).

Variables the model is only computed from (`args` in `args.embed_size`, the `dataset` of
`dataset.num_classes()`) are followed to their assignments but not to their other uses, so a
loss built from the same `args` stays out. The slice is not closed, and the answer is None (the
whole file and its importers count, as before), when the model comes from a parameter (a caller
hands it), leaves the function (`return model`, `self.model = model`, a closure), comes from a
`with`, an `except` or a comprehension, is rebound by `global` in a function, or when the code
on the way looks names up at run time. A wrap at the module level also keeps the files that
import the module (construction.py), which may change a model they import.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .. import Analysis
from ..base.identity import RETURNS_RECEIVER
from ..base.scopes import Binding, Scope
from ..parallel.wraps import DP_KIND, WrapSite, Wraps
from .mentions import Mentions, is_label

# nn.Module methods whose result is the module or one of its submodules.
_RETURNS_A_MODULE = RETURNS_RECEIVER | {
    "modules", "children", "named_modules", "named_children", "get_submodule",
}
_WRAP_OWNER = "<wrapped>"  # the owner Mentions marks when the slice looks names up at run time


class _Open(Exception):
    """The slice is not closed: the model may come from, or go to, code outside it."""


class WrappedModels(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.mentions: Mentions = ctx.analysis(Mentions)
        self.scopes = ctx.scopes
        # Every name that refers (not an attribute's member, a keyword, a parameter), by text,
        # for all the wraps of the file.
        self.references: Dict[str, List[cst.Name]] = {}
        # Per wrap site (Wraps.sites order): {"names": [...], "importers": at module level}
        self.slices: List[Optional[dict]] = []
        for site in ctx.analysis(Wraps).sites:
            if site.kind != DP_KIND or site.classes:
                self.slices.append(None)  # named classes: construction.py is not asked
                continue
            if not self.references:
                for node in ctx.nodes(cst.Name):
                    if not is_label(ctx.parent(node), node):
                        self.references.setdefault(node.value, []).append(node)
            piece = _Slice(self, site)
            try:
                names = sorted(piece.run())
            except _Open:
                self.slices.append(None)
                continue
            self.slices.append({"names": names, "importers": piece.scope.kind == "module"})

    def facts(self) -> dict:
        return {"wrap_slices": self.slices}

    def names_in(self, node: cst.CSTNode) -> Set[str]:
        """The qualified names `node` mentions, as mentions.py records them; _Open when it
        looks names up at run time."""
        found = self.mentions.names_in(node, _WRAP_OWNER)
        if _WRAP_OWNER in self.mentions.dynamic:
            self.mentions.dynamic.discard(_WRAP_OWNER)
            raise _Open(node)
        return found


class _Slice:
    def __init__(self, models: WrappedModels, site: WrapSite) -> None:
        self.models = models
        self.ctx = models.ctx
        self.scopes = models.scopes
        self.site = site
        self.call = call = site.call
        function = self.scopes.enclosing_function(call)
        self.scope: Scope = (
            self.scopes.by_node[function] if function is not None else self.scopes.module_scope
        )
        self.references = models.references
        self.names: Set[str] = set()
        self.holding: Set[str] = set()  # variables that hold the model or a part of it
        self.computed: Set[str] = set()  # variables the model is only computed from
        self.todo: List[Tuple[str, bool]] = []

    def run(self) -> Set[str]:
        module = self.site.module
        if module is None:
            raise _Open(self.call)
        self._flow(module, holds=True)
        self._result_of(self.call)
        while self.todo:
            name, holds = self.todo.pop()
            for binding in self.scope.bindings.get(name, ()):
                self._binding(binding, holds)
            if holds:
                for use in self._uses(name):
                    self._use(use)
        return self.names

    # -- what flows in ------------------------------------------------------------------------

    def _flow(self, expr: cst.CSTNode, holds: bool) -> None:
        """`expr` is (part of) what the model is built from: its names count; a variable
        that is the value itself (a bare name, an argument, an element) may hold a module
        that becomes part of the model, one only read from (`args.size`) is followed to its
        assignments alone."""
        self.names |= self.models.names_in(expr)
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if type(node) is not cst.Name or is_label(self.ctx.parent(node), node):
                continue
            if not self._local(node):
                continue
            self._variable(node.value, holds and self._whole_value(node, expr))

    def _variable(self, name: str, holds: bool) -> None:
        if holds and name not in self.holding:
            self.holding.add(name)
            self.computed.discard(name)
            self.todo.append((name, True))
        elif not holds and name not in self.holding and name not in self.computed:
            self.computed.add(name)
            self.todo.append((name, False))

    def _whole_value(self, node: cst.Name, top: cst.CSTNode) -> bool:
        """Is `node` a value handed on as it is (the expression, an argument, an element, a
        branch of a conditional), rather than something read from?"""
        current: cst.CSTNode = node
        while current is not top:
            parent = self.ctx.parent(current)
            if parent is None:
                return False
            if type(parent) is cst.Arg and parent.value is current:
                grand = self.ctx.parent(parent)
                if type(grand) is cst.Call and grand.func is not current:
                    return True  # an argument of a constructor or helper
                return False
            if type(parent) in (cst.Element, cst.StarredElement, cst.DictElement):
                current = self.ctx.parent(parent) or parent
                continue
            if type(parent) in (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.IfExp):
                current = parent
                continue
            return False
        return True

    def _binding(self, binding: Binding, holds: bool) -> None:
        kind = binding.kind
        statement = binding.statement
        if kind == "import":
            if binding.qualname:
                self.names.add(binding.qualname)
            return
        if kind in ("assign", "annassign", "augassign", "unpack", "walrus"):
            value = binding.value
            if value is None and statement is not None:
                value = getattr(statement, "value", None)
            if value is None:
                if holds:
                    raise _Open(binding.node)
                return
            self._flow(value, holds and not self._uses_a_holder(value))
            return
        if kind == "for" and type(statement) is cst.For:
            self._flow(statement.iter, holds and not self._uses_a_holder(statement.iter))
            return
        if kind in ("def", "class"):
            # a function or class of the function's own: what it names counts
            self.names |= self.models.names_in(binding.node)
            return
        if holds:
            raise _Open(binding.node)  # a parameter (a caller hands the model), `with`, ...
        # A value the model is only computed with (`args` of `args.embed_size`) from a
        # parameter, a `with` or an `except`: what it holds builds no part of the model.

    def _uses_a_holder(self, expr: cst.CSTNode) -> bool:
        """Is `expr` computed from the model (`model = DataParallel(model)`, `acc =
        evaluate(args, model)`)? Then the model's own uses are what matters; the other values
        of the call are only what it is computed with (`args` is no part of the model)."""
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if type(node) is cst.Name and node.value in self.holding and self._local(node):
                if not is_label(self.ctx.parent(node), node):
                    return True
        return False

    # -- what the model's uses may change -------------------------------------------------------

    def _uses(self, name: str) -> List[cst.Name]:
        uses = []
        bound = {id(b.node) for b in self.scope.bindings.get(name, ())}
        for node in self.references.get(name, ()):
            if id(node) in bound:
                continue  # a binding (`a, model = ...`), followed by _binding
            if not self._local(node):
                continue  # another variable of the same name
            if self.scopes.scope_of(node) is not self.scope:
                raise _Open(node)  # read in a nested function, lambda or comprehension
            uses.append(node)
        if self.scope.kind == "module":
            for scope in self.scopes.iter_scopes():
                if name in scope.globals_ and scope is not self.scope:
                    raise _Open(name)  # rebound by a function through `global`
        return uses

    def _local(self, node: cst.Name) -> bool:
        """Is `node` a variable of the slice's scope? Imports, functions and classes are not:
        their qualified names (`names_in`) are what the walk follows."""
        bindings = self.scopes.lookup(node.value, node)
        return (
            bool(bindings)
            and all(b.scope is self.scope for b in bindings)
            and not all(b.kind in ("import", "def", "class") for b in bindings)
        )

    def _use(self, use: cst.Name) -> None:
        parent = self.ctx.parent(use)
        if type(parent) is cst.Call and parent.func is use:
            for arg in parent.args:  # `model(x, aux)`: its forward may run what it is given
                self._flow(arg.value, holds=False)
            return
        if type(parent) is cst.Attribute and parent.value is use:
            self._member_use(parent)
            return
        self._handed_on(use)

    def _member_use(self, chain: cst.Attribute) -> None:
        top: cst.CSTNode = chain
        while True:
            parent = self.ctx.parent(top)
            if type(parent) is cst.Attribute and parent.value is top:
                top = parent
            elif type(parent) is cst.Subscript and parent.value is top:
                top = parent
            else:
                break
        parent = self.ctx.parent(top)
        if type(parent) is cst.Call and parent.func is top:
            # `model.add_module("head", Head())`, `model.apply(init)`: what it is given counts;
            # what a module's own methods return may be the model or a part of it
            # (`model.cuda()`, `model.get_submodule("fc")`), not `model.parameters()`
            for arg in parent.args:
                self._flow(arg.value, holds=True)
            if type(top) is cst.Attribute and top.attr.value in _RETURNS_A_MODULE:
                self._result_of(parent)
            return
        statement: Optional[cst.CSTNode] = None
        if type(parent) is cst.AssignTarget:
            statement = self.ctx.parent(parent)
        elif isinstance(parent, (cst.AugAssign, cst.AnnAssign)) and parent.target is top:
            statement = parent
        if statement is not None:
            value = getattr(statement, "value", None)
            if value is not None:
                self._flow(value, holds=True)  # `model.fc = head`: the head is part of it now
            return
        self._handed_on(top)  # `model.module`, `model.encoder` read: a part of the model

    def _handed_on(self, value: cst.CSTNode) -> None:
        """The model (or a part) is used as a value: handed to a call, bound to another
        name, iterated; anything else that lets it leave the slice opens it."""
        current = value
        parent = self.ctx.parent(current)
        while parent is not None and type(parent) in (
            cst.Element, cst.StarredElement, cst.List, cst.Tuple, cst.IfExp
        ):  # fmt: skip
            current, parent = parent, self.ctx.parent(parent)
        if type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is not cst.Call:
                raise _Open(value)
            # `patch(model)`, `torch.nn.DataParallel(model)`: the callee's code is followed,
            # the other arguments are what it is computed with, the result may be the model
            self.names |= self.models.names_in(call.func)
            for arg in call.args:
                if arg is not parent:
                    self._flow(arg.value, holds=False)
            self._result_of(call)
            return
        if type(parent) is cst.Assign and parent.value is current:
            self._bind_holders(parent.targets)
            return
        if type(parent) is cst.For and parent.iter is current:
            self._hold_target(parent.target)
            return
        if type(parent) in (cst.Comparison, cst.ComparisonTarget, cst.BooleanOperation,
                            cst.UnaryOperation, cst.BinaryOperation, cst.If, cst.While,
                            cst.Expr, cst.Del, cst.FormattedStringExpression):  # fmt: skip
            return  # tested, computed with, printed, deleted: nothing changes
        raise _Open(value)  # returned, yielded, stored on `self`, a closure, ...

    def _result_of(self, call: cst.Call) -> None:
        """A call whose result may be the model (or a part of it): where the result goes."""
        parent = self.ctx.parent(call)
        if type(parent) is cst.Expr:
            return  # `model.cuda()` on its own line: nothing else holds the result
        if type(parent) is cst.Attribute and parent.value is call:
            method = self.ctx.parent(parent)
            if type(method) is cst.Call and method.func is parent:
                # `DataParallel(model).cuda()`: the chain's result is the same model
                for arg in method.args:
                    self._flow(arg.value, holds=False)
                self._result_of(method)
                return
        self._handed_on(call)

    def _bind_holders(self, targets) -> None:
        for target in targets:
            self._hold_target(target.target)

    def _hold_target(self, target: cst.CSTNode) -> None:
        if type(target) is cst.Name:
            if not self._local(target):
                raise _Open(target)
            self._variable(target.value, True)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._hold_target(element.value)
        elif type(target) is cst.Subscript and type(target.value) is cst.Name:
            self._hold_target(target.value)  # `models["a"] = model`: the dict holds it
        else:
            raise _Open(target)  # `self.model = model`: other methods may change it
