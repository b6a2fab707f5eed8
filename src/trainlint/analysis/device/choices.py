"""Chosen CUDA indices and where devices made with them place things (TRL102, TRL103, TRL104).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from ..base.calls import argument, is_none, keyword, string_literal
from ..base.names import Names, dotted_name
from ..base.scopes import Scopes
from ..base.vocabulary import is_test_file
from .expressions import Device, Devices, USER_ROOTS, index_origin, looks_rank, parse_device_string
from .. import Analysis


# -- chosen device indices (TRL102 hardcoded-device-index, TRL103 device-index-without-set-device)
#
# Kept apart from `Devices` on purpose: `Devices.device_of` says what an expression denotes;
# what follows finds where a device with a *chosen* CUDA index is made (a literal "cuda:1", a
# GPU number from the command line or the rank) and where such devices are used for placement.

# Names that hold one GPU's number (a count such as `gpus`/`n_gpu` is not an index).
INDEX_NAMES = frozenset(
    {
        "gpu",
        "gpu_id",
        "gpu_idx",
        "gpu_index",
        "gpu_device",
        "device_id",
        "device_idx",
        "device_index",
        "cuda_id",
        "cuda_idx",
        "cuda_device",
        "dev_id",
    }
)
# Calls that set the current device (any receiver: torch.cuda, torch.xpu, get_accelerator()).
_SETTER_LEAVES = ("set_device", "set_device_index", "set_device_idx")
# Library entry points that set the current device of the process they start or initialise.
DEVICE_SETTING_ENTRY_POINTS = frozenset(
    {
        "mmengine.dist.init_dist",
        "mmengine.dist.utils.init_dist",
        "mmcv.runner.init_dist",
        "mmcv.runner.dist_utils.init_dist",
        "timm.utils.init_distributed_device",
        "timm.utils.distributed.init_distributed_device",
        "detectron2.engine.launch",
        "detectron2.engine.launch.launch",
        "ignite.distributed.Parallel",
        "ignite.distributed.initialize",
        "accelerate.Accelerator",
        "accelerate.PartialState",
        "lightning.fabric.Fabric",
        "lightning.Fabric",
        "deepspeed.initialize",
    }
)
# Project helpers that, by a convention shared by DETR/DeiT/MAE/BLIP/DINO-style code bases
# (`util.misc.init_distributed_mode`), mmcv (`init_dist`) and the PyTorch DDP tutorials
# (`ddp_setup`), call `torch.cuda.set_device(local_rank)` themselves.
DEVICE_SETTING_HELPERS = frozenset(
    {
        "init_distributed_mode",
        "init_dist",
        "init_distributed_device",
        "setup_distributed",
        "ddp_setup",
        "setup_ddp",
        "init_ddp",
    }
)
# Calls whose arguments are only shown or compared, never placed.
_NOT_PLACEMENT_CALLS = frozenset(
    {
        "print",
        "str",
        "repr",
        "format",
        "isinstance",
        "len",
        "int",
        "bool",
        "info",
        "debug",
        "warning",
        "warn",
        "error",
        "log",
        "write",
        "append",
        "set_device",
        "set_device_index",
        "set_device_idx",
        "device",
        "range",
        "init_process_group",
        "DistributedSampler",
        # `dist.barrier(device_ids=[rank])` places no tensors (detectron2 collect_env);
        # HF `pipeline(device=i)` runs each call under `with torch.cuda.device(i)`.
        "barrier",
        "pipeline",
    }
)


@dataclass(frozen=True)
class HardcodedIndex:
    """A literal CUDA index written into placement code (TRL102)."""

    node: cst.CSTNode  # what to report: the string, the integer, the device_ids list
    index: int  # the first non-zero index
    form: str  # string, cuda, to, device, set_device, device_context, device_ids,
    #            output_device, keyword, option_default, param_default, field_default, constant,
    #            trainer_devices (Lightning's `devices=[1]`)
    call: Optional[cst.Call] = None  # the call it is an argument of, when it is one


@dataclass(frozen=True)
class DeviceChoice:
    """Where a device with a chosen CUDA index is made (TRL103)."""

    device: Device
    made: cst.CSTNode  # the expression (or Param) that makes the device or its index
    statement: Optional[cst.CSTNode] = None  # the statement (or def) binding it to `name`
    name: Optional[str] = None  # the name or `self.x` it is bound to
    fallback: bool = False  # at run time it may be another kind (a CPU branch, a caller)
    source: Optional[cst.CSTNode] = None  # the argparse default / config field giving it
    is_index: bool = False  # an integer index (`.cuda(i)`), not a device value
    param: bool = False  # made by a function parameter (its default, or the caller)
    # For `torch.device("cuda", local_rank)`: where the index itself was made.
    index_made: Optional[cst.CSTNode] = field(default=None, compare=False)

    @property
    def chosen(self) -> bool:
        """A CUDA device whose index is neither absent nor 0: a literal one, or a run-time
        choice (`args.gpu`, the local rank)."""
        device = self.device
        if device.kind != "cuda":
            return False
        if device.origin == "literal":
            return device.index not in (None, 0)
        return device.origin in ("user", "rank")


@dataclass(frozen=True)
class Placement:
    """A call that puts something on a device given by `expr`."""

    call: cst.Call
    expr: cst.BaseExpression
    as_index: bool  # `expr` is an integer index (`.cuda(i)`, `device_ids=[i]`)
    direct: bool  # a placement call proper (`.to`, `.cuda`, `device=`), not a device handed on
    # A DataParallel replica's device other than the output device (`1` in `device_ids=[0,
    # 1]`): DataParallel runs that replica's forward with its device current, and the
    # outputs come back to the output device, so nothing outside the wrapper works there.
    replica: bool = False


class DeviceChoices(Analysis):
    """Literal and run-time-chosen CUDA indices, where they are placed, and whether the file
    ever sets the current device."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.devices: Devices = ctx.analysis(Devices)
        self._literal_sites: Optional[List[HardcodedIndex]] = None
        self._scope_indices: Optional[Dict[cst.CSTNode, Set[int]]] = None
        self._placements: Optional[List[Placement]] = None
        self._evidence: Optional[List[cst.CSTNode]] = None
        self._option_defaults: Optional[Dict[str, cst.BaseExpression]] = None
        self._test_file = is_test_file(ctx)

    # -- TRL102: literal indices --------------------------------------------------------------

    def hardcoded_indices(self) -> List[HardcodedIndex]:
        """Literal non-zero CUDA indices in placement code, outside tests, deliberate
        multi-GPU placement and `device_count()`-guarded code."""
        out = []
        for site in self._literal_index_sites():
            if site.index == 0:
                continue
            if self.in_test_code(site.node) or self.multi_gpu_scope(site.node):
                continue
            if self.guarded_by_device_count(site.node):
                continue
            out.append(site)
        return out

    def multi_gpu_scope(self, node: cst.CSTNode) -> bool:
        """Does the file place things on two or more different literal GPUs within one class
        (else function, else module body): deliberate model-parallel placement?"""
        if self._scope_indices is None:
            table: Dict[cst.CSTNode, Set[int]] = {}
            moved: Dict[Tuple[cst.CSTNode, str], Set[int]] = {}
            placed: List[Tuple[cst.CSTNode, Optional[str], int]] = []
            for site in self._literal_index_sites():
                # Only where things are put count; a device list or a default is one choice.
                if site.form in ("string", "cuda", "to", "device", "keyword"):
                    scope = self._placement_scope(site.node)
                    receiver = self._moved_receiver(site)
                    placed.append((scope, receiver, site.index))
                    if receiver is not None:
                        moved.setdefault((scope, receiver), set()).add(site.index)
            for scope, receiver, index in placed:
                # `model.to("cuda:0")` ... `model.to("cuda:1")`: one module moved twice is not
                # two stages on two GPUs; its move to the default GPU 0 does not count.
                if index == 0 and receiver is not None and len(moved[(scope, receiver)]) > 1:
                    continue
                table.setdefault(scope, set()).add(index)
            self._scope_indices = table
        # One deliberately model-parallel class or function makes the whole file's literal
        # placements deliberate (the script feeding it puts labels on the last stage's GPU).
        return any(len(indices) >= 2 for indices in self._scope_indices.values())

    def _moved_receiver(self, site: HardcodedIndex) -> Optional[str]:
        """The name of what a literal placement moves (`model` in `model.to("cuda:1")` or
        `model.cuda(1)`), when it is a name or attribute; None otherwise."""
        call: Optional[cst.CSTNode] = site.call
        if call is None and site.form == "string":
            arg = self.ctx.parent(site.node)
            call = self.ctx.parent(arg) if type(arg) is cst.Arg else None
        if type(call) is not cst.Call or type(call.func) is not cst.Attribute:
            return None
        if call.func.attr.value not in ("to", "cuda"):
            return None
        return dotted_name(call.func.value)

    def guarded_by_device_count(self, node: cst.CSTNode) -> bool:
        """Under `if torch.cuda.device_count() > 1:` (or an IfExp/while testing it)."""
        for ancestor in self.ctx.ancestors(node):
            test = getattr(ancestor, "test", None)
            if type(ancestor) in (cst.If, cst.IfExp, cst.While) and test is not None:
                for inner in self.ctx.tree.descendants(test):
                    if type(inner) is cst.Call:
                        leaf = (dotted_name(inner.func) or "").split(".")[-1]
                        if leaf == "device_count":
                            return True
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                break
        return False

    def in_test_code(self, node: cst.CSTNode) -> bool:
        if self._test_file:
            return True
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.FunctionDef and ancestor.name.value.startswith("test"):
                return True
            if type(ancestor) is cst.ClassDef and ancestor.name.value.startswith("Test"):
                return True
        return False

    def _placement_scope(self, node: cst.CSTNode) -> cst.CSTNode:
        function = None
        in_param = False
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.Param:
                in_param = True  # a default belongs to the scope that defines the function
            elif type(ancestor) is cst.ClassDef:
                return ancestor
            elif type(ancestor) is cst.FunctionDef and function is None:
                if in_param:
                    in_param = False
                    continue
                function = ancestor
        return function if function is not None else self.ctx.module

    def _literal_index_sites(self) -> List[HardcodedIndex]:
        if self._literal_sites is None:
            sites: List[HardcodedIndex] = []
            for node in self.ctx.nodes(cst.SimpleString) + self.ctx.nodes(cst.ConcatenatedString):
                site = self._string_site(node)
                if site is not None:
                    sites.append(site)
            for call in self.ctx.nodes(cst.Call):
                sites.extend(self._call_sites(call))
            sites.extend(self._default_sites())
            index = self.ctx.tree.index
            sites.sort(key=lambda s: index.get(s.node, 0))
            self._literal_sites = sites
        return self._literal_sites

    def _string_site(self, node: cst.CSTNode) -> Optional[HardcodedIndex]:
        if type(self.ctx.parent(node)) is cst.ConcatenatedString:
            return None  # the concatenation as a whole is the string
        text = string_literal(node)
        if text is None:
            return None
        device = parse_device_string(text)
        if device is None or device.kind != "cuda" or device.index is None:
            return None
        form = "string"
        child: cst.CSTNode = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.Comparison, cst.Assert, cst.Raise, cst.Annotation):
                return None
            if type(ancestor) is cst.SubscriptElement:
                return None  # a lookup key: `placement["cuda:1"]`
            if type(ancestor) in (cst.DictElement,) and child is ancestor.key:
                return None  # a mapping key: `{"cuda:1": "cuda:0"}`
            if type(ancestor) is cst.Expr and ancestor.value is node:
                return None  # a bare string statement
            if type(ancestor) is cst.Arg:
                keyword = ancestor.keyword.value if ancestor.keyword is not None else None
                if keyword in ("choices", "help", "metavar"):
                    return None
                call = self.ctx.parent(ancestor)
                if type(call) is cst.Call:
                    leaf = (dotted_name(call.func) or "").split(".")[-1]
                    if leaf in ("print", "info", "debug", "warning", "warn", "error", "log"):
                        return None
                    if keyword == "default" and leaf == "add_argument":
                        form = "option_default"
            if type(ancestor) is cst.Param and child is ancestor.default:
                form = "param_default"
            if type(ancestor) in (cst.Assign, cst.AnnAssign) and child is ancestor.value:
                if self.scopes.scope_of(ancestor).kind == "class":
                    form = "field_default"
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                break
            child = ancestor
        return HardcodedIndex(node, device.index, form)

    def _call_sites(self, call: cst.Call) -> List[HardcodedIndex]:
        names = self.names
        out: List[HardcodedIndex] = []
        func = call.func
        method = func.attr.value if type(func) is cst.Attribute else None

        def integer(expr, form) -> None:
            if type(expr) is cst.Integer:
                out.append(HardcodedIndex(expr, int(expr.value, 0), form, call))

        if names.is_(func, "torch.device"):
            index = argument(call, 1, "index")
            first = argument(call, 0, "type")
            if index is not None:
                integer(index, "device")
            elif first is not None:
                integer(first, "device")  # torch.device(1) is cuda:1
            return out
        if names.is_(func, "torch.cuda.set_device") or (
            method in _SETTER_LEAVES and _mentions_cuda(self.ctx.code(func))
        ):
            first = argument(call, 0, "device")
            if first is not None:
                integer(first, "set_device")
            return out
        if names.is_(func, "torch.cuda.device"):
            first = argument(call, 0, "device")
            if first is not None:
                integer(first, "device_context")
            return out
        if method == "cuda":
            first = argument(call, 0, "device")
            if first is not None:
                integer(first, "cuda")
        elif method == "to":
            first = argument(call, 0, "device")
            if first is not None:
                integer(first, "to")
        for arg in call.args:
            if arg.keyword is None:
                continue
            keyword = arg.keyword.value
            if keyword == "device_ids" and (
                type(arg.value) is cst.List or type(arg.value) is cst.Tuple
            ):
                values = [e.value for e in arg.value.elements]
                literal = [int(v.value, 0) for v in values if type(v) is cst.Integer]
                nonzero = [v for v in literal if v != 0]
                if literal:
                    first_index = nonzero[0] if nonzero else 0
                    out.append(HardcodedIndex(arg.value, first_index, "device_ids", call))
            elif keyword in ("devices", "gpus") and _gpu_trainer(names, call):
                # Lightning's `Trainer(accelerator="gpu", devices=[1])` picks GPU 1 by number
                # (an integer `devices=2` is a count, not an index)
                if type(arg.value) is cst.List or type(arg.value) is cst.Tuple:
                    values = [e.value for e in arg.value.elements]
                    literal = [int(v.value, 0) for v in values if type(v) is cst.Integer]
                    nonzero = [v for v in literal if v != 0]
                    if nonzero:
                        out.append(HardcodedIndex(arg.value, nonzero[0], "trainer_devices", call))
            elif keyword == "output_device":
                integer(arg.value, "output_device")
            elif keyword == "device" and method not in ("cuda", "to"):
                if _qualified_in_torch(names, func) or method is not None:
                    integer(arg.value, "keyword")
        return out

    def _default_sites(self) -> List[HardcodedIndex]:
        """Integer defaults of GPU-number options, parameters, fields and constants."""
        out: List[HardcodedIndex] = []
        for call in self.ctx.nodes(cst.Call):
            if not (
                type(call.func) is cst.Attribute and call.func.attr.value == "add_argument"
            ):
                continue
            dest = _option_dest(call)
            default = keyword(call, "default")
            if dest and dest.lower() in INDEX_NAMES and type(default) is cst.Integer:
                out.append(HardcodedIndex(default, int(default.value, 0), "option_default", call))
        for param in self.ctx.nodes(cst.Param):
            if param.name.value.lower() in INDEX_NAMES and type(param.default) is cst.Integer:
                value = int(param.default.value, 0)
                out.append(HardcodedIndex(param.default, value, "param_default"))
        for node in self.ctx.nodes(cst.Assign) + self.ctx.nodes(cst.AnnAssign):
            targets = (
                [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]
            )
            value = node.value
            if type(value) is not cst.Integer or len(targets) != 1:
                continue
            target = targets[0]
            if type(target) is not cst.Name or target.value.lower() not in INDEX_NAMES:
                continue
            kind = self.scopes.scope_of(node).kind
            if kind not in ("module", "class"):
                continue  # a local variable of a function, not a setting
            form = "field_default" if kind == "class" else "constant"
            out.append(HardcodedIndex(value, int(value.value, 0), form))
        return out

    # -- TRL103: devices chosen at run time, and the current device ----------------------------

    def current_device_evidence(self) -> List[cst.CSTNode]:
        """Where the file sets the current device: `set_device(...)`, `with
        torch.cuda.device(...)`, `CUDA_VISIBLE_DEVICES` written to the environment, or a
        distributed entry point that sets it."""
        if self._evidence is None:
            found: List[cst.CSTNode] = []
            for call in self.ctx.nodes(cst.Call):
                if self._sets_current_device(call):
                    found.append(call)
            for node in self.ctx.nodes(cst.SimpleString):
                if string_literal(node) == "CUDA_VISIBLE_DEVICES" and self._written_env(node):
                    found.append(node)
            self._evidence = found
        return self._evidence

    def current_device_follows(self, literal: cst.CSTNode) -> bool:
        """Is the current CUDA device set from the device this literal index makes? True when
        the literal is in the value of `name = ...` and `name` is what a `set_device(...)` /
        `torch.cuda.device(...)` of this file receives, or, when nothing in the file sets the
        current device, when that value is a chosen CUDA device something is placed on (TRL103's
        fix then inserts `set_device(name)`). Taking the index out of such a value (`"cuda:1"`
        -> `"cuda"`) hands `set_device` a device without an index: torch raises ValueError."""
        statement = self.ctx.statement_of(literal)
        if type(statement) is cst.Assign:
            targets = [t.target for t in statement.targets]
        elif type(statement) is cst.AnnAssign and statement.value is not None:
            targets = [statement.target]
        else:
            return False
        names = {dotted_name(t) for t in targets} - {None}
        if not names:
            return False
        evidence = self.current_device_evidence()
        if evidence:
            return any(
                type(call) is cst.Call and any(dotted_name(a.value) in names for a in call.args)
                for call in evidence
            )
        for placement in self.placements():
            choice = self.trace(placement.expr, placement.as_index)
            if choice is not None and choice.chosen and choice.statement is statement:
                return True
        return False

    def _sets_current_device(self, call: cst.Call) -> bool:
        func = call.func
        dotted = dotted_name(func) or ""
        leaf = dotted.split(".")[-1] if dotted else ""
        if type(func) is cst.Attribute:
            leaf = func.attr.value
        if leaf in _SETTER_LEAVES:
            return True
        qualified = self.names.qualified(func)
        if "torch.cuda.device" in qualified and type(self.ctx.parent(call)) is cst.WithItem:
            return True
        if any(q in DEVICE_SETTING_ENTRY_POINTS for q in qualified):
            return True
        if leaf in DEVICE_SETTING_HELPERS:
            return not any(q.startswith(("deepspeed.", "torch.")) for q in qualified)
        return False

    def _written_env(self, node: cst.CSTNode) -> bool:
        parent = self.ctx.parent(node)
        if type(parent) is cst.Index:
            element = self.ctx.parent(parent)
            assert element is not None  # an Index always lies in a SubscriptElement
            subscript = self.ctx.parent(element)
            holder = self.ctx.parent(subscript) if subscript is not None else None
            return type(holder) is cst.AssignTarget
        if type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is cst.Call:
                leaf = (dotted_name(call.func) or "").split(".")[-1]
                return leaf in ("setdefault", "putenv", "__setitem__")
        if type(parent) is cst.DictElement:
            for ancestor in self.ctx.ancestors(parent):
                if type(ancestor) is cst.Call:
                    leaf = (dotted_name(ancestor.func) or "").split(".")[-1]
                    return leaf == "update" and "environ" in self.ctx.code(ancestor.func)
        return False

    def placements(self) -> List[Placement]:
        """Calls that place on a device: `.to(d)`, `.cuda(i)`, `device=d`, `device_ids=[i]`,
        `output_device=i`, `map_location=d`, and names of device values handed to any other
        call (`train(model, device)`)."""
        if self._placements is None:
            out: List[Placement] = []
            for call in self.ctx.nodes(cst.Call):
                out.extend(self._placements_of(call))
            self._placements = out
        return self._placements

    def _placements_of(self, call: cst.Call) -> List[Placement]:
        func = call.func
        method = func.attr.value if type(func) is cst.Attribute else None
        leaf = method or (dotted_name(func) or "").split(".")[-1]
        if leaf in _NOT_PLACEMENT_CALLS or self.names.is_(func, "torch.device"):
            return []
        out: List[Placement] = []
        used: Set[cst.CSTNode] = set()
        if method in ("cuda", "to"):
            first = argument(call, 0, "device")
            if first is not None:
                out.append(Placement(call, first, method == "cuda", True))
                used.add(first)
        for arg in call.args:
            if arg.keyword is None or arg.value in used:
                continue
            keyword = arg.keyword.value
            if keyword in ("device", "map_location"):
                out.append(Placement(call, arg.value, False, True))
                used.add(arg.value)
            elif keyword == "device_ids" and (
                type(arg.value) is cst.List or type(arg.value) is cst.Tuple
            ):
                output_given = any(
                    a.keyword is not None and a.keyword.value == "output_device"
                    for a in call.args
                )
                for position, element in enumerate(arg.value.elements):
                    replica = leaf == "DataParallel" and (output_given or position > 0)
                    out.append(Placement(call, element.value, True, True, replica))
                    used.add(element.value)
            elif keyword == "output_device":
                out.append(Placement(call, arg.value, True, True))
                used.add(arg.value)
        for arg in call.args:
            if arg.value not in used and type(arg.value) in (cst.Name, cst.Attribute):
                if not arg.star:
                    out.append(Placement(call, arg.value, False, False))
        return out

    def trace(self, expr: cst.CSTNode, as_index: bool = False) -> Optional[DeviceChoice]:
        """Where the device (or index) `expr` evaluates to is made, and what it is."""
        return self._trace(expr, as_index, set())

    def option_default(self, attribute: str) -> Optional[cst.BaseExpression]:
        """The default of the command-line option or config field named `attribute`: the
        `default=` of `add_argument("--attribute", ...)`, or a class-level `attribute = ...`."""
        if self._option_defaults is None:
            table: Dict[str, cst.BaseExpression] = {}
            for call in self.ctx.nodes(cst.Call):
                if type(call.func) is cst.Attribute and call.func.attr.value in (
                    "add_argument",
                    "add_option",
                ):
                    dest = _option_dest(call)
                    default = keyword(call, "default")
                    if dest and default is not None:
                        table.setdefault(dest, default)
            for node in self.ctx.nodes(cst.AnnAssign) + self.ctx.nodes(cst.Assign):
                if self.scopes.scope_of(node).kind != "class" or node.value is None:
                    continue
                targets = (
                    [t.target for t in node.targets]
                    if type(node) is cst.Assign
                    else [node.target]
                )
                for target in targets:
                    if type(target) is cst.Name:
                        table.setdefault(target.value, node.value)
            self._option_defaults = table
        return self._option_defaults.get(attribute)

    def _trace(self, expr, as_index: bool, seen: Set[cst.CSTNode]) -> Optional[DeviceChoice]:
        if expr in seen or len(seen) >= _TRACE_BUDGET:
            return None  # a cycle, or a chain longer than any real device choice: unknown
        seen.add(expr)
        if type(expr) is cst.Integer:
            return DeviceChoice(Device("cuda", int(expr.value, 0), "literal"), expr, is_index=True)
        if type(expr) in (cst.SimpleString, cst.ConcatenatedString):
            text = string_literal(expr)
            device = parse_device_string(text) if text is not None else None
            return DeviceChoice(device, expr) if device is not None else None
        if type(expr) in (cst.FormattedString, cst.BinaryOperation):
            device = self.devices.device_of(expr)
            return DeviceChoice(device, expr) if device is not None else None
        if type(expr) is cst.IfExp:
            return self._trace_ifexp(expr, as_index, seen)
        if type(expr) is cst.Call:
            return self._trace_call(expr, as_index, seen)
        if type(expr) is cst.Name:
            return self._trace_name(expr, as_index, seen)
        if type(expr) is cst.Attribute:
            return self._trace_attribute(expr, as_index, seen)
        if type(expr) is cst.Subscript and as_index:
            origin = index_origin(expr)
            if origin in ("user", "rank"):
                device = Device("cuda", None, origin, self.ctx.code(expr))
                return DeviceChoice(device, expr, is_index=True)
        return None

    def _trace_ifexp(self, expr: cst.IfExp, as_index, seen) -> Optional[DeviceChoice]:
        body = self._trace(expr.body, as_index, seen)
        orelse = self._trace(expr.orelse, as_index, seen)
        for first, second in ((body, orelse), (orelse, body)):
            if first is not None and first.device.kind == "cuda":
                other_kind = second is None or second.device.kind != "cuda"
                return replace(first, fallback=first.fallback or other_kind)
        return None

    def _trace_call(self, call: cst.Call, as_index, seen) -> Optional[DeviceChoice]:
        names = self.names
        if names.is_(call.func, "torch.device"):
            type_expr = argument(call, 0, "type")
            index_expr = argument(call, 1, "index")
            if type_expr is None:
                return None
            base = self._trace(type_expr, False, seen)
            if base is None:
                return None
            if index_expr is None:
                if base.device.kind == "unknown":
                    return None
                if type(type_expr) in (cst.Name, cst.Attribute) and base.name is not None:
                    return replace(base, is_index=False)
                return replace(base, made=call, is_index=False)
            kind = base.device.kind
            if type(index_expr) is cst.Integer:
                device = Device(kind, int(index_expr.value, 0), "literal")
                return DeviceChoice(device, call, fallback=base.fallback)
            index = self._trace(index_expr, True, seen)
            if index is None or index.device.origin not in ("user", "rank", "literal"):
                return None
            device = Device(
                kind, index.device.index, index.device.origin, self.ctx.code(index_expr)
            )
            return DeviceChoice(
                device, call, fallback=base.fallback, source=index.source, index_made=index.made
            )
        if names.is_(call.func, "torch.cuda.current_device"):
            return DeviceChoice(Device("cuda", None, "current"), call, is_index=True)
        leaf = (dotted_name(call.func) or "").split(".")[-1]
        if leaf in ("get", "getenv") and call.args and as_index:
            key = string_literal(call.args[0].value)
            if key is not None and ("environ" in self.ctx.code(call.func) or leaf == "getenv"):
                origin = "rank" if looks_rank(key) else "user"
                return DeviceChoice(Device("cuda", None, origin, key), call, is_index=True)
            return None
        if leaf in ("str", "int") and len(call.args) == 1:
            inner = self._trace(call.args[0].value, as_index or leaf == "int", seen)
            if inner is not None and inner.made is call.args[0].value and inner.name is None:
                return replace(inner, made=call)
            return inner
        call_device = self.devices.device_of(call)
        if call_device is not None and call_device.kind != "unknown":
            return DeviceChoice(call_device, call)
        return None

    def _trace_name(self, name: cst.Name, as_index, seen) -> Optional[DeviceChoice]:
        bindings = self.scopes.lookup(name.value, name)
        results: List[Optional[DeviceChoice]] = []
        for binding in bindings:
            results.append(self._trace_binding(binding, name, as_index, seen))
        found = [r for r in results if r is not None]
        cuda = [r for r in found if r.device.kind == "cuda"]
        if not cuda:
            return None
        chosen = [r for r in cuda if r.chosen] or cuda
        first = chosen[0]
        if len(cuda) < len(results):
            first = replace(first, fallback=True)
        return first

    def _trace_binding(self, binding, name: cst.Name, as_index, seen) -> Optional[DeviceChoice]:
        if binding.kind in ("assign", "annassign") and binding.value is not None:
            inner = self._trace(binding.value, as_index, seen)
            if inner is None:
                if as_index:
                    origin = index_origin(binding.value)
                    if origin in ("user", "rank"):
                        device = Device("cuda", None, origin, self.ctx.code(binding.value))
                        return DeviceChoice(
                            device, binding.value, binding.statement, name.value, is_index=True
                        )
                return None
            if inner.name is None:
                inner = replace(inner, statement=binding.statement, name=name.value)
            return inner
        if binding.kind == "param":
            param = binding.node
            default = getattr(param, "default", None)
            function = binding.statement
            if default is not None:
                inner = self._trace(default, as_index, seen)
                if inner is None or inner.device.kind != "cuda":
                    return None
                return replace(
                    inner,
                    made=default,
                    statement=function,
                    name=name.value,
                    fallback=True,
                    param=True,
                )
            origin = index_origin(name)
            lowered = name.value.lower()
            if origin in ("user", "rank") and (
                as_index or lowered in INDEX_NAMES or looks_rank(lowered)
            ):
                device = Device("cuda", None, origin, name.value)
                return DeviceChoice(
                    device, param, function, name.value, True, is_index=True, param=True
                )
        return None

    def _trace_attribute(self, expr: cst.Attribute, as_index, seen) -> Optional[DeviceChoice]:
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        parts = dotted.split(".")
        if parts[0] == "self" and len(parts) == 2:
            return self._trace_self_attribute(expr, parts[1], as_index, seen)
        if parts[0] not in USER_ROOTS or len(parts) != 2:
            return None
        leaf = parts[1]
        default = self.option_default(leaf)
        if default is not None and not is_none(default):
            inner = self._trace(default, as_index, seen)
            if inner is not None and inner.device.kind == "cuda":
                if inner.device.origin == "literal" and inner.chosen:
                    return DeviceChoice(
                        inner.device, expr, fallback=True, source=default, is_index=inner.is_index
                    )
        lowered = leaf.lower()
        if as_index or lowered in INDEX_NAMES or looks_rank(lowered):
            origin = "rank" if looks_rank(lowered) else "user"
            device = Device("cuda", None, origin, dotted)
            fallback = default is None or is_none(default)
            return DeviceChoice(device, expr, fallback=fallback, source=default, is_index=True)
        return None

    def _trace_self_attribute(self, expr, attr: str, as_index, seen) -> Optional[DeviceChoice]:
        cls = None
        for ancestor in self.ctx.ancestors(expr):
            if type(ancestor) is cst.ClassDef:
                cls = ancestor
                break
        if cls is None:
            return None
        assigned = self._single_assignments(cls).get(f"self.{attr}", [])
        if len(assigned) != 1:
            return None
        inner = self._trace(assigned[0].value, as_index, seen)
        if inner is None:
            return None
        if inner.name is None:
            inner = replace(inner, statement=assigned[0], name=f"self.{attr}")
        return inner

    def _single_assignments(self, cls: cst.ClassDef) -> Dict[str, List[cst.Assign]]:
        """Dotted target -> the one-target assignments to it under `cls`, in document order
        (one walk of the class for all its `self.<attr>` traces)."""
        cache = self.__dict__.setdefault("_single_assignments_cache", {})
        found = cache.get(cls)
        if found is None:
            found = {}
            for node in self.ctx.tree.descendants(cls):
                if type(node) is cst.Assign and len(node.targets) == 1:
                    dotted = dotted_name(node.targets[0].target)
                    if dotted is not None:
                        found.setdefault(dotted, []).append(node)
            cache[cls] = found
        return found

    # -- what the file imports ----------------------------------------------------------------

    def custom_ops(self) -> Optional[str]:
        """A compiled extension or custom CUDA op library the file imports, if any: the ops
        that launch on the current device instead of their inputs' (mmcv/mmdet/mmrotate ops,
        detectron2's layers, a project's compiled `_ext`/`_C`/`*_cuda` module, a
        `torch.utils.cpp_extension` build). torchvision's ops guard their inputs' device."""
        for qualname in self.names.imported_names():
            name = qualname.lstrip(".")
            parts = name.split(".")
            if name.startswith(_CUSTOM_OP_PACKAGES):
                return name
            if any(p in ("_C", "_ext", "_cuda") or p.endswith(("_cuda", "_ext")) for p in parts):
                return name
            if name.startswith("torch.utils.cpp_extension"):
                return name
        return None

    def compiled_extensions(self) -> List[str]:
        """Module names this file builds as compiled extensions
        (`CUDAExtension("MultiScaleDeformableAttention", ...)` in a setup.py): a project file
        importing one of them imports custom CUDA ops, whatever the module is called."""
        found = []
        for call in self.ctx.nodes(cst.Call):
            if not self.names.is_(call.func, *_EXTENSION_BUILDERS):
                continue
            name = argument(call, 0, "name")
            text = string_literal(name) if name is not None else None
            if text:
                found.append(text)
        return found


