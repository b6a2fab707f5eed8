"""nn.Module subclasses of a file, as plain data: what `__init__` registers, what each method reads.

For each class of the file (every class with a base: whether it is an `nn.Module` is decided
across files, see hierarchy.py) this records

- its bases, as qualified names (`torch.nn.Module`, `models.base.BaseHead`, `.base.BaseHead` for a
  relative import, `<local>.BaseHead` for a class of this file);
- the parameters and submodules `__init__` registers (`self.p = nn.Parameter(...)`,
  `self.fc = nn.Linear(...)`, `self.blocks = nn.ModuleList(...)`, `self.head = Head(...)`,
  `register_parameter`, `add_module`/`register_module`, `setattr(self, "name", ...)`), including
  those of the helper methods `__init__` calls (`self._init_layers()`, mmdet's shape);
- for each method, the attributes of `self` it reads, the `self.<method>()` it calls and its
  `super().<method>()` calls; reads and calls that happen only under a data-dependent branch
  (`if random.random() < p:`, `if gt_boxes.numel() > 0:`) are kept apart. Reads in `__init__`
  and weight-initialisation methods count only when they hand the module object on (into a
  container, tied weights), not `nn.init.normal_(self.p)`;
- escapes, through which any attribute (or any with a prefix) may be reached:
  `getattr(self, name)`, iteration over `self.children()/modules()/parameters()`, `self.__dict__`,
  `vars(self)`, `self._modules`, `setattr(self, name, ...)` outside `__init__`;
- frozen attributes (`self.backbone.requires_grad_(False)`, `for p in self.backbone.parameters():
  p.requires_grad = False`, `nn.Parameter(t, requires_grad=False)`; "*" for all of `self`);
- whether the class defines `forward`.

`ModuleClass.to_facts()` is JSON-compatible: the project phase joins these across files.
"""

from __future__ import annotations

import builtins
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Set

import libcst as cst

from ...walk import children
from ..base.callgraph import CallGraph
from ..base.calls import is_false, keyword, positional, string_literal
from ..base.identity import returned_module
from ..base.names import Names, dotted_name
from ..base.nodes import descendants, is_name, is_self_attr, positional_params, self_and_descendants
from .. import Analysis

if TYPE_CHECKING:  # pragma: no cover - typing.TypeGuard is Python 3.10+; annotations are strings
    from typing import TypeGuard


# Builtin classes (`object`, `dict`, `Exception`): a base named so, and not rebound in the file,
# is the builtin, which reads no attribute a subclass registers.
BUILTIN_CLASSES = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type)
)

ALL = "*"  # an escape or freeze that reaches every attribute

MODULE = "torch.nn.Module"
PARAMETER = "torch.nn.Parameter"
CONTAINERS = {
    "torch.nn.ModuleList",
    "torch.nn.ModuleDict",
    "torch.nn.Sequential",
    "torch.nn.ParameterList",
    "torch.nn.ParameterDict",
}
# torch.nn classes that own no parameter: an unused one costs DDP nothing.
_PARAMETERLESS = re.compile(
    r"^torch\.nn\.("
    r"Identity|Flatten|Unflatten|Dropout\w*|AlphaDropout|FeatureAlphaDropout|"
    r"\w*Pool\w*|Upsample\w*|PixelShuffle|PixelUnshuffle|ChannelShuffle|\w*Pad\dd|"
    r"ReLU\d*|LeakyReLU|GELU|SiLU|Mish|ELU|CELU|SELU|GLU|Sigmoid|LogSigmoid|Tanh|Hardtanh|"
    r"Hardswish|Hardsigmoid|Hardshrink|Softshrink|Tanhshrink|Softplus|Softsign|Threshold|"
    r"Softmax\w*|LogSoftmax|Softmin|\w*Loss|Fold|Unfold|CosineSimilarity|PairwiseDistance"
    r")$"
)
# `self.<call>()` in a method other than __init__ that walks every submodule or parameter.
_WALKERS = {
    "children",
    "named_children",
    "modules",
    "named_modules",
    "parameters",
    "named_parameters",
    "state_dict",
    "_modules",
    "_parameters",
    "__dict__",
}
_PARAMETER_WALKS = {"parameters", "named_parameters", "children", "modules", "named_children"}
_WORDS = re.compile(r"\w+")
# Methods whose reads of `self.x` only initialise weights (or describe them): not uses.
_INIT_METHOD = re.compile(
    r"^_*(init|reset|initialize)(_|$)|init_weight|reset_param|^__init__$|^(extra_repr|__repr__)$"
)
_READ_TYPES = (cst.Attribute, cst.Call, cst.Assign, cst.AnnAssign, cst.For)
# Random sources: a branch on them is taken on some iterations and not others.
_RANDOM_PREFIXES = ("random.", "numpy.random.", "torch.rand", "torch.bernoulli")
# Tensor methods whose value depends on the data in a branch test.
_DATA_FUNCTIONS = {"torch.any", "torch.all", "torch.count_nonzero", "torch.numel"}
_DATA_METHODS = {"item", "any", "all", "numel", "nonzero", "sum", "tolist", "max", "min"}


