"""Scopes and bindings: which assignments, imports and definitions a name can refer to.

Flow-insensitive, like Python's own rule for what is local: a name assigned anywhere in a
function is local to all of it. Lookups follow LEGB and skip class bodies for nested functions.
Comprehension variables are treated as bindings of the enclosing scope (close enough for linting:
they are only ever looked up inside the comprehension).
"""

from __future__ import annotations

import builtins

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from ...walk import SCOPE_NODE_TYPES
from .. import Analysis


# Names that exist without a binding in the file: builtins, module attributes, and what IPython
# puts in a notebook's namespace.
_ALWAYS_BOUND = frozenset(dir(builtins)) | {
    "__file__",
    "__name__",
    "__doc__",
    "__spec__",
    "__loader__",
    "__package__",
    "__builtins__",
    "__path__",
    "__annotations__",
    "display",
    "get_ipython",
    "In",
    "Out",
    "exit",
    "quit",
}

ScopeNode = Union[cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda]


@dataclass
class Binding:
    name: str
    kind: str  # import, assign, augassign, annassign, for, with, except, def, class, param,
    #           global, walrus, comprehension, del, unpack
    node: cst.CSTNode  # the binding site (the Name being bound, or the def/class/import alias)
    statement: Optional[cst.CSTNode]  # the statement that binds (Assign, For, Import, ...)
    value: Optional[cst.BaseExpression] = None  # the assigned expression for plain `name = value`
    qualname: Optional[str] = None  # for imports: "torch.nn.DataParallel", ".models.Head"
    scope: Optional["Scope"] = None


@dataclass
class Scope:
    node: ScopeNode
    kind: str  # module, function, class, lambda
    parent: Optional["Scope"]
    bindings: Dict[str, List[Binding]] = field(default_factory=dict)
    globals_: set = field(default_factory=set)
    nonlocals: set = field(default_factory=set)
    star_imports: List[str] = field(default_factory=list)

    def add(self, binding: Binding) -> None:
        binding.scope = self
        self.bindings.setdefault(binding.name, []).append(binding)


def bound_value(binding: Binding) -> Optional[cst.BaseExpression]:
    """The expression a binding gives its name: the value of `name = value`, or the matching
    element of `a, b = x, y` (nested tuples too); None when it cannot be told."""
    if binding.value is not None:
        return binding.value
    statement = binding.statement
    if binding.kind != "unpack" or type(statement) is not cst.Assign:
        return None
    pairs = [(t.target, statement.value) for t in statement.targets]
    while pairs:
        target, value = pairs.pop()
        if target is binding.node:
            return value
        if type(target) not in (cst.Tuple, cst.List) or type(value) not in (cst.Tuple, cst.List):
            continue
        targets = target.elements  # type: ignore[attr-defined]
        values = value.elements  # type: ignore[attr-defined]
        if len(targets) != len(values) or any(
            type(e) is cst.StarredElement for e in (*targets, *values)
        ):
            continue
        pairs.extend((t.value, v.value) for t, v in zip(targets, values))
    return None


