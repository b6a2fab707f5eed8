"""Models whose train/eval mode changes nothing, and the one place that knows which `torch.nn`
layers behave differently in the two modes.

A model has no modes worth setting when it is a built-in layer without mode-dependent behaviour
(`nn.Linear(784, 10)`, a convolution, an embedding), an `nn.Sequential` of such layers, or a
same-file `nn.Module` whose submodules are all such layers (or such classes of the file) and that
reads no `self.training` and calls no dropout or normalisation function (the CIFAR-10
tutorial's `Net`; a weight-init method that tests `isinstance(m, nn.BatchNorm2d)` names a class
and builds nothing). Its code may call module-level helpers of the file and custom autograd
functions (`Spike.apply`) that read no mode either; a submodule handed in from outside
(`self.backbone = backbone`) and called is unknown. A missing
`model.eval()` around such a model changes no result (TRL405 stays quiet about the mode).

Mode-dependent: dropout of every kind, normalisation with running statistics (BatchNorm,
InstanceNorm, SyncBatchNorm), `RReLU` (random slopes in training), transformer and attention
blocks (dropout inside), and `nn.RNN`/`nn.LSTM`/`nn.GRU` only when they have more than one layer
and a dropout that is not literally zero (PyTorch applies an RNN's `dropout` between stacked
layers only, and only in train mode). A functional dropout or batch norm depends on the mode
only when its `training` flag does (`F.dropout(x, training=self.training)`); with a literal
flag, or none (`F.dropout` then always drops), `eval()` changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from ...walk import own_nodes
from ..base.calls import has_star_args, is_false, is_true, keyword, positional
from ..base.names import LOCAL_PREFIX, dotted_name
from ..base.nodes import descendants, is_self_attr
from ..base.scopes import bound_value
from .steps import TrainingSteps


_MODE_DEPENDENT = re.compile(
    r"dropout|batchnorm|batch_norm|instancenorm|instance_norm|^training$|rnn|lstm|gru|"
    r"transformer|attention|rrelu|^train$|^eval$|^apply$",
    re.IGNORECASE,
)
# Layers whose forward reads `self.training` (or that hold such layers).
_MODE_DEPENDENT_LAYER = re.compile(
    r"dropout|batchnorm|batch_norm|instancenorm|instance_norm|rrelu|transformer|attention",
    re.IGNORECASE,
)
# `torch.nn.functional` calls whose `training` flag (position among the positional arguments)
# decides what they do: a literal flag, or the default, makes them the same in both modes.
_FUNCTIONAL_TRAINING_AT = {
    "dropout": 2, "dropout1d": 2, "dropout2d": 2, "dropout3d": 2, "alpha_dropout": 2,
    "feature_alpha_dropout": 2, "batch_norm": 5,
}  # fmt: skip
# Recurrent layers: (position of `dropout` among the positional arguments). `num_layers` is the
# third positional argument of all three.
_STACKED_RNNS = {"LSTM": 5, "GRU": 5, "RNN": 6}
# Method names that override the mode switch itself (`def train(self, mode=True)`).
_MODE_SWITCH = re.compile(r"^(train|eval|training|apply)$")
_MAX_NESTED_CLASSES = 6  # classes of the file built inside one another, followed that deep
_CONTAINERS = ("Sequential", "ModuleList")
_MOVES = ("to", "cuda", "cpu", "float", "double", "half")
_WRAPPERS = ("DataParallel", "DistributedDataParallel", "DDP")
# Calls that build a new module from another: they hold a copy, not the module they are given.
_COPIES = frozenset({"deepcopy", "copy", "AveragedModel", "ModelEmaV2", "ModelEMA", "EMA"})
_MAX_REBINDINGS = 8  # `model = wrap(model)` links followed back to the class that built it
# Builtins a model class calls that build no layer and switch no mode.
_PLAIN_BUILTINS = frozenset(
    {
        "super", "range", "len", "int", "float", "bool", "str", "isinstance", "issubclass",
        "hasattr", "print", "min", "max", "abs", "round", "sum", "zip", "enumerate", "list",
        "tuple", "dict", "set", "sorted", "reversed",
    }
)


def mode_dependent_layer(steps: "TrainingSteps", call: cst.Call) -> Optional[bool]:
    """Does this `torch.nn` layer (or `torch.nn.functional` call) behave differently in train and
    eval mode? True or False for a call that builds a `torch.nn` layer or calls a
    `torch.nn.functional` function; None for any other call (not a torch layer: unknown).

    `nn.LSTM(28, 128, 2)` is False (dropout 0 by default); `nn.LSTM(28, 128, 2, dropout=0.3)` is
    True; `nn.LSTM(28, 128, dropout=0.3)` is False (one layer: PyTorch applies no dropout).
    Containers (`nn.Sequential(...)`, `nn.ModuleList([...])`) are False only when every layer
    written in them is."""
    leaves = [
        q.split(".")[-1] for q in steps.names.qualified(call.func) if q.startswith("torch.nn.")
    ]
    if not leaves:
        return None
    leaf = leaves[0]
    if leaf in _CONTAINERS:
        return not _mode_free_container(steps, call)
    if leaf in _STACKED_RNNS:
        return not _rnn_without_dropout(call, _STACKED_RNNS[leaf])
    if leaf in ("ModuleDict", "ParameterList", "ParameterDict", "Module"):
        return True  # contents not written as layers here: unknown, so not mode-free
    if leaf in _FUNCTIONAL_TRAINING_AT:
        # `F.dropout(x, training=True)`: the flag, not the module's mode, decides
        training = keyword(call, "training") or positional(call, _FUNCTIONAL_TRAINING_AT[leaf])
        literal = training is None or is_true(training) or is_false(training)
        return not literal or has_star_args(call)
    return bool(_MODE_DEPENDENT_LAYER.search(leaf))


def _rnn_without_dropout(call: cst.Call, dropout_at: int) -> bool:
    if has_star_args(call):
        return False
    layers = keyword(call, "num_layers") or positional(call, 2)
    dropout = keyword(call, "dropout") or positional(call, dropout_at)
    return dropout is None or _literal_number(dropout) == 0 or (
        layers is None or _literal_number(layers) == 1
    )


def _literal_number(node: cst.BaseExpression) -> Optional[float]:
    if type(node) in (cst.Integer, cst.Float):
        try:
            return float(node.value.replace("_", ""))  # type: ignore[attr-defined]
        except ValueError:
            return None
    return None


def _mode_free_container(steps: "TrainingSteps", call: cst.Call) -> bool:
    """`nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))`, `nn.ModuleList([...])`:
    only torch layers, none of them mode-dependent (nested containers are looked into)."""
    layers: List[cst.BaseExpression] = []
    for arg in call.args:
        if arg.star or arg.keyword is not None:
            return False
        if type(arg.value) in (cst.List, cst.Tuple):
            for element in arg.value.elements:  # type: ignore[attr-defined]
                if type(element) is not cst.Element:
                    return False
                layers.append(element.value)
        else:
            layers.append(arg.value)
    for layer in layers:
        if type(layer) is not cst.Call or mode_dependent_layer(steps, layer) is not False:
            return False
    return bool(layers)


def mode_free_model(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> bool:
    """Is `name` a model that behaves the same in train and eval mode: a built-in layer without
    mode-dependent behaviour (`nn.Linear(784, 10)`), an `nn.Sequential` of such layers, or an
    instance of a same-file `nn.Module` class built only from them (no `self.training` read)?
    Then a missing `model.eval()` changes nothing (the CIFAR-10 tutorial's `Net`)."""
    built = model_constructors(steps, name, at)
    if not built:
        return False
    for value in built:
        layer = mode_dependent_layer(steps, value)
        if layer is not None:
            if layer:
                return False
            continue
        if not (type(value.func) is cst.Name and _mode_free_class(steps, value.func.value, value)):
            return False
    return True


def model_constructors(
    steps: "TrainingSteps", name: str, at: cst.CSTNode, attributes: bool = False
) -> Optional[List[cst.Call]]:
    """The calls that build what `name` holds at `at`, through moves (`Net().to(device)`) and
    DataParallel/DDP wrappers, following `model = nn.DataParallel(model)` back to the earlier
    binding, `model = given` to what `given` holds there, and a function's parameter to the
    arguments of the file's calls of it (`test(net, loader)` called as `test(lenet,
    testloader)`); None when some binding is not such a call (unknown). With `attributes`,
    `name` may also be `self.<attr>` in a method: what every assignment to it in the class's
    methods builds (`self.network = ConvLSTMNet(...).to(device)` in `__init__`)."""
    if attributes and name.startswith("self.") and name.count(".") == 1:
        return _attribute_constructors(steps, name[len("self."):], at)
    if not name or "." in name:
        return None
    found: List[cst.Call] = []
    places: List[Tuple[str, cst.CSTNode]] = [(name, at)]
    for _ in range(_MAX_REBINDINGS):
        if not places:
            break
        bindings = [(n, b) for n, place in places for b in steps.scopes.lookup(n, place)]
        if not bindings:
            return None
        places = []
        for held, binding in bindings:
            if binding.kind == "param":
                passed = _passed_for(steps, binding)
                if passed is None:
                    return None
                for given, call in passed:
                    if isinstance(given, str):
                        places.append((given, call))
                    else:
                        found.append(given)  # `train(net, loader, nn.CTCLoss())`
                continue
            value = _unwrapped(binding.value) if binding.kind == "assign" else None
            if type(value) is cst.Name:
                # `model = nn.DataParallel(model)`: what it held before says what it holds; and
                # `model = model_or_path` (another name): what that one holds there
                places.append(
                    (value.value, binding.statement if binding.statement is not None else value)
                )
                continue
            if type(value) is not cst.Call:
                return None
            found.append(value)
    if places:
        return None  # rebound more often than followed: unknown
    return found


def _attribute_constructors(
    steps: "TrainingSteps", attr: str, at: cst.CSTNode
) -> Optional[List[cst.Call]]:
    """The calls that build `self.<attr>` in the class of the method `at` is in: every plain
    assignment to it in the class's own methods, each a constructor or a name that one builds
    there (`net = Net(); self.net = net`). None when there is none, or one is something else."""
    owner = next((a for a in steps.ctx.ancestors(at) if type(a) is cst.ClassDef), None)
    if owner is None:
        return None
    found: List[cst.Call] = []
    for node in descendants(owner):
        if type(node) is not cst.Assign or not any(
            is_self_attr(target.target, attr) for target in node.targets
        ):
            continue
        if next(a for a in steps.ctx.ancestors(node) if type(a) is cst.ClassDef) is not owner:
            continue  # a nested class's own attribute
        value = _unwrapped(node.value)
        if type(value) is cst.Call:
            found.append(value)
        elif type(value) is cst.Name:
            built = model_constructors(steps, value.value, node)
            if built is None:
                return None
            found.extend(built)
        else:
            return None
    return found or None


def holds_module(steps: "TrainingSteps", holder: str, module: str, at: cst.CSTNode) -> bool:
    """Was `module` (a name) handed, as itself, to the constructor of what `holder` holds at `at`
    (`d_net = Distiller(t_net, s_net)`, `nn.Sequential(backbone, head)`, `nn.ModuleList([g,
    d])`)? A module keeps what it is given as submodules, so `holder.train()` puts `module` in
    training mode too. A class of another file is taken to keep it (what it does with its
    arguments is not visible); a copy (`copy.deepcopy(model)`, `AveragedModel(model)`) is a
    new module and holds nothing of the original."""
    if not module.isidentifier() or not holder or module == holder:
        return False
    constructors = model_constructors(steps, holder, at)
    for call in constructors or ():
        leaf = (dotted_name(call.func) or "").split(".")[-1]
        if leaf in _COPIES:
            continue
        for arg in call.args:
            value = arg.value
            given: List[cst.BaseExpression] = [value]
            if isinstance(value, (cst.List, cst.Tuple)):
                given = [element.value for element in value.elements]
            if any(type(v) is cst.Name and v.value == module for v in given):
                return True
    return False


def _passed_for(
    steps: "TrainingSteps", binding
) -> Optional[List[Tuple[Union[str, cst.Call], cst.CSTNode]]]:
    """What the file's calls of a function pass for one of its parameters, each with its call:
    a name, or a call that builds the value (`nn.CTCLoss()`, moves and wrappers taken off);
    None when a call passes something else or the function has no call in the file (methods
    are not followed: their receiver is another question)."""
    scope = binding.scope
    function = scope.node if scope is not None else None
    if type(function) is not cst.FunctionDef:
        return None
    params = [p.name.value for p in function.params.params]
    if not params or params[0] in ("self", "cls"):
        return None
    passed = steps.loops.callgraph.passed_for(function, binding.name)
    if passed is None:
        return None
    out: List[Tuple[Union[str, cst.Call], cst.CSTNode]] = []
    for call, value in passed:
        built = _unwrapped(value)
        if isinstance(value, cst.Name):
            out.append((value.value, call))
        elif isinstance(built, cst.Call):
            out.append((built, call))
        else:
            return None
    return out


def imported_model_class(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> Optional[str]:
    """The qualified name of the class `name` is an instance of, when every binding builds it
    from one imported class that is not torch's (`from model import Net`; `model = Net(3)`,
    `model = Net(3).to(device)`, `model = nn.DataParallel(model)`): "model.Net". The project
    phase asks the file that defines it whether it is mode-free (`mode_free_classes`)."""
    found = model_classes(steps, name, at)
    if not found or len(found) != 1 or any(len(names) != 1 for names in found):
        return None
    (names,) = found
    (qualname,) = names
    return None if qualname.startswith(("<", "torch.", "builtins.")) else qualname


def model_classes(
    steps: "TrainingSteps", name: str, at: cst.CSTNode, attributes: bool = False
) -> Optional[List[FrozenSet[str]]]:
    """For each different call that builds what `name` holds at `at` (`model_constructors`), the
    qualified names its callee may have: one for `from model import Net`, one per star import
    for a name only star imports can bind (`from utils import *`, `from model import *`:
    "utils.Net", "model.Net"), "<local>.Net" for a class of this file. None when a binding is
    not such a call (unknown). A binding that unpickles a whole module (`model =
    torch.load(args.model_path)` to continue a run) holds an object of a class built elsewhere,
    the one the other bindings build: it adds none of its own (alone, it is unknown)."""
    built = model_constructors(steps, name, at, attributes)
    if not built:
        return None
    found: List[FrozenSet[str]] = []
    for value in built:
        if type(value.func) not in (cst.Name, cst.Attribute):
            return None
        qualified = steps.names.qualified(value.func)
        if not qualified:
            return None
        if qualified == frozenset({"torch.load"}):
            continue
        if qualified not in found:
            found.append(qualified)
    return found or None


def file_model_classes(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> List[cst.ClassDef]:
    """The module-level classes of this file that what `name` holds at `at` may be built from
    (`model_classes` whose qualified name is "<local>.Net")."""
    classes = {
        statement.name.value: statement
        for statement in steps.ctx.module.body
        if type(statement) is cst.ClassDef
    }
    found: List[cst.ClassDef] = []
    for names in model_classes(steps, name, at) or ():
        for qualname in names:
            if qualname.startswith(LOCAL_PREFIX):
                cls = classes.get(qualname[len(LOCAL_PREFIX):])
                if cls is not None and not any(cls is known for known in found):
                    found.append(cls)
    return found


def dynamic_model_class(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> bool:
    """Is what `name` holds at `at` built from a class a lookup chooses while the script runs
    (`Model = getattr(importlib.import_module(f"model.{model_name}"), model_name)`, `Net =
    import_module(path).Net`, `eval(args.arch)`)? Its `forward` cannot be read: it may move
    or convert what it is given itself. One such binding of `name` is enough: the model may be
    that one."""
    for binding in steps.scopes.lookup(name, at) if name and "." not in name else ():
        value = _unwrapped(binding.value) if binding.kind == "assign" else None
        if type(value) is not cst.Call or type(value.func) is not cst.Name:
            continue
        classes = steps.scopes.module_scope.bindings.get(value.func.value)
        values = [bound_value(b) for b in classes or ()]
        if values and all(_looked_up(v) for v in values):
            return True
    return False


def _looked_up(value: Optional[cst.BaseExpression]) -> bool:
    """`getattr(module, name)`, `import_module(path).Net`, `eval(text)`."""
    if type(value) is cst.Attribute:
        value = value.value
        return type(value) is cst.Call and (
            (dotted_name(value.func) or "").split(".")[-1] in ("import_module", "__import__")
        )
    return type(value) is cst.Call and type(value.func) is cst.Name and (
        value.func.value in ("getattr", "eval")
    )


def _unwrapped(value: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """`Net().to(device)` -> `Net()`; `nn.DataParallel(net)` -> `net`."""
    for _ in range(4):
        if type(value) is not cst.Call:
            return value
        func = value.func
        if type(func) is cst.Attribute and func.attr.value in _MOVES:
            value = func.value
            continue
        leaf = func.attr.value if type(func) is cst.Attribute else getattr(func, "value", "")
        if leaf in _WRAPPERS and value.args and not value.args[0].keyword:
            value = value.args[0].value
            continue
        return value
    return value


def mode_free_classes(steps: "TrainingSteps") -> List[str]:
    """The module-level `nn.Module` classes of this file that behave the same in train and eval
    mode (`_mode_free_class`): what files importing them ask in the project phase."""
    return sorted(
        statement.name.value
        for statement in steps.ctx.module.body
        if type(statement) is cst.ClassDef
        and statement.bases
        and _mode_free_class(steps, statement.name.value, statement)
    )


def eval_mode_returners(steps: "TrainingSteps") -> List[str]:
    """The module-level functions of this file that hand back a model in eval mode: a `return
    name` after `name.eval()` (or `name.train(False)`) in the function, with no `name.train()`
    between (`get_model(..., train=False)` loading a checkpoint for evaluation). A file whose
    evaluation uses such a model has set its mode, through that function."""
    if not _sets_a_mode(steps):
        return []  # no mode is set anywhere in the file
    return [
        statement.name.value
        for statement in steps.ctx.module.body
        if type(statement) is cst.FunctionDef
        and (None, None) in eval_mode_returns(steps, statement)
    ]


def eval_mode_returns(
    steps: "TrainingSteps", function: cst.FunctionDef
) -> FrozenSet[Tuple[Optional[int], Optional[int]]]:
    """What `function` hands back in eval mode, as (size of the returned tuple, index in it):
    (None, None) for the whole value (`model.eval(); return model`), (2, 1) for the second of
    a returned pair (`encoder.cuda().eval(); decoder.cuda().eval()` ... `return encoder,
    decoder`). A `name.train()` after the `eval()` and before the return takes it back, and
    every `return` of the same shape must agree: an early `return model.cuda()` before the
    `model.eval()` hands it back in train mode (a `return model, optimizer` for training is
    another shape, which a caller's `model = get_model(...)` does not receive)."""
    last_mode: Dict[str, str] = {}
    by_shape: Dict[Optional[int], Set[Optional[int]]] = {}
    for node in own_nodes(function.body):
        if type(node) is cst.Call:
            event = steps.event(node)
            if event is not None and event.kind in ("eval", "train") and event.receiver:
                last_mode[event.receiver] = event.kind
        elif type(node) is cst.Return:
            value = node.value
            shape: Optional[int] = None
            items: List[Optional[cst.BaseExpression]] = [value]
            if type(value) is cst.Tuple:
                items = [element.value for element in value.elements]
                shape = len(items)
            here: Set[Optional[int]] = {
                None if shape is None else i
                for i, item in enumerate(items)
                if type(item) is cst.Name and last_mode.get(item.value) == "eval"
            }
            by_shape[shape] = here if shape not in by_shape else by_shape[shape] & here
    return frozenset((shape, i) for shape, found in by_shape.items() for i in found)


def returned_in_eval_mode(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> bool:
    """Is every binding of `name` seen at `at` the result of a call to a function of this file
    that hands the model back in eval mode (`encoder, decoder = load_model(args)` with
    `load_model` ending `encoder.eval(); decoder.eval(); return encoder, decoder`)?"""
    return _every_binding(steps, name, at, lambda binding: _from_eval_returner(steps, binding))


def _from_eval_returner(steps: "TrainingSteps", binding) -> bool:
    found = _returning_call(binding)
    if found is None:
        return False
    call, place = found
    callee = steps.loops.callgraph.function_for(call.func)
    return callee is not None and place in eval_mode_returns(steps, callee)


def _every_binding(steps: "TrainingSteps", name: str, at: cst.CSTNode, test) -> bool:
    """Does `test` hold for every binding of the plain name `name` seen at `at` (and is there
    one)?"""
    if not name or "." in name:
        return False
    bindings = steps.scopes.lookup(name, at)
    return bool(bindings) and all(test(binding) for binding in bindings)


def _returning_call(
    binding,
) -> Optional[Tuple[cst.Call, Tuple[Optional[int], Optional[int]]]]:
    """`name = f(...)` -> (the call, (None, None)); `a, name = f(...)` -> (the call, (2, 1))."""
    if binding.kind == "assign" and type(binding.value) is cst.Call:
        return binding.value, (None, None)
    statement = binding.statement
    if binding.kind != "unpack" or type(statement) is not cst.Assign:
        return None
    if len(statement.targets) != 1 or type(statement.value) is not cst.Call:
        return None
    target = statement.targets[0].target
    if type(target) not in (cst.Tuple, cst.List):
        return None
    elements = target.elements  # type: ignore[attr-defined]
    for i, element in enumerate(elements):
        if type(element) is cst.StarredElement:
            return None
        if element.value is binding.node:
            return statement.value, (len(elements), i)
    return None


def _sets_a_mode(steps: "TrainingSteps") -> bool:
    return any(
        type(call.func) is cst.Attribute and call.func.attr.value in ("eval", "train")
        for call in steps.ctx.nodes(cst.Call)
    )


def plain_function(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> bool:
    """Is `name` a `def`, a lambda (`net = lambda X: linreg(X, w, b)`) or a `functools.partial`
    (`model_inferer = partial(sliding_window_inference, predictor=model)`)? It has no
    train/eval modes at all: whatever module it runs is set up by name elsewhere."""
    return _every_binding(steps, name, at, lambda binding: _binds_a_function(steps, binding))


def _binds_a_function(steps: "TrainingSteps", binding) -> bool:
    if binding.kind == "def" and type(binding.node) is cst.FunctionDef:
        return True
    if binding.kind == "assign" and type(binding.value) is cst.Lambda:
        return True
    if (
        binding.kind == "assign"
        and type(binding.value) is cst.Call
        and steps.names.is_(binding.value.func, "functools.partial")
    ):
        return True
    # `net, loss = lambda X: linreg(X, w, b), squared_loss`
    return binding.kind == "unpack" and _unpacked_lambda(binding.statement, binding.name)


def _unpacked_lambda(statement, name: str) -> bool:
    if type(statement) is not cst.Assign or type(statement.value) is not cst.Tuple:
        return False
    values = statement.value.elements
    for target in statement.targets:
        if type(target.target) is not cst.Tuple:
            continue
        names = target.target.elements
        if len(names) != len(values):
            continue
        for element, value in zip(names, values):
            if type(element.value) is cst.Name and element.value.value == name:
                return type(value.value) is cst.Lambda
    return False


def _mode_free_class(
    steps: "TrainingSteps", class_name: str, at: cst.CSTNode, seen: FrozenSet[str] = frozenset()
) -> bool:
    """A same-file `nn.Module` class (or a plain class with no base: it has no modes of its
    own) whose every call is a torch call, a call of its own submodules or methods, builds
    another such class of the file or calls a mode-free helper of the file
    (`_ModeFreeScan`), whose layers are all mode-free (`mode_dependent_layer`), that reads no
    `self.training`, overrides no `train`/`eval` and calls no dropout or normalisation
    function. A submodule attribute named like a mode-dependent layer (`self.lstm`,
    `self.attention`) is fine when every assignment to it builds a mode-free layer
    (`nn.LSTM(28, 128, 2)`) or a mode-free class of the file (an attention built of `nn.Linear`
    layers), and so is a method of the class named so (`self.forward_with_attention(x)`: its
    body is part of what is read here) and an attribute that only holds a plain value the
    class never calls (`self.attention_size = size`). A submodule handed in from outside
    (`self.features = features`) and called is unknown."""
    if class_name in seen or len(seen) >= _MAX_NESTED_CLASSES:
        return False  # a class that builds itself, or nesting too deep to follow: unknown
    seen = seen | {class_name}
    classes = [b for b in steps.scopes.lookup(class_name, at) if b.kind == "class"]
    if len(classes) != 1 or type(classes[0].node) is not cst.ClassDef:
        return False
    node: cst.ClassDef = classes[0].node
    # A ScriptModule (`torch.jit.ScriptModule` with `@torch.jit.script_method`s) is an
    # nn.Module with the same train/eval switch.
    plain = all(
        type(base.value) is cst.Name and base.value.value == "object" for base in node.bases
    )
    if not plain and not any(
        steps.names.is_(base.value, "torch.nn.Module", "torch.jit.ScriptModule")
        for base in node.bases
    ):
        return False
    own = _OwnAttributes(
        free_layers=_mode_free_attributes(steps, node, seen),
        plain_values=_plain_value_attributes(steps, node),
        methods={
            statement.name.value
            for statement in getattr(node.body, "body", ())
            if type(statement) is cst.FunctionDef
        },
        assigned=_self_assignments(steps, node),
    )
    scan = _ModeFreeScan(steps, seen, own)
    node.visit(scan)
    return scan.found_ok


@dataclass(frozen=True)
class _OwnAttributes:
    """What a class's `self.<attr>` names hold, for reading its code."""

    free_layers: Dict[str, bool]  # every assignment builds a mode-free layer or class
    plain_values: Set[str]  # sizes and flags, never called
    methods: Set[str]
    assigned: Dict[str, List[cst.BaseExpression]]

    def may_call(self, attr: str) -> bool:
        """May `self.<attr>(...)` run only code the scan reads? Not when an assignment hands
        the attribute something built elsewhere (`self.features = features`): what that is,
        and whether it has modes, is decided outside the class."""
        return attr in self.methods or all(
            _built_in_place(value) for value in self.assigned.get(attr, ())
        )


def _built_in_place(value: cst.BaseExpression) -> bool:
    """`nn.Linear(4, 2)`, `Block() if deep else nn.Identity()`, `None` (`self.downsample =
    None`, called only behind a test): every call in it is read where it is written."""
    if type(value) is cst.IfExp:
        return _built_in_place(value.body) and _built_in_place(value.orelse)
    return type(value) is cst.Call or (type(value) is cst.Name and value.value == "None")


class _ModeFreeScan(cst.CSTVisitor):
    """Reads a class (`own` says what its attributes hold) or a helper of the file that such a
    class calls (`own` is None) for anything that could make train and eval mode differ;
    `found_ok` turns False at the first such thing, or at a call whose code it cannot read.
    `callable_params` are a helper's parameters that its caller fills with mode-free layers
    (`mem_update(self.conv1, x, mem, spike)` calling `ops(x)`)."""

    def __init__(
        self,
        steps: "TrainingSteps",
        seen: FrozenSet[str],
        own: Optional[_OwnAttributes],
        callable_params: FrozenSet[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.steps = steps
        self.seen = seen
        self.own = own
        self.callable_params = callable_params
        self.found_ok = True

    def visit_FunctionDef(self, function: cst.FunctionDef) -> None:
        if _MODE_SWITCH.search(function.name.value):
            self.found_ok = False  # def train(self, mode=True): ... overrides the mode switch

    def visit_Param(self, param: cst.Param) -> bool:
        return False  # parameter names are the author's words, not layers

    def visit_Arg(self, arg: cst.Arg) -> bool:
        arg.value.visit(self)  # `dropout=` as a keyword is judged by the call it is in
        return False

    def visit_Attribute(self, attribute: cst.Attribute) -> bool:
        attr = attribute.attr.value
        if _MODE_DEPENDENT.search(attr) and not self._known_attribute(attribute):
            self.found_ok = False  # self.training, F.dropout, self.bn (not a free layer)
        attribute.value.visit(self)
        return False

    def _known_attribute(self, attribute: cst.Attribute) -> bool:
        attr = attribute.attr.value
        if attr == "apply" and type(attribute.value) is cst.Name:
            # `ActFun.apply(x)`: a custom autograd function of the file
            return _mode_free_function_class(self.steps, attribute.value, self.seen)
        own = self.own
        return (
            own is not None
            and type(attribute.value) is cst.Name
            and attribute.value.value == "self"
            and (attr in own.free_layers or attr in own.methods or attr in own.plain_values)
        )

    def visit_Name(self, name: cst.Name) -> None:
        if not _MODE_DEPENDENT.search(name.value):
            return
        bindings = self.steps.scopes.lookup(name.value, name)
        if not bindings or any(b.kind in ("import", "global") for b in bindings):
            self.found_ok = False  # from torch.nn.functional import dropout
        # a local variable (`lstm_out, _ = self.lstm(x)`) is only a name

    def visit_Call(self, call: cst.Call) -> Optional[bool]:
        steps = self.steps
        layer = mode_dependent_layer(steps, call)
        if layer is not None:
            if layer:
                self.found_ok = False
                return False
            if _constructs_layer(steps, call):
                return False  # a torch layer's arguments are sizes and flags
            for arg in call.args:
                arg.visit(self)  # F.relu(self.drop(x)): what it is given is still read
            return False
        # Submodules must be torch layers: a user class may hide a Dropout.
        func = call.func
        qualified = steps.names.qualified(func)
        if (
            type(func) is cst.Name
            and func.value in _PLAIN_BUILTINS
            and not steps.scopes.lookup(func.value, call)
        ):
            # `isinstance(m, nn.BatchNorm2d)` in a weight-init method names a class, builds
            # no layer; what other builtins are given is still read
            return False if func.value in ("isinstance", "issubclass") else None
        if (
            self.own is not None
            and type(func) is cst.Attribute
            and is_self_attr(func, func.attr.value)
            and not self.own.may_call(func.attr.value)
        ):
            self.found_ok = False  # `self.features(x)` with `self.features = features`
            return None
        torch_layer = any(q.startswith("torch.") for q in qualified)
        local = all(q.startswith(LOCAL_PREFIX) for q in qualified)  # self.conv1(x), x.view()
        if type(func) is not cst.Name and local:
            return None
        if type(func) is cst.Name:
            if _mode_free_class(steps, func.value, call, self.seen):
                return False  # a mode-free class of the file; its arguments are sizes
            if _bound_to_free_layer(steps, func):
                return None  # `sigmoid = nn.Sigmoid()` in forward, then `sigmoid(x)`
            if self._given_free_layer(func) or self._free_helper(func, call):
                return None  # what it is given is still read
        if not torch_layer:
            self.found_ok = False
        return None

    def _given_free_layer(self, func: cst.Name) -> bool:
        """`ops(x)` in a helper whose caller passed a mode-free layer for `ops`."""
        if func.value not in self.callable_params:
            return False
        bindings = self.steps.scopes.lookup(func.value, func)
        return bool(bindings) and all(b.kind == "param" for b in bindings)

    def _free_helper(self, func: cst.Name, call: cst.Call) -> bool:
        """A module-level function of the file whose code is mode-free given what this call
        passes it, or a name bound to a custom autograd function's `apply` (`act_fun =
        ActFun.apply`)."""
        bindings = self.steps.scopes.lookup(func.value, call)
        if len(bindings) != 1:
            return False
        (binding,) = bindings
        if binding.scope is None or binding.scope.kind != "module":
            return False
        if binding.kind == "def" and type(binding.node) is cst.FunctionDef:
            return _mode_free_helper(self.steps, binding.node, call, self.seen, self.own)
        value = binding.value if binding.kind == "assign" else None
        return (
            type(value) is cst.Attribute
            and value.attr.value == "apply"
            and type(value.value) is cst.Name
            and _mode_free_function_class(self.steps, value.value, self.seen)
        )


def _mode_free_helper(
    steps: "TrainingSteps",
    function: cst.FunctionDef,
    call: cst.Call,
    seen: FrozenSet[str],
    own: Optional[_OwnAttributes],
) -> bool:
    """Is a module-level function of the file, called as `call`, free of anything that
    depends on the mode (`mem_update(self.conv1, x, mem, spike)`: `mem = mem * decay + ops(x)`,
    `spike = act_fun(mem)`)? Its parameters may be called when this call fills them with a
    mode-free layer of the class (`self.conv1`) or a torch function (`F.relu`)."""
    key = "def " + function.name.value
    if key in seen or len(seen) >= _MAX_NESTED_CLASSES or function.decorators:
        return False  # recursion, nesting too deep, or a decorator that may wrap it: unknown
    callable_params: Set[str] = set()
    if not has_star_args(call):
        params = function.params
        positional_names = [p.name.value for p in (*params.posonly_params, *params.params)]
        named = {p.name.value for p in (*params.params, *params.kwonly_params)}
        for index, arg in enumerate(call.args):
            if arg.keyword is None:
                param = positional_names[index] if index < len(positional_names) else None
            else:
                param = arg.keyword.value if arg.keyword.value in named else None
            if param is not None and _free_layer_value(steps, arg.value, own):
                callable_params.add(param)
    scan = _ModeFreeScan(steps, seen | {key}, None, frozenset(callable_params))
    function.visit(scan)
    return scan.found_ok


def _free_layer_value(
    steps: "TrainingSteps", value: cst.BaseExpression, own: Optional[_OwnAttributes]
) -> bool:
    """`self.conv1` (a mode-free layer of the class) or a torch function (`F.relu`)."""
    if type(value) is cst.Attribute and is_self_attr(value, value.attr.value):
        return own is not None and value.attr.value in own.free_layers
    qualified = steps.names.qualified(value)
    return (
        type(value) in (cst.Name, cst.Attribute)
        and bool(qualified)
        and all(q.startswith("torch.") for q in qualified)
        and not any(_MODE_DEPENDENT.search(q.split(".")[-1]) for q in qualified)
    )


def _mode_free_function_class(steps: "TrainingSteps", name: cst.Name, seen: FrozenSet[str]) -> bool:
    """Is `name` a custom autograd function of the file (a `torch.autograd.Function` subclass)
    whose `forward` and `backward` read nothing mode-dependent? It has no modes: the same
    spike or straight-through estimate runs in both."""
    key = "function " + name.value
    if key in seen or len(seen) >= _MAX_NESTED_CLASSES:
        return False
    bindings = steps.scopes.lookup(name.value, name)
    if len(bindings) != 1 or bindings[0].kind != "class":
        return False
    node = bindings[0].node
    if type(node) is not cst.ClassDef or not any(
        steps.names.is_(base.value, "torch.autograd.Function") for base in node.bases
    ):
        return False
    scan = _ModeFreeScan(steps, seen | {key}, None)
    node.visit(scan)
    return scan.found_ok


def _bound_to_free_layer(steps: "TrainingSteps", name: cst.Name) -> bool:
    """Is every binding of `name` where it is called a mode-free torch layer built on the
    spot (`sigmoid = torch.nn.Sigmoid()` inside `forward`)?"""
    bindings = steps.scopes.lookup(name.value, name)
    return bool(bindings) and all(
        b.kind == "assign"
        and type(b.value) is cst.Call
        and mode_dependent_layer(steps, b.value) is False
        for b in bindings
    )


def _constructs_layer(steps: "TrainingSteps", call: cst.Call) -> bool:
    return any(
        q.startswith("torch.nn.") and q.split(".")[-1][:1].isupper()
        for q in steps.names.qualified(call.func)
    )


def _self_assignments(
    steps: "TrainingSteps", node: cst.ClassDef
) -> Dict[str, List[cst.BaseExpression]]:
    """`self.<attr>` names of the class, each with the values the class assigns to it."""
    assigned: Dict[str, List[cst.BaseExpression]] = {}
    for child in steps.ctx.tree.descendants(node):
        if type(child) is cst.Assign:
            for target in child.targets:
                t = target.target
                if type(t) is cst.Attribute and is_self_attr(t, t.attr.value):
                    assigned.setdefault(t.attr.value, []).append(child.value)
    return assigned


def _plain_value_attributes(steps: "TrainingSteps", node: cst.ClassDef) -> Set[str]:
    """`self.<attr>` names of the class assigned only values that build nothing (a size, a
    flag, a parameter: `self.attention_size = attention_size`) and never called as
    `self.<attr>(...)`: settings, not layers."""
    called = {
        child.func.attr.value
        for child in steps.ctx.tree.descendants(node)
        if type(child) is cst.Call
        and type(child.func) is cst.Attribute
        and is_self_attr(child.func, child.func.attr.value)
    }
    return {
        attr
        for attr, values in _self_assignments(steps, node).items()
        if attr not in called
        and not any(type(n) is cst.Call for v in values for n in [v, *descendants(v)])
    }


def _mode_free_attributes(
    steps: "TrainingSteps", node: cst.ClassDef, seen: FrozenSet[str]
) -> Dict[str, bool]:
    """`self.<attr>` names of the class whose every assignment builds a mode-free torch layer
    or an instance of a mode-free class of the file."""

    def mode_free(value: cst.BaseExpression) -> bool:
        if type(value) is not cst.Call:
            return False
        layer = mode_dependent_layer(steps, value)
        if layer is not None:
            return not layer
        func = value.func
        return type(func) is cst.Name and _mode_free_class(steps, func.value, value, seen)

    return {
        attr: True
        for attr, values in _self_assignments(steps, node).items()
        if all(mode_free(v) for v in values)
    }