# Expressions one trace may visit: a device choice is a few assignments deep in real code;
# `d1 = d0; d2 = d1; ...` thousands of links long would otherwise recurse past Python's limit.
_TRACE_BUDGET = 200

# torch's builders of compiled extensions (setup.py): the module names they make.
_EXTENSION_BUILDERS = (
    "torch.utils.cpp_extension.CUDAExtension",
    "torch.utils.cpp_extension.CppExtension",
)

# Libraries whose ops are compiled CUDA kernels that launch on the current device.
_CUSTOM_OP_PACKAGES = (
    "mmcv.ops",
    "mmcv._ext",
    "mmdet.ops",
    "mmdet.models",
    "mmrotate",
    "mmdet3d.ops",
    "detectron2.layers",
    "detectron2._C",
)


def unread_option(ctx, site: "HardcodedIndex") -> Optional[str]:
    """For an option default (`add_argument("--gpu_index", default=1)`): the option's name when
    nothing else in this file mentions it (no `args.gpu_index`, no `"gpu_index"` key, no
    parameter of that name), else None. An option nobody reads chooses no device; whether
    another file of the project reads it is the project phase's question."""
    if site.form != "option_default":
        return None
    call = site.call
    if call is None:
        for ancestor in ctx.ancestors(site.node):
            if type(ancestor) is cst.Call:
                call = ancestor
                break
    if call is None:
        return None
    dest = _option_dest(call)
    if not dest or not dest.isidentifier():
        return None
    word = re.compile(rf"\b{re.escape(dest)}\b")
    text = ctx.source.text
    start, end = _offsets(ctx, call)
    if any(not (start <= m.start() < end) for m in word.finditer(text)):
        return None
    return dest