@dataclass
class Attr:
    """A parameter or submodule registered on `self` by `__init__` (or a helper it calls)."""

    name: str
    kind: str  # "parameter", "module" (a torch.nn layer with parameters), "container", "call"
    callee: Optional[str]  # qualified name of the constructor ("torch.nn.Linear", "<local>.Head")
    node: cst.CSTNode  # where it is assigned (the target, or the register_* call)
    frozen: bool = False

    def to_facts(self) -> Dict[str, object]:
        return {"kind": self.kind, "callee": self.callee, "frozen": self.frozen}


@dataclass
class Method:
    name: str
    reads: Set[str] = field(default_factory=set)
    branch_reads: Set[str] = field(default_factory=set)  # read only under data-dependent tests
    calls: Set[str] = field(default_factory=set)  # self.<name>() (unconditional)
    branch_calls: Set[str] = field(default_factory=set)
    super_calls: Set[str] = field(default_factory=set)  # super().<name>()
    # `self.<sub>.<attr>` read as a value ("sub.attr"): what a submodule's forward left on it.
    sub_reads: Set[str] = field(default_factory=set)
    # `self.<sub>.<method>(...)` ("sub.method"), once per call: a submodule's method run by
    # this one (a getter of what the submodule's forward left, `self.backbone.get_layers()`).
    sub_calls: List[str] = field(default_factory=list)
    # The names of the functions a call hands `self` itself to (`self.exits.collect(self)` ->
    # "collect"), once per call: what such a function reads of the module it is given, it
    # reads during this method.
    hands_self_to: List[str] = field(default_factory=list)

    def to_facts(self) -> Dict[str, object]:
        return {
            "reads": sorted(self.reads),
            "branch_reads": sorted(self.branch_reads - self.reads),
            "calls": sorted(self.calls),
            "branch_calls": sorted(self.branch_calls - self.calls),
            "super_calls": sorted(self.super_calls),
            "sub_reads": sorted(self.sub_reads),
            "sub_calls": sorted(self.sub_calls),
            "hands_self_to": sorted(self.hands_self_to),
        }


@dataclass
class ModuleClass:
    name: str
    node: cst.ClassDef
    bases: List[str]  # qualified names; "?" for a base that is not a plain name
    attrs: Dict[str, Attr] = field(default_factory=dict)
    methods: Dict[str, Method] = field(default_factory=dict)
    init_methods: Set[str] = field(default_factory=set)  # __init__ and what only it calls
    escapes: Set[str] = field(default_factory=set)  # attribute-name prefixes; "" for every one
    frozen: Set[str] = field(default_factory=set)  # attribute names; ALL for every one
    # Could the file itself build it: its name used other than where it is defined (a call, a
    # base, `__all__`, a registry string), or a decorator that may register it?
    named_in_file: bool = True

    @property
    def has_forward(self) -> bool:
        return "forward" in self.methods

    def reads(self) -> Set[str]:
        """Every attribute some method of the class reads (uses, not initialisation)."""
        out: Set[str] = set()
        for method in self.methods.values():
            out |= method.reads
        return out

    def to_facts(self) -> Dict[str, object]:
        return {
            "bases": list(self.bases),
            "attrs": {name: attr.to_facts() for name, attr in self.attrs.items()},
            "methods": {name: method.to_facts() for name, method in self.methods.items()},
            "escapes": sorted(self.escapes),
            "frozen": sorted(self.frozen),
            "forward": self.has_forward,
            "named_in_file": self.named_in_file,
        }


