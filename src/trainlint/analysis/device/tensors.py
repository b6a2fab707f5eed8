"""Tensors on the model's device inside a function, and factories that make theirs on the CPU
(TRL105).
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Set

import libcst as cst

from ...walk import children
from ..base.calls import argument, is_none
from ..base.frameworks import Frameworks
from ..base.names import Names, dotted_name
from ..base.nodes import positional_params, target_names
from ..base.scopes import Scopes
from ..base.vocabulary import DTYPE_WORDS
from .expressions import Devices
from .. import Analysis


# -- tensors on the device (TRL105 new-tensor-off-device)
#
# Which names of a function hold tensors on the model's device, and which tensor factories
# create theirs on the CPU because they were given no `device=`.

# torch factories that create a new tensor on the default (CPU) device unless given `device=`.
TENSOR_FACTORIES = frozenset(
    {
        "zeros",
        "ones",
        "full",
        "empty",
        "rand",
        "randn",
        "randint",
        "randperm",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "tensor",
    }
)
# Methods and functions whose result carries no device (a size, a Python number, host memory).
_DEVICE_KILLING_ATTRIBUTES = frozenset(
    {"shape", "device", "dtype", "ndim", "is_cuda", "requires_grad", "T_device"}
)
_DEVICE_KILLING_METHODS = frozenset(
    {
        "size",
        "dim",
        "numel",
        "item",
        "tolist",
        "cpu",
        "numpy",
        "data_ptr",
        "stride",
        "get_device",
        "is_contiguous",
        "element_size",
        "nelement",
    }
)
_DEVICE_KILLING_FUNCTIONS = frozenset(
    {"len", "int", "float", "bool", "isinstance", "range", "str", "list", "tuple", "max", "min"}
)
_MOVERS = frozenset({"to", "cuda", "type_as"})
# Methods of a tensor that need their tensor arguments on the same device.
COMBINING_METHODS = frozenset(
    {
        "masked_fill",
        "masked_fill_",
        "add",
        "add_",
        "sub",
        "sub_",
        "mul",
        "mul_",
        "div",
        "div_",
        "matmul",
        "mm",
        "bmm",
        "where",
        "lt",
        "gt",
        "le",
        "ge",
        "eq",
        "ne",
        "maximum",
        "minimum",
        "masked_scatter",
        "logical_and",
        "logical_or",
    }
)
# torch functions that need all their tensor arguments on one device.
COMBINING_FUNCTIONS = frozenset(
    {
        "torch.cat",
        "torch.concat",
        "torch.concatenate",
        "torch.stack",
        "torch.hstack",
        "torch.vstack",
        "torch.where",
        "torch.matmul",
        "torch.mm",
        "torch.bmm",
        "torch.einsum",
        "torch.maximum",
        "torch.minimum",
        "torch.add",
        "torch.sub",
        "torch.mul",
        "torch.div",
        "torch.logical_and",
        "torch.logical_or",
        "torch.masked_select",
        "torch.bucketize",
    }
)
FORWARD_NAMES = frozenset(
    {"forward", "_forward", "forward_train", "forward_test", "forward_features"}
)
LIGHTNING_STEPS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
# Layers without parameters: CPU inputs work even when the module sits on the GPU.
_PARAMETERLESS_LAYERS = frozenset(
    {
        "ReLU",
        "ReLU6",
        "GELU",
        "SiLU",
        "Sigmoid",
        "Tanh",
        "LeakyReLU",
        "ELU",
        "Softmax",
        "LogSoftmax",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "Identity",
        "Flatten",
        "Unflatten",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveMaxPool2d",
        "Upsample",
        "PixelShuffle",
        "Softplus",
        "Hardswish",
        "Mish",
    }
)


class DeviceTensors(Analysis):
    """Per function (or a script's module body): the names holding tensors on the device.

    Seeds: the tensor parameters of `forward`-like methods (and Lightning step methods, whose
    batch Lightning has moved), names bound to `.to(device)`/`.cuda()`/`.type_as(...)` results,
    and outputs of a model that was moved (or of a submodule, in `forward`). Anything computed
    from a device tensor is one too, except sizes, Python numbers and `.cpu()` copies.
    """

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.devices: Devices = ctx.analysis(Devices)
        self._device_names: Dict[cst.CSTNode, Set[str]] = {}
        # Per scope, the assignment statements whose value is on the device: a name is a device
        # tensor at a use only if such an assignment (or a parameter, loop target, ...) reaches it.
        self._device_statements: Dict[cst.CSTNode, Set[cst.CSTNode]] = {}
        self._moved_models: Optional[Dict[str, List[cst.CSTNode]]] = None
        self._submodules: Dict[cst.CSTNode, Dict[str, Optional[str]]] = {}

    # -- factories ----------------------------------------------------------------------------

    def factory_without_device(self, call: cst.Call) -> bool:
        """`torch.zeros(...)`-like with no `device=`, creating a non-scalar CPU tensor. One
        with `out=` writes into the tensor it is given (`torch.arange(n,
        out=torch.cuda.LongTensor(n))`) and returns it, wherever that tensor lives."""
        qualified = self.names.qualified(call.func)
        leaf = None
        for name in qualified:
            if name.startswith("torch.") and name.count(".") == 1:
                leaf = name.split(".")[1]
        if leaf not in TENSOR_FACTORIES:
            return False
        if any(arg.star == "**" for arg in call.args):
            return False
        if any(
            arg.keyword is not None and arg.keyword.value in ("device", "out") for arg in call.args
        ):
            return False
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        if leaf == "tensor":
            # torch.tensor(2.0) is a 0-dim CPU tensor, which PyTorch accepts next to CUDA ones.
            while type(first) is cst.BinaryOperation:  # [0.1] + [1.0] * (n - 1)
                first = first.left
            return type(first) in (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)
        if (type(first) is cst.Tuple or type(first) is cst.List) and not first.elements:
            return False  # torch.zeros(()) is 0-dim
        return first is not None or leaf in ("randperm",)

    # -- device tensors -----------------------------------------------------------------------

    def scope_node(self, node: cst.CSTNode) -> cst.CSTNode:
        function = self.scopes.enclosing_function(node)
        return function if function is not None else self.ctx.module

    def device_names(self, scope: cst.CSTNode) -> Set[str]:
        found = self._device_names.get(scope)
        if found is None:
            found = self._device_names[scope] = self._compute_device_names(scope)
        return found

    def is_forward_like(self, function: cst.CSTNode) -> bool:
        if type(function) is not cst.FunctionDef:
            return False
        cls = self._class_of(function)
        if cls is None:
            return False
        name = function.name.value
        if name in FORWARD_NAMES:
            return True
        if name in LIGHTNING_STEPS:
            return self.ctx.analysis(Frameworks).class_framework(cls) == "lightning"
        return False

    def on_device(self, expr: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Does `expr` evaluate to a tensor on the device (as far as the code shows)?"""
        return self._on_device(expr, self.device_names(scope), scope, 0)

    def device_partners(self, expr: cst.CSTNode, scope: cst.CSTNode) -> List[cst.Name]:
        """The device-tensor names `expr` is computed from, in order. A name called
        (`critic` in `critic(x)`) is a model on the device, not a tensor: a module has no
        `.device` for a fix to name."""
        names = self.device_names(scope)
        out = []
        for node in [expr] + list(self.ctx.tree.descendants(expr)):
            if type(node) is cst.Name and node.value in names and self._is_read(node):
                parent = self.ctx.parent(node)
                if type(parent) is cst.Call and parent.func is node:
                    continue
                if not self._killed_between(node, expr):
                    out.append(node)
        return out

    def submodule_layer(self, call: cst.Call) -> Optional[str]:
        """For `self.x(...)` in a method: what `self.x` was assigned in the class ("Linear",
        "<module>" for anything else callable that is not a method), or None if unknown."""
        func = call.func
        if not (
            type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value == "self"
        ):
            return None
        function = self.scopes.enclosing_function(call)
        cls = self._class_of(function) if function is not None else None
        if cls is None:
            return None
        table = self._submodules.get(cls)
        if table is None:
            table = self._submodules[cls] = self._class_submodules(cls)
        return table.get(func.attr.value)

    def calls_device_model(self, call: cst.Call, scope: cst.CSTNode) -> bool:
        """A call of a model that sits on the device: a moved/wrapped model, or a submodule
        with parameters inside `forward`. At a module's top level (a script, a notebook's
        cells in order) the move must come before the call: a model tried on a CPU sample and
        moved further down (or in a later cell) is still on the CPU there."""
        func = call.func
        if type(func) is cst.Name:
            moves = self.moved_models().get(func.value)
            if moves and self._local_model(func):
                # `gen = Generator(z).get_gen()` inside a test function: a model of that
                # function, which a move of another `gen` elsewhere in the file does not reach
                function = self.scopes.enclosing_function(call)
                moves = [m for m in moves if self.scopes.enclosing_function(m) is function]
            if moves:
                if type(scope) is not cst.Module:
                    return True
                index = self.ctx.tree.index
                at = index.get(call, 0)
                return any(index.get(move, at) < at for move in moves)
        layer = self.submodule_layer(call)
        if layer is not None and self.is_forward_like(scope):
            return layer not in _PARAMETERLESS_LAYERS
        return False

    def _local_model(self, name: cst.Name) -> bool:
        """Is `name` (at a call) a variable its function binds itself (assignments, loops,
        `with`), not a parameter, a global or a name of an enclosing scope?"""
        function = self.scopes.enclosing_function(name)
        if function is None:
            return False
        bindings = self.scopes.lookup(name.value, name)
        return bool(bindings) and all(
            b.kind in ("assign", "annassign", "unpack", "for", "with")
            and b.scope is not None
            and b.scope.node is function
            for b in bindings
        )

    def moved_models(self) -> Dict[str, List[cst.CSTNode]]:
        """Names of models moved to a device (`model.to(device)`, `model = Net().cuda()`,
        `model = DDP(model, ...)`), each with the calls that move it."""
        if self._moved_models is None:
            found: Dict[str, List[cst.CSTNode]] = {}
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in ("to", "cuda"):
                    if not self.moves_to_device(call):
                        continue
                    if type(func.value) is cst.Name:
                        found.setdefault(func.value.value, []).append(call)
                    parent = self.ctx.parent(call)
                    if type(parent) is cst.Assign and len(parent.targets) == 1:
                        target = parent.targets[0].target
                        if type(target) is cst.Name:
                            found.setdefault(target.value, []).append(call)
                elif self.names.is_(
                    func,
                    "torch.nn.DataParallel",
                    "torch.nn.parallel.DistributedDataParallel",
                ):
                    parent = self.ctx.parent(call)
                    if type(parent) is cst.Assign and len(parent.targets) == 1:
                        target = parent.targets[0].target
                        if type(target) is cst.Name:
                            found.setdefault(target.value, []).append(call)
            self._moved_models = found
        return self._moved_models

    # -- building -----------------------------------------------------------------------------

    def _compute_device_names(self, scope: cst.CSTNode) -> Set[str]:
        names: Set[str] = set()
        if type(scope) is cst.FunctionDef and self.is_forward_like(scope):
            params = scope.params
            for param in (
                list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
            ):
                if param.name.value in ("self", "cls"):
                    continue
                default = param.default
                if default is not None and not is_none(default):
                    continue  # return_loss=False, mode="train": not tensors
                names.add(param.name.value)
        if type(scope) is cst.FunctionDef:
            names |= self._helper_params(scope)
        assigns = [
            node
            for node in self._own_nodes(scope)
            if type(node) in (cst.Assign, cst.AnnAssign, cst.AugAssign)
        ]
        statements = self._device_statements.setdefault(scope, set())
        for _ in range(6):
            before = len(names), len(statements)
            for node in assigns:
                value = node.value
                if value is None or node in statements:
                    continue
                if not self._on_device(value, names, scope, 0):
                    continue
                statements.add(node)
                targets = (
                    [t.target for t in node.targets]
                    if type(node) is cst.Assign
                    else [node.target]
                )
                for target in targets:
                    for name in target_names(target):
                        names.add(name)
            if (len(names), len(statements)) == before:
                break
        return names

    def _reached_by_device_value(self, name: cst.Name, scope: cst.CSTNode) -> bool:
        """Is a binding that puts `name` on the device one that reaches this use? Flow matters:
        in `t = torch.arange(n) * freqs; freqs = freqs.to(x.device)` the use of `freqs` sees the
        CPU value. Bindings other than plain assignments (parameters, loop targets, unpacking)
        keep the name-level answer, except loop targets: a loop binds what it iterates over,
        which is not what a later move made a device tensor."""
        statements = self._device_statements.get(scope)
        if statements is None:
            return True
        # Look the name up where its statement starts: in `h = h * 2` the `h` on the right sees
        # the binding before the statement, not the one this statement makes.
        at: cst.CSTNode = name
        for ancestor in self.ctx.ancestors(name):
            if type(ancestor) in (cst.Assign, cst.AugAssign, cst.AnnAssign):
                at = ancestor
                break
            if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
                break
        bindings = self.scopes.lookup(name.value, at)
        if not bindings:
            return True
        for binding in bindings:
            if binding.kind == "for":
                # `for images, labels in loader:` binds the CPU batch; the name is a device
                # tensor only after a move rebinds it (`images = images.to(device)`).
                continue
            if binding.kind not in ("assign", "annassign", "augassign"):
                return True
            if binding.statement in statements:
                return True
        return False

    def _helper_params(self, method: cst.FunctionDef) -> Set[str]:
        """Parameters of a helper method that `forward` calls with device tensors
        (`self.reparameterize(mu, logvar)`)."""
        cls = self._class_of(method)
        if cls is None or self.is_forward_like(method):
            return set()
        params = positional_params(method)
        if params and params[0].name.value in ("self", "cls"):
            params = params[1:]
        by_name = {p.name.value for p in params} | {
            p.name.value for p in method.params.kwonly_params
        }
        found: Set[str] = set()
        body = cls.body.body if type(cls.body) is cst.IndentedBlock else []
        for caller in body:
            if type(caller) is not cst.FunctionDef or not self.is_forward_like(caller):
                continue
            for node in self._own_nodes(caller):
                if not (
                    type(node) is cst.Call
                    and type(node.func) is cst.Attribute
                    and type(node.func.value) is cst.Name
                    and node.func.value.value == "self"
                    and node.func.attr.value == method.name.value
                ):
                    continue
                positional = 0
                for arg in node.args:
                    if arg.star:
                        break
                    if arg.keyword is not None:
                        name = arg.keyword.value
                    elif positional < len(params):
                        name = params[positional].name.value
                        positional += 1
                    else:
                        continue
                    if name in by_name and self.on_device(arg.value, caller):
                        found.add(name)
        return found

    def _own_nodes(self, scope: cst.CSTNode):
        """Nodes of a function (or the module) not inside nested functions or classes."""
        stack = list(reversed(children(scope)))
        while stack:
            node = stack.pop()
            yield node
            if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                continue
            stack.extend(reversed(children(node)))

    def _on_device(self, expr, names: Set[str], scope, depth: int) -> bool:
        if depth > 30:
            return False
        if type(expr) is cst.Name:
            return expr.value in names and self._reached_by_device_value(expr, scope)
        if type(expr) is cst.Attribute:
            if expr.attr.value in _DEVICE_KILLING_ATTRIBUTES:
                return False
            return self._on_device(expr.value, names, scope, depth + 1)
        if type(expr) is cst.Call:
            func = expr.func
            if type(func) is cst.Attribute:
                method = func.attr.value
                if method in _DEVICE_KILLING_METHODS:
                    return False
                if method in _MOVERS:
                    return self.moves_to_device(expr)
            leaf = (dotted_name(func) or "").split(".")[-1]
            if type(func) is cst.Name and leaf in _DEVICE_KILLING_FUNCTIONS:
                return False
            if self.factory_without_device(expr):
                return False
            if self._factory_with_device(expr):
                return True
            if self.devices.is_cuda_tensor_type(func):
                return True  # torch.cuda.FloatTensor(n, 1), a CUDA tensor type alias
            if (
                type(func) is cst.Attribute
                and func.attr.value == "type"
                and expr.args
                and self.devices.is_cuda_tensor_type(expr.args[0].value)
            ):
                return True  # x.type(torch.cuda.FloatTensor)
            if self.calls_device_model(expr, scope):
                return True
            if type(func) is cst.Attribute and self._on_device(
                func.value, names, scope, depth + 1
            ):
                return True
            return any(self._on_device(a.value, names, scope, depth + 1) for a in expr.args)
        if type(expr) is cst.Subscript:
            return self._on_device(expr.value, names, scope, depth + 1)
        if type(expr) is cst.BinaryOperation:
            return self._on_device(expr.left, names, scope, depth + 1) or self._on_device(
                expr.right, names, scope, depth + 1
            )
        if type(expr) is cst.UnaryOperation:
            return self._on_device(expr.expression, names, scope, depth + 1)
        if type(expr) is cst.Comparison:
            return self._on_device(expr.left, names, scope, depth + 1) or any(
                self._on_device(c.comparator, names, scope, depth + 1) for c in expr.comparisons
            )
        if type(expr) is cst.IfExp:
            return self._on_device(expr.body, names, scope, depth + 1) and self._on_device(
                expr.orelse, names, scope, depth + 1
            )
        if type(expr) in (cst.Tuple, cst.List):
            return any(self._on_device(e.value, names, scope, depth + 1) for e in expr.elements)
        return False

    def on_cpu_twin(self, node: cst.CSTNode) -> bool:
        """Is `node` in the arm of an `if`/`else` that is the CPU twin of the other arm? Both
        arms bind the same names, the other arm's values for them are moved to the device
        (`.cuda()`, `.to(device)`, `device=`) and this arm's are not: `if self.gpu_mode: alpha =
        torch.rand(n).cuda() else: alpha = torch.rand(n)`. Whatever the test is (`gpu_id >=
        0`, a flag), the author wrote this arm for the run without the device, where the
        tensors it makes meet nothing on the GPU. The same holds for the arms of a conditional
        expression: `torch.zeros(1).cuda() if args.cuda else torch.zeros(1)`."""
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
            if type(ancestor) is cst.IfExp and child in (ancestor.body, ancestor.orelse):
                mine, other = (
                    (ancestor.body, ancestor.orelse)
                    if child is ancestor.body
                    else (ancestor.orelse, ancestor.body)
                )
                if self._twin_values(mine, other):
                    return True
            orelse = getattr(ancestor, "orelse", None)
            if type(ancestor) is cst.If and type(orelse) is cst.Else:
                if child is ancestor.body and self._twin_arms(ancestor.body, orelse.body, node):
                    return True
                if child is orelse and self._twin_arms(orelse.body, ancestor.body, node):
                    return True
            child = ancestor
        return False

    def _twin_arms(self, mine: cst.CSTNode, other: cst.CSTNode, node: cst.CSTNode) -> bool:
        mine_values = self._arm_bindings(mine)
        other_values = self._arm_bindings(other)
        shared = set(mine_values) & set(other_values)
        holder = next(
            (
                name
                for name, values in mine_values.items()
                if any(v is node or v in set(self.ctx.ancestors(node)) for v in values)
            ),
            None,
        )
        if holder is None or holder not in shared:
            return False  # the tensor is not one of the values the two arms both make
        # The other arm makes the same value and moves it, nothing else: `torch.rand(n)` against
        # `torch.rand(n).cuda()`. Arms that differ otherwise (`torch.ones(n)` against
        # `torch.full((n,), 0.9, device=dev)` under `if label_smoothing:`) test something else.
        return any(
            self._twin_values(v, w) for v in mine_values[holder] for w in other_values[holder]
        ) and not any(self._moves_in(v) for v in mine_values[holder])

    def _twin_values(self, mine: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Is `other` the value `mine` moved to the device, and `mine` left where it is made?"""
        return (
            not self._moves_in(mine)
            and self._moves_in(other)
            and _unmoved_text(self.ctx.code(other)) == _unmoved_text(self.ctx.code(mine))
        )

    def _arm_bindings(self, arm: cst.CSTNode) -> Dict[str, List[cst.CSTNode]]:
        """Simple names an arm assigns (also inside its `with` blocks), with their values."""
        found: Dict[str, List[cst.CSTNode]] = {}
        for node in self.ctx.tree.descendants(arm):
            if type(node) is cst.Assign:
                for target in node.targets:
                    if type(target.target) is cst.Name:
                        found.setdefault(target.target.value, []).append(node.value)
        return found

    def _moves_in(self, value: cst.CSTNode) -> bool:
        return any(
            type(n) is cst.Call
            and (
                self.moves_to_device(n)
                or any(a.keyword is not None and a.keyword.value == "device" for a in n.args)
            )
            for n in [value, *self.ctx.tree.descendants(value)]
        )

    def moves_to_device(self, call: cst.Call) -> bool:
        """Is this method call a move of its receiver to the device? `.to(device)`, `.cuda()`,
        `.type_as(t)`, and the legacy `.type(T)` where `T` is a CUDA tensor type
        (`torch.cuda.FloatTensor`, or `Tensor = torch.cuda.FloatTensor if cuda else
        torch.FloatTensor`); not `.to("cpu")`, `.to(torch.float16)` nor `.type(torch.float32)`."""
        func = call.func
        if type(func) is not cst.Attribute:
            return False
        if func.attr.value in ("cuda", "type_as"):
            return True
        if func.attr.value == "type":
            return bool(call.args) and self.devices.is_cuda_tensor_type(
                argument(call, 0, "dtype")
            )
        if func.attr.value != "to":
            return False
        target = None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                target = arg.value
        if target is None and call.args and call.args[0].keyword is None:
            target = call.args[0].value
        if target is None:
            return False
        dotted = dotted_name(target) or ""
        if dotted.startswith("torch.") and dotted.split(".")[-1] in DTYPE_WORDS:
            return False
        if dotted.split(".")[-1].endswith("dtype"):
            return False  # `mask.to(dtype)`, `x.to(self.dtype)`: a cast, not a move
        device = self.devices.device_of(target)
        if device is not None and device.kind not in ("cuda", "unknown", "mps", "xla", "xpu"):
            return False
        return True

    def _factory_with_device(self, call: cst.Call) -> bool:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                if is_none(arg.value):
                    return False  # device=None: the default device, the CPU
                device = self.devices.device_of(arg.value)
                return device is None or device.kind != "cpu"
        return False

    def _class_of(self, function: cst.CSTNode) -> Optional[cst.ClassDef]:
        parent = self.ctx.parent(function)
        while parent is not None and type(parent) not in (cst.ClassDef, cst.FunctionDef):
            parent = self.ctx.parent(parent)
        return parent if type(parent) is cst.ClassDef else None

    def _class_submodules(self, cls: cst.ClassDef) -> Dict[str, Optional[str]]:
        table: Dict[str, Optional[str]] = {}
        methods = set()
        for statement in cls.body.body if type(cls.body) is cst.IndentedBlock else []:
            if type(statement) is cst.FunctionDef:
                methods.add(statement.name.value)
        for node in self.ctx.tree.descendants(cls):
            if type(node) is cst.Assign and len(node.targets) == 1:
                target = dotted_name(node.targets[0].target) or ""
                if not target.startswith("self.") or target.count(".") != 1:
                    continue
                attr = target.split(".")[1]
                value = node.value
                if type(value) is cst.Call:
                    leaf = (dotted_name(value.func) or "").split(".")[-1]
                    table.setdefault(attr, leaf or "<module>")
                else:
                    table.setdefault(attr, None)
        for method in methods:
            table[method] = None
        return table

    def _is_read(self, name: cst.Name) -> bool:
        parent = self.ctx.parent(name)
        if type(parent) is cst.Attribute and parent.attr is name:
            return False
        if type(parent) is cst.Arg and parent.keyword is name:
            return False
        return type(parent) not in (cst.AssignTarget, cst.Param)

    def _killed_between(self, node: cst.CSTNode, top: cst.CSTNode) -> bool:
        current = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.Attribute and ancestor.value is current:
                if ancestor.attr.value in _DEVICE_KILLING_ATTRIBUTES:
                    return True
                call = self.ctx.parent(ancestor)
                if type(call) is cst.Call and call.func is ancestor:
                    if ancestor.attr.value in _DEVICE_KILLING_METHODS:
                        return True
            if type(ancestor) is cst.Call and type(ancestor.func) is cst.Name:
                if ancestor.func.value in _DEVICE_KILLING_FUNCTIONS:
                    return True
            if ancestor is top:
                return False
            current = ancestor
        return False


_MOVE_TEXT = re.compile(r"\.(?:cuda|to)\([^()]*\)|,\s*device\s*=\s*[\w.]+(?:\([^()]*\))?")


def _unmoved_text(code: str) -> str:
    """A value's code without its moves (`.cuda()`, `.to(device)`, `, device=dev`) or spaces."""
    return re.sub(r"\s+", "", _MOVE_TEXT.sub("", code))
