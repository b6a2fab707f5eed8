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

import os
import re
from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from . import Analysis
from .calls import argument, string_value
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
        if type(expr) is cst.Integer:
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
        if type(expr) in (cst.SimpleString, cst.ConcatenatedString):
            value = string_value(expr)
            if isinstance(value, bytes):
                value = None
            return parse_device_string(value) if isinstance(value, str) else None
        if type(expr) is cst.Integer:
            # `.cuda(1)`, `.to(1)`, `device_ids=[1]`: an integer device is a CUDA index.
            try:
                return Device("cuda", int(expr.value, 0), "literal")
            except ValueError:
                return None
        if type(expr) is cst.FormattedString:
            return self._fstring(expr)
        if type(expr) is cst.IfExp:
            return self._ifexp(expr, seen)
        if type(expr) is cst.Call:
            return self._call(expr, seen)
        if type(expr) is cst.Name:
            return self._name(expr, seen)
        if type(expr) is cst.Attribute:
            return self._attribute(expr)
        if type(expr) is cst.Subscript:
            origin = index_origin(expr)
            if origin in ("user", "rank"):
                return Device("unknown", None, origin)
        if type(expr) is cst.BinaryOperation:
            return self._built_device_string(expr)
        return None

    def _built_device_string(self, expr: cst.CSTNode) -> Optional[Device]:
        """`"cuda:{}".format(i)`, `"cuda:%d" % i`, `"cuda:" + str(i)`: a CUDA device whose
        index is `i`."""
        template: Optional[cst.CSTNode] = None
        index: Optional[cst.CSTNode] = None
        if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
            if expr.func.attr.value == "format" and len(expr.args) == 1 and not expr.args[0].star:
                template, index = expr.func.value, expr.args[0].value
                text = _string_value(template)
                if text is None or re.match(r"^\s*(cuda|xpu|npu|hpu):\{\}\s*$", text) is None:
                    return None
        elif type(expr) is cst.BinaryOperation:
            template, index = expr.left, expr.right
            text = _string_value(template)
            if text is None:
                return None
            if type(expr.operator) is cst.Modulo:
                if re.match(r"^\s*(cuda|xpu|npu|hpu):%[di]\s*$", text) is None:
                    return None
            elif type(expr.operator) is cst.Add:
                if re.match(r"^\s*(cuda|xpu|npu|hpu):$", text) is None:
                    return None
                if type(index) is cst.Call and self.names.is_(index.func, "str") and index.args:
                    index = index.args[0].value
            else:
                return None
        if template is None or index is None:
            return None
        kind = (_string_value(template) or "").strip().split(":")[0]
        if type(index) is cst.Integer:
            return Device(kind, int(index.value, 0), "literal")
        return Device(kind, None, self._index_origin(index), self.ctx.code(index))

    def _fstring(self, expr: cst.FormattedString) -> Optional[Device]:
        literal = "".join(
            part.value for part in expr.parts if type(part) is cst.FormattedStringText
        )
        match = re.match(r"^\s*(cuda|xpu|npu|hpu)\s*:\s*$", literal)
        if match is None:
            return None
        inner = [p for p in expr.parts if type(p) is cst.FormattedStringExpression]
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
            if type(index_expr) is cst.Integer:
                return Device(base.kind, int(index_expr.value, 0), "literal")
            return Device(
                base.kind, None, self._index_origin(index_expr), self.ctx.code(index_expr)
            )
        if names.is_(call.func, "torch.cuda.current_device"):
            return Device("cuda", None, "current")
        if names.is_(call.func, "str") and call.args:
            return self._device(call.args[0].value, seen)
        return self._built_device_string(call)

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
        if type(expr) is cst.Name:
            for binding in self.scopes.lookup(expr.value, expr):
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    inner = index_origin(binding.value)
                    if inner != "unknown":
                        return inner
                if binding.kind == "param":
                    return "rank" if _looks_rank(expr.value) else "user"
        return "unknown"


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
    #            output_device, keyword, option_default, param_default, field_default, constant
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
        self._test_file = _is_test_path(_relative_path(ctx))

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
            for site in self._literal_index_sites():
                # Only where things are put count; a device list or a default is one choice.
                if site.form in ("string", "cuda", "to", "device", "keyword"):
                    table.setdefault(self._placement_scope(site.node), set()).add(site.index)
            self._scope_indices = table
        # One deliberately model-parallel class or function makes the whole file's literal
        # placements deliberate (the script feeding it puts labels on the last stage's GPU).
        return any(len(indices) >= 2 for indices in self._scope_indices.values())

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
        text = _string_value(node)
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
            if keyword == "device_ids" and type(arg.value) in (cst.List, cst.Tuple):
                values = [e.value for e in arg.value.elements]
                literal = [int(v.value, 0) for v in values if type(v) is cst.Integer]
                nonzero = [v for v in literal if v != 0]
                if literal:
                    first_index = nonzero[0] if nonzero else 0
                    out.append(HardcodedIndex(arg.value, first_index, "device_ids", call))
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
            default = _keyword(call, "default")
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
                if _string_value(node) == "CUDA_VISIBLE_DEVICES" and self._written_env(node):
                    found.append(node)
            self._evidence = found
        return self._evidence

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
            subscript = self.ctx.parent(self.ctx.parent(parent))
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
            elif keyword == "device_ids" and type(arg.value) in (cst.List, cst.Tuple):
                for element in arg.value.elements:
                    out.append(Placement(call, element.value, True, True))
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
                    default = _keyword(call, "default")
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
        if expr in seen:
            return None
        seen.add(expr)
        if type(expr) is cst.Integer:
            return DeviceChoice(Device("cuda", int(expr.value, 0), "literal"), expr, is_index=True)
        if type(expr) in (cst.SimpleString, cst.ConcatenatedString):
            text = _string_value(expr)
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
            key = _string_value(call.args[0].value)
            if key is not None and ("environ" in self.ctx.code(call.func) or leaf == "getenv"):
                origin = "rank" if _looks_rank(key) else "user"
                return DeviceChoice(Device("cuda", None, origin, key), call, is_index=True)
            return None
        if leaf in ("str", "int") and len(call.args) == 1:
            inner = self._trace(call.args[0].value, as_index or leaf == "int", seen)
            if inner is not None and inner.made is call.args[0].value and inner.name is None:
                return replace(inner, made=call)
            return inner
        device = self.devices.device_of(call)
        if device is not None and device.kind != "unknown":
            return DeviceChoice(device, call)
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
                as_index or lowered in INDEX_NAMES or _looks_rank(lowered)
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
        if parts[0] not in _USER_ROOTS or len(parts) != 2:
            return None
        leaf = parts[1]
        default = self.option_default(leaf)
        if default is not None and not _is_none(default):
            inner = self._trace(default, as_index, seen)
            if inner is not None and inner.device.kind == "cuda":
                if inner.device.origin == "literal" and inner.chosen:
                    return DeviceChoice(
                        inner.device, expr, fallback=True, source=default, is_index=inner.is_index
                    )
        lowered = leaf.lower()
        if as_index or lowered in INDEX_NAMES or _looks_rank(lowered):
            origin = "rank" if _looks_rank(lowered) else "user"
            device = Device("cuda", None, origin, dotted)
            fallback = default is None or _is_none(default)
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
        """A compiled extension or custom CUDA op library the file imports, if any."""
        for qualname in self.names.imported_names():
            name = qualname.lstrip(".")
            parts = name.split(".")
            if name.startswith(("mmcv.ops", "mmdet.ops", "mmcv._ext", "torchvision.ops")):
                if name.startswith("torchvision"):
                    continue  # torchvision's ops guard the device of their inputs
                return name
            if any(p in ("_C", "_ext", "_cuda") or p.endswith(("_cuda", "_ext")) for p in parts):
                return name
            if name.endswith("cpp_extension.load") or name.endswith("cpp_extension.load_inline"):
                return name
        return None


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
        self._moved_models: Optional[Set[str]] = None
        self._submodules: Dict[cst.CSTNode, Dict[str, Optional[str]]] = {}

    # -- factories ----------------------------------------------------------------------------

    def factory_without_device(self, call: cst.Call) -> bool:
        """`torch.zeros(...)`-like with no `device=`, creating a non-scalar CPU tensor."""
        qualified = self.names.qualified(call.func)
        leaf = None
        for name in qualified:
            if name.startswith("torch.") and name.count(".") == 1:
                leaf = name.split(".")[1]
        if leaf not in TENSOR_FACTORIES:
            return False
        if any(arg.star == "**" for arg in call.args):
            return False
        if any(arg.keyword is not None and arg.keyword.value == "device" for arg in call.args):
            return False
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        if leaf == "tensor":
            # torch.tensor(2.0) is a 0-dim CPU tensor, which PyTorch accepts next to CUDA ones.
            while type(first) is cst.BinaryOperation:  # [0.1] + [1.0] * (n - 1)
                first = first.left
            return type(first) in (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)
        if type(first) in (cst.Tuple, cst.List) and not first.elements:
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
            from .frameworks import Frameworks

            return self.ctx.analysis(Frameworks).class_framework(cls) == "lightning"
        return False

    def on_device(self, expr: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Does `expr` evaluate to a tensor on the device (as far as the code shows)?"""
        return self._on_device(expr, self.device_names(scope), scope, 0)

    def device_partners(self, expr: cst.CSTNode, scope: cst.CSTNode) -> List[cst.Name]:
        """The device-tensor names `expr` is computed from, in order."""
        names = self.device_names(scope)
        out = []
        for node in [expr] + list(self.ctx.tree.descendants(expr)):
            if type(node) is cst.Name and node.value in names and self._is_read(node):
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
        with parameters inside `forward`."""
        func = call.func
        if type(func) is cst.Name and func.value in self.moved_models():
            return True
        layer = self.submodule_layer(call)
        if layer is not None and self.is_forward_like(scope):
            return layer not in _PARAMETERLESS_LAYERS
        return False

    def moved_models(self) -> Set[str]:
        """Names of models moved to a device (`model.to(device)`, `model = Net().cuda()`,
        `model = DDP(model, ...)`)."""
        if self._moved_models is None:
            found: Set[str] = set()
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in ("to", "cuda"):
                    if not self._moves_to_device(call):
                        continue
                    if type(func.value) is cst.Name:
                        found.add(func.value.value)
                    parent = self.ctx.parent(call)
                    if type(parent) is cst.Assign and len(parent.targets) == 1:
                        target = parent.targets[0].target
                        if type(target) is cst.Name:
                            found.add(target.value)
                elif self.names.is_(
                    func,
                    "torch.nn.DataParallel",
                    "torch.nn.parallel.DistributedDataParallel",
                ):
                    parent = self.ctx.parent(call)
                    if type(parent) is cst.Assign and len(parent.targets) == 1:
                        target = parent.targets[0].target
                        if type(target) is cst.Name:
                            found.add(target.value)
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
                if default is not None and not _is_none(default):
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
                    for name in _bound_name_list(target):
                        names.add(name)
            if (len(names), len(statements)) == before:
                break
        return names

    def _reached_by_device_value(self, name: cst.Name, scope: cst.CSTNode) -> bool:
        """Is a binding that puts `name` on the device one that reaches this use? Flow matters:
        in `t = torch.arange(n) * freqs; freqs = freqs.to(x.device)` the use of `freqs` sees the
        CPU value. Bindings other than plain assignments (parameters, loop targets, unpacking)
        keep the name-level answer."""
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
        params = list(method.params.posonly_params) + list(method.params.params)
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
        stack = list(reversed(_children(scope)))
        while stack:
            node = stack.pop()
            yield node
            if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                continue
            stack.extend(reversed(_children(node)))

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
                    return self._moves_to_device(expr)
            leaf = (dotted_name(func) or "").split(".")[-1]
            if type(func) is cst.Name and leaf in _DEVICE_KILLING_FUNCTIONS:
                return False
            if self.factory_without_device(expr):
                return False
            if self._factory_with_device(expr):
                return True
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

    def _moves_to_device(self, call: cst.Call) -> bool:
        """`.to(device)`, `.cuda()`, `.type_as(t)`: not `.to("cpu")` nor `.to(torch.float16)`."""
        func = call.func
        if type(func) is not cst.Attribute:
            return False
        if func.attr.value in ("cuda", "type_as"):
            return True
        target = None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                target = arg.value
        if target is None and call.args and call.args[0].keyword is None:
            target = call.args[0].value
        if target is None:
            return False
        dotted = dotted_name(target) or ""
        if dotted.startswith("torch.") and dotted.split(".")[-1] in _DTYPES:
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


_DTYPES = frozenset(
    {
        "float",
        "float16",
        "float32",
        "float64",
        "half",
        "double",
        "bfloat16",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "long",
        "int",
        "bool",
        "complex64",
        "complex128",
        "channels_last",
    }
)


def _bound_name_list(target: cst.CSTNode) -> List[str]:
    if type(target) is cst.Name:
        return [target.value]
    if type(target) in (cst.Tuple, cst.List):
        out: List[str] = []
        for element in target.elements:
            out.extend(_bound_name_list(element.value))
        return out
    if type(target) is cst.StarredElement:
        return _bound_name_list(target.value)
    return []


def reads_of_binding(ctx, target: cst.Name, statement: cst.CSTNode) -> List[cst.Name]:
    """The later reads of the name `target` bound by `statement` (an Assign) that this binding
    reaches, in its scope and scopes nested in it. `sd = rename(sd)` reads the earlier value."""
    scopes: Scopes = ctx.scopes
    scope = scopes.scope_of(statement)
    index = ctx.tree.index
    start = index.get(statement, -1)
    found: List[cst.Name] = []
    for name in ctx.nodes(cst.Name):
        if name.value != target.value or name is target or index.get(name, -1) <= start:
            continue
        if not _is_read_name(ctx, name):
            continue
        if any(ancestor is statement for ancestor in ctx.ancestors(name)):
            continue
        at = _read_position(ctx, name)
        if any(b.node is target for b in scopes.lookup(name.value, at)):
            if scopes.scope_of(name) is scope or any(
                ancestor is scope.node for ancestor in ctx.ancestors(name)
            ):
                found.append(name)
    return found


def _read_position(ctx, name: cst.Name) -> cst.CSTNode:
    for ancestor in ctx.ancestors(name):
        if type(ancestor) is cst.Assign:
            for target in ancestor.targets:
                if type(target.target) is cst.Name and target.target.value == name.value:
                    return ancestor
            return name
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return name
    return name


def _is_read_name(ctx, name: cst.Name) -> bool:
    parent = ctx.parent(name)
    if parent is None or type(parent) in (cst.AssignTarget, cst.Param, cst.AsName, cst.ImportAlias):
        return False
    if type(parent) is cst.Attribute and parent.attr is name:
        return False
    if type(parent) is cst.Arg and parent.keyword is name:
        return False
    if type(parent) in (cst.FunctionDef, cst.ClassDef) and parent.name is name:
        return False
    if type(parent) in (cst.For, cst.CompFor) and parent.target is name:
        return False
    if type(parent) in (cst.Tuple, cst.List, cst.Element):
        # a name inside an unpacking target
        for ancestor in ctx.ancestors(name):
            if type(ancestor) in (cst.AssignTarget, cst.For, cst.CompFor):
                target = getattr(ancestor, "target", None)
                if target is not None and any(
                    a is target for a in [name] + list(ctx.ancestors(name))
                ):
                    return False
            if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                break
    return True


def _option_dest(call: cst.Call) -> Optional[str]:
    """`add_argument("--gpu-id", ...)` -> "gpu_id" (or its `dest=`)."""
    dest = _keyword(call, "dest")
    if dest is not None:
        return _string_value(dest)
    flags = [_string_value(a.value) for a in call.args if a.keyword is None]
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


def _is_none(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _relative_path(ctx) -> str:
    """The file's path inside the project (a project that lives in a folder named `test` is not
    test code)."""
    path = os.path.abspath(ctx.path)
    root = getattr(ctx.settings, "root", None)
    if root is not None:
        root = os.path.abspath(str(root))
        if path.startswith(root.rstrip(os.sep) + os.sep):
            return path[len(root.rstrip(os.sep)) + 1 :]
    return ctx.path


def is_test_file(ctx) -> bool:
    """The file is test code (`tests/`, `test_*.py`, `*_test.py`, `conftest.py`, relative to the
    project root): tests pick their own devices and fail loudly on a mismatch (TRL105)."""
    return _is_test_path(_relative_path(ctx))


def _is_test_path(path: str) -> bool:
    normalized = path.replace("\\", "/")
    parts = normalized.split("/")
    name = parts[-1]
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        return True
    return any(p in ("tests", "test", "testing") for p in parts[:-1])


def _string_value(node: Optional[cst.CSTNode]) -> Optional[str]:
    if type(node) in (cst.SimpleString, cst.ConcatenatedString):
        value = string_value(node)
        return value if isinstance(value, str) else None
    return None


def parse_device_string(value: str) -> Optional[Device]:
    match = _DEVICE_STR.match(value)
    if match is None:
        return None
    index = int(match.group(2)) if match.group(2) is not None else None
    return Device(match.group(1), index, "literal" if index is not None else "current")


def index_origin(expr: cst.CSTNode) -> str:
    """Where a non-literal index comes from, judged by how it is spelled."""
    if type(expr) is cst.Call and expr.args:
        # int(os.environ["LOCAL_RANK"]), int(args.gpu)
        return index_origin(expr.args[0].value)
    if type(expr) is cst.Subscript:
        text = _flatten_text(expr)
        if "environ" in text:
            return "rank" if _looks_rank(text) else "user"
        return index_origin(expr.value)
    if type(expr) is cst.Attribute:
        dotted = dotted_name(expr) or ""
        leaf = expr.attr.value
        if _looks_rank(leaf):
            return "rank"
        if dotted.split(".")[0] in _USER_ROOTS or _looks_user(leaf):
            return "user"
        return "unknown"
    if type(expr) is cst.Name:
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
# Method calls `move()` may take for a move.
_MOVE_METHODS = frozenset({"to", "cuda", "type_as"})
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
        # id(call) -> (call, its move or None): every analysis asks for the moves of the same
        # calls (the dataflow, the summaries, the placements). The entry keeps the call alive,
        # so its id is not reused while it is remembered.
        self._moves: Dict[int, Tuple[cst.Call, Optional[Move]]] = {}
        self._move_calls: Optional[bool] = None
        self._may_move: Optional[bool] = None

    # -- whole file ---------------------------------------------------------------------------

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
            found = self._may_move = self.has_move_calls() or any(
                name.rsplit(".", 1)[-1] in text for name in self.mover_names
            )
        return found

    # -- one move -----------------------------------------------------------------------------

    def move(self, node: cst.CSTNode) -> Optional[Move]:
        """The move `node` performs, if it is one (moves to the CPU are not moves)."""
        if type(node) is not cst.Call:
            return None
        entry = self._moves.get(id(node))
        if entry is None:
            entry = self._moves[id(node)] = (node, self._move(node))
        return entry[1]

    def _move(self, node: cst.Call) -> Optional[Move]:
        func = node.func
        non_blocking = _kw_true(node, "non_blocking")
        if type(func) is cst.Attribute:
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
                type(func) is cst.Call
                or (type(func) is cst.Name and func.value in ("tuple", "list", "dict", "set"))
            ) and expr.args:
                return self.is_moved(expr.args[0].value, depth)
            return False
        if type(expr) in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
            return self.is_moved(expr.elt, depth)
        if type(expr) is cst.DictComp:
            return self.is_moved(expr.value, depth)
        if type(expr) in (cst.List, cst.Tuple, cst.Set):
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
            stack.extend(reversed(_children(node)))
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
        if not params or not self.may_move():
            return frozenset()
        nodes = list(_descendants(function.body))
        derived: Dict[str, Set[str]] = {}
        moved: Set[int] = set()
        for node in nodes:
            node_type = type(node)
            if node_type is not cst.Call and node_type is not cst.Assign:
                continue
            if node_type is cst.Call:
                if self.move(node) is None and not self.is_moved(node):
                    continue
                mentioned = self._data_names(node)
            elif type(node) is cst.Assign and any(
                type(t.target) in (cst.Subscript, cst.Attribute) for t in node.targets
            ):
                # batch[k] = batch[k].to(dev): moved in place
                if not self.is_moved(node.value):
                    continue
                mentioned = set()
                for t in node.targets:
                    mentioned |= _names_in(t.target)
            else:
                continue
            if not derived:
                derived = self._derived_names(params, nodes)
            for index, param in enumerate(params):
                if mentioned & derived[param]:
                    moved.add(index)
        return frozenset(moved)

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
                skip.update(_descendants(move.device))
        return {n.value for n in _descendants(expr) if type(n) is cst.Name and n not in skip}

    def _data_names(self, expr: cst.CSTNode, _depth: int = 0) -> Set[str]:
        """Names whose values a moving expression moves (its receiver, the items of a
        comprehension or map, a helper's first argument), not the device argument."""
        if _depth > 8:
            return set()
        d = _depth + 1
        if type(expr) is cst.Name:
            return {expr.value}
        if type(expr) in (cst.Attribute, cst.Subscript):
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
            return self._data_names(positional[0], d) if positional else set()
        if type(expr) in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
            names: Set[str] = set()
            comp = expr.for_in
            while comp is not None:
                names |= _names_in(comp.iter)
                comp = comp.inner_for_in
            inner = expr.value if type(expr) is cst.DictComp else expr.elt
            return names | self._data_names(inner, d)
        if type(expr) in (cst.List, cst.Tuple, cst.Set):
            return set().union(*(self._data_names(e.value, d) for e in expr.elements))
        if type(expr) is cst.IfExp:
            return self._data_names(expr.body, d) | self._data_names(expr.orelse, d)
        return _names_in(expr)

    # -- same-file functions ------------------------------------------------------------------

    def _function_for(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The function of this file a callee expression names (`helper`, `self.helper`)."""
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) is cst.FunctionDef:
                    return binding.node
            return None
        if type(func) is cst.Attribute and type(func.value) is cst.Name:
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
            return {MOVED}
        if type(value) is cst.Call:
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
            if type(func) is cst.Attribute and func.attr.value in _MODULE_RETURNS_SELF:
                return set(self.placement(func.value, depth + 1))
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
        if type(function) is not cst.FunctionDef:
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
            if type(ancestor) is cst.ClassDef:
                cls = ancestor
                break
        if cls is None:
            return {UNKNOWN_PLACEMENT}
        attr = expr.attr.value
        found: Set[str] = set()
        events: List[cst.CSTNode] = []
        for node in _descendants(cls.body):
            if type(node) is cst.Assign:
                if any(_is_self_attr(target.target, attr) for target in node.targets):
                    events.append(node)
            elif type(node) is cst.Call:
                move = self.move(node)
                if move is not None and move.method in ("to", "cuda"):
                    if move.receiver is not None and _is_self_attr(move.receiver, attr):
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
                if type(func) is not cst.Attribute or type(func.value) is not cst.Name:
                    continue
                name = func.value.value
                for ancestor in self.ctx.ancestors(node):
                    if type(ancestor) in holders:
                        index.setdefault(id(ancestor), {}).setdefault(name, []).append(node)
        return index.get(id(scope_node), {})

    def _placement_statement(self, call: cst.Call, name: str) -> Optional[str]:
        func = call.func
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
    return type(value) is cst.Name and value.value == "True"


def _positional_params(function: cst.FunctionDef) -> List[cst.Param]:
    return list(function.params.posonly_params) + list(function.params.params)


def _is_method_call(call: cst.Call, function: cst.FunctionDef) -> bool:
    params = _positional_params(function)
    return (
        type(call.func) is cst.Attribute
        and bool(params)
        and params[0].name.value in ("self", "cls")
    )


def _is_self_attr(node: cst.CSTNode, attr: str) -> bool:
    return (
        type(node) is cst.Attribute
        and type(node.value) is cst.Name
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
    return {n.value for n in _descendants(node) if type(n) is cst.Name}


def _target_names(target: cst.CSTNode) -> Set[str]:
    if type(target) is cst.Name:
        return {target.value}
    if type(target) in (cst.Tuple, cst.List):
        out: Set[str] = set()
        for element in target.elements:
            out |= _target_names(element.value)
        return out
    if type(target) is cst.StarredElement:
        return _target_names(target.value)
    return set()


def _binding_pairs(node: cst.CSTNode):
    """(names bound, expression they come from) for assignments and loops."""
    if type(node) is cst.Assign:
        names: Set[str] = set()
        for t in node.targets:
            names |= _target_names(t.target)
        return [(names, node.value)]
    if type(node) in (cst.For, cst.CompFor):
        return [(_target_names(node.target), node.iter)]
    return []
