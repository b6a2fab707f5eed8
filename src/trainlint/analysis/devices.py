"""What a device expression is.

`device_of(expr)` answers for the expressions placement calls take: "cuda:1",
torch.device("cuda", 1), `.cuda(2)`'s integer, f"cuda:{args.gpu}", torch.device("cuda",
args.local_rank), the idiom `"cuda" if torch.cuda.is_available() else "cpu"`, and a variable bound
to any of these (followed through simple assignments in scope).

The answer says the kind ("cuda", "cpu", "mps", "meta", ...), the CUDA index when it is a
literal, and where a non-literal index comes from:
- "user": command-line or config values (`args.gpu`, `opt.device`, `cfg.gpu_id`, a function
  parameter named like a GPU id) — may be anything at run time;
- "rank": the process's rank (`local_rank`, `LOCAL_RANK` from the environment) — the DDP idiom;
- "current": the current device (`torch.cuda.current_device()`, a bare "cuda");
- "unknown": anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from . import Analysis
from .names import Names, dotted_name
from .scopes import Scopes
from ..walk import children as _walk_children

_DEVICE_STR = re.compile(r"^\s*(cuda|cpu|mps|meta|xla|xpu|hpu|npu|privateuseone)(?::(\d+))?\s*$")
# Objects that hold command-line or config values.
_USER_ROOTS = {
    "args",
    "opt",
    "opts",
    "cfg",
    "config",
    "conf",
    "hparams",
    "hp",
    "params",
    "flags",
    "FLAGS",
    "options",
    "settings",
    "cli_args",
    "arguments",
    "parsed_args",
}
_RANK_WORDS = ("local_rank", "localrank", "rank", "local_gpu", "gpu_rank")
# Names that hold a GPU number someone typed (a function parameter named `device` is just a
# device handed down, not a choice).
_USER_WORDS = (
    "gpu",
    "gpu_id",
    "gpu_ids",
    "gpus",
    "device_id",
    "device_ids",
    "cuda_id",
    "gpu_index",
    "device_index",
    "dev_id",
)


@dataclass(frozen=True)
class Device:
    kind: str  # cuda, cpu, mps, meta, ..., or "unknown"
    index: Optional[int] = None  # the literal CUDA index, when there is one
    origin: str = "literal"  # literal, user, rank, current, unknown
    # Source text of a non-literal index (`args.gpu` in f"cuda:{args.gpu}"), so that two places
    # that use the same expression can be recognised as the same device.
    index_text: Optional[str] = field(default=None, compare=False)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def is_default_cuda(self) -> bool:
        """`"cuda"`, `"cuda:0"`, `torch.device("cuda")`: device 0 / the current device."""
        return (
            self.kind == "cuda"
            and self.origin in ("literal", "current")
            and (self.index is None or self.index == 0)
        )

    @property
    def nonzero_literal(self) -> bool:
        return self.kind == "cuda" and self.index is not None and self.index != 0

    @property
    def user_chosen(self) -> bool:
        return self.origin in ("user", "rank")

    def describe(self) -> str:
        if self.kind == "unknown":
            return "an unknown device"
        if self.index is not None:
            return f"{self.kind}:{self.index}"
        if self.origin == "user":
            return f"a {self.kind} device chosen at run time"
        if self.origin == "rank":
            return f"the {self.kind} device of this rank"
        return self.kind


UNKNOWN = Device("unknown", None, "unknown")


class Devices(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)

    def device_of(self, expr: Optional[cst.BaseExpression]) -> Optional[Device]:
        """What `expr` denotes as a device; None when it is not recognisably a device."""
        if expr is None:
            return None
        return self._device(expr, set())

    def cuda_index(self, expr: cst.BaseExpression) -> Device:
        """What an integer-valued CUDA index (`.cuda(i)`, `set_device(i)`, `device_ids[0]`)
        denotes."""
        if isinstance(expr, cst.Integer):
            return Device("cuda", int(expr.value, 0), "literal")
        found = self.device_of(expr)
        if found is not None and found.kind == "cuda":
            return found
        return Device("cuda", None, self._index_origin(expr), self.ctx.code(expr))

    # -- the cases ----------------------------------------------------------------------------

    def _device(self, expr: cst.CSTNode, seen: Set[cst.CSTNode]) -> Optional[Device]:
        if expr in seen:
            return None
        seen.add(expr)
        if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
            value = expr.evaluated_value if hasattr(expr, "evaluated_value") else None
            if isinstance(value, bytes):
                value = None
            return parse_device_string(value) if isinstance(value, str) else None
        if isinstance(expr, cst.Integer):
            # `.cuda(1)`, `.to(1)`, `device_ids=[1]`: an integer device is a CUDA index.
            try:
                return Device("cuda", int(expr.value, 0), "literal")
            except ValueError:
                return None
        if isinstance(expr, cst.FormattedString):
            return self._fstring(expr)
        if isinstance(expr, cst.IfExp):
            return self._ifexp(expr, seen)
        if isinstance(expr, cst.Call):
            return self._call(expr, seen)
        if isinstance(expr, cst.Name):
            return self._name(expr, seen)
        if isinstance(expr, cst.Attribute):
            return self._attribute(expr)
        if isinstance(expr, cst.Subscript):
            origin = index_origin(expr)
            if origin in ("user", "rank"):
                return Device("unknown", None, origin)
        return None

    def _fstring(self, expr: cst.FormattedString) -> Optional[Device]:
        literal = "".join(
            part.value for part in expr.parts if isinstance(part, cst.FormattedStringText)
        )
        match = re.match(r"^\s*(cuda|xpu|npu|hpu)\s*:\s*$", literal)
        if match is None:
            return None
        inner = [p for p in expr.parts if isinstance(p, cst.FormattedStringExpression)]
        if len(inner) != 1:
            return Device(match.group(1), None, "unknown")
        index = inner[0].expression
        return Device(match.group(1), None, self._index_origin(index), self.ctx.code(index))

    def _ifexp(self, expr: cst.IfExp, seen) -> Optional[Device]:
        body = self._device(expr.body, seen)
        orelse = self._device(expr.orelse, seen)
        # `"cuda" if torch.cuda.is_available() else "cpu"`: the CUDA side is what placement means.
        if body is not None and orelse is not None:
            if orelse.kind == "cpu":
                return body
            if body.kind == "cpu":
                return orelse
            if body == orelse:
                return body
            return UNKNOWN
        return body or orelse

    def _call(self, call: cst.Call, seen) -> Optional[Device]:
        names = self.names
        if names.is_(call.func, "torch.device"):
            args = [a for a in call.args if a.keyword is None]
            kwargs = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            type_expr = args[0].value if args else kwargs.get("type")
            index_expr = args[1].value if len(args) > 1 else kwargs.get("index")
            base = self._device(type_expr, seen) if type_expr is not None else None
            if base is None:
                return UNKNOWN
            if index_expr is None:
                return base
            if isinstance(index_expr, cst.Integer):
                return Device(base.kind, int(index_expr.value, 0), "literal")
            return Device(
                base.kind, None, self._index_origin(index_expr), self.ctx.code(index_expr)
            )
        if names.is_(call.func, "torch.cuda.current_device"):
            return Device("cuda", None, "current")
        if names.is_(call.func, "str") and call.args:
            return self._device(call.args[0].value, seen)
        return None

    def _name(self, name: cst.Name, seen) -> Optional[Device]:
        bindings = self.scopes.lookup(name.value, name)
        if not bindings:
            return None
        found = []
        for binding in bindings:
            if binding.kind in ("assign", "annassign") and binding.value is not None:
                found.append(self._device(binding.value, seen))
            elif binding.kind == "param":
                param = binding.node
                default = getattr(param, "default", None)
                dev = self._device(default, seen) if default is not None else None
                if dev is not None and dev.kind != "unknown":
                    # A default like device="cuda:1" may be overridden by callers.
                    found.append(Device(dev.kind, dev.index, dev.origin))
                elif _looks_user(name.value):
                    found.append(Device("unknown", None, "user"))
                else:
                    found.append(None)
            else:
                found.append(None)
        known = [d for d in found if d is not None]
        if not known:
            return None
        if all(d == known[0] for d in known) and len(known) == len(found):
            return known[0]
        # Several different assignments (a CPU fallback, a per-rank branch): keep what is sure.
        cuda = [d for d in known if d.kind == "cuda"]
        if cuda and all(d == cuda[0] for d in cuda):
            return cuda[0]
        return UNKNOWN

    def _attribute(self, expr: cst.Attribute) -> Optional[Device]:
        dotted = dotted_name(expr) or ""
        root = dotted.split(".")[0]
        if root in _USER_ROOTS:
            return Device("unknown", None, "user")
        if expr.attr.value == "device":
            return Device("unknown", None, "unknown")
        return None

    def _index_origin(self, expr: cst.CSTNode) -> str:
        origin = index_origin(expr)
        if origin != "unknown":
            return origin
        if isinstance(expr, cst.Name):
            for binding in self.scopes.lookup(expr.value, expr):
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    inner = index_origin(binding.value)
                    if inner != "unknown":
                        return inner
                if binding.kind == "param":
                    return "rank" if _looks_rank(expr.value) else "user"
        return "unknown"


def parse_device_string(value: str) -> Optional[Device]:
    match = _DEVICE_STR.match(value)
    if match is None:
        return None
    index = int(match.group(2)) if match.group(2) is not None else None
    return Device(match.group(1), index, "literal" if index is not None else "current")


def index_origin(expr: cst.CSTNode) -> str:
    """Where a non-literal index comes from, judged by how it is spelled."""
    if isinstance(expr, cst.Call) and expr.args:
        # int(os.environ["LOCAL_RANK"]), int(args.gpu)
        return index_origin(expr.args[0].value)
    if isinstance(expr, cst.Subscript):
        text = _flatten_text(expr)
        if "environ" in text:
            return "rank" if _looks_rank(text) else "user"
        return index_origin(expr.value)
    if isinstance(expr, cst.Attribute):
        dotted = dotted_name(expr) or ""
        leaf = expr.attr.value
        if _looks_rank(leaf):
            return "rank"
        if dotted.split(".")[0] in _USER_ROOTS or _looks_user(leaf):
            return "user"
        return "unknown"
    if isinstance(expr, cst.Name):
        if _looks_rank(expr.value):
            return "rank"
        if _looks_user(expr.value):
            return "user"
    return "unknown"


def _looks_rank(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _RANK_WORDS)


def _looks_user(text: str) -> bool:
    lowered = text.lower()
    return lowered in _USER_WORDS or lowered.startswith("gpu_")


def _flatten_text(node: cst.CSTNode) -> str:
    try:
        return cst.Module([]).code_for_node(node)
    except Exception:
        return ""


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
_DTYPE_WORDS = frozenset(
    {
        "float",
        "float16",
        "float32",
        "float64",
        "half",
        "double",
        "bfloat16",
        "int",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "long",
        "short",
        "bool",
        "complex64",
        "complex128",
        "dtype",
    }
)
# Module methods that return the module itself (`model.train()`, `model.half()`).
_MODULE_RETURNS_SELF = frozenset(
    {"train", "eval", "half", "float", "double", "bfloat16", "requires_grad_", "share_memory"}
)
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
        self.mover_names: FrozenSet[str] = WELL_KNOWN_MOVERS | frozenset(
            str(name) for name in extra
        )
        self._summaries: Dict[cst.FunctionDef, FrozenSet[int]] = {}
        self._in_progress: Set[cst.FunctionDef] = set()
        self._placements: Dict[Tuple[cst.CSTNode, int], FrozenSet[str]] = {}
        self._call_sites: Optional[Dict[cst.FunctionDef, List[cst.Call]]] = None
        self._functions: Optional[Dict[str, List[cst.FunctionDef]]] = None

    # -- one move -----------------------------------------------------------------------------

    def move(self, node: cst.CSTNode) -> Optional[Move]:
        """The move `node` performs, if it is one (moves to the CPU are not moves)."""
        if not isinstance(node, cst.Call):
            return None
        func = node.func
        non_blocking = _kw_true(node, "non_blocking")
        if isinstance(func, cst.Attribute):
            attr = func.attr.value
            if attr == "cuda":
                device = _arg(node, 0, "device")
                return Move(node, func.value, "cuda", device, non_blocking)
            if attr == "type_as" and node.args:
                return Move(node, func.value, "type_as", None, non_blocking)
            if attr == "to":
                device = self._to_device_arg(node)
                if device is None:
                    return None
                return Move(node, func.value, "to", device, non_blocking)
        if self.names.is_(func, "torch.as_tensor", "torch.tensor", "torch.from_numpy"):
            device = _keyword(node, "device")
            if device is None or self._is_cpu(device):
                return None
            receiver = node.args[0].value if node.args else None
            return Move(node, receiver, "tensor", device, non_blocking)
        return None

    def _to_device_arg(self, call: cst.Call) -> Optional[cst.BaseExpression]:
        device = _keyword(call, "device")
        if device is None:
            positional = [a.value for a in call.args if a.keyword is None and not a.star]
            if not positional:
                return None  # .to(dtype=...), .to(memory_format=...)
            device = positional[0]
        if self._is_dtype(device) or self._is_cpu(device):
            return None
        return device

    def _is_dtype(self, expr: cst.BaseExpression) -> bool:
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        leaf = dotted.split(".")[-1]
        return leaf in _DTYPE_WORDS or leaf.endswith("dtype") or leaf.endswith("_type")

    def _is_cpu(self, expr: cst.BaseExpression, _depth: int = 0) -> bool:
        """Is `expr` surely the CPU? (a literal, or a name only ever assigned one; a parameter
        whose default is "cpu" is not: callers pass the real device)"""
        if isinstance(expr, cst.Name):
            if _depth > 3:
                return False
            bindings = self.scopes.lookup(expr.value, expr)
            return bool(bindings) and all(
                b.kind in ("assign", "annassign")
                and b.value is not None
                and self._is_cpu(b.value, _depth + 1)
                for b in bindings
            )
        if isinstance(expr, cst.IfExp):
            return self._is_cpu(expr.body, _depth + 1) and self._is_cpu(expr.orelse, _depth + 1)
        if not isinstance(expr, (cst.SimpleString, cst.ConcatenatedString, cst.Call)):
            return False
        found = self.devices.device_of(expr)
        return found is not None and found.kind == "cpu"

    # -- values -------------------------------------------------------------------------------

    def is_moved(self, expr: Optional[cst.CSTNode], _depth: int = 0) -> bool:
        """Is the value of `expr` on the device? (a move, or made of moves)"""
        if expr is None or _depth > 6:
            return False
        depth = _depth + 1
        if isinstance(expr, cst.Call):
            if self.move(expr) is not None:
                return True
            func = expr.func
            if isinstance(func, cst.Attribute):
                if func.attr.value in _CPU_METHODS:
                    return False
                if self.is_moved(func.value, depth):
                    return True  # x.to(dev).float()
            if self.mover_call(expr):
                return True
            if self._is_map_of_mover(expr, depth):
                return True
            # tuple(t.to(dev) for t in batch), list(...), type(batch)(...)
            if (
                isinstance(func, cst.Call)
                or (isinstance(func, cst.Name) and func.value in ("tuple", "list", "dict", "set"))
            ) and expr.args:
                return self.is_moved(expr.args[0].value, depth)
            return False
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self.is_moved(expr.elt, depth)
        if isinstance(expr, cst.DictComp):
            return self.is_moved(expr.value, depth)
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            items = [e.value for e in expr.elements]
            return bool(items) and all(self.is_moved(item, depth) for item in items)
        if isinstance(expr, cst.Dict):
            values = [e.value for e in expr.elements if isinstance(e, cst.DictElement)]
            return bool(values) and all(self.is_moved(v, depth) for v in values)
        if isinstance(expr, cst.IfExp):
            return self.is_moved(expr.body, depth) or self.is_moved(expr.orelse, depth)
        if isinstance(expr, cst.Subscript):
            return self.is_moved(expr.value, depth)
        return False

    def moves_in(self, expr: cst.CSTNode) -> List[Move]:
        """Every move call under `expr` (itself included)."""
        found = []
        stack = [expr]
        while stack:
            node = stack.pop()
            move = self.move(node)
            if move is not None:
                found.append(move)
            stack.extend(reversed(_children(node)))
        return found

    def _is_map_of_mover(self, call: cst.Call, depth: int) -> bool:
        """`map(lambda t: t.to(dev), batch)`, `map(to_device, batch)`."""
        if not (isinstance(call.func, cst.Name) and call.func.value == "map" and call.args):
            return False
        return self.is_mover_function(call.args[0].value, depth)

    def is_mover_function(self, expr: cst.BaseExpression, _depth: int = 0) -> bool:
        """Is `expr` a callable that moves its argument (a lambda, a helper, a summary)?"""
        if isinstance(expr, cst.Lambda):
            return self.is_moved(expr.body, _depth + 1)
        if isinstance(expr, cst.Call):  # functools.partial(to_device, device=dev)
            if self.names.is_(expr.func, "functools.partial") and expr.args:
                return self.is_mover_function(expr.args[0].value, _depth + 1)
            return False
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        if self._mover_name(dotted):
            return True
        function = self._function_for(expr)
        return function is not None and 0 in self.moved_params(function)

    # -- helpers that move their arguments ----------------------------------------------------

    def mover_call(self, call: cst.Call, arg_index: Optional[int] = None) -> bool:
        """A call of a helper that moves its argument (`arg_index`, or any) and returns it:
        a well-known name, a name configured with `device-movers`, or a function of this file
        whose body moves that parameter."""
        dotted = dotted_name(call.func)
        if dotted is not None and self._mover_name(dotted):
            return True
        function = self._function_for(call.func)
        if function is None:
            return False
        moved = self.moved_params(function)
        if not moved:
            return False
        offset = 1 if _is_method_call(call, function) else 0
        if arg_index is None:
            return any(
                self._param_index(function, call, i, offset) in moved for i in range(len(call.args))
            )
        return self._param_index(function, call, arg_index, offset) in moved

    def _mover_name(self, dotted: str) -> bool:
        leaf = dotted.split(".")[-1]
        return leaf in self.mover_names or dotted in self.mover_names

    def _param_index(self, function, call: cst.Call, arg_index: int, offset: int) -> int:
        arg = call.args[arg_index]
        if arg.keyword is not None:
            for i, param in enumerate(_positional_params(function)):
                if param.name.value == arg.keyword.value:
                    return i
            return -1
        return arg_index + offset

    def moved_params(self, function: cst.FunctionDef) -> FrozenSet[int]:
        """Indices of the positional parameters whose values `function` moves to a device
        (directly, through names derived from them, or by handing them to a mover)."""
        cached = self._summaries.get(function)
        if cached is not None:
            return cached
        if function in self._in_progress:
            return frozenset()  # recursion: the base case decides
        self._in_progress.add(function)
        try:
            result = self._summarise(function)
        finally:
            self._in_progress.discard(function)
        self._summaries[function] = result
        return result

    def _summarise(self, function: cst.FunctionDef) -> FrozenSet[int]:
        params = [p.name.value for p in _positional_params(function)]
        if not params:
            return frozenset()
        nodes = list(_descendants(function.body))
        derived: Dict[str, Set[str]] = {p: {p} for p in params}
        # Names bound from a parameter (`for k, v in batch.items()`, `t = batch[k]`).
        for _ in range(3):
            for node in nodes:
                pairs = _binding_pairs(node)
                for targets, value in pairs:
                    mentioned = self._names_outside_devices(value)
                    for param, names in derived.items():
                        if mentioned & names:
                            names.update(targets)
        moved: Set[int] = set()
        for node in nodes:
            if isinstance(node, cst.Call):
                if self.move(node) is None and not self.is_moved(node):
                    continue
                mentioned = self._data_names(node)
            elif isinstance(node, cst.Assign) and any(
                isinstance(t.target, (cst.Subscript, cst.Attribute)) for t in node.targets
            ):
                # batch[k] = batch[k].to(dev): moved in place
                if not self.is_moved(node.value):
                    continue
                mentioned = set()
                for t in node.targets:
                    mentioned |= _names_in(t.target)
            else:
                continue
            for index, param in enumerate(params):
                if mentioned & derived[param]:
                    moved.add(index)
        return frozenset(moved)

    def _names_outside_devices(self, expr: cst.CSTNode) -> Set[str]:
        """Names in `expr`, except those only used as the device of a move (`x.to(device)`
        derives from `x`, not from `device`)."""
        skip: Set[cst.CSTNode] = set()
        for move in self.moves_in(expr):
            if move.device is not None:
                skip.update(_descendants(move.device))
        return {n.value for n in _descendants(expr) if isinstance(n, cst.Name) and n not in skip}

    def _data_names(self, expr: cst.CSTNode, _depth: int = 0) -> Set[str]:
        """Names whose values a moving expression moves (its receiver, the items of a
        comprehension or map, a helper's first argument), not the device argument."""
        if _depth > 8:
            return set()
        d = _depth + 1
        if isinstance(expr, cst.Name):
            return {expr.value}
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            return self._data_names(expr.value, d)
        if isinstance(expr, cst.Call):
            move = self.move(expr)
            if move is not None:
                return self._data_names(move.receiver, d) if move.receiver is not None else set()
            func = expr.func
            positional = [a.value for a in expr.args if a.keyword is None]
            if isinstance(func, cst.Name) and func.value == "map":
                return set().union(*(self._data_names(a, d) for a in positional[1:]))
            if isinstance(func, cst.Attribute) and self.is_moved(func.value):
                return self._data_names(func.value, d)
            return self._data_names(positional[0], d) if positional else set()
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            names: Set[str] = set()
            comp = expr.for_in
            while comp is not None:
                names |= _names_in(comp.iter)
                comp = comp.inner_for_in
            inner = expr.value if isinstance(expr, cst.DictComp) else expr.elt
            return names | self._data_names(inner, d)
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            return set().union(*(self._data_names(e.value, d) for e in expr.elements))
        if isinstance(expr, cst.IfExp):
            return self._data_names(expr.body, d) | self._data_names(expr.orelse, d)
        return _names_in(expr)

    # -- same-file functions ------------------------------------------------------------------

    def _function_for(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The function of this file a callee expression names (`helper`, `self.helper`)."""
        if isinstance(func, cst.Name):
            for binding in self.scopes.lookup(func.value, func):
                if isinstance(binding.node, cst.FunctionDef):
                    return binding.node
            return None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            if func.value.value in ("self", "cls"):
                candidates = self._functions_named(func.attr.value)
                if len(candidates) == 1:
                    return candidates[0]
        return None

    def _functions_named(self, name: str) -> List[cst.FunctionDef]:
        if self._functions is None:
            table: Dict[str, List[cst.FunctionDef]] = {}
            for function in self.ctx.nodes(cst.FunctionDef):
                table.setdefault(function.name.value, []).append(function)
            self._functions = table
        return self._functions.get(name, [])

    def call_sites(self, function: cst.FunctionDef) -> List[cst.Call]:
        """Calls in this file that run `function` (by name, or `self.name(...)` for methods)."""
        if self._call_sites is None:
            sites: Dict[cst.FunctionDef, List[cst.Call]] = {}
            for call in self.ctx.nodes(cst.Call):
                target = self._function_for(call.func)
                if target is not None:
                    sites.setdefault(target, []).append(call)
            self._call_sites = sites
        return self._call_sites.get(function, [])

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
        if isinstance(expr, cst.Name):
            return self._name_placement(expr, depth)
        if isinstance(expr, cst.Attribute):
            base = expr.value
            if isinstance(base, cst.Name) and base.value == "self":
                return self._self_attribute_placement(expr, depth)
            inner = self.placement(base, depth + 1)
            # `model.module`, `model.encoder`: a part of the module, never the wrapper itself.
            return {MOVED if p == WRAPPED else p for p in inner}
        return self._value_placement(expr, depth)

    def _value_placement(self, value: cst.BaseExpression, depth: int) -> Set[str]:
        move = self.move(value)
        if move is not None and move.method in ("to", "cuda"):
            receiver = move.receiver
            if isinstance(receiver, cst.Call) and self.names.is_(receiver.func, _DP, _DDP, *_FSDP):
                return {WRAPPED}  # DataParallel(model).to(device): still the wrapper
            return {MOVED}
        if isinstance(value, cst.Call):
            func = value.func
            inner = value.args[0].value if value.args else None
            if self.names.is_(func, _DP, *_FSDP):
                return {WRAPPED}
            if self.names.is_(func, _DDP):
                if _keyword(value, "device_ids") is not None or len(value.args) > 1:
                    return {WRAPPED}
                return set(self.placement(inner, depth + 1)) if inner is not None else set()
            if self.names.is_(func, "torch.compile", "torch.jit.script") and inner is not None:
                return set(self.placement(inner, depth + 1))
            if isinstance(func, cst.Attribute) and func.attr.value in _MODULE_RETURNS_SELF:
                return set(self.placement(func.value, depth + 1))
            if isinstance(func, cst.Attribute) and func.attr.value == "to":
                return {UNPLACED}  # model.to("cpu") / .to(torch.float16)
            return {UNPLACED}
        if isinstance(value, (cst.Name, cst.Attribute)):
            return set(self.placement(value, depth + 1))
        if isinstance(value, cst.IfExp):
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
                latest = max(index.get(b.statement or b.node, -1) for b in bindings)
                if position is None:  # moved in another function (`main()` moves a global)
                    if UNPLACED in found or UNKNOWN_PLACEMENT in found:
                        found.discard(UNPLACED)
                        found.add(MOVED)
                elif position > latest:  # model = Net(); model.to(device)
                    return {kind}
        return found

    def _param_placement(self, binding, depth: int) -> Set[str]:
        function = binding.statement
        if not isinstance(function, cst.FunctionDef):
            return {UNKNOWN_PLACEMENT}
        params = _positional_params(function)
        names = [p.name.value for p in params]
        if binding.name not in names:
            return {UNKNOWN_PLACEMENT}
        index = names.index(binding.name)
        found: Set[str] = set()
        sites = self.call_sites(function)
        for call in sites:
            offset = 1 if _is_method_call(call, function) else 0
            arg = _keyword(call, binding.name)
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
            if isinstance(ancestor, cst.ClassDef):
                cls = ancestor
                break
        if cls is None:
            return {UNKNOWN_PLACEMENT}
        attr = expr.attr.value
        found: Set[str] = set()
        events: List[cst.CSTNode] = []
        for node in _descendants(cls.body):
            if isinstance(node, cst.Assign):
                if any(_is_self_attr(target.target, attr) for target in node.targets):
                    events.append(node)
            elif isinstance(node, cst.Call):
                move = self.move(node)
                if move is not None and move.method in ("to", "cuda"):
                    if move.receiver is not None and _is_self_attr(move.receiver, attr):
                        events.append(node)
        here = self.scopes.enclosing_function(expr)
        for node in _last_word_per_method(self, events, here):
            if isinstance(node, cst.Assign):
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
        for node in self._call_statements(scope_node):
            kind = self._placement_statement(node.value, name)
            if kind is None:
                continue
            if self.scopes.enclosing_function(node) is here:
                position = index.get(node, -1)
                if position < use and (last is None or position > last[0]):
                    last = (position, kind)
            elif kind == MOVED:
                elsewhere = MOVED
        if last is not None:
            return last
        return (None, elsewhere) if elsewhere is not None else None

    def _call_statements(self, scope_node: cst.CSTNode) -> List[cst.Expr]:
        """The expression statements that are calls (`model.cuda()`) under a scope, cached:
        `_in_place` asks for every name of every model call."""
        cache = self.__dict__.setdefault("_call_statements_cache", {})
        found = cache.get(scope_node)
        if found is None:
            body = scope_node if isinstance(scope_node, cst.Module) else scope_node.body
            found = [
                node
                for node in _descendants(body)
                if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call)
            ]
            cache[scope_node] = found
        return found

    def _placement_statement(self, call: cst.Call, name: str) -> Optional[str]:
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
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


def _last_word_per_method(moves: "Moves", events: List[cst.CSTNode], here) -> List[cst.CSTNode]:
    """The assignments and moves of one `self.<attr>` that another method can observe: in a
    method other than `here` whose last such event is an assignment run unconditionally (a
    statement of the method's own body, no `return` before it), only that last one
    (`self.model = Net(); self.model.to(dev); self.model = DDP(self.model, device_ids=[0])`);
    everything elsewhere."""
    by_function: Dict[cst.CSTNode, List[cst.CSTNode]] = {}
    for node in events:
        by_function.setdefault(moves.scopes.enclosing_function(node), []).append(node)
    out: List[cst.CSTNode] = []
    for function, nodes in by_function.items():
        last = nodes[-1]
        if (
            function is None
            or function is here
            or len(nodes) == 1
            or not isinstance(last, cst.Assign)
            or not isinstance(function, cst.FunctionDef)
        ):
            out.extend(nodes)
            continue
        statement = moves.ctx.parent(last)
        body = function.body
        top = isinstance(body, cst.IndentedBlock) and statement in body.body
        returns = any(
            isinstance(n, cst.Return) and moves.ctx.tree.is_before(n, last)
            for n in _descendants(body)
        )
        out.extend([last] if top and not returns else nodes)
    return out


def _arg(call: cst.Call, index: int, name: str) -> Optional[cst.BaseExpression]:
    found = _keyword(call, name)
    if found is not None:
        return found
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return positional[index] if index < len(positional) else None


def _keyword(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def _kw_true(call: cst.Call, name: str) -> bool:
    value = _keyword(call, name)
    return isinstance(value, cst.Name) and value.value == "True"


def _positional_params(function: cst.FunctionDef) -> List[cst.Param]:
    return list(function.params.posonly_params) + list(function.params.params)


def _is_method_call(call: cst.Call, function: cst.FunctionDef) -> bool:
    params = _positional_params(function)
    return (
        isinstance(call.func, cst.Attribute)
        and bool(params)
        and params[0].name.value in ("self", "cls")
    )


def _is_self_attr(node: cst.CSTNode, attr: str) -> bool:
    return (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == "self"
        and node.attr.value == attr
    )


def _children(node: cst.CSTNode) -> List[cst.CSTNode]:
    return _walk_children(node)


def _descendants(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(_children(current)))


def _names_in(node: cst.CSTNode) -> Set[str]:
    return {n.value for n in _descendants(node) if isinstance(n, cst.Name)}


def _target_names(target: cst.CSTNode) -> Set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        out: Set[str] = set()
        for element in target.elements:
            out |= _target_names(element.value)
        return out
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return set()


def _binding_pairs(node: cst.CSTNode):
    """(names bound, expression they come from) for assignments and loops."""
    if isinstance(node, cst.Assign):
        names: Set[str] = set()
        for t in node.targets:
            names |= _target_names(t.target)
        return [(names, node.value)]
    if isinstance(node, (cst.For, cst.CompFor)):
        return [(_target_names(node.target), node.iter)]
    return []
