"""Placements on a chosen device next to placements on the bare current GPU (TRL107).

A script that lets its user (or its caller) choose the device (`--device`, `cfg.device`, a
`device` parameter, a literal `"cuda:1"`) and also places things with `.cuda()`, `"cuda"` or
`torch.device("cuda")` sends the two halves to different GPUs as soon as the choice is not GPU 0:
the bare forms mean the *current* device, which stays GPU 0 unless `torch.cuda.set_device` (or
`CUDA_VISIBLE_DEVICES`, or a launcher that sets it) says otherwise.

`MixedPlacements` finds both kinds of placement and tells which of them lie on one path of the
script: the same function, functions one calls (through this file's call graph), functions one
caller runs both of, or methods of one class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from ..base.calls import argument, keyword, string_literal
from ..base.callgraph import CallGraph
from ..base.names import Names, dotted_name
from ..base.scopes import Scopes
from .choices import DeviceChoices
from .expressions import USER_ROOTS, looks_rank, parse_device_string
from .. import Analysis
from ..base.nodes import positional_params

# Calls whose `device=` is not where tensors or modules are put.
_NOT_PLACEMENT = frozenset(
    {"print", "info", "debug", "warning", "log", "format", "str", "set_device", "device"}
)
# How many levels of same-file calls a path is followed through.
_FOLLOW = 3
# How many expressions one device question may visit through names bound to names (`d2 = d1`):
# the traces recurse once per link, and a longer chain is unknown (quiet), never a
# RecursionError.
_MAX_TRACE = 200


@dataclass(frozen=True)
class BarePlacement:
    """`.cuda()`, `.to("cuda")`, `device="cuda"`: onto whatever the current GPU is."""

    call: cst.Call
    node: cst.CSTNode  # what a report points at: the `.cuda()` call or the device argument
    form: str  # how the message shows it: `.cuda()`, `"cuda"`, `torch.device("cuda")`
    # the device argument a fix replaces (None for `.cuda()`, where the call is rewritten)
    device: Optional[cst.BaseExpression] = None


@dataclass(frozen=True)
class ChosenPlacement:
    """A placement on a device chosen by the user or the caller."""

    call: cst.Call
    expr: cst.BaseExpression  # the device expression as the call gets it
    origin: str  # option (args.device), parameter (a `device` parameter), attribute, literal
    made: cst.CSTNode  # where the choice comes from (the parameter, the option read, ...)


class MixedPlacements(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.choices: DeviceChoices = ctx.analysis(DeviceChoices)
        self.callgraph: CallGraph = ctx.analysis(CallGraph)
        self._bare: Optional[List[BarePlacement]] = None
        self._chosen: Optional[List[ChosenPlacement]] = None
        self._reach: Dict[cst.CSTNode, Set[cst.CSTNode]] = {}
        self._assigned: Optional[Dict[str, List[cst.BaseExpression]]] = None
        self._links: Dict[Tuple[cst.CSTNode, cst.CSTNode], Optional[str]] = {}

    # -- the two kinds of placement -----------------------------------------------------------

    def bare(self) -> List[BarePlacement]:
        if self._bare is None:
            found: List[BarePlacement] = []
            for call in self.ctx.nodes(cst.Call):
                site = self._bare_site(call)
                if site is not None:
                    found.append(site)
            self._bare = found
        return self._bare

    def chosen(self) -> List[ChosenPlacement]:
        if self._chosen is None:
            found: List[ChosenPlacement] = []
            for placement in self.choices.placements():
                if not placement.direct or placement.as_index:
                    continue
                if keyword(placement.call, "map_location") is placement.expr:
                    continue  # `load_state_dict` copies what was loaded onto the parameters

                made = self.choice(placement.expr)
                if made is not None:
                    found.append(ChosenPlacement(placement.call, placement.expr, *made))
            self._chosen = found
        return self._chosen

    def _bare_site(self, call: cst.Call) -> Optional[BarePlacement]:
        func = call.func
        method = func.attr.value if type(func) is cst.Attribute else None
        if method == "cuda" and type(func) is cst.Attribute:
            if dotted_name(func.value) == "torch" or self.callgraph.callee(call) is not None:
                return None  # `torch.cuda`; `self.cuda(*items)`, a method of the file's class
            if argument(call, 0, "device") is None:
                return BarePlacement(call, call, ".cuda()")
            return None
        device = argument(call, 0, "device") if method == "to" else keyword(call, "device")
        if device is None:
            return None
        leaf = method or (dotted_name(func) or "").split(".")[-1]
        if leaf in _NOT_PLACEMENT or self.names.is_(func, "torch.device"):
            return None
        form = self._bare_form(device, set())
        if form is None:
            return None
        return BarePlacement(call, device, form, device)

    def _bare_form(self, expr: cst.BaseExpression, seen: Set[cst.CSTNode]) -> Optional[str]:
        """`"cuda"`, `"cuda:0"`, `torch.device("cuda")`, or a name only ever bound to one."""
        if expr in seen or len(seen) >= _MAX_TRACE:
            return None
        seen.add(expr)
        text = string_literal(expr)
        if text is not None:
            device = parse_device_string(text)
            if device is not None and device.kind == "cuda" and device.index in (None, 0):
                return f'"{text.strip()}"'
            return None
        if type(expr) is cst.Call and self.names.is_(expr.func, "torch.device"):
            first = argument(expr, 0, "type")
            index = argument(expr, 1, "index")
            if first is None or (index is not None and self.ctx.code(index) != "0"):
                return None
            inner = self._bare_form(first, seen)
            return f"torch.device({inner})" if inner is not None else None
        if type(expr) is cst.Name:
            bindings = self.scopes.lookup(expr.value, expr)
            if not bindings:
                return None
            forms = set()
            for binding in bindings:
                if binding.kind not in ("assign", "annassign") or binding.value is None:
                    return None
                form = self._bare_form(binding.value, seen)
                if form is None:
                    return None
                forms.add(form)
            return next(iter(forms)) if len(forms) == 1 else None
        return None

    # -- device choices -----------------------------------------------------------------------

    def choice(self, expr: cst.BaseExpression) -> Optional[tuple]:
        """(origin, where it is made) when `expr` is a device the user or the caller chooses
        and that may name any GPU; None otherwise (a bare "cuda", the rank's GPU, another
        tensor's `.device`, an accelerator's device)."""
        return self._choice(expr, set())

    def _choice(self, expr: cst.CSTNode, seen: Set[cst.CSTNode]) -> Optional[tuple]:
        if expr in seen or len(seen) >= _MAX_TRACE:
            return None
        seen.add(expr)
        if string_literal(expr) is not None:
            # A literal GPU (`"cuda:1"`) beside `.cuda()` is as often two models placed on
            # purpose; TRL102 reports the literal itself.
            return None
        if type(expr) is cst.FormattedString or type(expr) is cst.Subscript:
            return None
        if type(expr) is cst.IfExp:
            return self._choice(expr.body, seen) or self._choice(expr.orelse, seen)
        if type(expr) is cst.Call:
            if self.names.is_(expr.func, "torch.device"):
                index = argument(expr, 1, "index")
                if index is not None:
                    return None  # torch.device("cuda", rank): TRL103/TRL305's question
                first = argument(expr, 0, "type")
                return self._choice(first, seen) if first is not None else None
            if self.names.is_(expr.func, "str") and expr.args:
                return self._choice(expr.args[0].value, seen)
            return None
        if type(expr) is cst.Attribute:
            return self._attribute_choice(expr, seen)
        if type(expr) is cst.Name:
            for binding in self.scopes.lookup(expr.value, expr):
                if binding.kind == "param":
                    if self._chosen_parameter(binding.node, seen):
                        return ("parameter", binding.node)
                    continue
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    found = self._choice(binding.value, seen)
                    if found is not None:
                        return found
        return None

    def _chosen_parameter(self, param: cst.CSTNode, seen: Set[cst.CSTNode]) -> bool:
        """A parameter used as the device is the caller's choice, unless every call of its
        function in this file passes a bare CUDA device (`device = torch.device("cuda")` in
        `main`, handed to `train(model, loader, device)`) or nothing chosen."""
        if type(param) is not cst.Param or looks_rank(param.name.value):
            return False
        if self._in_lambda(param):
            return False
        function = next(
            (a for a in self.ctx.ancestors(param) if type(a) is cst.FunctionDef), None
        )
        if function is None:
            return False
        calls = self.callgraph.callers(function)
        if not calls:
            return True  # called from another file or a library: anything may come in
        for call in calls:
            passed = _argument_for(function, call, param)
            if passed is _UNKNOWN:
                return True
            if passed is None:
                passed = param.default
            if passed is None:
                continue
            if self._choice(passed, seen) is not None or self._literal_gpu(passed, set()):
                return True
        return False

    def _literal_gpu(self, expr: cst.BaseExpression, seen: Set[cst.CSTNode]) -> bool:
        """`"cuda:1"`, `torch.device("cuda", 1)`, or a name bound to one: handed to a function
        that also uses `.cuda()`, the two halves are on different GPUs whatever the intent."""
        if expr in seen or len(seen) >= _MAX_TRACE:
            return False
        seen.add(expr)
        text = string_literal(expr)
        if text is not None:
            device = parse_device_string(text)
            return device is not None and device.kind == "cuda" and device.index not in (None, 0)
        if type(expr) is cst.Call and self.names.is_(expr.func, "torch.device"):
            first, index = argument(expr, 0, "type"), argument(expr, 1, "index")
            if index is not None:
                return type(index) is cst.Integer and int(index.value, 0) != 0
            return first is not None and self._literal_gpu(first, seen)
        if type(expr) is cst.Name:
            return any(
                binding.kind in ("assign", "annassign")
                and binding.value is not None
                and self._literal_gpu(binding.value, seen)
                for binding in self.scopes.lookup(expr.value, expr)
            )
        return False

    def _attribute_choice(self, expr: cst.Attribute, seen: Set[cst.CSTNode]) -> Optional[tuple]:
        if not _is_device_word(expr.attr.value):
            return None
        dotted = dotted_name(expr)
        if dotted is None:
            return None
        parts = dotted.split(".")
        if not _is_device_word(parts[-1]):
            return None
        if any(part in USER_ROOTS for part in parts[:-1]):
            # `args.device = torch.device("cuda" if ... else "cpu")` set by the script itself
            # (the old HF examples): what it assigns decides, not the option's name.
            assigned = self._assigned_attribute(dotted)
            if assigned and not any(self._choice(value, seen) for value in assigned):
                return None
            return ("option", expr)
        if parts[0] == "self" and len(parts) == 2:
            cls = next((a for a in self.ctx.ancestors(expr) if type(a) is cst.ClassDef), None)
            if cls is None:
                return None
            for node in self.ctx.tree.descendants(cls.body):
                if type(node) is not cst.Assign:
                    continue
                for target in node.targets:
                    written = target.target
                    if type(written) is cst.Attribute and dotted_name(written) == dotted:
                        found = self._choice(node.value, seen)
                        if found is not None:
                            return ("attribute", found[1])
        return None

    def makes_choice(self) -> bool:
        """Does this file choose a device that may name any GPU: read a device option or config
        field (`args.device`, `cfg.device`), or write a literal other GPU (`"cuda:1"`)? A file
        handing such a choice to a function of another file makes that function's `device`
        parameter a real choice."""
        for node in self.ctx.nodes(cst.Attribute):
            if _is_device_word(node.attr.value) and self._attribute_choice(node, set()):
                return True
        return any(site.index != 0 for site in self.choices.hardcoded_indices())

    def caller_in_file(self, param: cst.CSTNode) -> bool:
        """Is the function that has this parameter called in this file?"""
        function = next(
            (a for a in self.ctx.ancestors(param) if type(a) is cst.FunctionDef), None
        )
        return function is not None and bool(self.callgraph.callers(function))

    def _assigned_attribute(self, dotted: str) -> List[cst.BaseExpression]:
        """The values this file assigns to the attribute `dotted` (`args.device = ...`)."""
        if self._assigned is None:
            table: Dict[str, List[cst.BaseExpression]] = {}
            for node in self.ctx.nodes(cst.Assign):
                for target in node.targets:
                    if type(target.target) is cst.Attribute:
                        name = dotted_name(target.target)
                        if name is not None:
                            table.setdefault(name, []).append(node.value)
            self._assigned = table
        return self._assigned.get(dotted, [])

    def _in_lambda(self, node: cst.CSTNode) -> bool:
        return any(type(a) is cst.Lambda for a in self.ctx.ancestors(node))

    # -- paths --------------------------------------------------------------------------------

    def owner(self, node: cst.CSTNode) -> cst.CSTNode:
        """The function whose body holds `node`, else the module."""
        function = self.scopes.enclosing_function(node)
        return function if function is not None else self.ctx.module

    def reach(self, owner: cst.CSTNode) -> Set[cst.CSTNode]:
        """`owner` and the functions of this file its body calls (a few levels down)."""
        found = self._reach.get(owner)
        if found is None:
            body = owner.body if type(owner) is cst.FunctionDef else owner
            found = {owner}
            for call, _chain in self.callgraph.calls_in(body, follow=_FOLLOW):
                target = self.callgraph.function_for(call.func)
                if target is not None:
                    found.add(target)
            self._reach[owner] = found
        return found

    def one_path(self, a: cst.CSTNode, b: cst.CSTNode) -> Optional[str]:
        """How two sites lie on one path of the script: "function" (one function's body),
        "calls" (one calls the other's function), "caller" (a function or the module runs
        both), "class" (methods of one class); None when nothing links them."""
        owner_a, owner_b = self.owner(a), self.owner(b)
        if owner_a is owner_b:
            return "function"
        key = (owner_a, owner_b)
        if key not in self._links:
            self._links[key] = self._link(owner_a, owner_b)
        return self._links[key]

    def _link(self, owner_a: cst.CSTNode, owner_b: cst.CSTNode) -> Optional[str]:
        if owner_b in self.reach(owner_a) or owner_a in self.reach(owner_b):
            return "calls"
        class_a = self._class_of(owner_a)
        if class_a is not None and class_a is self._class_of(owner_b):
            return "class"
        for caller in self._callers():
            reached = self.reach(caller)
            if owner_a in reached and owner_b in reached:
                return "caller"
        return None

    def _class_of(self, owner: cst.CSTNode) -> Optional[cst.CSTNode]:
        if type(owner) is not cst.FunctionDef:
            return None
        block = self.ctx.parent(owner)
        parent = self.ctx.parent(block) if block is not None else None
        return parent if type(parent) is cst.ClassDef else None

    def _callers(self) -> List[cst.CSTNode]:
        return [self.ctx.module, *self.ctx.nodes(cst.FunctionDef)]


_UNKNOWN = cst.Name("_unknown_argument")  # a call whose arguments cannot be matched


def _argument_for(
    function: cst.FunctionDef, call: cst.Call, param: cst.Param
) -> Optional[cst.BaseExpression]:
    """What `call` passes for `param` (None when it passes nothing: the default applies)."""
    name = param.name.value
    for arg in call.args:
        if arg.star:
            return _UNKNOWN
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    positional = positional_params(function)
    if param not in positional:
        return None
    index = positional.index(param)
    if positional and positional[0].name.value in ("self", "cls"):
        if type(call.func) is cst.Attribute:
            index -= 1
    given = [arg for arg in call.args if arg.keyword is None]
    return given[index].value if 0 <= index < len(given) else None


def _is_device_word(name: str) -> bool:
    """`device`, `train_device`, `device_str`: a name for one device (not `device_ids`, a count,
    or a type)."""
    lowered = name.lower()
    if lowered.startswith(("device_id", "device_idx", "device_index", "device_count")):
        return False  # a GPU number or a count (`.cuda(device_id)` is TRL103's question)
    if lowered in ("device_type", "device_map", "device_name"):
        return False
    return lowered == "device" or lowered.endswith("_device") or lowered.startswith("device_")


__all__ = ["BarePlacement", "ChosenPlacement", "MixedPlacements"]
