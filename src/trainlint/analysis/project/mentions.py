"""What the top-level definitions of a file name: the edges along which code may build objects.

A class can run inside a model only if something on the way from where the model is built names
it: the script calls `Glow(...)`, Glow's `__init__` calls a helper that builds
`iSequential(*layers)` of `CouplingLayer`s, and so on. This file records, per top-level
definition of a file (a class, a function, a module-level assignment), the qualified names its
code mentions (`models.glow.Glow`, `<local>.CouplingLayer`, `flow_ssl` for the module itself).
construction.py follows them across files from a file that wraps a model (through
`Hierarchy.locate`), so that a class nothing on the way names is known not to run in it.

A module-level statement naming several things (`REGISTRY.add(Net)`, `MODELS["net"] = Net`)
links them both ways, since a lookup that reaches the registry reaches what was put into it.
A decorator that may register (`@MODELS.register_module()`, `@register_model`; not
`@dataclass` or `@torch.no_grad()`) is recorded with the names it mentions, "?" for one of a
library: reaching the registry reaches the decorated definition. A bare mention of a module
(`getattr(flow_ssl, args.flow)`, `models.__dict__[arch]`) reaches every name the module binds.

Some code looks names up in ways no mention shows: `globals()`, `locals()`, `vars()`, `eval`,
`exec`, `import_module`, `__import__`, `sys.modules`, `__subclasses__()`. A definition using one
is `dynamic`, and reaching it makes the answer unknown (every class may run). One use is
read instead: a package's `__init__.py` importing its own submodules by computed name
(`import_module("." + name, package=__name__)` over `pkgutil.walk_packages(__path__)`) and
binding their names with `globals().update(...)` is `imports_submodules`, a star import of each.
"""

from __future__ import annotations

from typing import Dict, List, Set

import libcst as cst

from ..base.names import LOCAL_PREFIX, Names
from .. import Analysis

MODULE_CODE = "<module>"  # the statements of a file outside any definition
# Calls and attributes that reach objects by a name computed at run time.
_DYNAMIC_BUILTINS = {"globals", "locals", "vars", "eval", "exec", "__import__"}
_DYNAMIC_QUALIFIED = {"importlib.import_module", "sys.modules"}
_DYNAMIC_ATTRIBUTES = {"__subclasses__"}
# Decorators that register nothing: the decorated definition is built only where it is named.
_HARMLESS_DECORATORS = {
    "staticmethod", "classmethod", "property", "dataclasses.dataclass", "abc.abstractmethod",
    "typing.final", "typing.overload", "functools.wraps", "functools.lru_cache",
    "functools.cache", "functools.total_ordering", "torch.no_grad", "torch.inference_mode",
    "torch.enable_grad", "torch.jit.script", "torch.jit.unused", "torch.jit.ignore",
    "torch.compile",
}  # fmt: skip
_HARMLESS_PREFIXES = ("torch.autograd.", "torch.cuda.amp.", "torch.amp.", "torch.fx.")
# Packages that hold no class of the project: their names are not recorded (smaller facts).
_LIBRARY_ROOTS = {
    "torch", "torchvision", "numpy", "os", "sys", "math", "random", "time", "re", "json",
    "collections", "typing", "functools", "itertools", "argparse", "logging", "copy",
    "builtins", "pathlib", "warnings", "abc", "dataclasses", "shutil", "pickle", "scipy",
}  # fmt: skip