class Scopes(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.tree = ctx.tree
        self.module_scope = Scope(ctx.module, "module", None)
        self.by_node: Dict[cst.CSTNode, Scope] = {ctx.module: self.module_scope}
        self._scope_by_id: Dict[int, Scope] = {}
        # What a node sits in up to a scope, by (node id, scope node id): the tree never
        # changes, and a name rebound hundreds of times in one function asks this for every
        # binding at every read.
        self._within: Dict[Tuple[int, int], List[cst.CSTNode]] = {}
        self._build()

    # -- queries ------------------------------------------------------------------------------

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The scope in which `node` is evaluated."""
        # A node is evaluated in its parent's scope unless the parent is a scope whose body (or
        # parameter) it is, so every node passed on the way up gets the same answer: remember it
        # for all of them (rules ask for the scope of nearly every name). Only nodes of the tree
        # are remembered (they outlive the cache, so their ids stay theirs).
        cache = self._scope_by_id
        found = cache.get(id(node))
        if found is not None:
            return found
        parent_of = self.tree.parent
        passed = []
        child = node
        parent = parent_of(node)
        found = self.module_scope
        while parent is not None:
            known = cache.get(id(child))
            if known is not None:
                found = known
                break
            passed.append(child)
            parent_type = type(parent)
            if parent_type is cst.FunctionDef or parent_type is cst.Lambda:
                # Defaults, annotations and decorators run in the enclosing scope.
                if child is parent.body or (
                    type(child) is cst.Param and child in _params_of(parent)
                ):
                    found = self.by_node[parent]
                    break
            elif parent_type is cst.ClassDef:
                if child is parent.body:
                    found = self.by_node[parent]
                    break
            elif parent_type is cst.Module:
                break
            child = parent
            parent = parent_of(parent)
        for seen in passed:
            cache[id(seen)] = found
        return found

    def lookup(self, name: str, at: cst.CSTNode) -> List[Binding]:
        """The bindings `name` may refer to when evaluated at node `at` (LEGB)."""
        scope: Optional[Scope] = self.scope_of(at)
        first = True
        while scope is not None:
            if name in scope.globals_ and scope is not self.module_scope:
                # (`global x` at module level is legal and means nothing)
                scope = self.module_scope
                first = False
                continue
            if scope.kind == "class" and not first:
                scope = scope.parent
                continue
            found = scope.bindings.get(name)
            if found:
                return self._reaching(found, at, scope) if first else found
            first = False
            scope = scope.parent
        return []

    def _reaching(self, bindings: List[Binding], at: cst.CSTNode, scope: Scope) -> List[Binding]:
        """In straight-line code of the same scope, the last binding before `at` wins; bindings
        inside branches, loops and try blocks may or may not have run, so they all count."""
        if len(bindings) == 1:
            return bindings
        # What `at` sits in, read once: a name rebound a few hundred times in one function
        # (an augmentation pipeline's `img = ...`) is looked up that often, and walking up from
        # `at` again for every binding made one 21 KB file take a minute.
        around_at = {id(a) for a in self.tree.ancestors(at)}
        read = self._ancestors_until(at, scope)
        position = {id(a): i for i, a in enumerate(read)}
        index = self.tree.index
        use = index.get(at, -1)
        # `loader = wrap(loader)`: the value is read before its own statement binds the name
        # (in a loop, that binding reaches the next iteration's read, like a later one).
        own = {id(b) for b in bindings if self._evaluated_before_binding(b, around_at)}
        before = [b for b in bindings if index.get(b.node, -1) < use and id(b) not in own]
        if not before:
            return bindings  # used before any binding here: a loop or a later call
        reaching: List[Binding] = []
        last: Optional[Binding] = None  # the binding every path to `at` runs last, if any
        for binding in reversed(before):
            if self._other_arm(binding, at, scope, read, position):
                continue  # `if ...: m = wrap(m)` `else: m0 = m`: the `if` arm has not run
            reaching.append(binding)
            if not self._conditional(binding, scope, around_at):
                last = binding
                break
        reaching.reverse()
        # Inside a loop, a binding later in the same loop reaches the next iteration's use,
        # unless a binding that always runs before the use in that same loop body replaces it
        # first (`model = nn.DataParallel(model)`, then the use, then `model = model.eval()`:
        # each iteration's use sees that iteration's wrapper).
        loops = [a for a in read if type(a) in (cst.For, cst.While)]
        if last is not None:
            around_last = self._ancestors_until(last.statement or last.node, scope)
            loops = [loop for loop in loops if not any(loop is a for a in around_last)]
        if loops:
            for binding in bindings:
                if (index.get(binding.node, -1) > use or id(binding) in own) and any(
                    loop in self._ancestors_until(binding.node, scope) for loop in loops
                ):
                    reaching.append(binding)
        return reaching

    @staticmethod
    def _evaluated_before_binding(binding: Binding, around_at: Set[int]) -> bool:
        """Is the read (whose ancestors' ids are `around_at`) in the value of the assignment
        that makes `binding`?"""
        statement = binding.statement
        if type(statement) not in (cst.Assign, cst.AnnAssign, cst.AugAssign):
            return False
        value = getattr(statement, "value", None)
        return value is not None and id(value) in around_at

    def _ancestors_until(self, node: cst.CSTNode, scope: Scope) -> List[cst.CSTNode]:
        """The nodes around `node` up to `scope`'s node."""
        key = (id(node), id(scope.node))
        out = self._within.get(key)
        if out is None:
            out = []
            for ancestor in self.tree.ancestors(node):
                if ancestor is scope.node:
                    break
                out.append(ancestor)
            self._within[key] = out
        return out

    def _other_arm(
        self,
        binding: Binding,
        at: cst.CSTNode,
        scope: Scope,
        read: List[cst.CSTNode],
        position: Dict[int, int],
    ) -> bool:
        """Is `binding` in one arm of an `if` (`if`, `elif`, `else`) and `at` in another, with no
        loop around that `if` in the scope? Then the binding has not run when `at` is
        evaluated (in a loop it may have, in an earlier iteration). `read` is what `at` sits
        in, up to the scope, and `position` each of those nodes' place in it."""
        child: cst.CSTNode = binding.statement or binding.node
        for ancestor in self._ancestors_until(child, scope):
            if id(ancestor) not in position:
                child = ancestor
                continue
            if type(ancestor) is not cst.If:
                return False
            i = position[id(ancestor)]
            read_child = read[i - 1] if i > 0 else at
            arms = (ancestor.body, ancestor.orelse)
            if child is read_child or not (
                any(child is arm for arm in arms) and any(read_child is arm for arm in arms)
            ):
                return False
            return not any(type(a) in (cst.For, cst.While) for a in read[i + 1:])
        return False

    def _conditional(self, binding: Binding, scope: Scope, enclosing_read: Set[int]) -> bool:
        """May `binding` not have run when the read (whose ancestors' ids are `enclosing_read`),
        later in the same scope, is evaluated? Only a branch, loop or try between the binding
        and the block the two share makes it so: a binding earlier in the very loop body that
        reads it (`z = z.to(device)` then `model(z)`) has run in every iteration that reaches
        the read."""
        node = binding.statement or binding.node
        for ancestor in self.tree.ancestors(node):
            if ancestor is scope.node:
                return False
            if id(ancestor) in enclosing_read:
                # The innermost node around both: a block holds them in order; a branch
                # holds them in different arms (`if` body and `else`, a loop and its `else`).
                return isinstance(ancestor, _BRANCHES)
            if isinstance(ancestor, _BRANCHES):
                return True
        return False

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        scope: Optional[Scope] = self.scope_of(node)
        while scope is not None and scope.kind not in ("function", "module"):
            scope = scope.parent
        if scope is not None and scope.kind == "function":
            return scope.node  # type: ignore[return-value]
        return None

    def iter_scopes(self) -> Iterator[Scope]:
        return iter(self.by_node.values())

    def unbound(self, name: cst.Name) -> bool:
        """Does nothing in the file bind the name read at `name` (no assignment, import, def or
        parameter in any scope it can see, not a builtin, no star import that might supply it)?
        Reading it raises NameError: unfinished code, like an exercise's blank."""
        if name.value in _ALWAYS_BOUND or self.lookup(name.value, name):
            return False
        return not any(scope.star_imports for scope in self.by_node.values())

    # -- building -----------------------------------------------------------------------------

    def _build(self) -> None:
        tree = self.tree
        # Every node's scope (what `scope_of` answers), in document order, which visits a parent
        # before its children; scopes are created on the way, so parents exist before children.
        cache = self._scope_by_id
        parent_of = tree.parent
        by_node = self.by_node
        module = self.module_scope
        scope_types = SCOPE_NODE_TYPES
        FunctionDef, ClassDef, Lambda = cst.FunctionDef, cst.ClassDef, cst.Lambda
        Module = cst.Module
        for node in tree.order:
            parent = parent_of(node)
            if parent is None:
                continue  # the module
            parent_type = type(parent)
            if parent_type is Module:
                scope = module
            elif parent_type is FunctionDef or parent_type is Lambda:
                # Defaults, annotations and decorators run in the enclosing scope.
                if node is parent.body or (type(node) is cst.Param and node in _params_of(parent)):
                    scope = by_node[parent]
                else:
                    scope = cache[id(parent)]
            elif parent_type is ClassDef and node is parent.body:
                scope = by_node[parent]
            else:
                scope = cache[id(parent)]
            cache[id(node)] = scope
            node_type = type(node)
            if node_type in scope_types:
                kind = "function" if node_type is FunctionDef else (
                    "class" if node_type is ClassDef else "lambda"
                )
                by_node[node] = Scope(node, kind, scope)
        for node in tree.order:
            handler = _BINDERS.get(type(node))
            if handler is not None:
                handler(self, node)

    def _bind_target(self, target: cst.BaseExpression, kind: str, stmt, value=None) -> None:
        if type(target) is cst.Name:
            self.scope_of(target).add(Binding(target.value, kind, target, stmt, value))
        elif type(target) is cst.Tuple or type(target) is cst.List:
            for element in target.elements:
                inner = element.value
                self._bind_target(inner, "unpack" if kind == "assign" else kind, stmt)
        elif type(target) is cst.StarredElement:
            self._bind_target(target.value, kind, stmt)

    def _on_assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target, "assign", node, node.value)

    def _on_annassign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target, "annassign", node, node.value)

    def _on_augassign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target, "augassign", node, node.value)

    def _on_for(self, node: cst.For) -> None:
        self._bind_target(node.target, "for", node)

    def _on_compfor(self, node: cst.CompFor) -> None:
        self._bind_target(node.target, "comprehension", node)

    def _on_with(self, node: cst.With) -> None:
        for item in node.items:
            if item.asname is not None:
                self._bind_target(item.asname.name, "with", node)

    def _on_except(self, node) -> None:
        if node.name is not None:
            self._bind_target(node.name.name, "except", node)

    def _on_walrus(self, node: cst.NamedExpr) -> None:
        scope = self.scope_of(node)
        # PEP 572: the target binds in the enclosing function, never in a comprehension.
        target = node.target
        assert type(target) is cst.Name  # the grammar allows only a name before `:=`
        self._add_to(scope, Binding(target.value, "walrus", target, node, node.value))

    def _add_to(self, scope: Scope, binding: Binding) -> None:
        scope.add(binding)

    def _on_def(self, node) -> None:
        scope = self.scope_of(node)
        kind = "class" if type(node) is cst.ClassDef else "def"
        scope.add(Binding(node.name.value, kind, node, node))
        if type(node) in (cst.FunctionDef, cst.Lambda) or kind == "def":
            own = self.by_node[node]
            for param in _params_of(node):
                own.add(Binding(param.name.value, "param", param, node))

    def _on_lambda(self, node: cst.Lambda) -> None:
        own = self.by_node[node]
        for param in _params_of(node):
            own.add(Binding(param.name.value, "param", param, node))

    def _on_import(self, node: cst.Import) -> None:
        scope = self.scope_of(node)
        for alias in node.names:
            dotted = _dotted(alias.name)
            if alias.asname is not None:
                name = alias.asname.name.value  # type: ignore[union-attr]
                scope.add(Binding(name, "import", alias, node, qualname=dotted))
            else:
                top = dotted.split(".")[0]
                scope.add(Binding(top, "import", alias, node, qualname=top))

    def _on_import_from(self, node: cst.ImportFrom) -> None:
        scope = self.scope_of(node)
        module = _dotted(node.module) if node.module is not None else ""
        dots = "." * len(node.relative)
        base = f"{dots}{module}"
        if isinstance(node.names, cst.ImportStar):
            scope.star_imports.append(base)
            return
        for alias in node.names:
            imported = _dotted(alias.name)
            name = alias.asname.name.value if alias.asname is not None else imported  # type: ignore
            qual = f"{base}.{imported}" if not base.endswith(".") else f"{base}{imported}"
            scope.add(Binding(name, "import", alias, node, qualname=qual))

    def _on_global(self, node: cst.Global) -> None:
        scope = self.scope_of(node)
        for item in node.names:
            scope.globals_.add(item.name.value)

    def _on_nonlocal(self, node: cst.Nonlocal) -> None:
        scope = self.scope_of(node)
        for item in node.names:
            scope.nonlocals.add(item.name.value)


