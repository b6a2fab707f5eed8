"""Arguments a module's `forward` uses only on the host, where a CPU tensor is what it needs.

A speech model's `forward(self, x, lengths)` that hands `lengths` to `pack_padded_sequence`
wants them on the CPU (PyTorch requires it: "'lengths' argument should be a 1D CPU int64
tensor"), and one that only turns an argument into Python values (`lengths.tolist()`,
`int(n)`, `len(ids)`, `mask.cpu()`) never lets it meet the device. A loop that leaves such an
item on the CPU and hands it to the model is right, not a forgotten `.to(device)`.

`host_params(forward)` gives the positional parameters (self at 0) every use of which is such
a use, also through a submodule of a class of the same file (`self.encoder(x, lengths)` with
`self.encoder = Encoder(...)` whose `forward` packs them), and through a name bound to them
(`clamped = lens.clamp(max=t)`, then packed). A parameter rebound in the body, or used any
other way (arithmetic, a call nobody reads), is not one. A parameter the body never names
meets nothing either (`forward(self, x, lengths=None)` that ignores the lengths).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Tuple

import libcst as cst

from ..base.callgraph import CallGraph
from ..base.names import Names
from ..base.nodes import (
    call_param_index,
    positional_params,
    subtree,
)
from .. import Analysis

PACKERS = ("torch.nn.utils.rnn.pack_padded_sequence",)
_HOST_METHODS = {"cpu", "tolist", "numpy", "item"}
# Tensor methods whose result stays on the tensor's device: followed to what uses the result.
_KEEPING_METHODS = {
    "clamp", "clamp_min", "clamp_max", "long", "int", "float", "view", "reshape", "squeeze",
    "unsqueeze", "flatten", "detach", "clone", "contiguous",
}  # fmt: skip
_HOST_BUILTINS = {"len", "int", "float", "max", "min", "list", "sorted", "range", "sum"}
_INTROSPECTION = ("locals", "vars", "eval", "exec")
_MAX_DEPTH = 3  # submodules followed, one class inside the next


class HostSide(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self._summaries: Dict[int, FrozenSet[int]] = {}
        # id(function) -> (function, the names its body binds): one walk per function, not
        # one per parameter asked about.
        self._stores: Dict[int, Tuple[cst.FunctionDef, List[cst.Name]]] = {}

    def host_params(self, forward: cst.FunctionDef, _depth: int = 0) -> FrozenSet[int]:
        """Indices of the positional parameters `forward` uses only on the host."""
        known = self._summaries.get(id(forward))
        if known is not None:
            return known
        self._summaries[id(forward)] = frozenset()  # a cycle of submodules proves nothing
        params = [p.name.value for p in positional_params(forward)]
        found = set()
        for index, name in enumerate(params):
            if not index:
                continue
            if self._never_read(forward, name) or self._host_only(forward, name, _depth):
                found.add(index)
        result = frozenset(found)
        self._summaries[id(forward)] = result
        return result

    def _never_read(self, function: cst.FunctionDef, name: str) -> bool:
        """Does the body never name the parameter (`forward(self, x, lengths=None)` that ignores
        the lengths)? What it is given then meets nothing. Not when the body may reach its
        arguments another way: `locals()`, `vars()`, `eval`, `exec`."""
        for node in subtree(function.body):
            if type(node) is cst.Name and node.value in (name, *_INTROSPECTION):
                return False
        return True

    def takes_on_host(self, forward: cst.FunctionDef, call: cst.Call, arg_index: int) -> bool:
        """Does a module's `forward` use only on the host what argument `arg_index` of a call
        of the module (`model(x, lengths)`: `forward(self, x, lengths)`) hands it?"""
        return call_param_index(forward, call, arg_index, 1) in self.host_params(forward)

    def _host_only(
        self, function: cst.FunctionDef, name: str, depth: int, start: int = 0
    ) -> bool:
        """Is every read of the value a host use: the parameter's, or the local's bound by the
        top-level statement before `start`? A rebinding at the top level of the body
        (`outputs, lens = pad_packed_sequence(...)`) ends the value: later reads are of another;
        a rebinding anywhere else leaves it unknown."""
        stores = {id(node) for node in self._stored_names(function) if node.value == name}
        reads: List[cst.Name] = []
        for statement in function.body.body[start:]:
            nodes = [n for n in subtree(statement) if type(n) is cst.Name and n.value == name]
            stored_here = [n for n in nodes if id(n) in stores]
            reads.extend(n for n in nodes if id(n) not in stores)
            if stored_here:
                if not self._plain_rebinding(statement, stored_here):
                    return False
                break  # what follows reads another value
        return bool(reads) and all(self._host_use(use, function, depth) for use in reads)

    def _stored_names(self, function: cst.FunctionDef) -> List[cst.Name]:
        known = self._stores.get(id(function))
        if known is not None and known[0] is function:
            return known[1]
        found: List[cst.Name] = []
        for node in subtree(function.body):
            targets: List[cst.CSTNode] = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)):
                targets = [node.target]
            elif isinstance(node, cst.AsName):
                targets = [node.name]
            elif isinstance(node, cst.NamedExpr):
                targets = [node.target]
            for target in targets:
                found.extend(_target_names(target))
        self._stores[id(function)] = (function, found)
        return found

    @staticmethod
    def _plain_rebinding(statement: cst.CSTNode, stored: List[cst.Name]) -> bool:
        """A statement of the body's top level that binds the name with `=` (not `+=`)."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        return all(isinstance(small, cst.Assign) for small in statement.body)

    def _host_use(self, use: cst.Name, function: cst.FunctionDef, depth: int) -> bool:
        value: cst.CSTNode = use
        parent = self.ctx.parent(value)
        # Through methods that keep the tensor where it is (`lens.clamp(max=t).long()`), to one
        # that brings it to the host (`.cpu()`, `.tolist()`), or to the use of the result.
        while isinstance(parent, cst.Attribute) and parent.value is value:
            call = self.ctx.parent(parent)
            if not (isinstance(call, cst.Call) and call.func is parent):
                return False
            if parent.attr.value in _HOST_METHODS:
                return True
            if parent.attr.value not in _KEEPING_METHODS:
                return False
            value, parent = call, self.ctx.parent(call)
        if (
            isinstance(parent, cst.Assign)
            and parent.value is value
            and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Name)
            and parent.targets[0].target.value != use.value
            and depth < _MAX_DEPTH
        ):
            # `clamped = lens.clamp(max=t)`: a name for the same values, read on the host too
            line = self.ctx.parent(parent)
            start = next((i for i, s in enumerate(function.body.body) if s is line), -1) + 1
            if not start:
                return False  # bound inside a branch or loop: which reads see it is unknown
            return self._host_only(function, parent.targets[0].target.value, depth + 1, start)
        if not isinstance(parent, cst.Arg) or parent.value is not value:
            return False  # rebound, compared, computed with: not only on the host
        call = self.ctx.parent(parent)
        if not isinstance(call, cst.Call):
            return False
        index = next((i for i, a in enumerate(call.args) if a is parent), -1)
        func = call.func
        if isinstance(func, cst.Name) and func.value in _HOST_BUILTINS:
            return not self.ctx.scopes.lookup(func.value, func)
        if self.names.is_(func, *PACKERS):
            keyword = parent.keyword.value if parent.keyword is not None else None
            return keyword == "lengths" or (keyword is None and index == 1)
        return self._handed_to_a_host_submodule(call, parent, function, depth)

    def _handed_to_a_host_submodule(
        self, call: cst.Call, arg: cst.Arg, function: cst.FunctionDef, depth: int
    ) -> bool:
        """`self.encoder(x, lengths)` where `self.encoder` is a module of a class of this file
        whose `forward` uses that argument only on the host."""
        func = call.func
        if depth >= _MAX_DEPTH or arg.keyword is not None:
            return False
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            return False
        forward = self.ctx.analysis(CallGraph).submodule_forward(func)
        if forward is None:
            return False
        index = call.args.index(arg) + 1  # `self` of the submodule's forward
        return index in self.host_params(forward, depth + 1)


def _target_names(target: cst.CSTNode) -> List[cst.Name]:
    """The names an assignment target binds (`a`, `a, (b, c)`, `*rest`), not those it only
    reads (`self.x`, `d[k]`)."""
    if isinstance(target, cst.Name):
        return [target]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []
