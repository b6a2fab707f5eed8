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
from typing import Dict, List, Optional, Set

import libcst as cst

from ...walk import own_nodes
from ..base.calls import string_literal, string_value
from ..base.conditions import Conditions
from ..base.names import Names, dotted_name
from ..base.scopes import Scopes
from .. import Analysis


# torch.cuda.FloatTensor, torch.cuda.LongTensor, ...: the legacy CUDA tensor types.
_CUDA_TENSOR_TYPE = re.compile(r"^torch\.cuda\.[A-Za-z]*Tensor$")
_DEVICE_STR = re.compile(r"^\s*(cuda|cpu|mps|meta|xla|xpu|hpu|npu|privateuseone)(?::(\d+))?\s*$")
# Objects that hold command-line or config values.
USER_ROOTS = {
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
    # Known only as a parameter's default (`def get_batch(reader, device="cpu")`): the device
    # of a call that leaves the argument out; a caller may pass any other.
    default: bool = field(default=False, compare=False)

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
        self._assigned_attributes: Optional[Dict[str, list]] = None

    def cuda_declined(self, node: cst.CSTNode) -> bool:
        """Does `node` run only where the script chose not to use CUDA: on the false side of
        `if torch.cuda.is_available():`, or of a flag every assignment of which is that test
        (`CUDA = torch.cuda.is_available()`) or an `and` chain ending in it (`args.cuda = not
        args.no_cuda and torch.cuda.is_available()`)? There the code it guards runs on the CPU,
        and whatever the true side moves stays where it was."""
        conditions: Conditions = self.ctx.analysis(Conditions)
        return any(
            not holds and self._cuda_test(test, branch)
            for branch, test, holds in conditions.branch_tests(node)
        )

    def _cuda_test(self, test: cst.BaseExpression, at: cst.CSTNode) -> bool:
        if self._asks_cuda(test):
            return True
        if type(test) is cst.Name:
            bindings = self.scopes.lookup(test.value, at)
            return bool(bindings) and all(
                b.kind == "assign" and b.value is not None and self._asks_cuda(b.value)
                for b in bindings
            )
        if type(test) is cst.Attribute:
            values = self._attribute_values().get(self.ctx.code(test)) or []
            return bool(values) and all(self._asks_cuda(v) for v in values)
        return False

    def _asks_cuda(self, expr: cst.BaseExpression) -> bool:
        """`torch.cuda.is_available()`, alone or as the last conjunct of an `and` chain."""
        while type(expr) is cst.BooleanOperation and type(expr.operator) is cst.And:
            expr = expr.right
        return type(expr) is cst.Call and "torch.cuda.is_available" in self.names.qualified(
            expr.func
        )

    def _attribute_values(self) -> Dict[str, list]:
        """`args.cuda` -> the values the file assigns to it."""
        if self._assigned_attributes is None:
            found: Dict[str, list] = {}
            for assign in self.ctx.nodes(cst.Assign):
                for target in assign.targets:
                    if type(target.target) is cst.Attribute:
                        found.setdefault(self.ctx.code(target.target), []).append(assign.value)
            self._assigned_attributes = found
        return self._assigned_attributes

    def device_of(self, expr: Optional[cst.BaseExpression]) -> Optional[Device]:
        """What `expr` denotes as a device; None when it is not recognisably a device."""
        if expr is None:
            return None
        return self._device(expr, set())

    def cpu_functions(self) -> List[str]:
        """The module-level functions whose every `return` gives the CPU device (`def
        get_device(): return 'cpu'`, with the GPU line commented out): what a file that takes
        its device from one of them moves stays on the CPU."""
        found = []
        for statement in self.ctx.module.body:
            if type(statement) is not cst.FunctionDef:
                continue
            returned = [
                self.device_of(node.value)
                for node in own_nodes(statement)
                if type(node) is cst.Return
            ]
            if returned and all(d is not None and d.kind == "cpu" for d in returned):
                found.append(statement.name.value)
        return found

    def cuda_index(self, expr: cst.BaseExpression) -> Device:
        """What an integer-valued CUDA index (`.cuda(i)`, `set_device(i)`, `device_ids[0]`)
        denotes."""
        if type(expr) is cst.Integer:
            return Device("cuda", int(expr.value, 0), "literal")
        found = self.device_of(expr)
        if found is not None and found.kind == "cuda":
            return found
        return Device("cuda", None, self._index_origin(expr), self.ctx.code(expr))

    def is_cuda_tensor_type(self, expr: Optional[cst.BaseExpression], _depth: int = 0) -> bool:
        """Is `expr` a legacy CUDA tensor type (`torch.cuda.FloatTensor`, the string
        "torch.cuda.FloatTensor", or a name bound to one, such as `Tensor =
        torch.cuda.FloatTensor if cuda else torch.FloatTensor`)? `x.type(T)` moves `x` to the
        current GPU and `T(n, 1)` creates there. Where the name may also be the CPU type, the
        CUDA side is the one a run on a GPU takes, as for `"cuda" if ... else "cpu"`."""
        if expr is None or _depth > 4:
            return False
        if type(expr) is cst.SimpleString:
            value = string_literal(expr)
            return value is not None and _CUDA_TENSOR_TYPE.match(value) is not None
        if type(expr) is cst.IfExp:
            return self.is_cuda_tensor_type(
                expr.body, _depth + 1
            ) or self.is_cuda_tensor_type(expr.orelse, _depth + 1)
        if type(expr) is cst.Attribute:
            return any(_CUDA_TENSOR_TYPE.match(q) for q in self.names.qualified(expr))
        if type(expr) is cst.Name:
            if any(_CUDA_TENSOR_TYPE.match(q) for q in self.names.qualified(expr)):
                return True  # from torch.cuda import FloatTensor
            bindings = self.scopes.lookup(expr.value, expr)
            return any(
                b.kind in ("assign", "annassign")
                and b.value is not None
                and self.is_cuda_tensor_type(b.value, _depth + 1)
                for b in bindings
            )
        return False

    # -- the cases ----------------------------------------------------------------------------

    def _device(self, expr: cst.CSTNode, seen: Set[cst.CSTNode]) -> Optional[Device]:
        if expr in seen:
            return None
        seen.add(expr)
        if type(expr) is cst.SimpleString or type(expr) is cst.ConcatenatedString:
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
                text = string_literal(template)
                if text is None or re.match(r"^\s*(cuda|xpu|npu|hpu):\{\}\s*$", text) is None:
                    return None
        elif type(expr) is cst.BinaryOperation:
            template, index = expr.left, expr.right
            text = string_literal(template)
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
        kind = (string_literal(template) or "").strip().split(":")[0]
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
                    found.append(Device(dev.kind, dev.index, dev.origin, default=True))
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
        assigned = self._assigned_device(expr)
        if assigned is not None:
            return assigned
        dotted = dotted_name(expr) or ""
        root = dotted.split(".")[0]
        if root in USER_ROOTS:
            return Device("unknown", None, "user")
        if expr.attr.value == "device":
            return Device("unknown", None, "unknown")
        return None

    def _assigned_device(self, expr: cst.Attribute) -> Optional[Device]:
        """`opt.device` where every assignment the file makes to it builds a device from one
        index chosen at run time (`opt.device = torch.device("cuda:{}".format(opt.gpus[0]))`):
        that device, with the index's text, so that `DataParallel(model,
        device_ids=opt.gpus).cuda(opt.device)` is seen to move to device_ids[0]. A literal or
        the current device is not taken from such an assignment: the option may hold another
        value where the assignment has not run."""
        values = self._attribute_values().get(self.ctx.code(expr)) or []
        found = [self._device(value, set()) for value in values]
        first = found[0] if found else None
        if first is None or first.index_text is None or not first.user_chosen:
            return None
        if any(
            d is None or d != first or d.index_text != first.index_text for d in found[1:]
        ):
            return None
        return first

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
                    return "rank" if looks_rank(expr.value) else "user"
        return "unknown"


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
            return "rank" if looks_rank(text) else "user"
        return index_origin(expr.value)
    if type(expr) is cst.Attribute:
        dotted = dotted_name(expr) or ""
        leaf = expr.attr.value
        if looks_rank(leaf):
            return "rank"
        if dotted.split(".")[0] in USER_ROOTS or _looks_user(leaf):
            return "user"
        return "unknown"
    if type(expr) is cst.Name:
        if looks_rank(expr.value):
            return "rank"
        if _looks_user(expr.value):
            return "user"
    return "unknown"


def looks_rank(text: str) -> bool:
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
