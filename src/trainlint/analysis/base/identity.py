"""Calls whose result is the very module they were given, so a name rebound to the result
(`model = model.cuda()`, `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`) still holds
what it held: the same DDP wrapper, the same class, the same placement.

The one table of such calls; the analyses that follow a module through assignments (wrappers
in parallel/, placements in device/moves.py, registered submodules in project/modules.py) read
it instead of keeping their own lists.

Decided per call:

- `nn.Module` methods that `return self`: `to`, `cuda`, `cpu`, the dtype casts, `train`/`eval`,
  `requires_grad_`, `to_empty`, `share_memory`, `apply`. (On a *tensor*, `to`/`cuda` return a
  copy; the table is about modules.)
- `nn.SyncBatchNorm.convert_sync_batchnorm(m)` replaces BatchNorm layers inside `m` and returns
  `m` itself (a new object only when `m` is itself a single BatchNorm layer, never a model or a
  DDP wrapper); `nn.utils.convert_conv2d_weight_memory_format(m, fmt)` and its 3d sibling
  change `m` in place and return it.
- Not the same object: `torch.compile(m)` returns an `OptimizedModule` wrapping `m` (its
  `state_dict()` keys gain an `_orig_mod.` prefix), `torch.jit.script`/`trace` a ScriptModule,
  `accelerator.prepare(m)` a wrapper, `copy.deepcopy(m)` a copy. The compiled and scripted
  modules stay where `m` was, though: `KEEPS_PLACEMENT` says so, for the device analyses only.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .calls import argument
from .names import Names, dotted_name

# nn.Module methods that return the module they are called on.
RETURNS_RECEIVER = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "xpu",
        "float",
        "half",
        "double",
        "bfloat16",
        "train",
        "eval",
        "requires_grad_",
        "to_empty",
        "share_memory",
        "apply",
    }
)
# Functions that return the module passed as their argument (index, keyword).
RETURNS_ARGUMENT: Dict[str, tuple] = {
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm": (0, "module"),
    "torch.nn.utils.convert_conv2d_weight_memory_format": (0, "module"),
    "torch.nn.utils.convert_conv3d_weight_memory_format": (0, "module"),
}
# Functions returning a different object that runs the module where it is (same device).
KEEPS_PLACEMENT = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace"})

_MAX_PEEL = 8


def returned_module(call: cst.Call, names: Names) -> Optional[cst.CSTNode]:
    """The expression whose module `call` returns unchanged (`m` for `m.cuda()` and for
    `convert_sync_batchnorm(m)`), or None when the result is another object."""
    func = call.func
    if type(func) is cst.Attribute and func.attr.value in RETURNS_RECEIVER:
        return func.value
    for qualified in names.qualified(func):
        where = RETURNS_ARGUMENT.get(qualified)
        if where is not None:
            return argument(call, where[0], where[1])
    return None


def same_module(expr: cst.CSTNode, names: Names) -> cst.CSTNode:
    """`convert_sync_batchnorm(model.cuda()).train()` -> `model`: peel every call of the table."""
    for _ in range(_MAX_PEEL):
        if type(expr) is not cst.Call:
            break
        inner = returned_module(expr, names)
        if inner is None:
            break
        expr = inner
    return expr


def aliases(name: str, at: cst.CSTNode, scopes, names: Names, depth: int = 4) -> Set[str]:
    """The names that hold the same module as `name` where it is read at `at`: `name` itself
    and, when every binding of it is a plain alias (`model = srgan_generator`, also through a
    call of the table: `model = net.to(device)`, of an attribute, `model = self.model`, or of
    the module a wrapper holds, `model = self.model.module`), the aliased names, a few levels
    deep."""
    found = {name}
    todo = [(name, at, depth)]
    while todo:
        current, where, left = todo.pop()
        if left <= 0:
            continue
        bindings = scopes.lookup(current, where)
        sources: List[Tuple[str, cst.CSTNode]] = []
        for binding in bindings:
            value = binding.value
            if binding.kind != "assign" or value is None:
                sources = []
                break
            value = same_module(value, names)
            if type(value) is cst.Attribute and value.attr.value == "module":
                # `model = self.model.module`: the module a DataParallel/DDP wrapper holds,
                # whose layers the wrapper's `eval()`/`train()` switch too
                value = same_module(value.value, names)
            dotted = dotted_name(value) if type(value) in (cst.Name, cst.Attribute) else None
            if dotted is None:
                sources = []
                break
            sources.append((dotted, value))
        for source, node in sources:
            if source not in found:
                found.add(source)
                if "." not in source:  # an attribute's bindings are not scoped names
                    todo.append((source, node, left - 1))
    return found


__all__ = [
    "aliases",
    "KEEPS_PLACEMENT",
    "RETURNS_ARGUMENT",
    "RETURNS_RECEIVER",
    "returned_module",
    "same_module",
]