def _params_of(node) -> List[cst.Param]:
    params = node.params
    out = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
    if type(params.star_arg) is cst.Param:
        out.append(params.star_arg)
    if params.star_kwarg is not None:
        out.append(params.star_kwarg)
    return out


def _dotted(node) -> str:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


_BRANCHES: Tuple[type, ...] = (
    cst.If, cst.Try, cst.For, cst.While, cst.With, cst.IfExp, cst.BooleanOperation
)
if hasattr(cst, "TryStar"):
    _BRANCHES = _BRANCHES + (cst.TryStar,)
if hasattr(cst, "Match"):
    _BRANCHES = _BRANCHES + (cst.Match,)

_BINDERS: Dict[type, Callable[..., None]] = {
    cst.Assign: Scopes._on_assign,
    cst.AnnAssign: Scopes._on_annassign,
    cst.AugAssign: Scopes._on_augassign,
    cst.For: Scopes._on_for,
    cst.CompFor: Scopes._on_compfor,
    cst.With: Scopes._on_with,
    cst.ExceptHandler: Scopes._on_except,
    cst.NamedExpr: Scopes._on_walrus,
    cst.FunctionDef: Scopes._on_def,
    cst.ClassDef: Scopes._on_def,
    cst.Lambda: Scopes._on_lambda,
    cst.Import: Scopes._on_import,
    cst.ImportFrom: Scopes._on_import_from,
    cst.Global: Scopes._on_global,
    cst.Nonlocal: Scopes._on_nonlocal,
}
if hasattr(cst, "ExceptStarHandler"):
    _BINDERS[cst.ExceptStarHandler] = Scopes._on_except


