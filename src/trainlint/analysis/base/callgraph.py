"""The same-file call graph: which function of this file a call runs, which calls run a
function, and every call a block makes, through the functions of this file it calls.

A plain call (`helper(...)`) is resolved through the scopes: the function its name is bound to
where it is called (an imported or reassigned name is not this file's function). A method call
on `self` or `cls` (`self.helper(...)`) runs the method of that name of the class it is written
in, or else the only function of the file with that name (a mixin's method); with several and
none in the class, it is not resolved. A method call on an instance (`model.fit(loader)`, where
every binding of `model` builds the same class of this file) runs that class's method, or its
same-file base's. Functions passed around as values are not followed.
"""

from __future__ import annotations

import builtins
from typing import Dict, List, Optional, Set, Tuple, Union

import libcst as cst

from ...walk import own_nodes
from .calls import argument, has_star_args
from .scopes import Scopes
from .. import Analysis
from .nodes import positional_params


Chain = Tuple[cst.FunctionDef, ...]
_BUILTIN_NAMES = frozenset(dir(builtins))


class CallGraph(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self._functions: Optional[Dict[str, List[cst.FunctionDef]]] = None
        self._callers: Optional[Dict[cst.FunctionDef, List[cst.Call]]] = None
        self._calls_by_name: Optional[Dict[str, List[cst.Call]]] = None  # `name(...)` calls
        self._names: Optional[Dict[str, List[cst.Name]]] = None  # every Name node, by value
        # class -> `self.<attr>` -> the values assigned to it anywhere in the class
        self._self_assigns: Dict[cst.ClassDef, Dict[str, List[cst.BaseExpression]]] = {}

    def functions_named(self, name: str) -> List[cst.FunctionDef]:
        """Every function of this file (at any depth, methods too) with this name."""
        if self._functions is None:
            table: Dict[str, List[cst.FunctionDef]] = {}
            for function in self.ctx.nodes(cst.FunctionDef):
                table.setdefault(function.name.value, []).append(function)
            self._functions = table
        return self._functions.get(name, [])

    def function_for(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The function of this file a callee expression names (`helper`, `self.helper`)."""
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) is cst.FunctionDef:
                    return binding.node
            return None
        if (
            type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value in ("self", "cls")
        ):
            name = func.attr.value
            own = self._method_of_class_around(func, name)
            if own is not None:
                return own
            candidates = self.functions_named(name)
            if len(candidates) == 1:
                return candidates[0]
            return None
        if type(func) is cst.Attribute and type(func.value) is cst.Name:
            # `model.fit(loader)` where every binding of `model` builds one class of this file
            classes = self._instance_classes(func.value)
            if len(classes) == 1:
                return self._method_in(classes[0], func.attr.value, set())
        if type(func) is cst.Attribute and type(func.value) is cst.Attribute:
            # `self.gpu.to_device(x)` where every `self.gpu = ...` of the class builds one class
            # of this file
            classes = self._attribute_classes(func.value)
            if len(classes) == 1:
                return self._method_in(classes[0], func.attr.value, set())
        return None

    def submodule_forward(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The `forward` a call of `self.<attr>` runs, when every assignment to that attribute
        in the class around it builds one class of this file that has (or inherits, within the
        file) a `forward`: `self.embedding = SentenceEmbedding(...)` ... `self.embedding(x)`."""
        if type(func) is not cst.Attribute:
            return None
        classes = self._attribute_classes(func)
        if len(classes) != 1:
            return None
        return self._method_in(classes[0], "forward", set())

    def _attribute_classes(self, attribute: cst.Attribute) -> List[cst.ClassDef]:
        """The classes of this file that `self.attr` is built from, when every assignment to it
        in the class around `attribute` calls one (`self.gpu = GPUManager(config.device)`)."""
        if type(attribute.value) is not cst.Name or attribute.value.value != "self":
            return []
        owner = next((a for a in self.ctx.ancestors(attribute) if type(a) is cst.ClassDef), None)
        if owner is None:
            return []
        found: List[cst.ClassDef] = []
        for value in self._assigned_to_self(owner).get(attribute.attr.value, ()):
            if type(value) is not cst.Call or type(value.func) is not cst.Name:
                return []
            cls = self._class_named(value.func.value, value.func)
            if cls is None:
                return []
            if not any(known is cls for known in found):
                found.append(cls)
        return found

    def _assigned_to_self(self, owner: cst.ClassDef) -> Dict[str, List[cst.BaseExpression]]:
        """`self.<attr>` -> the values the class assigns to it (read once per class: every
        method call through an attribute asks, and a large class has many)."""
        table = self._self_assigns.get(owner)
        if table is None:
            table = {}
            for node in self.ctx.tree.descendants(owner):
                if type(node) is not cst.Assign:
                    continue
                names = {
                    t.target.attr.value
                    for t in node.targets
                    if type(t.target) is cst.Attribute
                    and type(t.target.value) is cst.Name
                    and t.target.value.value == "self"
                }
                for name in names:
                    table.setdefault(name, []).append(node.value)
            self._self_assigns[owner] = table
        return table

    def _method_in(
        self, cls: cst.ClassDef, name: str, seen: Set[cst.ClassDef]
    ) -> Optional[cst.FunctionDef]:
        """The `def name` of the class or of its same-file bases (first found, in base order);
        None when it is not there or is a property."""
        seen.add(cls)
        body = cls.body
        for statement in body.body if type(body) is cst.IndentedBlock else ():
            if type(statement) is cst.FunctionDef and statement.name.value == name:
                decorators = {_decorator_name(d.decorator) for d in statement.decorators}
                if decorators & {"property", "cached_property", "staticmethod", "classmethod"}:
                    return None
                return statement
        for base in cls.bases:
            if type(base.value) is cst.Name:
                parent = self._class_named(base.value.value, cls)
                if parent is not None and parent not in seen:
                    found = self._method_in(parent, name, seen)
                    if found is not None:
                        return found
        return None

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function of this file `call` runs, if it can be told."""
        return self.function_for(call.func)

    def callers(self, function: cst.FunctionDef) -> List[cst.Call]:
        """The calls of this file that run `function`."""
        if self._callers is None:
            table: Dict[cst.FunctionDef, List[cst.Call]] = {}
            for call in self.ctx.nodes(cst.Call):
                target = self.function_for(call.func)
                if target is not None:
                    table.setdefault(target, []).append(call)
            self._callers = table
        return self._callers.get(function, [])

    def constructions(self, init: cst.FunctionDef) -> List[cst.Call]:
        """The calls of this file that build the class whose `__init__` this is
        (`MixUpLoader(loader, 0.6)` runs `MixUpLoader.__init__`), by the class's own name."""
        if init.name.value != "__init__":
            return []
        block = self.ctx.parent(init)
        cls = self.ctx.parent(block) if block is not None else None
        if type(cls) is not cst.ClassDef:
            return []
        if self._calls_by_name is None:
            table: Dict[str, List[cst.Call]] = {}
            for call in self.ctx.nodes(cst.Call):
                if type(call.func) is cst.Name:
                    table.setdefault(call.func.value, []).append(call)
            self._calls_by_name = table
        name = cls.name.value
        return [
            call
            for call in self._calls_by_name.get(name, [])
            if self._class_named(name, call.func) is cls
        ]

    def passed_for(
        self, function: cst.FunctionDef, param: str
    ) -> Optional[List[Tuple[cst.Call, cst.BaseExpression]]]:
        """What each call of this file that runs `function` passes for its parameter `param`
        (by position or by keyword; a method's calls leave out `self`). None when nothing
        calls it, or a call passes `*args`/`**kwargs` or nothing for it (the default)."""
        names = [p.name.value for p in function.params.params]
        if param not in names:
            return None
        index = names.index(param)
        if names[0] in ("self", "cls"):
            if param == names[0]:
                return None
            index -= 1
        out: List[Tuple[cst.Call, cst.BaseExpression]] = []
        for call in self.callers(function):
            if has_star_args(call):
                return None
            passed = argument(call, index, param)
            if passed is None:
                return None
            out.append((call, passed))
        return out or None

    def default_used(self, function: cst.FunctionDef, param: str) -> Optional[bool]:
        """Can the default of `function`'s parameter `param` take effect through this file?

        True: a call of the file leaves it out, or the function is named other than as the
        callee of a call (`fire.Fire(train)`, a callback, a decorator that registers it):
        whoever calls it then may leave it out. False: the file calls it, and every call passes
        the parameter (by keyword or position; a `*args`/`**kwargs` may pass it). None: the file
        never names it (its callers, if any, are in other files). A method is named by any
        `x.<name>`, a class's `__init__` by the class name."""
        if function.decorators:
            return True
        name = function.name.value
        method = False
        named_at: cst.CSTNode = function.name
        block = self.ctx.parent(function)
        owner = self.ctx.parent(block) if block is not None else None
        if isinstance(owner, cst.ClassDef):
            if name == "__init__":
                name, named_at = owner.name.value, owner.name
            else:
                method = True
        calls = 0
        for node in self.ctx.nodes(cst.Attribute if method else cst.Name):
            word = node.attr.value if isinstance(node, cst.Attribute) else node.value
            if word != name or node is named_at:
                continue
            parent = self.ctx.parent(node)
            if not method and type(parent) is cst.Attribute and parent.attr is node:
                continue  # `diffusion.train()`: another object's member of that name
            if type(parent) is cst.Call and parent.func is node:
                if has_star_args(parent):
                    calls += 1
                    continue
                if self.argument_for(parent, function, param) is None:
                    return True
                calls += 1
            elif method and type(parent) is cst.Attribute and parent.value is node:
                continue  # `self.fit.__doc__`-like reads say nothing about calls
            elif type(parent) in (cst.ImportAlias, cst.FunctionDef, cst.ClassDef):
                continue
            else:
                return True
        return False if calls else None

    def named_in_file(
        self, definition: Union[cst.FunctionDef, cst.ClassDef], members: bool = False
    ) -> bool:
        """Does the file name a function or class anywhere but in its definition: a call, a
        callback (`fire.Fire(evaluate)`), an alias? Another object's member of that name
        counts only with `members` (`self.setup()` may be a method of that name, or not)."""
        if self._names is None:
            table: Dict[str, List[cst.Name]] = {}
            for found in self.ctx.nodes(cst.Name):
                table.setdefault(found.value, []).append(found)
            self._names = table
        for node in self._names.get(definition.name.value, ()):
            if node is definition.name:
                continue
            parent = self.ctx.parent(node)
            if not members and type(parent) is cst.Attribute and parent.attr is node:
                continue
            return True
        return False

    def imported_uses(self) -> Tuple[Dict[str, List[list]], List[str]]:
        """How this file uses what it imports, for the project phase of another file that asks
        whether its function's parameter default is ever taken: for each imported callable
        called here (`train(...)` after `from train import train`, `T.train(...)` after
        `import train as T`, a name only a star import may bind), one `[positional count,
        keywords, star]` per call; and the imported names used other than as a callee (a
        callback such as `fire.Fire(train)`, whose caller may leave any argument out)."""
        found, named = self.imported_calls()
        calls: Dict[str, List[list]] = {}
        for leaf, call in found:
            positional = sum(1 for a in call.args if a.keyword is None and not a.star)
            keywords = sorted(a.keyword.value for a in call.args if a.keyword is not None)
            calls.setdefault(leaf, []).append([positional, keywords, has_star_args(call)])
        return calls, named

    def imported_calls(self) -> Tuple[List[Tuple[str, cst.Call]], List[str]]:
        """The calls of imported callables in this file, as (the callable's own name, the
        call): `train(...)` after `from train import train`, `T.train(...)` after `import
        train as T`, a name only a star import may bind; and the imported names used other
        than as a callee (a callback, `fire.Fire(train)`: who calls it, and how, is not seen)."""
        imported = {
            name
            for name, bindings in self.scopes.module_scope.bindings.items()
            if all(b.kind == "import" for b in bindings)
        }
        starred = bool(self.scopes.module_scope.star_imports)
        calls: List[Tuple[str, cst.Call]] = []
        named: Set[str] = set()
        for node in self.ctx.nodes(cst.Name):
            if not isinstance(node, cst.Name) or (node.value not in imported and not starred):
                continue
            parent = self.ctx.parent(node)
            if type(parent) in (cst.ImportAlias, cst.AsName, cst.ImportFrom, cst.Import):
                continue
            if type(parent) is cst.Attribute and parent.attr is node:
                continue
            if node.value in imported:
                bindings = self.scopes.lookup(node.value, node)
                if not bindings or any(b.kind != "import" for b in bindings):
                    continue  # shadowed where it is used
            elif not isinstance(parent, cst.Call) or parent.func is not node:
                continue
            elif node.value in _BUILTIN_NAMES or self.scopes.lookup(node.value, node):
                continue  # a builtin or the file's own name, not one a star import binds
            used: cst.CSTNode = node
            leaf = node.value
            if isinstance(parent, cst.Attribute) and parent.value is node:
                used, leaf = parent, parent.attr.value  # `T.train`: module T's `train`
                parent = self.ctx.parent(parent)
            if isinstance(parent, cst.Call) and parent.func is used:
                calls.append((leaf, parent))
            elif not isinstance(parent, cst.Attribute) or parent.value is not used:
                named.add(leaf)
        return calls, sorted(named)

    def calls_in(self, node: cst.CSTNode, follow: int = 2) -> List[Tuple[cst.Call, Chain]]:
        """Every call under `node`, plus those in same-file functions it calls (`follow` levels).

        Each call comes with the chain of functions it was reached through (empty when it is
        directly under `node`). Nested function and class definitions under `node` are not
        entered (their code does not run here)."""
        out: List[Tuple[cst.Call, Chain]] = []
        self._collect_calls(node, (), follow, out, set())
        return out

    def _collect_calls(
        self,
        node: cst.CSTNode,
        via: Chain,
        follow: int,
        out: List[Tuple[cst.Call, Chain]],
        seen: Set[cst.FunctionDef],
    ) -> None:
        for child in own_nodes(node):
            if child is node or type(child) is not cst.Call:
                continue
            out.append((child, via))
            if follow > 0:
                target = self.function_for(child.func)
                if target is not None and target not in seen and target not in via:
                    seen.add(target)
                    self._collect_calls(target.body, via + (target,), follow - 1, out, seen)

    def argument_for(
        self, call: cst.Call, function: cst.FunctionDef, param: str
    ) -> Optional[cst.BaseExpression]:
        """What `call` (a call that runs `function`) passes for the parameter `param`: by
        keyword, or by position (`self` skipped for a method called through an attribute, and
        for the `__init__` a construction of its class runs).
        None when it is not passed, or a `*args`/`**kwargs` before it hides where it lands."""
        params = positional_params(function)
        bound = type(call.func) is cst.Attribute or function.name.value == "__init__"
        if params and params[0].name.value in ("self", "cls") and bound:
            params = params[1:]
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == param:
                return arg.value
        index = next((i for i, p in enumerate(params) if p.name.value == param), None)
        if index is None:
            return None
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in positional[: index + 1]):
            return None
        return positional[index].value if index < len(positional) else None

    def member_kind(self, func: cst.BaseExpression) -> Optional[str]:
        """What `obj.name` is when `obj` is an instance of a class of this file (`self` in its
        methods, or a name every binding of which builds it: `net = Net().to(device)`):
        "method" for a `def` of the class or its same-file bases (a bound method, not a module;
        a `@property` counts as an attribute), "attribute" for a `self.name = ...` assignment in
        them, "unknown" when the class is known but the name is in neither (inherited from a base
        outside the file). None when the class of `obj` is not known."""
        if type(func) is not cst.Attribute:
            return None
        classes = self._instance_classes(func.value)
        if not classes:
            return None
        kinds = {self._member_in(cls, func.attr.value, set()) for cls in classes}
        if len(kinds) == 1:
            return kinds.pop()
        return "unknown"

    def _instance_classes(self, receiver: cst.BaseExpression) -> List[cst.ClassDef]:
        if type(receiver) is not cst.Name:
            return []
        if receiver.value == "self":
            for ancestor in self.ctx.ancestors(receiver):
                if type(ancestor) is cst.ClassDef:
                    return [ancestor]
            return []
        bindings = self.scopes.lookup(receiver.value, receiver)
        found: List[cst.ClassDef] = []
        for binding in bindings:
            value = binding.value
            if binding.kind != "assign" or value is None:
                return []
            while (
                type(value) is cst.Call
                and type(value.func) is cst.Attribute
                and value.func.attr.value in ("to", "cuda", "cpu", "float", "double", "half")
            ):
                value = value.func.value  # Net().to(device)
            if type(value) is cst.Name and value.value == receiver.value:
                continue  # `net = net.to(device)`: the same object, built by another binding
            if type(value) is not cst.Call or type(value.func) is not cst.Name:
                return []
            cls = self._class_named(value.func.value, value.func)
            if cls is None:
                return []
            found.append(cls)
        return found

    def _class_named(self, name: str, at: cst.CSTNode) -> Optional[cst.ClassDef]:
        classes = [b.node for b in self.scopes.lookup(name, at) if b.kind == "class"]
        if len(classes) == 1 and type(classes[0]) is cst.ClassDef:
            return classes[0]
        return None

    def _member_in(self, cls: cst.ClassDef, name: str, seen: Set[cst.ClassDef]) -> str:
        seen.add(cls)
        body = cls.body
        statements = body.body if type(body) is cst.IndentedBlock else ()
        for statement in statements:
            if type(statement) is cst.FunctionDef and statement.name.value == name:
                decorators = {_decorator_name(d.decorator) for d in statement.decorators}
                if decorators & {"property", "cached_property"}:
                    return "attribute"
                return "method"
        for node in self.ctx.tree.descendants(cls):
            targets: List[cst.BaseExpression] = []
            if type(node) is cst.Assign:
                targets = [t.target for t in node.targets]
            elif type(node) in (cst.AnnAssign, cst.AugAssign):
                targets = [node.target]
            if targets:
                for target in targets:
                    if (
                        type(target) is cst.Attribute
                        and type(target.value) is cst.Name
                        and target.value.value == "self"
                        and target.attr.value == name
                    ):
                        return "attribute"
        for statement in statements:  # class-level `encoder = nn.Linear(...)`
            if type(statement) is cst.SimpleStatementLine:
                for small in statement.body:
                    if type(small) is cst.Assign and any(
                        type(t.target) is cst.Name and t.target.value == name
                        for t in small.targets
                    ):
                        return "attribute"
        for base in cls.bases:
            if type(base.value) is cst.Name:
                parent = self._class_named(base.value.value, cls)
                if parent is not None and parent not in seen:
                    kind = self._member_in(parent, name, seen)
                    if kind != "unknown":
                        return kind
        return "unknown"

    def _method_of_class_around(
        self, node: cst.CSTNode, name: str
    ) -> Optional[cst.FunctionDef]:
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.ClassDef:
                body = ancestor.body
                if type(body) is cst.IndentedBlock:
                    for statement in body.body:
                        if type(statement) is cst.FunctionDef and statement.name.value == name:
                            return statement
                return None
        return None


def _decorator_name(node: cst.BaseExpression) -> str:
    if type(node) is cst.Call:
        node = node.func
    if type(node) is cst.Attribute:
        return node.attr.value
    if type(node) is cst.Name:
        return node.value
    return ""