def _offsets(ctx, node: cst.CSTNode) -> Tuple[int, int]:
    row, col, end_row, end_col = ctx.span(node)
    return ctx.source.offset(row, col), ctx.source.offset(end_row, end_col)


def _option_dest(call: cst.Call) -> Optional[str]:
    """`add_argument("--gpu-id", ...)` -> "gpu_id" (or its `dest=`)."""
    dest = keyword(call, "dest")
    if dest is not None:
        return string_literal(dest)
    flags = [string_literal(a.value) for a in call.args if a.keyword is None]
    strings = [f for f in flags if f]
    long = [f for f in strings if f.startswith("--")]
    chosen = long[0] if long else (strings[0] if strings else None)
    if chosen is None:
        return None
    return chosen.lstrip("-").replace("-", "_")


def _qualified_in_torch(names: Names, func: cst.CSTNode) -> bool:
    return any(q.startswith("torch.") for q in names.qualified(func))


def _mentions_cuda(text: str) -> bool:
    return "cuda" in text


_LIGHTNING_RUNNERS = (
    "lightning.Trainer",
    "lightning.pytorch.Trainer",
    "pytorch_lightning.Trainer",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
)


def _gpu_trainer(names: Names, call: cst.Call) -> bool:
    """A Lightning `Trainer`/`Fabric` whose accelerator is a GPU (or left to pick one)."""
    if not names.is_(call.func, *_LIGHTNING_RUNNERS):
        return False
    accelerator = keyword(call, "accelerator")
    if accelerator is None:
        return True  # "auto": the GPU when there is one
    chosen = string_literal(accelerator)
    return chosen is None or chosen in ("gpu", "cuda", "auto")