def reads_of_binding(ctx, target: cst.Name, statement: cst.CSTNode) -> List[cst.Name]:
    """The later reads of the name `target` bound by `statement` (an Assign) that this binding
    reaches, in its scope and scopes nested in it. `sd = rename(sd)` reads the earlier value."""
    scopes: Scopes = ctx.scopes
    scope = scopes.scope_of(statement)
    index = ctx.tree.index
    start = index.get(statement, -1)
    found: List[cst.Name] = []
    for name in ctx.nodes(cst.Name):
        if name.value != target.value or name is target or index.get(name, -1) <= start:
            continue
        if not _is_read_name(ctx, name):
            continue
        if any(ancestor is statement for ancestor in ctx.ancestors(name)):
            continue
        at = _read_position(ctx, name)
        if any(b.node is target for b in scopes.lookup(name.value, at)):
            if scopes.scope_of(name) is scope or any(
                ancestor is scope.node for ancestor in ctx.ancestors(name)
            ):
                found.append(name)
    return found


def _read_position(ctx, name: cst.Name) -> cst.CSTNode:
    for ancestor in ctx.ancestors(name):
        if type(ancestor) is cst.Assign:
            for target in ancestor.targets:
                if type(target.target) is cst.Name and target.target.value == name.value:
                    return ancestor
            return name
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return name
    return name


def _is_read_name(ctx, name: cst.Name) -> bool:
    parent = ctx.parent(name)
    if parent is None or type(parent) in (cst.AssignTarget, cst.Param, cst.AsName, cst.ImportAlias):
        return False
    if type(parent) is cst.Attribute and parent.attr is name:
        return False
    if type(parent) is cst.Arg and parent.keyword is name:
        return False
    if type(parent) in (cst.FunctionDef, cst.ClassDef) and parent.name is name:
        return False
    if type(parent) in (cst.For, cst.CompFor) and parent.target is name:
        return False
    if type(parent) in (cst.Tuple, cst.List, cst.Element):
        # a name inside an unpacking target
        for ancestor in ctx.ancestors(name):
            if type(ancestor) in (cst.AssignTarget, cst.For, cst.CompFor):
                target = getattr(ancestor, "target", None)
                if target is not None and any(
                    a is target for a in [name] + list(ctx.ancestors(name))
                ):
                    return False
            if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                break
    return True
