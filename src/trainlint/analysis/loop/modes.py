"""Models whose train/eval mode changes nothing: a same-file `nn.Module` with no dropout, no
normalisation with running statistics, no recurrent or attention layers and no `self.training`
read, whose submodules are all `torch.nn` layers (the CIFAR-10 tutorial's `Net`). A missing
`model.eval()` around such a model changes no result (TRL405 stays quiet about the mode).
"""

from __future__ import annotations

import re

import libcst as cst

from .steps import TrainingSteps


_MODE_DEPENDENT = re.compile(
    r"dropout|batchnorm|batch_norm|instancenorm|instance_norm|^training$|rnn|lstm|gru|"
    r"transformer|attention|^train$|^eval$|^apply$",
    re.IGNORECASE,
)


def mode_free_model(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> bool:
    """Is `name` an instance of a same-file `nn.Module` class that behaves the same in train and
    eval mode (no dropout, normalisation with running statistics, recurrent or attention layers,
    no `self.training` read, and only `torch.nn` layers as submodules)? Then a missing
    `model.eval()` changes nothing (the CIFAR-10 tutorial's `Net`)."""
    if not name or "." in name:
        return False
    bindings = steps.scopes.lookup(name, at)
    if not bindings:
        return False
    for binding in bindings:
        value = binding.value
        if binding.kind != "assign" or value is None:
            return False
        for _ in range(4):  # Net().to(device), Net().cuda()
            if (
                type(value) is cst.Call
                and type(value.func) is cst.Attribute
                and value.func.attr.value in ("to", "cuda", "cpu", "float", "double", "half")
            ):
                value = value.func.value
                continue
            break
        if type(value) is cst.Call and steps.names.is_(value.func, "torch.nn.Sequential"):
            if not _mode_free_layers(steps, value):
                return False
            continue
        if not (type(value) is cst.Call and type(value.func) is cst.Name):
            return False
        if not _mode_free_class(steps, value.func.value, value):
            return False
    return True


def plain_function(steps: "TrainingSteps", name: str, at: cst.CSTNode) -> bool:
    """Is `name` a `def` or a lambda (`net = lambda X: linreg(X, w, b)`)? It has no train/eval
    modes at all."""
    if not name or "." in name:
        return False
    bindings = steps.scopes.lookup(name, at)
    if not bindings:
        return False
    for binding in bindings:
        if binding.kind == "def" and type(binding.node) is cst.FunctionDef:
            continue
        if binding.kind == "assign" and type(binding.value) is cst.Lambda:
            continue
        if binding.kind == "unpack" and _unpacked_lambda(binding.statement, name):
            continue  # `net, loss = lambda X: linreg(X, w, b), squared_loss`
        return False
    return True


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


def _mode_free_layers(steps: "TrainingSteps", sequential: cst.Call) -> bool:
    """`nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))`: only torch layers, none of
    them mode-dependent."""
    for arg in sequential.args:
        layer = arg.value
        if arg.star or type(layer) is not cst.Call:
            return False
        qualified = steps.names.qualified(layer.func)
        if not any(q.startswith("torch.nn.") for q in qualified):
            return False
        if any(_MODE_DEPENDENT.search(q.split(".")[-1]) for q in qualified):
            return False
    return bool(sequential.args)


def _mode_free_class(steps: "TrainingSteps", class_name: str, at: cst.CSTNode) -> bool:
    classes = [b for b in steps.scopes.lookup(class_name, at) if b.kind == "class"]
    if len(classes) != 1 or type(classes[0].node) is not cst.ClassDef:
        return False
    node: cst.ClassDef = classes[0].node
    if not any(steps.names.is_(base.value, "torch.nn.Module") for base in node.bases):
        return False
    found_ok = True

    class Scan(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            nonlocal found_ok
            if _MODE_DEPENDENT.search(n.value):
                found_ok = False

        def visit_Call(self, call: cst.Call) -> None:
            nonlocal found_ok
            # Submodules must be torch layers: a user class may hide a Dropout.
            func = call.func
            qualified = steps.names.qualified(func)
            if type(func) is cst.Name and func.value in ("super", "range", "len", "int"):
                return
            torch_layer = any(q.startswith("torch.") for q in qualified)
            local = all(q.startswith("<local>.") for q in qualified)  # self.conv1(x), x.view()
            if type(func) is not cst.Name and local:
                return
            if not torch_layer:
                found_ok = False

    node.visit(Scan())
    return found_ok