class Mentions(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes = ctx.scopes
        self.module_bound: Set[str] = set(self.scopes.module_scope.bindings)
        self.mentions: Dict[str, Set[str]] = {}
        self.links: List[List[str]] = []
        self.decorated: Dict[str, Set[str]] = {}
        self.dynamic: Set[str] = set()
        # A package's __init__.py importing its own submodules by computed name, and binding
        # their names with `globals().update(...)`: `imports_submodules`, read as a star
        # import of each (a superset of what it binds).
        self.package = ctx.source.path.endswith("__init__.py")
        self.imports_submodules = False
        self._run_time_globals = False
        self._statements(ctx.module.body)
        if self._run_time_globals and not self.imports_submodules:
            self.dynamic.add(MODULE_CODE)

    def facts(self) -> Dict[str, object]:
        return {
            "mentions": {name: sorted(found) for name, found in sorted(self.mentions.items())},
            "links": self.links,
            "decorated": {name: sorted(found) for name, found in sorted(self.decorated.items())},
            "dynamic": sorted(self.dynamic),
            "imports_submodules": self.imports_submodules,
        }

    # -- the file's top level -------------------------------------------------------------------

    def _statements(self, body) -> None:
        for statement in body:
            self._statement(statement)

    def _statement(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
            name = statement.name.value
            found = self.mentions.setdefault(name, set())
            for part in self._parts_of_definition(statement):
                found |= self._names_in(part, name)
            decorators: Set[str] = set()
            for decorator in statement.decorators:
                if _harmless(self.names.qualified(_callee(decorator.decorator))):
                    continue
                # A decorator of a library (nothing of it recorded): may register anything.
                decorators |= self._names_in(decorator.decorator, name) or {"?"}
            if decorators:
                self.decorated[name] = decorators
            return
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                self._small(small)
            return
        # if / for / while / with / try at module level: their tests name things together, and
        # their bodies are module level too.
        heads = []
        for child in self.ctx.tree.children(statement):
            if isinstance(child, (cst.BaseSuite, cst.BaseCompoundStatement)):
                continue
            if isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler, cst.If)):
                continue
            heads.append(child)
        self._link(heads)
        for body in _bodies(statement):
            self._statements(body)
        orelse = getattr(statement, "orelse", None)
        if type(orelse) is cst.If:
            self._statement(orelse)  # an elif: its test names things together too

    def _small(self, small: cst.CSTNode) -> None:
        if type(small) in (cst.Import, cst.ImportFrom):
            return  # what an import binds is resolved from the file's imports
        targets = []
        if type(small) is cst.Assign:
            targets = [t.target for t in small.targets]
            value = small.value
        elif type(small) is cst.AnnAssign and small.value is not None:
            targets, value = [small.target], small.value
        if targets and all(type(t) is cst.Name for t in targets):
            for target in targets:
                assert isinstance(target, cst.Name)
                name = target.value
                self.mentions.setdefault(name, set()).update(self._names_in(value, name))
            return
        self._link([small])

    def _link(self, nodes: List[cst.CSTNode]) -> None:
        found: Set[str] = set()
        for node in nodes:
            found |= self._names_in(node, MODULE_CODE)
        if len(found) > 1:
            self.links.append(sorted(found))

    @staticmethod
    def _parts_of_definition(definition) -> List[cst.CSTNode]:
        """What a definition's code names, its decorators aside: a class's bases and body, a
        function's defaults, annotations and body."""
        if type(definition) is cst.ClassDef:
            return [arg.value for arg in definition.bases] + [
                arg.value for arg in definition.keywords
            ] + [definition.body]
        return [definition.params, definition.body]

    # -- names ------------------------------------------------------------------------------------

    def _names_in(self, node: cst.CSTNode, owner: str) -> Set[str]:
        """The qualified names of the file's top level or of imports that `node` mentions (each
        dotted chain once, as far as it is a plain chain); marks `owner` dynamic on the way."""
        found: Set[str] = set()
        tree = self.ctx.tree
        candidates = [node] + list(tree.descendants(node))
        for current in candidates:
            kind = type(current)
            if kind is cst.Call:
                self._check_dynamic_call(current, owner)
                continue
            if kind is not cst.Name and kind is not cst.Attribute:
                continue
            parent = self.ctx.parent(current)
            if type(parent) is cst.Attribute and parent.value is current:
                continue  # part of a longer chain
            if kind is cst.Attribute:
                assert isinstance(current, cst.Attribute)
                if current.attr.value in _DYNAMIC_ATTRIBUTES:
                    self.dynamic.add(owner)
            if kind is cst.Name and _is_label(parent, current):
                continue
            found |= self._qualified(current, owner)
        return found

    def _qualified(self, chain: cst.CSTNode, owner: str) -> Set[str]:
        names = self.names.qualified(chain)
        root = chain
        while type(root) is cst.Attribute:
            assert isinstance(root, cst.Attribute)
            root = root.value
        if not names and root is not chain:
            names = self.names.qualified(root)
        out = set()
        for name in names:
            if name in _DYNAMIC_QUALIFIED or any(
                name.startswith(q + ".") for q in _DYNAMIC_QUALIFIED
            ):
                if not (name == "importlib.import_module" and self._own_submodule(chain, owner)):
                    self.dynamic.add(owner)
            if name.startswith(LOCAL_PREFIX):
                if name[len(LOCAL_PREFIX) :].split(".")[0] not in self.module_bound:
                    continue  # a local variable or parameter
            elif name.split(".")[0] in _LIBRARY_ROOTS:
                continue
            out.add(name)
        return out

    def _check_dynamic_call(self, call: cst.Call, owner: str) -> None:
        func = call.func
        if type(func) is cst.Name and func.value in _DYNAMIC_BUILTINS:
            assert isinstance(func, cst.Name)
            if not self.scopes.lookup(func.value, func):
                if func.value == "globals" and self.package and self._module_level(owner):
                    self._run_time_globals = True  # decided once the whole file is read
                else:
                    self.dynamic.add(owner)

    def _module_level(self, owner: str) -> bool:
        """Is `owner` code that runs at import: the module's statements, or a name they bind
        (`module = import_module(...)` inside a module-level loop)?"""
        return owner == MODULE_CODE or owner not in self._defined_names()

    def _defined_names(self) -> Set[str]:
        return {
            node.name.value
            for node in self.ctx.module.body
            if isinstance(node, (cst.ClassDef, cst.FunctionDef))
        }

    def _own_submodule(self, chain: cst.CSTNode, owner: str) -> bool:
        """`import_module("." + name, package=__name__)` at the top of a package's
        __init__.py: it imports a submodule of the package itself."""
        call = self.ctx.parent(chain)
        if not (self.package and self._module_level(owner) and type(call) is cst.Call):
            return False
        assert isinstance(call, cst.Call)
        if not call.args or call.args[0].keyword is not None:
            return False
        first = call.args[0].value
        relative = (
            isinstance(first, cst.BinaryOperation)
            and isinstance(first.left, cst.SimpleString)
            and first.left.evaluated_value == "."
        ) or (
            isinstance(first, cst.FormattedString)
            and bool(first.parts)
            and isinstance(first.parts[0], cst.FormattedStringText)
            and first.parts[0].value == "."
        )
        package = next(
            (a.value for a in call.args if a.keyword and a.keyword.value == "package"), None
        )
        if relative and isinstance(package, cst.Name) and package.value == "__name__":
            self.imports_submodules = True
            return True
        return False


def _callee(decorator: cst.CSTNode) -> cst.CSTNode:
    """`register` of `@register`, `@register("name")`."""
    return decorator.func if isinstance(decorator, cst.Call) else decorator


def _harmless(qualnames) -> bool:
    return any(
        name in _HARMLESS_DECORATORS or name.startswith(_HARMLESS_PREFIXES) for name in qualnames
    )


def _is_label(parent, name: cst.Name) -> bool:
    """A name that labels rather than refers: an attribute's member, a keyword of a call, a
    parameter, a definition's own name, an import's alias."""
    if type(parent) is cst.Attribute:
        return parent.attr is name
    if type(parent) is cst.Arg:
        return parent.keyword is name
    if type(parent) is cst.Param:
        return parent.name is name
    if type(parent) in (cst.FunctionDef, cst.ClassDef):
        return parent.name is name
    return type(parent) in (cst.ImportAlias, cst.AsName)


def _bodies(statement: cst.CSTNode) -> List[list]:
    """The statement lists of a compound statement's blocks (else, except and finally too)."""
    out: List[list] = []
    todo = [statement]
    while todo:
        current = todo.pop()
        body = getattr(current, "body", None)
        if isinstance(body, cst.IndentedBlock):
            out.append(list(body.body))
        elif isinstance(body, cst.SimpleStatementSuite):
            out.append([cst.SimpleStatementLine(body=list(body.body))])
        for name in ("orelse", "finalbody"):
            extra = getattr(current, name, None)
            if extra is not None and type(extra) is not cst.If:
                todo.append(extra)
        for handler in getattr(current, "handlers", ()) or ():
            todo.append(handler)
    return out
