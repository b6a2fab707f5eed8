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

A module picked from by name and called (`getattr(flows, args.flow)(in_channels=3)`, also
through a variable every use of which calls it) is recorded with the shapes of those calls,
`flows(0;in_channels)`; `signatures` holds what each top-level function, and each class with
its own `__init__`, accepts, so that construction.py can leave out what such a call cannot
build (it would raise TypeError first).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from ...walk import own_nodes
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
        # What the module's own statements (outside definitions) name: `main()`, a loop.
        self.top_level: Set[str] = set()
        self.decorated: Dict[str, Set[str]] = {}
        # What calls each top-level function, and each class with its own `__init__`, accept.
        self.signatures: Dict[str, dict] = {}
        # Functions that return their one argument as it came (`def export(fn): ...; return
        # fn`): as decorators, they leave a class's signature as it is.
        self.identities: List[str] = []
        self.dynamic: Set[str] = set()
        # A package's __init__.py importing its own submodules by computed name, and binding
        # their names with `globals().update(...)`: `imports_submodules`, read as a star
        # import of each (a superset of what it binds).
        self.package = ctx.source.path.endswith("__init__.py")
        self.imports_submodules = False
        self._definitions: Optional[Set[str]] = None  # the file's top-level def and class names
        self._run_time_globals = False
        self._statements(ctx.module.body)
        if self._run_time_globals and not self.imports_submodules:
            self.dynamic.add(MODULE_CODE)

    def facts(self) -> Dict[str, object]:
        return {
            "mentions": {name: sorted(found) for name, found in sorted(self.mentions.items())},
            "links": self.links,
            "top_level": sorted(self.top_level),
            "decorated": {name: sorted(found) for name, found in sorted(self.decorated.items())},
            "dynamic": sorted(self.dynamic),
            "imports_submodules": self.imports_submodules,
            "signatures": self.signatures,
            "identities": self.identities,
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
                found |= self.names_in(part, name)
            decorators: Set[str] = set()
            for decorator in statement.decorators:
                if _harmless(self.names.qualified(_callee(decorator.decorator))):
                    continue
                # A decorator of a library (nothing of it recorded): may register anything.
                decorators |= self.names_in(decorator.decorator, name) or {"?"}
            if decorators:
                self.decorated[name] = decorators
            if isinstance(statement, cst.FunctionDef):
                self.signatures[name] = _signature(statement, bound=False)
                if _returns_its_argument(statement):
                    self.identities.append(name)
            else:
                init = next(
                    (
                        s
                        for s in statement.body.body
                        if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"
                    ),
                    None,
                )
                metaclass = any(
                    k.keyword and k.keyword.value == "metaclass" for k in statement.keywords
                )
                if init is not None and not metaclass:
                    # (A decorator may replace the class: construction.py keeps the signature
                    # only when each decorator returns what it is given.)
                    self.signatures[name] = _signature(init, bound=True)
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
                self.mentions.setdefault(name, set()).update(self.names_in(value, name))
            return
        self._link([small])

    def _link(self, nodes: List[cst.CSTNode]) -> None:
        found: Set[str] = set()
        for node in nodes:
            found |= self.names_in(node, MODULE_CODE)
        self.top_level |= found
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

    def names_in(self, node: cst.CSTNode, owner: str) -> Set[str]:
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
            if kind is cst.Name and is_label(parent, current):
                continue
            names = self._qualified(current, owner)
            shapes = self._picked_and_called(current)
            if shapes:
                names = {f"{name}({'|'.join(shapes)})" for name in names}
            found |= names
        return found

    # -- a class picked by name from a module, then called ------------------------------------

    def _picked_and_called(self, chain: cst.CSTNode) -> List[str]:
        """The call shapes of `getattr(models, args.arch)(num_classes=10)`, or of
        `make = getattr(models, name)` then `make(num_classes=10)` (each call the name makes),
        for the `models` of it: only what accepts one of them can be built there. Empty when
        the picked value is used otherwise too (handed on, stored)."""
        arg = self.ctx.parent(chain)
        lookup = self.ctx.parent(arg) if isinstance(arg, cst.Arg) else None
        if not (
            isinstance(arg, cst.Arg)
            and isinstance(lookup, cst.Call)
            and isinstance(lookup.func, cst.Name)
            and lookup.func.value == "getattr"
            and len(lookup.args) == 2
            and lookup.args[0] is arg
            and not isinstance(lookup.args[1].value, cst.SimpleString)
        ):
            return []
        user = self.ctx.parent(lookup)
        if isinstance(user, cst.Call) and user.func is lookup:
            return [_call_shape(user)]
        assign = self.ctx.parent(user) if isinstance(user, cst.AssignTarget) else user
        if not (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
        ):
            return []
        target = assign.targets[0].target
        shapes = []
        for use in self.ctx.nodes(cst.Name):
            if use is target or use.value != target.value:
                continue
            if not any(b.statement is assign for b in self.scopes.lookup(use.value, use)):
                continue  # another variable of that name
            call = self.ctx.parent(use)
            if not (isinstance(call, cst.Call) and call.func is use):
                return []  # handed on: may be called with anything
            shapes.append(_call_shape(call))
        return sorted(set(shapes))

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
        if self._definitions is None:
            self._definitions = {
                node.name.value
                for node in self.ctx.module.body
                if isinstance(node, (cst.ClassDef, cst.FunctionDef))
            }
        return self._definitions

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


def _call_shape(call: cst.Call) -> str:
    """`2;in_channels,k` for a call with two positional arguments and those keywords; `*` for
    one with `*args` or `**kwargs` (any signature may accept it)."""
    if any(arg.star for arg in call.args):
        return "*"
    positional = sum(1 for arg in call.args if arg.keyword is None)
    keywords = sorted(arg.keyword.value for arg in call.args if arg.keyword is not None)
    return f"{positional};{','.join(keywords)}"


def accepts(signature: dict, shapes: List[str]) -> bool:
    """Can a function or class with `signature` (see `_signature`) be called in one of the
    `shapes` of `_call_shape` without a TypeError?"""
    for shape in shapes:
        if shape == "*":
            return True
        count, _, words = shape.partition(";")
        keywords = [w for w in words.split(",") if w]
        positional = signature["positional"]
        if int(count) > len(positional) and not signature["varargs"]:
            continue
        filled = set(positional[: int(count)])
        named = set(positional) | set(signature["keyword_only"])
        if any(k not in named for k in keywords) and not signature["varkw"]:
            continue
        if any(k in filled for k in keywords):
            continue  # given twice
        filled |= set(keywords)
        if all(name in filled for name in signature["required"]):
            return True
    return False


def _signature(function: cst.FunctionDef, bound: bool) -> dict:
    """What calls a function accepts: positional parameter names, keyword-only ones, those
    without a default, and whether it takes *args / **kwargs. `bound`: the first parameter is
    `self` (a class's `__init__`)."""
    params = function.params
    positional = [p.name.value for p in (*params.posonly_params, *params.params)]
    required = [
        p.name.value
        for p in (*params.posonly_params, *params.params, *params.kwonly_params)
        if p.default is None
    ]
    if bound and positional:
        required = [name for name in required if name != positional[0]]
        positional = positional[1:]
    return {
        "positional": positional,
        "keyword_only": [p.name.value for p in params.kwonly_params],
        "required": required,
        "varargs": isinstance(params.star_arg, cst.Param),
        "varkw": params.star_kwarg is not None,
    }


def _returns_its_argument(function: cst.FunctionDef) -> bool:
    params = function.params
    if (
        len(params.params) != 1
        or isinstance(params.star_arg, cst.Param)
        or params.star_kwarg is not None
        or params.kwonly_params
    ):
        return False
    name = params.params[0].name.value
    returns = [
        node
        for node in own_nodes(function.body)
        if isinstance(node, cst.Return)
    ]
    return bool(returns) and all(
        isinstance(r.value, cst.Name) and r.value.value == name for r in returns
    )


def _callee(decorator: cst.CSTNode) -> cst.CSTNode:
    """`register` of `@register`, `@register("name")`."""
    return decorator.func if isinstance(decorator, cst.Call) else decorator


def _harmless(qualnames) -> bool:
    return any(
        name in _HARMLESS_DECORATORS or name.startswith(_HARMLESS_PREFIXES) for name in qualnames
    )


def is_label(parent, name: cst.Name) -> bool:
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