def escaped(name: str, escapes) -> bool:
    return any(name.startswith(prefix) for prefix in escapes)


class Modules(Analysis):
    """The classes of the file, by name (top-level and nested, first definition wins)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.classes: Dict[str, ModuleClass] = {}
        self._positions: Dict[type, List[int]] = {}
        for node in ctx.nodes(cst.ClassDef):
            if node.bases and node.name.value not in self.classes:
                self.classes[node.name.value] = self._read_class(node)
        if self.classes:
            graph = ctx.analysis(CallGraph)
            words = self._string_words()
            for name, cls in self.classes.items():
                cls.named_in_file = (
                    bool(cls.node.decorators) or name in words or graph.named_in_file(cls.node)
                )

    def facts(self) -> Dict[str, object]:
        return {name: cls.to_facts() for name, cls in self.classes.items()}

    def _string_words(self) -> Set[str]:
        """The words of the file's strings other than docstrings (`__all__ = ["Net"]`, a
        registry key): names that could build one of its classes."""
        words: Set[str] = set()
        for string in self.ctx.nodes(cst.SimpleString):
            if type(self.ctx.parent(string)) is not cst.Expr:  # a docstring builds nothing
                words.update(_WORDS.findall(string.value))
        return words

    # -- one class ----------------------------------------------------------------------------

    def _read_class(self, node: cst.ClassDef) -> ModuleClass:
        bases = [self._base_name(a.value) for a in node.bases if a.keyword is None and not a.star]
        cls = ModuleClass(node.name.value, node, bases)
        functions: Dict[str, cst.FunctionDef] = {}
        for statement in node.body.body:
            if type(statement) is cst.FunctionDef:
                functions[statement.name.value] = statement
        cls.init_methods = _init_reach(
            functions, {name: self._within(f, (cst.Call,)) for name, f in functions.items()}
        )
        cls.methods = {name: Method(name) for name in functions}
        for name, function in functions.items():
            method = cls.methods[name]
            self_name = _self_param(function)
            if self_name is None:
                continue
            registering = name in cls.init_methods
            initialising = registering or bool(_INIT_METHOD.search(name))
            for sub in self._within(function, _READ_TYPES):
                if type(sub) is cst.Attribute and is_name(sub.value, self_name):
                    # A lambda or function made while building runs later: its reads are uses.
                    later = initialising and self._deferred(sub, function)
                    self._on_self_attribute(cls, method, sub, initialising and not later)
                elif type(sub) is cst.Call:
                    self._on_call(cls, method, sub, self_name, registering, initialising)
                elif type(sub) is cst.Assign:
                    for target in sub.targets:
                        if registering and _is_self_attr(target.target, self_name):
                            self._register(cls, target.target.attr.value, sub.value, target.target)
                        elif _sets_requires_grad_false(target.target, sub.value):
                            self._freeze(cls, target.target.value, self_name)
                elif type(sub) is cst.AnnAssign and registering and sub.value is not None:
                    if _is_self_attr(sub.target, self_name):
                        self._register(cls, sub.target.attr.value, sub.value, sub.target)
                elif type(sub) is cst.For:
                    self._on_for(cls, sub, self_name, initialising)
        for name in cls.frozen & set(cls.attrs):
            cls.attrs[name].frozen = True
        return cls

    def _base_name(self, base: cst.BaseExpression) -> str:
        """A base class as a qualified name: `nn.Module` -> "torch.nn.Module", a builtin class
        the file does not rebind (`object`, `dict`) -> "builtins.object", `Generic[T]` ->
        "typing.Generic"; "?" when the expression names nothing we can follow (a call)."""
        if type(base) is cst.Subscript:
            base = base.value  # Generic[T], Protocol[T]: the class is the subscripted one
        if (
            type(base) is cst.Name
            and base.value in BUILTIN_CLASSES
            and not self.ctx.scopes.lookup(base.value, base)
        ):
            return "builtins." + base.value
        found = sorted(self.names.qualified(base))
        return found[0] if found else "?"

    def _within(self, function: cst.FunctionDef, types) -> List[cst.CSTNode]:
        """The nodes of `types` inside `function`, in document order: slices of the file's
        nodes-by-type (a walk over every node of every method costs as much as the parse)."""
        index = self.ctx.tree.index
        last: cst.CSTNode = function
        while True:
            kids = children(last)
            if not kids:
                break
            last = kids[-1]
        low, high = index[function], index[last]
        found: List[cst.CSTNode] = []
        for node_type in types:
            nodes = self.ctx.nodes(node_type)
            positions = self._positions.get(node_type)
            if positions is None:
                positions = self._positions[node_type] = [index[n] for n in nodes]
            found.extend(nodes[bisect_right(positions, low) : bisect_right(positions, high)])
        if len(types) > 1:
            found.sort(key=index.__getitem__)
        return found

    def _register(self, cls: ModuleClass, name: str, value: cst.CSTNode, node) -> None:
        kind, callee, frozen = self._kind_of(value)
        if kind is None:
            return
        if kind == "container" and _built_empty(value) and not self._filled(cls, name):
            return  # `self.blocks = nn.ModuleList()` never added to: it holds no parameters
        # The first registration names the place; a later one of the same attribute keeps it.
        attr = cls.attrs.get(name)
        if attr is None:
            cls.attrs[name] = Attr(name, kind, callee, node, frozen)
        elif frozen:
            attr.frozen = True

    def _filled(self, cls: ModuleClass, name: str) -> bool:
        """Does a method of the class add to `self.<name>` (`append`, `extend`, `insert`,
        `add_module`, `update`, `self.<name>[k] = m`, `self.<name> += [...]`) or hand it to
        other code (`build(self.<name>)`, `for ... in ...: self.<name>...` is a read)?"""
        for node in self.ctx.tree.descendants(cls.node.body):
            if not is_self_attr(node, name):
                continue
            parent = self.ctx.parent(node)
            if type(parent) is cst.Attribute and parent.value is node:
                if parent.attr.value in _FILLING:
                    return True
            elif type(parent) is cst.Subscript and parent.value is node:
                holder = self.ctx.parent(parent)
                if type(holder) is cst.AssignTarget:
                    return True
            elif type(parent) is cst.AugAssign and parent.target is node:
                return True
            elif type(parent) is cst.Arg:
                return True  # passed to a helper that may fill it
        return False

    def _kind_of(self, value: cst.CSTNode):
        """(kind, constructor, frozen) for a value assigned to `self.x`; kind None when it is
        not a parameter or a module (a tensor, a number, None, a loss)."""
        if type(value) is cst.IfExp:
            for branch in (value.body, value.orelse):
                found = self._kind_of(branch)
                if found[0] is not None:
                    return found
            return None, None, False
        peeled_freeze = False  # nn.Linear(...).requires_grad_(False)
        for _ in range(8):
            # `nn.Linear(...).cuda()`, `convert_sync_batchnorm(Backbone())`: the module built
            if type(value) is not cst.Call:
                break
            same = returned_module(value, self.names)
            if not isinstance(same, cst.BaseExpression):
                break
            func = value.func
            if type(func) is cst.Attribute and func.attr.value == "requires_grad_":
                peeled_freeze = peeled_freeze or freezes(value)
            value = same
        if type(value) is not cst.Call:
            return None, None, False
        qualified = sorted(self.names.qualified(value.func))
        callee = qualified[0] if qualified else None
        if callee == PARAMETER:
            frozen = is_false(keyword(value, "requires_grad")) or is_false(positional(value, 1))
            return "parameter", callee, frozen or peeled_freeze
        if callee in CONTAINERS:
            return "container", callee, peeled_freeze
        if callee is not None and callee.startswith("torch.nn.") and callee.count(".") == 2:
            if _PARAMETERLESS.match(callee) or not callee.split(".")[-1][:1].isupper():
                return None, None, False
            if any(is_false(keyword(value, k)) for k in ("affine", "elementwise_affine")):
                return None, None, False
            return "module", callee, peeled_freeze
        leaf = (dotted_name(value.func) or "").split(".")[-1]
        if callee is not None and leaf[:1].isupper() and not callee.startswith("torch."):
            # A class of this project or of a library: whether it has parameters is decided
            # across files (an unknown library class never is).
            return "call", callee, peeled_freeze
        return None, None, False

    def _on_self_attribute(
        self, cls: ModuleClass, method: Method, node: cst.Attribute, initialising: bool
    ) -> None:
        parent = self.ctx.parent(node)
        name = node.attr.value
        if name in ("__dict__", "_modules", "_parameters"):
            cls.escapes.add("")
            return
        if _is_store(parent, node):
            return
        if type(parent) is cst.Call and parent.func is node:
            conditional = self._data_dependent(node)
            (method.branch_calls if conditional else method.calls).add(name)
            if not initialising and name in _WALKERS and self._walked(parent):
                cls.escapes.add("")
            if name in cls.methods or initialising:
                return  # a method, or a module called while building (shape inference)
        if type(parent) is cst.Attribute and parent.value is node:
            holder = self.ctx.parent(parent)
            if type(holder) is cst.Call and holder.func is parent:
                method.sub_calls.append(f"{name}.{parent.attr.value}")
        if initialising and not self._hands_on(node):
            return
        if self._data_dependent(node):
            method.branch_reads.add(name)
        else:
            method.reads.add(name)
        if type(parent) is cst.Attribute and parent.value is node and not initialising:
            holder = self.ctx.parent(parent)
            called = type(holder) is cst.Call and holder.func is parent
            if not called and not _is_store(holder, parent):
                method.sub_reads.add(f"{name}.{parent.attr.value}")

    def _on_call(
        self,
        cls: ModuleClass,
        method: Method,
        call: cst.Call,
        self_name: str,
        registering: bool,
        initialising: bool,
    ) -> None:
        func = call.func
        leaf = func.value if type(func) is cst.Name else None
        if any(is_name(arg.value, self_name) for arg in call.args):
            callee = func.attr.value if type(func) is cst.Attribute else leaf
            method.hands_self_to.append(callee or "?")
        if type(func) is cst.Attribute:
            receiver = func.value
            attr = func.attr.value
            if is_name(receiver, self_name) and registering:
                if attr == "register_parameter" and len(call.args) >= 2:
                    name = string_literal(call.args[0].value)
                    if name is not None:
                        self._register(cls, name, call.args[1].value, call)
                elif attr in ("add_module", "register_module") and len(call.args) >= 2:
                    name = string_literal(call.args[0].value)
                    if name is not None:
                        self._register(cls, name, call.args[1].value, call)
            if attr == "requires_grad_" and freezes(call):
                self._freeze(cls, receiver, self_name)
            if (
                type(receiver) is cst.Call
                and type(receiver.func) is cst.Name
                and receiver.func.value == "super"
            ):
                method.super_calls.add(attr)
            return
        if leaf in ("getattr", "setattr", "delattr", "hasattr") and call.args:
            if not is_name(call.args[0].value, self_name) or len(call.args) < 2:
                if leaf == "getattr" and call.args and is_name(call.args[0].value, "vars"):
                    cls.escapes.add("")
                return
            name_node = call.args[1].value
            literal = string_literal(name_node)
            if leaf == "getattr":
                if literal is not None:
                    if not initialising or self._hands_on(call):
                        if self._data_dependent(call):
                            method.branch_reads.add(literal)
                        else:
                            method.reads.add(literal)
                elif not initialising:
                    cls.escapes.add(_prefix(name_node))
            elif leaf == "setattr":
                if literal is not None and registering and len(call.args) >= 3:
                    self._register(cls, literal, call.args[2].value, call)
                elif literal is None:
                    cls.escapes.add(_prefix(name_node))
        elif leaf == "vars" and call.args and is_name(call.args[0].value, self_name):
            cls.escapes.add("")

    def _on_for(self, cls: ModuleClass, loop: cst.For, self_name: str, initialising) -> None:
        receiver = frozen_by_loop(self.ctx, loop)
        if receiver is not None:
            self._freeze(cls, receiver, self_name)

    def _freeze(self, cls: ModuleClass, receiver: cst.CSTNode, self_name: str) -> None:
        root = _self_root(receiver, self_name)
        if root == "":
            cls.frozen.add(ALL)
        elif root is not None:
            cls.frozen.add(root)

    # -- what a read means --------------------------------------------------------------------

    def _deferred(self, node: cst.CSTNode, method: cst.FunctionDef) -> bool:
        """Is `node` inside a lambda or a function defined in `method`?"""
        for ancestor in self.ctx.ancestors(node):
            if ancestor is method:
                return False
            if type(ancestor) in (cst.Lambda, cst.FunctionDef):
                return True
        return False

    def _hands_on(self, node: cst.CSTNode) -> bool:
        """In an initialising method, does this read of `self.x` hand the object on (into a
        container, another attribute: tied weights), rather than initialise it?"""
        parent = self.ctx.parent(node)
        if type(parent) is cst.Attribute and parent.value is node:
            # `self.x.weight`: counts only as the value of an assignment to self (weight tying)
            return self._in_assigned_value(node)
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.Call:
                leaf = (dotted_name(ancestor.func) or "").split(".")[-1]
                if "init" in leaf or leaf.endswith("_"):
                    return False  # nn.init.normal_(self.p), trunc_normal_(self.pos_embed)
            if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                break
        return True

    def _in_assigned_value(self, node: cst.CSTNode) -> bool:
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.Assign, cst.AnnAssign):
                return child is ancestor.value
            if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return False
            child = ancestor
        return False

    def _walked(self, call: cst.Call) -> bool:
        """Is `self.children()` (and the like) iterated, not just peeked at with `next()`?"""
        parent = self.ctx.parent(call)
        if type(parent) is cst.Arg:
            outer = self.ctx.parent(parent)
            if type(outer) is cst.Call and type(outer.func) is cst.Name:
                return outer.func.value != "next"
        return True

    def _data_dependent(self, node: cst.CSTNode) -> bool:
        """Is `node` inside a branch whose test depends on the data or on chance (within its
        method)?"""
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                return False
            if type(ancestor) in (cst.If, cst.IfExp, cst.While) and child is not ancestor.test:
                if self._test_depends_on_data(ancestor.test):
                    return True
            child = ancestor
        return False

    def _test_depends_on_data(self, test: cst.CSTNode) -> bool:
        for node in self_and_descendants(self.ctx, test):
            if type(node) is not cst.Call:
                continue
            for qualified in self.names.qualified(node.func):
                if qualified.startswith(_RANDOM_PREFIXES) or qualified in _DATA_FUNCTIONS:
                    return True
            func = node.func
            if type(func) is cst.Attribute and func.attr.value in _DATA_METHODS:
                receiver = dotted_name(func.value) or ""
                root = receiver.split(".")[0]
                if root in ("math", "np", "numpy"):
                    # NumPy's own `np.sum(x)`: data-dependent when what it sums is
                    # (`np.sum(mask.cpu().numpy())`), not over the module's config
                    # (`np.sum(self.kinds) == 1`).
                    if any(_names_data(self.ctx, arg.value) for arg in node.args):
                        return True
                elif receiver and root != "self":
                    return True
        return False


# -- helpers ----------------------------------------------------------------------------------


def _names_data(ctx, expr: cst.CSTNode) -> bool:
    """Does `expr` name anything but the module's own state, NumPy or math, and literals (a
    local such as `masks` in `masks.cpu().numpy() > 0`)?"""
    for node in self_and_descendants(ctx, expr):
        if type(node) is not cst.Name:
            continue
        parent = ctx.parent(node)
        if type(parent) is cst.Attribute and parent.attr is node:
            continue  # the `cpu` of `masks.cpu`
        if node.value not in ("self", "np", "numpy", "math", "True", "False", "None"):
            return True
    return False


def frozen_by_loop(ctx, loop: cst.For) -> Optional[cst.CSTNode]:
    """For `for p in X.parameters(): p.requires_grad = False` (or `p.requires_grad_(False)`),
    the `X` whose parameters the loop freezes; else None."""
    if type(loop.target) not in (cst.Name, cst.Tuple) or type(loop.iter) is not cst.Call:
        return None
    func = loop.iter.func
    if type(func) is not cst.Attribute or func.attr.value not in _PARAMETER_WALKS:
        return None
    names = {n.value for n in descendants(loop.target) if type(n) is cst.Name}
    if type(loop.target) is cst.Name:
        names.add(loop.target.value)
    for sub in ctx.tree.descendants(loop.body):
        if type(sub) is cst.Assign:
            for target in sub.targets:
                t = target.target
                if _sets_requires_grad_false(t, sub.value) and dotted_name(t.value) in names:
                    return func.value
        elif type(sub) is cst.Call and type(sub.func) is cst.Attribute:
            if sub.func.attr.value == "requires_grad_" and freezes(sub):
                if dotted_name(sub.func.value) in names:
                    return func.value
    return None


def _init_reach(
    functions: Dict[str, cst.FunctionDef], calls_in: Dict[str, List[cst.CSTNode]]
) -> Set[str]:
    """`__init__` and the methods only it calls (`self._init_layers()`), transitively;
    `calls_in`: the calls inside each method."""
    if "__init__" not in functions:
        return set()
    calls: Dict[str, Set[str]] = {}
    for name, function in functions.items():
        self_name = _self_param(function)
        found: Set[str] = set()
        if self_name is not None:
            for sub in calls_in[name]:
                assert type(sub) is cst.Call  # calls_in holds _within(method, (cst.Call,))
                if (
                    type(sub.func) is cst.Attribute
                    and is_name(sub.func.value, self_name)
                    and sub.func.attr.value in functions
                ):
                    found.add(sub.func.attr.value)
        calls[name] = found
    reach = {"__init__"}
    todo = ["__init__"]
    while todo:
        for callee in calls[todo.pop()]:
            if callee not in reach and callee != "forward":
                reach.add(callee)
                todo.append(callee)
    # A helper that other methods call too is not only initialisation.
    for name in list(reach - {"__init__"}):
        if any(name in called for caller, called in calls.items() if caller not in reach):
            reach.discard(name)
    return reach


def _self_param(function: cst.FunctionDef) -> Optional[str]:
    for decorator in function.decorators:
        if dotted_name(decorator.decorator) in ("staticmethod", "classmethod"):
            return None
    params = positional_params(function)
    return params[0].name.value if params else None


def _is_self_attr(node: cst.CSTNode, self_name: str) -> TypeGuard[cst.Attribute]:
    return type(node) is cst.Attribute and is_name(node.value, self_name)


def _self_root(node: cst.CSTNode, self_name: str) -> Optional[str]:
    """`self.backbone.layer1` -> "backbone"; `self` -> ""; anything else -> None."""
    while type(node) is cst.Call and type(node.func) is cst.Attribute:
        node = node.func.value  # self.backbone.eval().requires_grad_(False)
    chain = dotted_name(node) if type(node) in (cst.Name, cst.Attribute) else None
    if chain is None:
        return None
    parts = chain.split(".")
    if parts[0] != self_name:
        return None
    return parts[1] if len(parts) > 1 else ""


def _is_store(parent: Optional[cst.CSTNode], node: cst.CSTNode) -> bool:
    if type(parent) is cst.AssignTarget:
        return True
    if type(parent) is cst.AnnAssign and parent.target is node:
        return True
    return type(parent) is cst.Del


def _sets_requires_grad_false(
    target: cst.CSTNode, value: cst.CSTNode
) -> TypeGuard[cst.Attribute]:
    """`self.pos_embed.requires_grad = False`."""
    return (
        type(target) is cst.Attribute
        and target.attr.value == "requires_grad"
        and is_false(value)
    )


def freezes(call: cst.Call) -> bool:
    value = positional(call, 0)
    if value is None:
        value = keyword(call, "requires_grad")
    return is_false(value)


def _prefix(node: cst.CSTNode) -> str:
    """The literal start of a computed attribute name (`f"layer{i}"` -> "layer"), else ""."""
    if type(node) is cst.FormattedString and node.parts:
        first = node.parts[0]
        if type(first) is cst.FormattedStringText:
            return first.value
    if type(node) is cst.BinaryOperation and type(node.operator) is cst.Add:
        literal = string_literal(node.left)
        if literal is not None:
            return literal
    return ""


def forward_reach(cls: ModuleClass) -> Set[str]:
    """`forward` and the methods of the class it calls through `self.<method>()`, directly or
    not, on any branch (what runs when the module is called). Empty without `forward`."""
    if not cls.has_forward:
        return set()
    reached = {"forward"}
    todo = ["forward"]
    while todo:
        method = cls.methods.get(todo.pop())
        if method is None:
            continue
        for name in method.calls | method.branch_calls:
            if name in cls.methods and name not in reached:
                reached.add(name)
                todo.append(name)
    return reached


# Container methods that add modules.
_FILLING = {"append", "extend", "insert", "add_module", "update", "register_module", "__setitem__"}


def _built_empty(value: cst.CSTNode) -> bool:
    """`nn.ModuleList()`, `nn.ModuleDict({})`, `nn.Sequential()`, `nn.ModuleList([])`."""
    if type(value) is not cst.Call:
        return False
    if not value.args:
        return True
    if len(value.args) != 1 or value.args[0].star:
        return False
    only = value.args[0].value
    if type(only) is cst.List or type(only) is cst.Tuple or type(only) is cst.Dict:
        return not only.elements
    return False


def attributes_from_init(cls: cst.ClassDef) -> Dict[str, List[object]]:
    """Attributes `__init__` sets straight from one of its positional parameters
    (`self.backbone = backbone`) and nothing else in the class sets -> [the parameter's
    position in a call of the class (`self` left out), its name]: what a caller hands the
    constructor there is what the attribute holds."""
    init = next(
        (s for s in cls.body.body if type(s) is cst.FunctionDef and s.name.value == "__init__"),
        None,
    )
    if init is None:
        return {}
    params = [p.name.value for p in positional_params(init)]
    if not params:
        return {}
    self_name = params[0]
    stores: Dict[str, int] = {}
    for node in descendants(cls.body):
        if type(node) is cst.Assign:
            for assigned in node.targets:
                if type(assigned.target) is cst.Attribute:
                    attr = assigned.target.attr.value
                    stores[attr] = stores.get(attr, 0) + 1
    found: Dict[str, List[object]] = {}
    for node in descendants(init.body):
        if type(node) is not cst.Assign or len(node.targets) != 1:
            continue
        target, value = node.targets[0].target, node.value
        if _is_self_attr(target, self_name) and type(value) is cst.Name:
            attr = target.attr.value
            if value.value in params[1:] and stores.get(attr) == 1:
                found[attr] = [params.index(value.value) - 1, value.value]
    return found
