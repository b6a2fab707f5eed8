"""What puts a value, or a module, on the device (TRL101).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import libcst as cst

from ...walk import children
from ..base.callgraph import CallGraph
from ..base.memo import Summaries
from ..base.identity import KEEPS_PLACEMENT, RETURNS_RECEIVER, returned_module
from ..base.calls import argument, is_true, keyword
from ..base.conditions import switched_off
from ..base.names import Names, dotted_name, may_be_project
from ..base.nodes import (
    call_param_index,
    is_name,
    is_self_attr,
    names_in,
    positional_params,
    subtree,
    target_names,
)
from ..base.scopes import Scopes
from ..base.vocabulary import DTYPE_WORDS
from .expressions import Devices
from .. import Analysis


# == Moves (TRL101): what puts a value, or a module, on the device ===============================
#
# Kept apart from `Devices` (what a device expression *is*): this part answers where a value ends
# up. `move(call)` recognises one move (`.to(dev)`, `.cuda()`, `.type_as(t)`,
# `torch.as_tensor(x, device=dev)`); `is_moved(expr)` says whether an expression's value is on the
# device (a move, a chain over one, a comprehension or `map` that moves every item, a helper that
# moves its argument); `moved_params(function)` is a function summary (which parameters a function
# of this file moves); `placement(expr)` says where a module lives (moved, wrapped in DDP/DP, left
# where it was built, unknown), following parameters to the same-file call sites that pass them.

# Helpers that move a (nested) batch to a device, under the names libraries and users give them.
WELL_KNOWN_MOVERS = frozenset(
    {
        "send_to_device",  # accelerate.utils
        "move_to_device",
        "to_device",
        "batch_to_device",
        "recursive_to",
        "move_to",
        "move_data_to_device",  # lightning.fabric.utilities
        "transfer_batch_to_device",
        "to_cuda",
        "to_gpu",
    }
)
_CPU_METHODS = frozenset({"cpu", "numpy", "item", "tolist"})
# Method calls `move()` may take for a move.
_MOVE_METHODS = frozenset({"to", "cuda", "type_as"})
# Module methods that return the module itself and do not move it (`model.train()`,
# `model.half()`); the moves (`to`, `cuda`, `cpu`, `xpu`) are read as moves above.
_MODULE_RETURNS_SELF = RETURNS_RECEIVER - {"to", "cuda", "cpu", "xpu"}
_DDP = "torch.nn.parallel.DistributedDataParallel"
_DP = "torch.nn.DataParallel"
_FSDP = (
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
)

# Placements of a module (`placement()`):
MOVED = "moved"  # on the device; its inputs must be there too
WRAPPED = "wrapped"  # DataParallel / DDP(device_ids=...) / FSDP: on the device, moves its inputs
UNPLACED = "unplaced"  # built and never moved (CPU unless something we cannot see moves it)
UNKNOWN_PLACEMENT = "unknown"


@dataclass(frozen=True)
class Move:
    """One move: `receiver.to(device, non_blocking=...)`, `receiver.cuda(...)`, `.type_as(t)`."""

    call: cst.Call
    receiver: Optional[cst.BaseExpression]  # None for torch.as_tensor(x, device=...)
    method: str  # "to", "cuda", "type_as", "tensor"
    device: Optional[cst.BaseExpression]  # the device argument (None: `.cuda()`, `.type_as`)
    non_blocking: bool


class Moves(Analysis):
    """Where values and modules end up (see the section comment above)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.devices: Devices = ctx.analysis(Devices)
        extra = ctx.settings.options.get("device-movers") or []
        self.configured_movers: FrozenSet[str] = frozenset(str(name) for name in extra)
        self.mover_names: FrozenSet[str] = WELL_KNOWN_MOVERS | self.configured_movers
        # A function calling itself (or its caller) is summarised as moving nothing there: the
        # base case decides.
        self._summaries: Summaries[cst.FunctionDef, FrozenSet[int]] = Summaries(
            self._summarise, frozenset()
        )
        self._placements: Dict[Tuple[cst.CSTNode, int], FrozenSet[str]] = {}
        self.callgraph: CallGraph = ctx.analysis(CallGraph)
        # id(call) -> (call, its move or None): every analysis asks for the moves of the same
        # calls (the dataflow, the summaries, the placements). The entry keeps the call alive,
        # so its id is not reused while it is remembered.
        self._moves: Dict[int, Tuple[cst.Call, Optional[Move]]] = {}
        self._move_calls: Optional[bool] = None
        self._may_move: Optional[bool] = None
        self._device_function: Optional[Tuple[Optional[str]]] = None  # (answer,) once known

    # -- whole file ---------------------------------------------------------------------------

    def device_function(self) -> Optional[str]:
        """The qualified name of the function of another project file every move of this file
        takes its device from (`.to(get_device())` with `get_device` imported from
        `infras/utils.py`, and no `.cuda()`), when there is exactly one: what it returns
        decides whether anything of the file leaves the CPU. None otherwise."""
        if self._device_function is None:
            found: Set[str] = set()
            for move in self.moves_in(self.ctx.module):
                device = move.device
                qualified = self.names.qualified(device.func) if type(device) is cst.Call else ()
                if not qualified or not all(
                    may_be_project(q) and not q.startswith("<") for q in qualified
                ):
                    found = set()
                    break
                found.add(sorted(qualified)[0])
            self._device_function = (found.pop() if len(found) == 1 else None,)
        return self._device_function[0]

    def has_move_calls(self) -> bool:
        """Can any call of this file be a move? (a `.to`/`.cuda`/`.type_as` method call, or a
        call with a `device=` keyword: what `move()` needs.) False: `move()` is None for every
        node, and `moves_in()` empty."""
        found = self._move_calls
        if found is None:
            found = False
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in _MOVE_METHODS:
                    found = True
                    break
                if type(func) is cst.Attribute and func.attr.value == "type" and call.args:
                    found = True  # perhaps .type(torch.cuda.FloatTensor)
                    break
                if any(a.keyword is not None and a.keyword.value == "device" for a in call.args):
                    found = True
                    break
            self._move_calls = found
        return found

    def may_move(self) -> bool:
        """Can anything in this file put a value on the device? Every `is_moved` bottoms out in
        a move, or in a mover's name (well-known or configured: its last part is in the text),
        directly or through the summary of a function of this file. False: `is_moved()` is
        False for every expression and every function's `moved_params()` is empty."""
        found = self._may_move
        if found is None:
            text = self.ctx.source.text
            found = self._may_move = (
                self.has_move_calls()
                or any(name.rsplit(".", 1)[-1] in text for name in self.mover_names)
                or "torch.cuda." in text  # torch.cuda.FloatTensor(n) creates on the GPU
            )
        return found

    # -- one move -----------------------------------------------------------------------------

    def move(self, node: cst.CSTNode) -> Optional[Move]:
        """The move `node` performs, if it is one (moves to the CPU are not moves, nor are
        moves in code no run executes: `if use_gpu: model = model.cuda()` after `use_gpu =
        False`)."""
        if type(node) is not cst.Call:
            return None
        entry = self._moves.get(id(node))
        if entry is None:
            move = None if switched_off(self.ctx, node) else self._move(node)
            entry = self._moves[id(node)] = (node, move)
        return entry[1]

    def _move(self, node: cst.Call) -> Optional[Move]:
        func = node.func
        non_blocking = is_true(keyword(node, "non_blocking"))
        if type(func) is cst.Attribute:
            attr = func.attr.value
            if attr == "cuda":
                device = argument(node, 0, "device")
                return Move(node, func.value, "cuda", device, non_blocking)
            if attr == "type_as" and node.args:
                return Move(node, func.value, "type_as", None, non_blocking)
            if attr == "type" and node.args:
                # x.type(torch.cuda.FloatTensor): the legacy move to the current GPU
                if self.devices.is_cuda_tensor_type(argument(node, 0, "dtype")):
                    return Move(node, func.value, "type", None, non_blocking)
                return None
            if attr == "to":
                device = self._to_device_arg(node)
                if device is None:
                    return None
                return Move(node, func.value, "to", device, non_blocking)
        if self.names.is_(func, "torch.as_tensor", "torch.tensor", "torch.from_numpy"):
            device = keyword(node, "device")
            if device is None or self._is_cpu(device):
                return None
            receiver = node.args[0].value if node.args else None
            return Move(node, receiver, "tensor", device, non_blocking)
        return None

    def to_cpu(self, node: cst.CSTNode) -> bool:
        """Does `node` bring its receiver to the CPU: `x.cpu()`, `x.to("cpu")`,
        `x.to(device="cpu")`, `x.to(torch.device("cpu"))` (`generator(L).detach().to("cpu")`
        is a host tensor, whatever the generator ran on)?"""
        if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
            return False
        attr = node.func.attr.value
        if attr == "cpu":
            return True
        if attr != "to":
            return False
        device = _to_argument(node)
        return device is not None and self._is_cpu(device)

    def _to_device_arg(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        """The device a `.to(...)` call moves to: None for the CPU, a dtype, or no argument
        (`.to(dtype=...)`, `.to(memory_format=...)`)."""
        device = _to_argument(call)
        if device is None or self._is_dtype(device) or self._is_cpu(device):
            return None
        return device

    def _is_dtype(self, expr: cst.BaseExpression) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        leaf = dotted.split(".")[-1]
        return leaf in DTYPE_WORDS or leaf.endswith("dtype") or leaf.endswith("_type")

    def _is_cpu(self, expr: cst.BaseExpression, _depth: int = 0) -> bool:
        """Is `expr` surely the CPU? (a literal, or a name only ever assigned one; a parameter
        whose default is "cpu" is not: callers pass the real device)"""
        if type(expr) is cst.Name:
            if _depth > 3:
                return False
            bindings = self.scopes.lookup(expr.value, expr)
            return bool(bindings) and all(
                b.kind in ("assign", "annassign")
                and b.value is not None
                and self._is_cpu(b.value, _depth + 1)
                for b in bindings
            )
        if type(expr) is cst.IfExp:
            return self._is_cpu(expr.body, _depth + 1) and self._is_cpu(expr.orelse, _depth + 1)
        if type(expr) not in (cst.SimpleString, cst.ConcatenatedString, cst.Call):
            return False
        found = self.devices.device_of(expr)
        return found is not None and found.kind == "cpu"

    # -- values -------------------------------------------------------------------------------

    def is_moved(self, expr: Optional[cst.CSTNode], _depth: int = 0) -> bool:
        """Is the value of `expr` on the device? (a move, or made of moves)"""
        if expr is None or _depth > 6 or not self.may_move():
            return False
        depth = _depth + 1
        if type(expr) is cst.Call:
            if self.move(expr) is not None:
                return True
            func = expr.func
            if type(func) is cst.Attribute:
                if func.attr.value in _CPU_METHODS or self.to_cpu(expr):
                    return False
                if self.is_moved(func.value, depth):
                    return True  # x.to(dev).float()
            if self.mover_call(expr):
                return True
            if self.devices.is_cuda_tensor_type(func):
                return True  # torch.cuda.FloatTensor(n, 1), Tensor(n, 1) with a CUDA alias
            if self.names.is_(func, "torch.autograd.Variable") and expr.args:
                return self.is_moved(expr.args[0].value, depth)  # Variable(x.cuda())
            if self._is_map_of_mover(expr, depth):
                return True
            # tuple(t.to(dev) for t in batch), list(...), type(batch)(...)
            if (
                type(func) is cst.Call
                or (type(func) is cst.Name and func.value in ("tuple", "list", "dict", "set"))
            ) and expr.args:
                return self.is_moved(expr.args[0].value, depth)
            return False
        if (
            type(expr) is cst.ListComp
            or type(expr) is cst.SetComp
            or type(expr) is cst.GeneratorExp
        ):
            return self.is_moved(expr.elt, depth)
        if type(expr) is cst.DictComp:
            return self.is_moved(expr.value, depth)
        if type(expr) is cst.List or type(expr) is cst.Tuple or type(expr) is cst.Set:
            items = [e.value for e in expr.elements]
            return bool(items) and all(self.is_moved(item, depth) for item in items)
        if type(expr) is cst.Dict:
            values = [e.value for e in expr.elements if type(e) is cst.DictElement]
            return bool(values) and all(self.is_moved(v, depth) for v in values)
        if type(expr) is cst.IfExp:
            return self.is_moved(expr.body, depth) or self.is_moved(expr.orelse, depth)
        if type(expr) is cst.Subscript:
            return self.is_moved(expr.value, depth)
        return False

    def moves_in(self, expr: cst.CSTNode) -> List[Move]:
        """Every move call under `expr` (itself included)."""
        found: List[Move] = []
        if not self.has_move_calls():
            return found
        stack = [expr]
        while stack:
            node = stack.pop()
            move = self.move(node)
            if move is not None:
                found.append(move)
            stack.extend(reversed(children(node)))
        return found

    def _is_map_of_mover(self, call: cst.Call, depth: int) -> bool:
        """`map(lambda t: t.to(dev), batch)`, `map(to_device, batch)`."""
        if not (type(call.func) is cst.Name and call.func.value == "map" and call.args):
            return False
        return self.is_mover_function(call.args[0].value, depth)

    def is_mover_function(self, expr: cst.BaseExpression, _depth: int = 0) -> bool:
        """Is `expr` a callable that moves its argument (a lambda, a helper, a summary)?"""
        if type(expr) is cst.Lambda:
            return self.is_moved(expr.body, _depth + 1)
        if type(expr) is cst.Call:  # functools.partial(to_device, device=dev)
            if self.names.is_(expr.func, "functools.partial") and expr.args:
                return self.is_mover_function(expr.args[0].value, _depth + 1)
            return False
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        function = self.callgraph.function_for(expr)
        if self._mover_name(dotted, own=function is not None and self._passes_through(function)):
            return True
        return function is not None and 0 in self.moved_params(function)

    # -- helpers that move their arguments ----------------------------------------------------

    def mover_call(self, call: cst.Call, arg_index: Optional[int] = None) -> bool:
        """A call of a helper that moves its argument (`arg_index`, or any) and returns it:
        a well-known name (not a function of this file: its body decides), a name configured
        with `device-movers`, or a function of this file whose body moves that parameter."""
        dotted = dotted_name(call.func)
        function = self.callgraph.function_for(call.func)
        own = function is not None and self._passes_through(function)
        if dotted is not None and self._mover_name(dotted, own=own):
            return True
        if function is None:
            # `self.embedding(x)`: the forward of a submodule built from a class of this file
            function = self.callgraph.submodule_forward(call.func)
        if function is None:
            return False
        moved = self.moved_params(function)
        if not moved:
            return False
        offset = 1 if _is_method_call(call, function) else 0
        if arg_index is None:
            return any(
                call_param_index(function, call, i, offset) in moved for i in range(len(call.args))
            )
        return call_param_index(function, call, arg_index, offset) in moved

    def _summarised_callee(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The function of this file a call runs whose body says what it moves: a helper, a
        method, or the `forward` of a submodule built from a class of this file
        (`self.embedding(x)` after `self.embedding = SentenceEmbedding(...)`). None for a
        well-known or configured mover's name, which moves whatever it is given."""
        dotted = dotted_name(func)
        if dotted is not None and self._mover_name(dotted):
            return None
        return self.callgraph.function_for(func) or self.callgraph.submodule_forward(func)

    def _mover_name(self, dotted: str, own: bool = False) -> bool:
        """A well-known mover's name (`to_device`, `send_to_device`), or one configured with
        `device-movers`. For a function of this file that hands its argument back untouched
        (`own`) only the configured names count."""
        names = self.configured_movers if own else self.mover_names
        leaf = dotted.split(".")[-1]
        return leaf in names or dotted in names

    def _passes_through(self, function: cst.FunctionDef) -> bool:
        """Does a function of this file return its first argument untouched: every `return`
        gives the parameter itself, and no call receives it or is made on it (a simulated GPU
        manager's `to_device(self, array)` that only counts `array.nbytes`)? Then its name says
        nothing about moving; a body that hands the value to any call may move it."""
        params = [p.name.value for p in _positional_params(function)]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        if not params:
            return False
        first = params[0]
        returned = False
        for node in subtree(function.body):
            if type(node) is cst.Return:
                if type(node.value) is not cst.Name or node.value.value != first:
                    return False
                returned = True
            elif type(node) is cst.Call:
                func = node.func
                if type(func) is cst.Attribute and first in names_in(func.value):
                    return False
                if any(first in names_in(arg.value) for arg in node.args):
                    return False
            elif type(node) in (cst.FunctionDef, cst.Lambda):
                return False
        return returned

    def forward_moves(self, forward: cst.FunctionDef, call: cst.Call, arg_index: int) -> bool:
        """Does a module's `forward` move what argument `arg_index` of a call of the module
        (`model(x)`: `forward(self, x)`) hands it?"""
        return call_param_index(forward, call, arg_index, 1) in self.moved_params(forward)

    def moved_params(self, function: cst.FunctionDef) -> FrozenSet[int]:
        """Indices of the positional parameters whose values `function` moves to a device
        (directly, through names derived from them, or by handing them to a mover)."""
        return self._summaries.get(function)

    def handed_to_attributes(self, function: cst.FunctionDef) -> Dict[int, Set[str]]:
        """Positional parameter index -> the attributes of the method's own object it calls
        with a value derived from that parameter (`forward(self, clip)` reshaping `clip` and
        calling `self.backbone(clip)`: {1: {"backbone"}}). Such an attribute may be a
        DataParallel wrapper handed to `__init__`, which scatters what it gets to the GPUs."""
        params = [p.name.value for p in _positional_params(function)]
        if len(params) < 2:
            return {}
        nodes = list(subtree(function.body))
        attributes = [
            (node, node.func.attr.value)
            for node in nodes
            if type(node) is cst.Call
            and type(node.func) is cst.Attribute
            and type(node.func.value) is cst.Name
            and node.func.value.value == params[0]
        ]
        if not attributes:
            return {}
        derived = self._derived_names(params, nodes)
        handed: Dict[int, Set[str]] = {}
        for call, attribute in attributes:
            mentioned: Set[str] = set()
            for arg in call.args:
                mentioned |= names_in(arg.value)
            for index, param in enumerate(params[1:], start=1):
                if mentioned & derived[param]:
                    handed.setdefault(index, set()).add(attribute)
        return handed

    def _summarise(self, function: cst.FunctionDef) -> FrozenSet[int]:
        params = [p.name.value for p in _positional_params(function)]
        if not params or not self.may_move():
            return frozenset()
        nodes = list(subtree(function.body))
        sites: List[Tuple[int, Set[str]]] = []
        for position, node in enumerate(nodes):
            node_type = type(node)
            if node_type is cst.Call:
                if self.move(node) is None and not self.is_moved(node):
                    continue
                sites.append((position, self._data_names(node)))
            elif isinstance(node, cst.Assign) and any(
                type(t.target) in (cst.Subscript, cst.Attribute) for t in node.targets
            ):
                # batch[k] = batch[k].to(dev): moved in place
                if not self.is_moved(node.value):
                    continue
                mentioned: Set[str] = set()
                for t in node.targets:
                    mentioned |= names_in(t.target)
                sites.append((position, mentioned))
        if not sites:
            return frozenset()
        return frozenset(self._moved_at_sites(params, nodes, sites))

    def _moved_at_sites(
        self, params: List[str], nodes: List[cst.CSTNode], sites: List[Tuple[int, Set[str]]]
    ) -> Set[int]:
        """The parameters whose values reach a moving site: each parameter's derived names grow
        binding by binding in source order (`x = self.encode(x)` then `x = x * mask`: the mask
        is derived into `x` only after the move, so it is not moved). A binding takes effect
        after its whole statement; a comprehension's `for` everywhere in it."""
        events: List[Tuple[int, int, Set[str], Set[str]]] = []
        sizes: Dict[int, int] = {}  # id(node) -> how many nodes its subtree holds
        for node in reversed(nodes):
            size = sizes[id(node)] = sizes.get(id(node), 0) + 1
            parent = self.ctx.parent(node)
            if parent is not None:
                sizes[id(parent)] = sizes.get(id(parent), 0) + size
        for position, node in enumerate(nodes):
            pairs = _binding_pairs(node)
            if not pairs:
                continue
            if type(node) is cst.CompFor:
                after = -1
            elif type(node) is cst.For:
                after = position
            else:
                after = position + sizes[id(node)] - 1  # `nodes` is in document order
            for targets, value in pairs:
                events.append((after, 0, targets, self._names_outside_devices(value)))
        for position, mentioned in sites:
            events.append((position, 1, set(), mentioned))
        events.sort(key=lambda event: (event[0], event[1]))
        derived: Dict[str, Set[str]] = {p: {p} for p in params}
        moved: Set[int] = set()
        for _, kind, targets, mentioned in events:
            for index, param in enumerate(params):
                if not mentioned & derived[param]:
                    continue
                if kind:
                    moved.add(index)
                else:
                    derived[param] |= targets
        return moved

    def _derived_names(
        self, params: List[str], nodes: List[cst.CSTNode]
    ) -> Dict[str, Set[str]]:
        """Each parameter -> the names bound from it (`for k, v in batch.items()`, `t =
        batch[k]`), followed three bindings deep; what each binding's value mentions does not
        change between rounds. Built only for a function that moves something."""
        derived: Dict[str, Set[str]] = {p: {p} for p in params}
        bindings = [
            (targets, self._names_outside_devices(value))
            for node in nodes
            for targets, value in _binding_pairs(node)
        ]
        for _ in range(3):
            for targets, mentioned in bindings:
                for param, names in derived.items():
                    if mentioned & names:
                        names.update(targets)
        return derived

    def _names_outside_devices(self, expr: cst.CSTNode) -> Set[str]:
        """Names in `expr`, except those only used as the device of a move (`x.to(device)`
        derives from `x`, not from `device`)."""
        skip: Set[cst.CSTNode] = set()
        for move in self.moves_in(expr):
            if move.device is not None:
                skip.update(subtree(move.device))
        return {n.value for n in subtree(expr) if type(n) is cst.Name and n not in skip}

    def _data_names(self, expr: cst.CSTNode, _depth: int = 0) -> Set[str]:
        """Names whose values a moving expression moves (its receiver, the items of a
        comprehension or map, a helper's first argument), not the device argument."""
        if _depth > 8:
            return set()
        d = _depth + 1
        if type(expr) is cst.Name:
            return {expr.value}
        if type(expr) is cst.Attribute or type(expr) is cst.Subscript:
            return self._data_names(expr.value, d)
        if type(expr) is cst.Call:
            move = self.move(expr)
            if move is not None:
                return self._data_names(move.receiver, d) if move.receiver is not None else set()
            func = expr.func
            positional = [a.value for a in expr.args if a.keyword is None]
            if type(func) is cst.Name and func.value == "map":
                return set().union(*(self._data_names(a, d) for a in positional[1:]))
            if type(func) is cst.Attribute and self.is_moved(func.value):
                return self._data_names(func.value, d)
            function = self._summarised_callee(func)
            if function is not None:
                # a function of this file moves the arguments its summary names, not the rest
                moved = self.moved_params(function)
                offset = 1 if _is_method_call(expr, function) else 0
                return set().union(
                    *(
                        self._data_names(arg.value, d)
                        for i, arg in enumerate(expr.args)
                        if not arg.star and call_param_index(function, expr, i, offset) in moved
                    )
                )
            return self._data_names(positional[0], d) if positional else set()
        if (
            type(expr) is cst.ListComp
            or type(expr) is cst.SetComp
            or type(expr) is cst.GeneratorExp
            or type(expr) is cst.DictComp
        ):
            names: Set[str] = set()
            comp: Optional[cst.CompFor] = expr.for_in
            while comp is not None:
                names |= names_in(comp.iter)
                comp = comp.inner_for_in
            inner = expr.value if isinstance(expr, cst.DictComp) else expr.elt
            return names | self._data_names(inner, d)
        if type(expr) is cst.List or type(expr) is cst.Tuple or type(expr) is cst.Set:
            return set().union(*(self._data_names(e.value, d) for e in expr.elements))
        if type(expr) is cst.IfExp:
            return self._data_names(expr.body, d) | self._data_names(expr.orelse, d)
        return names_in(expr)

    # -- same-file functions ------------------------------------------------------------------

    # -- modules ------------------------------------------------------------------------------

    def placement(self, expr: cst.BaseExpression, _depth: int = 0) -> FrozenSet[str]:
        """Where the module `expr` lives: a set of MOVED / WRAPPED / UNPLACED / UNKNOWN_PLACEMENT
        (several when different assignments reach `expr`)."""
        key = (expr, _depth)
        cached = self._placements.get(key)
        if cached is None:
            self._placements[key] = frozenset({UNKNOWN_PLACEMENT})  # cycles
            cached = self._placements[key] = frozenset(self._placement(expr, _depth))
        return cached

    def _placement(self, expr: cst.BaseExpression, depth: int) -> Set[str]:
        if depth > 12:
            return {UNKNOWN_PLACEMENT}
        if type(expr) is cst.Name:
            return self._name_placement(expr, depth)
        if type(expr) is cst.Attribute:
            base = expr.value
            if type(base) is cst.Name and base.value == "self":
                return self._self_attribute_placement(expr, depth)
            inner = self.placement(base, depth + 1)
            # `model.module`, `model.encoder`: a part of the module, never the wrapper itself.
            return {MOVED if p == WRAPPED else p for p in inner}
        return self._value_placement(expr, depth)

    def _value_placement(self, value: cst.BaseExpression, depth: int) -> Set[str]:
        move = self.move(value)
        if move is not None and move.method in ("to", "cuda"):
            receiver = move.receiver
            if type(receiver) is cst.Call and self.names.is_(receiver.func, _DP, _DDP, *_FSDP):
                return {WRAPPED}  # DataParallel(model).to(device): still the wrapper
            if isinstance(receiver, (cst.Name, cst.Attribute)):
                # `model = DataParallel(model)` ... `model = model.to(device)`: still the wrapper
                return _moved_keeping_wrappers(self.placement(receiver, depth + 1))
            return {MOVED}
        if type(value) is cst.Call:
            func = value.func
            inner = value.args[0].value if value.args else None
            if self.names.is_(func, _DP, *_FSDP):
                return {WRAPPED}
            if self.names.is_(func, _DDP):
                if keyword(value, "device_ids") is not None or len(value.args) > 1:
                    return {WRAPPED}
                return set(self.placement(inner, depth + 1)) if inner is not None else set()
            if self.names.is_(func, *KEEPS_PLACEMENT) and inner is not None:
                return set(self.placement(inner, depth + 1))
            if type(func) is cst.Attribute and func.attr.value in _MODULE_RETURNS_SELF:
                return set(self.placement(func.value, depth + 1))
            if type(func) is not cst.Attribute or func.attr.value not in RETURNS_RECEIVER:
                same = returned_module(value, self.names)
                if isinstance(same, cst.BaseExpression):
                    # `nn.SyncBatchNorm.convert_sync_batchnorm(model)`: the module it was given
                    return set(self.placement(same, depth + 1))
            if type(func) is cst.Attribute and func.attr.value == "to":
                return {UNPLACED}  # model.to("cpu") / .to(torch.float16)
            return {UNPLACED}
        if type(value) in (cst.Name, cst.Attribute):
            return set(self.placement(value, depth + 1))
        if type(value) is cst.IfExp:
            return set(self.placement(value.body, depth + 1)) | set(
                self.placement(value.orelse, depth + 1)
            )
        return {UNKNOWN_PLACEMENT}

    def _name_placement(self, name: cst.Name, depth: int) -> Set[str]:
        bindings = self.scopes.lookup(name.value, name)
        if not bindings:
            return {UNKNOWN_PLACEMENT}
        found: Set[str] = set()
        for binding in bindings:
            if binding.kind in ("assign", "annassign") and binding.value is not None:
                found |= self._value_placement(binding.value, depth + 1)
            elif binding.kind == "param":
                found |= self._param_placement(binding, depth + 1)
            else:
                found.add(UNKNOWN_PLACEMENT)
        scope = bindings[0].scope
        if scope is not None:
            in_place = self._in_place(name.value, scope.node, name)
            if in_place is not None:
                position, kind = in_place
                index = self.ctx.tree.index
                # `model = model.train()` rebinds the same module: a move before it still holds
                latest = max(
                    (
                        index.get(b.statement or b.node, -1)
                        for b in bindings
                        if not _same_module_again(b, name.value)
                    ),
                    default=-1,
                )
                if position is None:  # moved in another function (`main()` moves a global)
                    if UNPLACED in found or UNKNOWN_PLACEMENT in found:
                        found.discard(UNPLACED)
                        found.add(MOVED)
                elif position > latest:  # model = Net(); model.to(device)
                    return _moved_keeping_wrappers(found) if kind == MOVED else {kind}
        return found

    def _param_placement(self, binding, depth: int) -> Set[str]:
        function = binding.statement
        if type(function) is not cst.FunctionDef:
            return {UNKNOWN_PLACEMENT}
        params = _positional_params(function)
        names = [p.name.value for p in params]
        if binding.name not in names:
            return {UNKNOWN_PLACEMENT}
        index = names.index(binding.name)
        found: Set[str] = set()
        sites = self.callgraph.callers(function)
        for call in sites:
            offset = 1 if _is_method_call(call, function) else 0
            arg = keyword(call, binding.name)
            if arg is None:
                positional = [a for a in call.args if a.keyword is None]
                if any(a.star for a in positional[: index - offset + 1]):
                    found.add(UNKNOWN_PLACEMENT)
                    continue
                if 0 <= index - offset < len(positional):
                    arg = positional[index - offset].value
            if arg is None:
                found.add(UNKNOWN_PLACEMENT)
            else:
                found |= set(self.placement(arg, depth + 1))
        if not sites and not found:
            found.add(UNKNOWN_PLACEMENT)
        return found

    def _self_attribute_placement(self, expr: cst.Attribute, depth: int) -> Set[str]:
        cls = None
        for ancestor in self.ctx.ancestors(expr):
            if type(ancestor) is cst.ClassDef:
                cls = ancestor
                break
        if cls is None:
            return {UNKNOWN_PLACEMENT}
        attr = expr.attr.value
        found: Set[str] = set()
        events: List[cst.CSTNode] = []
        for node in subtree(cls.body):
            if type(node) is cst.Assign:
                if any(is_self_attr(target.target, attr) for target in node.targets):
                    events.append(node)
            elif type(node) is cst.Call:
                move = self.move(node)
                if move is not None and move.method in ("to", "cuda"):
                    if move.receiver is not None and is_self_attr(move.receiver, attr):
                        events.append(node)
        here = self.scopes.enclosing_function(expr)
        for node in _last_word_per_method(self, events, here):
            if type(node) is cst.Assign:
                found |= self._value_placement(node.value, depth + 1)
            else:
                found.add(MOVED)
        if MOVED in found:
            found.discard(UNPLACED)
        return found or {UNKNOWN_PLACEMENT}

    def _in_place(
        self, name: str, scope_node: cst.CSTNode, at: cst.CSTNode
    ) -> Optional[Tuple[Optional[int], str]]:
        """What `model.to(device)` / `model.cuda()` / `model.cpu()` statements (Module.to
        works in place) say about `name` at `at`: (position, MOVED or UNPLACED), or None when
        there are none. In the function of `at`, the last such statement before it decides;
        one in another function (a `main()` that moves a global model) counts wherever it is
        (position None)."""
        body = getattr(scope_node, "body", None)
        if body is None:
            return None
        index = self.ctx.tree.index
        use = index.get(at, -1)
        here = self.scopes.enclosing_function(at)
        last: Optional[Tuple[int, str]] = None
        elsewhere: Optional[str] = None
        for node in self._call_statements(scope_node).get(name, ()):
            call = node.value
            assert type(call) is cst.Call  # _call_statements keeps only calls' statements
            kind = self._placement_statement(call, name)
            if kind is None:
                continue
            if self.scopes.enclosing_function(node) is here:
                position = index.get(node, -1)
                if any(ancestor is node for ancestor in self.ctx.ancestors(at)):
                    continue  # `evaluate(loader, model)`: the use is the call's own argument
                if position < use and (last is None or position > last[0]):
                    last = (position, kind)
            elif kind == MOVED and self._same_variable(name, node, scope_node):
                elsewhere = MOVED
        if last is not None:
            return last
        return (None, elsewhere) if elsewhere is not None else None

    def _same_variable(self, name: str, statement: cst.CSTNode, scope_node: cst.CSTNode) -> bool:
        """Does `name`, evaluated at `statement` in another function, mean the variable of
        `scope_node`? A `train(model, ...)` whose parameter is called `model` moves its own
        local, not the notebook's `model` a cell before the call runs."""
        bindings = self.scopes.lookup(name, statement)
        return not bindings or all(
            b.scope is not None and b.scope.node is scope_node for b in bindings
        )

    def _call_statements(self, scope_node: cst.CSTNode) -> Dict[str, List[cst.Expr]]:
        """The expression statements that are method calls on a name (`model.cuda()`) under a
        scope, by that name, in document order: no other statement can be a placement
        statement of a name. Indexed once per file from the tree's Expr nodes (each under
        every def/class around it and the module), not by a walk of each scope: `_in_place`
        asks for every name of every model call."""
        index = self.__dict__.get("_call_statements_index")
        if index is None:
            index = self.__dict__["_call_statements_index"] = {}
            holders = (cst.Module, cst.FunctionDef, cst.ClassDef)
            for node in self.ctx.nodes(cst.Expr):
                call = node.value
                if type(call) is not cst.Call:
                    continue
                func = call.func
                if type(func) is cst.Attribute and type(func.value) is cst.Name:
                    names = [func.value.value]
                elif type(func) is cst.Name:
                    # `prepare(model, device)`: a function of the file may move it in place
                    names = [a.value.value for a in call.args if type(a.value) is cst.Name]
                else:
                    continue
                for ancestor in self.ctx.ancestors(node):
                    if type(ancestor) in holders:
                        for name in names:
                            index.setdefault(id(ancestor), {}).setdefault(name, []).append(node)
        return index.get(id(scope_node), {})

    def _placement_statement(self, call: cst.Call, name: str) -> Optional[str]:
        func = call.func
        if type(func) is cst.Name:
            return self._moved_by_function(call, name)
        if not (
            type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value == name
        ):
            return None
        move = self.move(call)
        if move is not None and move.method in ("to", "cuda"):
            return MOVED
        if func.attr.value == "cpu":
            return UNPLACED
        if func.attr.value == "to" and call.args and self._is_cpu(call.args[0].value):
            return UNPLACED
        return None

    def _moved_by_function(self, call: cst.Call, name: str) -> Optional[str]:
        """MOVED when `call` (a statement) hands the module `name` to a function of this file
        that moves that parameter (`def prepare(model, device): model.to(device)`): a
        module's `.to` works in place, so the caller's module is on the device afterwards."""
        function = self.callgraph.function_for(call.func)
        if function is None:
            return None
        params = [p.name.value for p in _positional_params(function)]
        moved = self._params_moved_in_place(function, params)
        for position, arg in enumerate(call.args):
            if arg.star:
                return None  # the positions after it are unknown
            if type(arg.value) is not cst.Name or arg.value.value != name:
                continue
            if arg.keyword is None:
                index: Optional[int] = position
            elif arg.keyword.value in params:
                index = params.index(arg.keyword.value)
            else:
                index = None
            if index is not None and index in moved:
                return MOVED
        return None

    def _params_moved_in_place(self, function: cst.FunctionDef, params: List[str]) -> Set[int]:
        """The positions of the parameters `function` moves itself (`model.to(device)`,
        `model = model.cuda()`); moving what the module returns (`model(x).to(device)`)
        leaves the module where it is. Read once per function."""
        memo = self.__dict__.setdefault("_params_moved_memo", {})
        if function in memo:
            return memo[function]
        statements = self._call_statements(function)
        moved: Set[int] = set()
        for index, param in enumerate(params):
            if any(
                isinstance(statement.value, cst.Call)
                and isinstance(statement.value.func, cst.Attribute)
                and self._placement_statement(statement.value, param) == MOVED
                for statement in statements.get(param, ())
            ):
                moved.add(index)
        for node in subtree(function.body):
            if type(node) is not cst.Assign:
                continue
            bound = [
                index
                for index, param in enumerate(params)
                if any(is_name(t.target, param) for t in node.targets)
            ]
            if bound and _on_device(self._value_placement(node.value, 1)):
                moved.update(bound)
        memo[function] = moved
        return moved


def _moved_keeping_wrappers(placement: Iterable[str]) -> Set[str]:
    """Where a module is after `.to(device)` / `.cuda()`: on the device, and still the
    DataParallel / DDP wrapper on the paths where it was one."""
    return {WRAPPED if p == WRAPPED else MOVED for p in placement} or {MOVED}


def _on_device(placement: Set[str]) -> bool:
    return bool(placement) and placement <= {MOVED, WRAPPED}


def _same_module_again(binding, name: str) -> bool:
    """`name = name.train()`, `name = name.float()`: a module method that returns the module
    itself where it is, bound to the same name (`name = name.cpu()` moves it, so is not)."""
    value = binding.value
    return (
        binding.kind == "assign"
        and type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value in _MODULE_RETURNS_SELF
        and is_name(value.func.value, name)
    )


def _last_word_per_method(moves: "Moves", events: List[cst.CSTNode], here) -> List[cst.CSTNode]:
    """The assignments and moves of one `self.<attr>` that another method can observe: in a
    method other than `here` whose last such event is an assignment run unconditionally (a
    statement of the method's own body, no `return` before it), only that last one
    (`self.model = Net(); self.model.to(dev); self.model = DDP(self.model, device_ids=[0])`);
    everything elsewhere."""
    by_function: Dict[Optional[cst.CSTNode], List[cst.CSTNode]] = {}
    for node in events:
        by_function.setdefault(moves.scopes.enclosing_function(node), []).append(node)
    out: List[cst.CSTNode] = []
    for function, nodes in by_function.items():
        last = nodes[-1]
        if (
            function is None
            or function is here
            or len(nodes) == 1
            or type(last) is not cst.Assign
            or type(function) is not cst.FunctionDef
        ):
            out.extend(nodes)
            continue
        statement = moves.ctx.parent(last)
        body = function.body
        top = type(body) is cst.IndentedBlock and statement in body.body
        returns = any(
            type(n) is cst.Return and moves.ctx.tree.is_before(n, last)
            for n in subtree(body)
        )
        out.extend([last] if top and not returns else nodes)
    return out


def _positional_params(function: cst.FunctionDef) -> List[cst.Param]:
    return positional_params(function)


def _is_method_call(call: cst.Call, function: cst.FunctionDef) -> bool:
    params = _positional_params(function)
    return (
        type(call.func) is cst.Attribute
        and bool(params)
        and params[0].name.value in ("self", "cls")
    )


_FILLERS = frozenset({"append", "extend", "insert", "appendleft", "add"})


def _binding_pairs(node: cst.CSTNode):
    """(names bound, expression they come from) for assignments and loops."""
    if type(node) is cst.Assign:
        names: Set[str] = set()
        for t in node.targets:
            names |= target_names(t.target)
        return [(names, node.value)]
    if type(node) is cst.For or type(node) is cst.CompFor:
        return [(target_names(node.target), node.iter)]
    if (
        type(node) is cst.Call
        and type(node.func) is cst.Attribute
        and type(node.func.value) is cst.Name
        and node.func.attr.value in _FILLERS
        and node.args
    ):
        # `tokens.append(encode(batch[i]))`: the list is filled from what the call is given
        return [({node.func.value.value}, node)]
    return []


def _to_argument(call: cst.Call) -> Optional[cst.BaseExpression]:
    """What `.to(...)` is given first: `device=`, else its first positional argument (a device,
    a dtype or a tensor to match), else None."""
    device = keyword(call, "device")
    if device is None:
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        device = positional[0] if positional else None
    return device
