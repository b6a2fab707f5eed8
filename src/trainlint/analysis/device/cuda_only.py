"""Where a script can only run with a GPU, on the first one it sees (TRL104).

A script that moves its model with a bare `.cuda()`, places on a hard-coded "cuda" or
"cuda:0", or makes CUDA tensors the default type, on a line every run of it takes, runs only
on a machine with CUDA. There a checkpoint saved from cuda:0, which is where such a script (or
any single-process GPU run) saves from, has its device. Code reached only through such a line
is "CUDA-only".

A use counts when nothing between it and its function (or the module) can skip it: no `if`,
conditional expression, `try`, `while`, boolean operator or lambda around it, and, for a
placement on a named device, none around the binding of that name either; the
`if __name__ == "__main__":` block counts as what a script's run takes. Code is CUDA-only
when
- the module runs such a use at import time (everything in the file);
- its function runs one, or it is a method of a class whose `__init__` runs one (the method
  runs on an instance that was built);
- every call of this file to its function is itself CUDA-only (a function nothing in the file
  calls is not).

Not established at all for a file that chooses GPUs: one with a non-zero or run-time CUDA
index (`.cuda(args.gpu)`, "cuda:1", `device_ids=[args.gpu]`), a `set_device`, or a process
group, per-process spawn or LOCAL_RANK read (one process per GPU, each of which may load onto
the GPU a checkpoint names).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Union

import libcst as cst

from ..base.callgraph import CallGraph
from ..base.calls import string_literal
from ..base.names import Names
from ..base.nodes import follows_exit
from ..parallel.parallel import Parallel
from .choices import DeviceChoices, Placement
from .expressions import Devices, parse_device_string
from .. import Analysis

# The module's own code, and the `if __name__ == "__main__":` block of a script.
_MODULE = "module"
_MAIN = "main"
Context = Union[cst.FunctionDef, str]

# Between a use and its function, any of these may skip it (or take another branch).
_SKIPPING = (
    cst.If,
    cst.Else,
    cst.IfExp,
    cst.Try,
    cst.TryStar,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.While,
    cst.BooleanOperation,
    cst.Lambda,
    cst.CompIf,
)
_DEFAULT_TYPE_SETTERS = ("torch.set_default_tensor_type", "torch.set_default_device")
_PROCESS_ENV = ("LOCAL_RANK", "RANK", "WORLD_SIZE")


class CudaOnly(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.calls: CallGraph = ctx.analysis(CallGraph)
        self.choices: DeviceChoices = ctx.analysis(DeviceChoices)
        self.devices: Devices = ctx.analysis(Devices)
        self._uses_by_context: Optional[Dict[Context, List[cst.CSTNode]]] = None
        self._chooses: Optional[bool] = None
        self._covered: Dict[Context, bool] = {}
        self._placements_by_call: Optional[Dict[cst.Call, List[Placement]]] = None

    def only_on_cuda(self, node: cst.CSTNode) -> bool:
        """Does `node` run only on a machine with CUDA, in a process that uses the first GPU
        it sees (a file that chooses GPUs never answers yes)?"""
        if self._chooses_gpus():
            return False
        return self._context_covered(self._context_of(node), set())

    def uses(self) -> Dict[Context, List[cst.CSTNode]]:
        """The unskippable CUDA uses of the file, by the function (or module part) they are in."""
        if self._uses_by_context is None:
            found: Dict[Context, List[cst.CSTNode]] = {}
            for call in self.ctx.nodes(cst.Call):
                if self._is_cuda_use(call) and self._unskippable(call):
                    found.setdefault(self._context_of(call), []).append(call)
            self._uses_by_context = found
        return self._uses_by_context

    # -- which code is CUDA-only ------------------------------------------------------------

    def _context_covered(self, context: Context, seen: Set[Context]) -> bool:
        uses = self.uses()
        if uses.get(_MODULE):
            return True  # the file's own import runs it
        if context == _MAIN:
            return bool(uses.get(_MAIN))
        if context == _MODULE or context in seen:
            return False
        assert isinstance(context, cst.FunctionDef)
        known = self._covered.get(context)
        if known is not None:
            return known
        seen.add(context)
        covered = bool(uses.get(context)) or self._built_on_cuda(context)
        if not covered:
            callers = self.calls.callers(context)
            covered = bool(callers) and all(
                self._context_covered(self._context_of(call), seen) for call in callers
            )
        self._covered[context] = covered
        return covered

    def _built_on_cuda(self, method: cst.FunctionDef) -> bool:
        """A method of a class whose `__init__` runs a CUDA use: an instance exists only where
        CUDA does."""
        parent = self.ctx.parent(method)
        block = self.ctx.parent(parent) if parent is not None else None
        if type(block) is not cst.ClassDef or method.name.value == "__init__":
            return False
        for statement in block.body.body if type(block.body) is cst.IndentedBlock else ():
            if type(statement) is cst.FunctionDef and statement.name.value == "__init__":
                return bool(self.uses().get(statement))
        return False

    def _context_of(self, node: cst.CSTNode) -> Context:
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.FunctionDef:
                return ancestor
            if type(ancestor) is cst.If and child is not ancestor.test and _is_main_test(
                self.ctx, ancestor.test
            ):
                return _MAIN
            child = ancestor
        return _MODULE

    def _unskippable(self, node: cst.CSTNode) -> bool:
        if follows_exit(self.ctx, node):
            return False
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Module):
                return True
            if type(ancestor) is cst.If and _is_main_test(self.ctx, ancestor.test):
                if child is ancestor.body:
                    return True
            if isinstance(ancestor, _SKIPPING):
                return False
            child = ancestor
        return True

    # -- what a CUDA use is -------------------------------------------------------------------

    def _is_cuda_use(self, call: cst.Call) -> bool:
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "cuda":
            if self.names.is_(func, "torch.cuda") or self.calls.callee(call) is not None:
                return False  # `self.cuda(*items)`: a method of the file's class, not torch's
            if not call.args:
                return True  # model.cuda(): the current device, cuda:0 in a file that sets none
            first = call.args[0]
            return (
                len(call.args) == 1
                and first.keyword is None
                and type(first.value) is cst.Integer
                and int(first.value.value, 0) == 0
            )
        if self.names.is_(func, *_DEFAULT_TYPE_SETTERS):
            if len(call.args) != 1:
                return False
            value = call.args[0].value
            if type(value) is cst.SimpleString:
                text = string_literal(value)
                device = parse_device_string(text) if text is not None else None
                if device is not None:
                    return device.kind == "cuda" and device.index in (None, 0)
            return type(value) in (cst.Attribute, cst.SimpleString) and (
                self.devices.is_cuda_tensor_type(value)
            )
        if type(func) is cst.Attribute and self.devices.is_cuda_tensor_type(func):
            return True  # torch.cuda.FloatTensor(n): made on the current GPU
        if type(func) is cst.Attribute and func.attr.value == "type" and len(call.args) == 1:
            value = call.args[0].value  # x.type(torch.cuda.FloatTensor): moved there
            return type(value) in (cst.Attribute, cst.SimpleString) and (
                self.devices.is_cuda_tensor_type(value)
            )
        if type(func) is cst.Attribute and func.attr.value == "to" or any(
            arg.keyword is not None and arg.keyword.value == "device" for arg in call.args
        ):
            return self._places_on_first_gpu(call)
        return False

    def _places_on_first_gpu(self, call: cst.Call) -> bool:
        if self._placements_by_call is None:
            table: Dict[cst.Call, List[Placement]] = {}
            for placement in self.choices.placements():
                table.setdefault(placement.call, []).append(placement)
            self._placements_by_call = table
        for placement in self._placements_by_call.get(call, ()):
            if not placement.direct or placement.as_index:
                continue
            choice = self.choices.trace(placement.expr)
            if choice is None or choice.fallback or choice.param:
                continue
            device = choice.device
            if device.kind != "cuda" or device.origin not in ("literal", "current"):
                continue
            if device.index not in (None, 0):
                continue
            if choice.statement is not None and not self._unskippable(choice.statement):
                continue  # `if args.cuda: device = "cuda"`
            return True
        return False

    # -- files that choose GPUs -------------------------------------------------------------

    def _chooses_gpus(self) -> bool:
        if self._chooses is None:
            self._chooses = self._find_gpu_choice()
        return self._chooses

    def _find_gpu_choice(self) -> bool:
        parallel: Parallel = self.ctx.analysis(Parallel)
        if parallel.process_group_inits() or parallel.spawned_functions():
            return True
        if any(parallel.reads_env(variable) for variable in _PROCESS_ENV):
            return True
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in (
                "set_device",
                "set_device_index",
            ):
                return True
            if self.names.is_(func, "torch.cuda.device"):
                return True
        for placement in self.choices.placements():
            if not placement.direct:
                continue
            choice = self.choices.trace(placement.expr, placement.as_index)
            if choice is not None and choice.chosen:
                return True
        return False


def _is_main_test(ctx, test: cst.BaseExpression) -> bool:
    text = "".join(ctx.code(test).split()).replace("'", '"')
    return text in ('__name__=="__main__"', '"__main__"==__name__')
