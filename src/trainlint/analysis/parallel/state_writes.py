"""Writes to a module object's state: what `forward`, or a forward hook, changes on `self`.

Under `nn.DataParallel` every forward copies the module once per GPU (a shallow copy) and runs
the copies in threads. An attribute set on a copy (`self.x = v`) is thrown away with it; a
container the module holds (`self.cache = {}` in `__init__`) is the same object in every copy, so
`self.cache[k] = v` and `self.feats.append(v)` are written by all replica threads at once, with
tensors from different GPUs.

What counts as a write to module state, seen from a function in which some names denote the
module (`self`) or an object it holds (a hook factory's `bank` parameter, given `self.core_out`):

- attribute assignment: `self.x = v`, `self.x: T = v`, `self.x, y = ...`, `setattr(self, "x", v)`,
  on a held object too (`self.block.cache = v`);
- item assignment or deletion on a held object: `self.x[k] = v`, `del self.x[k]`, `bank[k] = v`;
- a container-mutating method on a held object: `self.x.append(v)`, `extend`, `update`, ...;
- `self.n += 1` unless `n` is a tensor of the module (a registered buffer or parameter, or an
  attribute assigned a torch value, by the class or by a base class of the same file).

What does not:

- in-place tensor updates of the module's tensors: `self.running_mean.mul_(m)`,
  `self.ema.copy_(v)`, `self.num_batches_tracked += 1`, `self.queue[:, i] = k` on a buffer.
  DataParallel keeps the parameters and buffers of the replica on `device_ids[0]` sharing storage
  with the module, so these land (BatchNorm's running statistics rely on it);
- writes under `torch.no_grad()` / `torch.inference_mode()` (a block, or the function's
  decorator): inference-time bookkeeping, where no graph can be corrupted;
- writes on the eval-only branch of `self.training` (`if not self.training:`): caches for
  inference, not training;
- a write into a held object of a value (and key) that is the same in every replica: built
  from constants, the module's attributes and input sizes other than the batch dimension
  (`self.config.num_buckets = 2 ** exponent` with the exponent from `x.shape[1]`), through
  local names and a helper's arguments at its calls;
- local variables, even ones named like attributes, and local containers (returned or not);
- writes inside nested functions and lambdas: they run when called (hooks are read separately).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from ...walk import children
from ..base.callgraph import CallGraph
from ..base.calls import argument, keyword, positional
from ..base.names import LOCAL_PREFIX, Names
from ..base.scopes import Scopes
from ..base.vocabulary import disables_grad
from ..device.tensors import DeviceTensors
from ..project.modules import MODULE, ModuleClass, Modules
from .parallel import MODULE_RETURNING
from .. import Analysis
from ..base.nodes import enclosing_class, follows_exit, positional_params


# Methods that change a Python container in place, whatever else holds them.
MUTATING_METHODS = {
    "append",
    "extend",
    "insert",
    "setdefault",
    "popitem",
    "appendleft",
    "extendleft",
    "popleft",
    "__setitem__",
}
# Names containers share with other objects (`FloatFunctional.add`, `ema.update(model)`,
# `tensor.clear`...): a write only on an attribute the class makes a container.
CONTAINER_ONLY_METHODS = {"update", "pop", "clear", "remove", "add", "discard"}
_CONTAINER_MAKERS = {
    "dict",
    "list",
    "set",
    "collections.OrderedDict",
    "collections.defaultdict",
    "collections.deque",
    "collections.Counter",
}
FORWARD_HOOK_REGISTRARS = ("register_forward_hook", "register_forward_pre_hook")
# Buffers a normalization layer inherits from torch's _BatchNorm (a subclass updates them).
# The nodes `_write_at` reads a write from.
_WRITE_NODES = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Del, cst.Call)
_NORM_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
# Calls that return their receiver on another device or dtype: `self.x = self.x.to(x.device)`.
_MOVES = MODULE_RETURNING | {"type_as", "type", "detach", "contiguous"}
_TENSOR_MAKERS = ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.Tensor")

Function = Union[cst.FunctionDef, cst.Lambda]


@dataclass
class StateWrite:
    node: cst.CSTNode  # the written target (`self.core_out[name]`) or the mutating call
    attr: str  # the module attribute written or written into: "core_out", "block.cache"
    kind: str  # "assign" (the attribute itself is rebound) or "item" (a held object changes)
    function: Function  # the function the write is in


@dataclass
class HookWrite:
    """A forward hook registered by a method of a class, and what it writes."""

    registration: cst.Call  # `layer.register_forward_hook(fn)`
    hook: cst.BaseExpression  # `fn`
    writes: List[StateWrite]
    inside: bool  # True when the writes are in the class's own code (a method or closure)


class StateWrites(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.names: Names = ctx.analysis(Names)
        self._attrs: Dict[cst.ClassDef, Tuple[Set[str], Set[str]]] = {}
        self._method_writes: Dict[cst.FunctionDef, List[StateWrite]] = {}
        # class -> attribute -> its `self.<attr>` nodes in the class body, in document order,
        # each with whether it is stored to; function -> attribute -> where it is stored to
        # (document positions); function -> attributes its `if`/`while` tests mention. Each is
        # one walk, instead of one per write.
        self._self_attrs: Dict[cst.ClassDef, Dict[str, List[Tuple[cst.Attribute, bool]]]] = {}
        self._stores: Dict[Function, Dict[str, List[int]]] = {}
        self._tested: Dict[Function, Set[str]] = {}
        self._submodules: Dict[cst.ClassDef, Set[str]] = {}

    # -- functions ----------------------------------------------------------------------------

    def in_method(self, method: cst.FunctionDef) -> List[StateWrite]:
        """Writes to `self` state in a method's own body (not in its nested functions)."""
        found = self._method_writes.get(method)
        if found is None:
            receiver = _receiver(method)
            if receiver is None or _grad_off_decorated(self.names, method):
                found = []
            else:
                found = list(self._writes(method, {receiver: ""}, on_replica=True))
            self._method_writes[method] = found
        return list(found)

    def in_function(self, func: Function, roots: Dict[str, str]) -> List[StateWrite]:
        """Writes in `func`'s own body through the names in `roots` (name -> the attribute path
        it denotes: "" for the module itself, "core_out" for `self.core_out`)."""
        if type(func) is cst.FunctionDef and _grad_off_decorated(self.names, func):
            return []
        return list(self._writes(func, roots))

    def _writes(
        self, func: Function, roots: Dict[str, str], on_replica: bool = False
    ) -> Iterator[StateWrite]:
        """The writes of `func`; `on_replica` when `self` is the module a forward runs on
        (a method, not a hook, which keeps the original module)."""
        tensors = self._tensors_of(func)
        for node in _own_nodes(func):
            if type(node) in _WRITE_NODES and follows_exit(self.ctx, node):
                continue  # after a `continue`/`return` of its block: it never runs
            for write in self._write_at(node, func, roots):
                if on_replica and self._on_own_submodule(write):
                    # `self.step_attack.bound = s`: DataParallel replicates submodules too, so
                    # on a replica this sets an attribute of the replica's own copy, lost with
                    # it like one of the module's own attributes, not shared.
                    write.kind = "assign"
                if write.kind == "item" and _top(write.attr) in tensors:
                    continue  # an in-place update of the module's own tensor
                if write.kind == "item" and _plain(_written_value(node)):
                    continue  # strings and numbers: bookkeeping, no graph, no device
                if write.kind == "item" and self._cpu_constant(_written_value(node)):
                    continue  # `torch.arange(n)`: a fresh CPU tensor, no graph, no GPU
                if write.kind == "item" and self._device_keyed(node):
                    continue  # each replica reads and writes its own GPU's entry
                if write.kind == "item" and self._same_on_every_replica(node, func):
                    continue  # `self.config.num_buckets = n`: every replica stores the same n
                if write.kind == "item" and self._made_earlier_in_the_call(write, func, roots):
                    continue  # into the object this call just made: the replica's own
                if self._quiet_context(write.node, func):
                    continue
                if write.kind == "assign" and (
                    self._replica_cache(write, node)
                    or self._scratch(write)
                    or self._reapplied(write, node)
                    or self._recomputed_each_call(write, node)
                ):
                    continue
                yield write

    def _write_at(self, node: cst.CSTNode, func: Function, roots) -> Iterator[StateWrite]:
        if type(node) is cst.Assign:
            for target in node.targets:
                for leaf in _unpack(target.target):
                    yield from self._target(leaf, func, roots)
        elif type(node) is cst.AnnAssign and node.value is not None:
            yield from self._target(node.target, func, roots)
        elif type(node) is cst.AugAssign:
            for write in self._target(node.target, func, roots):
                # `self.n += 1` on a tensor is an in-place add (an item write, quiet for the
                # module's own tensors); on a Python number it rebinds the attribute.
                if write.kind == "assign" and write.attr in self._tensors_of(func):
                    write.kind = "item"
                yield write
        elif type(node) is cst.Del:
            for leaf in _unpack(node.target):
                if type(leaf) is cst.Subscript:
                    yield from self._target(leaf, func, roots)
        elif type(node) is cst.Call:
            yield from self._call(node, func, roots)

    def _cpu_constant(self, value: Optional[cst.BaseExpression]) -> bool:
        """A tensor a torch factory makes on the CPU without a graph (`torch.arange(n)`, no
        `device=`, no `requires_grad=True`): a memo of it (`self.targets[n] = torch.arange(n)`,
        moved by each reader) mixes no GPUs and no graphs, whichever replica stored it."""
        if type(value) is not cst.Call:
            return False
        if not self.ctx.analysis(DeviceTensors).factory_without_device(value):
            return False
        grad = keyword(value, "requires_grad")
        return grad is None or (type(grad) is cst.Name and grad.value == "False")

    def _tensors_of(self, func: Function) -> Set[str]:
        cls = self._class_of(func)
        return self.attrs_of(cls)[0] if cls is not None else set()

    def _containers_of(self, func: Function) -> Set[str]:
        cls = self._class_of(func)
        return self.attrs_of(cls)[1] if cls is not None else set()

    def _target(self, target, func: Function, roots) -> Iterator[StateWrite]:
        if type(target) is cst.Attribute:
            owner = self.path_of(target.value, roots)
            if owner is not None:
                attr = f"{owner}.{target.attr.value}" if owner else target.attr.value
                yield StateWrite(target, attr, "assign" if not owner else "item", func)
        elif type(target) is cst.Subscript:
            owner = self.path_of(target.value, roots)
            if owner:
                yield StateWrite(target, owner, "item", func)

    def _call(self, call: cst.Call, func: Function, roots) -> Iterator[StateWrite]:
        callee = call.func
        if type(callee) is cst.Attribute:
            method = callee.attr.value
            if method not in MUTATING_METHODS and method not in CONTAINER_ONLY_METHODS:
                return
            owner = self.path_of(callee.value, roots)
            if not owner:
                return
            if method in CONTAINER_ONLY_METHODS and (
                owner not in self._containers_of(func)
            ):
                return
            yield StateWrite(call, owner, "item", func)
        elif type(callee) is cst.Name and callee.value == "setattr":
            obj, name = positional(call, 0), positional(call, 1)
            owner = self.path_of(obj, roots) if obj is not None else None
            if owner is not None and type(name) is cst.SimpleString:
                attr = str(name.evaluated_value)
                yield StateWrite(
                    call, f"{owner}.{attr}" if owner else attr, "item" if owner else "assign", func
                )

    def path_of(self, expr: Optional[cst.CSTNode], roots: Dict[str, str], depth: int = 0):
        """The attribute path `expr` denotes relative to the module ("" for the module itself,
        "core_out", "blocks[]" for an item of `self.blocks`), or None when it is not state."""
        if expr is None or depth > 4:
            return None
        if type(expr) is cst.Name:
            if expr.value in roots and self._is_parameter(expr):
                return roots[expr.value]
            return self._alias(expr, roots, depth)
        if type(expr) is cst.Attribute:
            owner = self.path_of(expr.value, roots, depth + 1)
            if owner is None:
                return None
            return f"{owner}.{expr.attr.value}" if owner else expr.attr.value
        if type(expr) is cst.Subscript:
            owner = self.path_of(expr.value, roots, depth + 1)
            return f"{owner}[]" if owner else None
        return None

    def _is_parameter(self, name: cst.Name) -> bool:
        bindings = self.scopes.lookup(name.value, name)
        return bool(bindings) and all(b.kind == "param" for b in bindings)

    def _alias(self, name: cst.Name, roots, depth: int) -> Optional[str]:
        """A local bound only to state (`bank = self.core_out`) denotes that state."""
        bindings = self.scopes.lookup(name.value, name)
        if not bindings:
            return None
        paths = set()
        for binding in bindings:
            if binding.kind not in ("assign", "annassign") or binding.value is None:
                return None
            if type(binding.value) not in (cst.Name, cst.Attribute, cst.Subscript):
                return None
            path = self.path_of(binding.value, roots, depth + 1)
            if not path:
                return None
            paths.add(path)
        return paths.pop() if len(paths) == 1 else None

    # -- context ------------------------------------------------------------------------------

    def _quiet_context(self, node: cst.CSTNode, func: Function) -> bool:
        """Under no_grad/inference_mode, or on the eval-only side of `self.training`."""
        child = node
        for ancestor in self.ctx.ancestors(node):
            if ancestor is func:
                return False
            if type(ancestor) is cst.With:
                for item in ancestor.items:
                    if disables_grad(self.names, item.item):
                        return True
            if type(ancestor) is cst.If:
                if child is ancestor.body and _only_in_eval(ancestor.test):
                    return True
                if child is ancestor.orelse and _in_all_training(ancestor.test):
                    return True
            child = ancestor
        return False

    def quiet_at_every_call(
        self, method: cst.FunctionDef, callers: Sequence[cst.FunctionDef], attr: str
    ) -> bool:
        """Does every call of `method` in `callers` (`self.<method>(...)`, as the call graph
        resolves it) run where a write of `self.<attr>` by the method would be quiet in the
        caller itself: under no_grad (a block, or the
        caller's decorator), on the eval-only side of `self.training`, or under an `if` that
        tests `self.<attr>` (`if max_pos > self.weights.size(0): self.make_weights(...)`, a
        cache each replica rebuilds when it finds it too short)?"""
        sites = [
            call
            for call in self.ctx.analysis(CallGraph).callers(method)
            if self.scopes.enclosing_function(call) in callers
        ]
        for call in sites:
            caller = self.scopes.enclosing_function(call)
            assert caller is not None
            if _grad_off_decorated(self.names, caller) or self._quiet_context(call, caller):
                continue
            if not any(
                isinstance(a, (cst.If, cst.While)) and self._mentions_attr(a.test, attr)
                for a in self._ancestors_within(call, caller)
            ):
                return False
        return bool(sites)

    def dormant_until(
        self, write: StateWrite, cls: cst.ClassDef, reached: Set[str]
    ) -> Optional[List[str]]:
        """A write that runs only under `if self.<a> is not None:` (or `if self.<a>:`) where
        `__init__` sets `self.<a>` to None/False and the only other assignments of it are in
        methods `forward` does not reach (`init_context()`, a public switch nobody may call):
        the names that could wake the branch (those methods and `<a>` itself, for a write from
        outside), to be looked for in the project; None when the write is not so guarded."""
        for ancestor in self._ancestors_within(write.node, write.function):
            if type(ancestor) is not cst.If:
                continue
            attr = _guard_attribute(ancestor.test)
            if attr is None or not any(
                a is ancestor.body for a in self._ancestors_within(write.node, ancestor)
            ):
                continue
            enablers = self._enablers(cls, attr)
            if enablers is not None and not set(enablers) & reached:
                return sorted(enablers) + [attr]
        return None

    def _enablers(
        self, cls: cst.ClassDef, attr: str, parameters: bool = False
    ) -> Optional[List[str]]:
        """Methods that give `self.<attr>` a value other than None/False; None when `__init__`
        does not start it at None/False or another kind of write (a container, `setattr`)
        may change it. With `parameters`, `__init__` may also start it from a parameter whose
        default is None/False (`self.gradcam = gradcam`): the keyword, written `gradcam=`, is
        then one more way to turn it on."""
        starts_off = False
        found: Set[str] = set()
        init = _method_named(cls, "__init__")
        defaults = {
            p.name.value: p.default
            for p in ([*init.params.params, *init.params.kwonly_params] if init else [])
            if p.default is not None and parameters
        }
        for method in _methods(cls):
            receiver = _receiver(method)
            for node in _own_nodes(method):
                if type(node) is cst.AugAssign and _is_self_attr(node.target, receiver, attr):
                    return None
                if type(node) is not cst.Assign:
                    continue
                for target in node.targets:
                    for leaf in _unpack(target.target):
                        if not _is_self_attr(leaf, receiver, attr):
                            continue
                        value = node.value
                        off = _is_off(value)
                        if method is init:
                            if type(target.target) is not cst.Attribute:
                                return None
                            if not off and not (
                                type(value) is cst.Name
                                and value.value in defaults
                                and _is_off(defaults[value.value])
                            ):
                                return None
                            if not off:
                                found.add(f"{value.value}=")  # type: ignore[attr-defined]
                            starts_off = True
                        elif not off:
                            found.add(method.name.value)
        return sorted(found) if starts_off else None

    def hook_dormant_until(self, hook: HookWrite, cls: cst.ClassDef) -> Optional[List[str]]:
        """A forward hook registered only where a switch the code never turns on lets it be:
        under `if self.<a>:` (or `if self.<a> is not None:`, or such a conjunct) with
        `self.<a>` starting off in `__init__` (None/False, or a parameter whose default is:
        `gradcam=False`), or in a method (`set_gradcam_hook()`) that the class calls only from
        such places. The names that could wake it, for the project phase: `a` or `m` (touched
        or called on an object from outside), `a=` (a keyword passed at construction); None when
        the registration runs (or this file turns the switch on)."""
        around = list(self.ctx.ancestors(hook.registration))
        method = next((m for m in _methods(cls) if any(a is m for a in around)), None)
        if method is None:
            return None
        enablers = self._dormant_at(hook.registration, method, cls, 2)
        if enablers is None or self._woken_in_file(cls, enablers):
            return None
        return enablers

    def _dormant_at(
        self, node: cst.CSTNode, method: cst.FunctionDef, cls: cst.ClassDef, depth: int
    ) -> Optional[List[str]]:
        for ancestor in self._ancestors_within(node, method):
            if type(ancestor) is not cst.If or not any(
                a is ancestor.body for a in self._ancestors_within(node, ancestor)
            ):
                continue
            attr = _guard_attribute(ancestor.test)
            switches = self._enablers(cls, attr, parameters=True) if attr is not None else None
            if switches is not None:
                return sorted(set(switches) | {attr})  # type: ignore[arg-type]
        name = method.name.value
        if name == "__init__" or _receiver(method) is None:
            return None
        found = {name}
        for other in _methods(cls):
            receiver = _receiver(other)
            for call in _own_nodes(other):
                if not (
                    type(call) is cst.Call
                    and type(call.func) is cst.Attribute
                    and call.func.attr.value == name
                    and type(call.func.value) is cst.Name
                    and call.func.value.value == receiver
                ):
                    continue
                inner = self._dormant_at(call, other, cls, depth - 1) if depth > 0 else None
                if inner is None:
                    return None  # `self.set_hook()` where it runs
                found.update(inner)
        return sorted(found)

    def _woken_in_file(self, cls: cst.ClassDef, enablers: List[str]) -> bool:
        """Does code of this file outside the class turn a switch on (call the method, pass the
        keyword, touch the attribute)?"""
        text = self.ctx.source.text
        row, col, end_row, end_col = self.ctx.span(cls)
        start, end = self.ctx.source.offset(row, col), self.ctx.source.offset(end_row, end_col)
        outside = text[:start] + text[end:]
        return any(re.search(enabler_pattern(e), outside) for e in enablers)

    def _ancestors_within(self, node: cst.CSTNode, func: cst.CSTNode) -> List[cst.CSTNode]:
        found = []
        for ancestor in self.ctx.ancestors(node):
            if ancestor is func:
                break
            found.append(ancestor)
        return found

    def _device_keyed(self, statement: cst.CSTNode) -> bool:
        """`cache[str(x.device)] = t`, `cache[key] = t` with `key = (size, device, dtype)`: a
        cache with one entry per device, which replicas on different GPUs never share."""
        key: Optional[cst.CSTNode] = None
        if type(statement) is cst.Assign:
            target = statement.targets[0].target
            if type(target) is cst.Subscript and target.slice:
                index = target.slice[0].slice
                key = index.value if type(index) is cst.Index else None
        elif type(statement) is cst.Call and statement.args:
            key = statement.args[0].value  # setdefault(key, value), __setitem__(key, value)
        if key is None:
            return False
        values = [key]
        if type(key) is cst.Name:
            values += [b.value for b in self.scopes.lookup(key.value, key) if b.value is not None]
        return any(
            type(node) is cst.Name and "device" in node.value
            or type(node) is cst.Attribute and "device" in node.attr.value
            for value in values
            for node in [value, *self.ctx.tree.descendants(value)]
        )

    def _same_on_every_replica(self, statement: cst.CSTNode, func: Function) -> bool:
        """`self.config.num_buckets = n` (or `self.table[k] = v`) where the key and the value
        are the same in every replica: built from constants, the module's own attributes (each
        replica is a copy), and sizes of the inputs other than the batch dimension
        (`x.shape[1]`, `x.size(-1)`: DataParallel splits dimension 0). The replicas' writes
        into the shared object then agree; nothing races, nothing is lost."""
        if type(statement) is not cst.Assign:
            return False
        keys = [
            t.target.slice[0].slice
            for t in statement.targets
            if type(t.target) is cst.Subscript and len(t.target.slice) == 1
        ]
        return all(self._invariant(k, func, 0) for k in [statement.value, *keys])

    def _invariant(self, expr: cst.CSTNode, func: Function, depth: int) -> bool:
        if depth > 6:
            return False
        kind = type(expr)
        if kind in (cst.Integer, cst.Float, cst.SimpleString, cst.Ellipsis):
            return True
        if kind is cst.Index:
            return self._invariant(expr.value, func, depth)  # type: ignore[attr-defined]
        if kind is cst.Name:
            return self._invariant_name(expr, func, depth)  # type: ignore[arg-type]
        if kind is cst.Attribute:
            return _is_self_attr_any(expr)
        if kind is cst.Subscript:
            return self._invariant_subscript(expr, func, depth)  # type: ignore[arg-type]
        if kind is cst.Call:
            return self._invariant_call(expr, func, depth)  # type: ignore[arg-type]
        if kind in (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation):
            parts = [c for c in children(expr) if isinstance(c, cst.BaseExpression)]
        elif kind is cst.Comparison:
            parts = [expr.left] + [c.comparator for c in expr.comparisons]  # type: ignore
        elif kind is cst.IfExp:
            parts = [expr.test, expr.body, expr.orelse]  # type: ignore[attr-defined]
        elif kind in (cst.List, cst.Tuple):
            parts = [e.value for e in expr.elements]  # type: ignore[attr-defined]
        else:
            return False
        return all(self._invariant(part, func, depth) for part in parts)

    def _invariant_name(self, name: cst.Name, func: Function, depth: int) -> bool:
        if name.value in ("True", "False", "None"):
            return True
        bindings = self.scopes.lookup(name.value, name)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind == "param" and type(func) is cst.FunctionDef:
                if not self._invariant_argument(func, name.value, depth):
                    return False
            elif binding.kind != "assign" or binding.value is None:
                return False
            elif not self._invariant(binding.value, func, depth + 1):
                return False
        return True

    def _invariant_argument(self, func: cst.FunctionDef, param: str, depth: int) -> bool:
        """A helper's parameter: the same at every call of the helper in the file
        (`self._set_num_buckets(sequence_length)` with `sequence_length = x.shape[1]`)."""
        if func.name.value == "forward":
            return False  # the scattered inputs themselves
        passed = self.ctx.analysis(CallGraph).passed_for(func, param)
        if passed is None:
            return False
        for call, value in passed:
            caller = self.scopes.enclosing_function(call)
            if caller is None or not self._invariant(value, caller, depth + 1):
                return False
        return True

    def _invariant_subscript(self, expr: cst.Subscript, func: Function, depth: int) -> bool:
        value = expr.value
        if type(value) is cst.Attribute and value.attr.value == "shape":
            return all(_not_batch_dim(element.slice) for element in expr.slice)
        return self._invariant(value, func, depth) and all(
            self._invariant(element.slice, func, depth) for element in expr.slice
        )

    def _invariant_call(self, call: cst.Call, func: Function, depth: int) -> bool:
        callee = call.func
        args = [a.value for a in call.args]
        if type(callee) is cst.Attribute and callee.attr.value == "size" and len(args) == 1:
            return _not_batch_dim(cst.Index(args[0]))
        if type(callee) is cst.Name:
            if callee.value not in _SAME_RESULT_BUILTINS or self.scopes.lookup(callee.value, call):
                return False
        elif type(callee) is cst.Attribute:
            root = callee.value
            if type(root) is cst.Name and root.value == "self":
                return False  # another method: whatever it computes
            if not (type(root) is cst.Name and root.value == "math") and not self._invariant(
                root, func, depth
            ):
                return False
        else:
            return False
        return all(self._invariant(a, func, depth) for a in args)

    def _replica_cache(self, write: StateWrite, statement: cst.CSTNode) -> bool:
        """`self.x = self.x.to(device)`, or an assignment in a function that tests `self.x`
        (`if self.x is None:`, `if n > self.x.shape[0]:`): a cache each replica fills for itself.
        Under DataParallel it is recomputed on every forward, which is slower, not wrong."""
        value = getattr(statement, "value", None)
        while type(value) is cst.Call and type(value.func) is cst.Attribute:
            if value.func.attr.value not in _MOVES:
                break
            value = value.func.value
        if type(value) is cst.Attribute and value.attr.value == write.attr:
            return True
        if type(statement) is cst.AugAssign or self._mentions_attr(value, write.attr):
            return False  # `self.n += 1`, `self.n = self.n + 1`: the previous call's value
        # Any write of an attribute the function tests (`if self.mask is None or ...:` with
        # `else: self.mask = None`) maintains that cache.
        return write.attr in self._tested_attrs(write.function)

    def _reapplied(self, write: StateWrite, statement: cst.CSTNode) -> bool:
        """`self.training |= self.export`: an idempotent update (`|=`, `&=`) by a value that
        is the same on every call (constants, and attributes the function does not set). A
        replica loses it, and the next call applies it again to the same result: nothing
        carried over, nothing lost."""
        if type(statement) is not cst.AugAssign:
            return False
        if type(statement.operator) not in (cst.BitOrAssign, cst.BitAndAssign):
            return False
        stored = set(self._stores_in(write.function))
        stored |= {
            node.target.attr.value  # type: ignore[attr-defined]
            for node in _own_nodes(write.function)
            if type(node) is cst.AugAssign and _is_self_attr_any(node.target)
            and node is not statement
        }
        for node in [statement.value, *self.ctx.tree.descendants(statement.value)]:
            if type(node) is cst.Attribute:
                if not _is_self_attr_any(node) or node.attr.value in stored:
                    return False
            elif type(node) is cst.Name:
                parent = self.ctx.parent(node)
                if type(parent) is cst.Attribute:
                    continue  # `self` and `export` of `self.export`, checked above
                if node.value not in ("True", "False", "None"):
                    return False
            elif type(node) in (cst.Call, cst.Subscript, cst.Lambda):
                return False
        return True

    def _tested_attrs(self, function: Function) -> Set[str]:
        """Attributes (`<name>.<attr>`) the `if`/`while` tests of a function's own body
        mention (what `_mentions_attr` finds there)."""
        found = self._tested.get(function)
        if found is None:
            found = set()
            for node in _own_nodes(function):
                if type(node) is cst.If or type(node) is cst.While:
                    test = node.test
                    for inner in [test, *self.ctx.tree.descendants(test)]:
                        if type(inner) is cst.Attribute and type(inner.value) is cst.Name:
                            found.add(inner.attr.value)
            self._tested[function] = found
        return found

    def carries_over(self, write: StateWrite) -> bool:
        """Does the write compute from the attribute's previous value (`self.n += 1`,
        `self.pos = (self.pos + 1) % k`): state carried from one forward to the next?"""
        statement = self.ctx.parent(write.node)
        if type(statement) is cst.AssignTarget:
            statement = self.ctx.parent(statement)
        if type(statement) is cst.AugAssign:
            return True
        return type(statement) is cst.Assign and self._mentions_attr(
            statement.value, write.attr
        )

    def _recomputed_each_call(self, write: StateWrite, statement: cst.CSTNode) -> bool:
        """`self.n_coarse = self.sched[1][self.last_sched.item() - 1]` in forward, under tests
        of the module's own state, and read only later in forward or in the methods only that
        later part of forward calls: every replica computes the value the original would, from
        the state it copied, before it uses it. A replica losing it loses nothing; the original
        keeps what its other methods set."""
        if type(statement) is not cst.Assign or self._mentions_attr(statement.value, write.attr):
            return False  # `self.n = self.n + 1` carries the previous call's value
        func = write.function
        cls = self._class_of(func)
        if cls is None or type(func) is not cst.FunctionDef:
            return False
        if not self._invariant(statement.value, func, 0):
            return False
        for ancestor in self.ctx.ancestors(statement):
            if ancestor is func:
                break
            if type(ancestor) is cst.If and not self._invariant(ancestor.test, func, 0):
                return False  # written only when the inputs say so
            if type(ancestor) in (cst.For, cst.While):
                return False
        index = self.ctx.tree.index
        written = index.get(statement, -1)
        later_callees: Set[str] = set()
        elsewhere: Set[str] = set()
        for node in self.ctx.tree.descendants(cls.body):
            if type(node) is cst.Call and _is_self_attr_any(node.func):
                name = node.func.attr.value  # type: ignore[attr-defined]
                later = self._owner_function(node) is func and index.get(node, -1) > written
                (later_callees if later else elsewhere).add(name)
        only_from_here = later_callees - elsewhere
        for node, store in self._self_attrs_of(cls).get(write.attr, ()):
            if store:
                continue
            owner = self._owner_function(node)
            at = index.get(node, -1)
            if owner is func and at > written:
                continue  # later in the same call
            if type(owner) is cst.FunctionDef and owner is not func:
                if owner.name.value in only_from_here:
                    continue  # a method only that later part of this call runs
                if any(s < at for s in self._stores_in(owner).get(write.attr, ())):
                    continue  # a method that sets the attribute itself before reading it
            return False
        return True

    def _made_earlier_in_the_call(self, write: StateWrite, func: Function, roots) -> bool:
        """`self.weight = target.clone()`, then `self.weight[self.weight == 0] = w0`, or
        `self.attack = self.make_attack()`, then `self.attack.transform = t`: the item write
        changes the object the same call made a few statements before, on every path to it (an
        earlier statement of its block or of a block around it), so on a replica it is the
        replica's own new object, not one the replicas share. An alias (`self.w =
        self.shared`, `self.w = cache`) is no new object, and an object reached through the new
        one (`self.attack.model.x = ...`) may be shared."""
        if "[" in write.attr or write.attr.count(".") > 1:
            return False
        attr = write.attr.split(".")[0]
        if attr != write.attr and type(write.node) is not cst.Attribute:
            return False  # `self.attack.queue.append(x)`: into what the new object holds
        child: Optional[cst.CSTNode] = self.ctx.statement_of(write.node)
        while child is not None and child is not func:
            parent = self.ctx.parent(child)
            if type(parent) in (cst.IndentedBlock, cst.SimpleStatementLine):
                for earlier in parent.body:  # type: ignore[union-attr]
                    if earlier is child:
                        break
                    if self._makes_attr(earlier, attr, roots):
                        return True
            child = parent
        return False

    def _makes_attr(self, statement: cst.CSTNode, attr: str, roots) -> bool:
        """Does `statement` bind `self.<attr>` to a new object (not a name, attribute or item
        of something else)?"""
        smalls = statement.body if type(statement) is cst.SimpleStatementLine else [statement]
        for small in smalls:
            if type(small) is not cst.Assign or type(small.value) in (
                cst.Name, cst.Attribute, cst.Subscript
            ):
                continue
            for target in small.targets:
                node = target.target
                if (
                    type(node) is cst.Attribute
                    and node.attr.value == attr
                    and self.path_of(node.value, roots) == ""
                ):
                    return True
        return False

    def _scratch(self, write: StateWrite) -> bool:
        """`self.t = f(x)` read back only later in the same function: a local variable kept
        on `self`, which each replica uses for itself. (Read nowhere else in the class: it is
        there for outside code, which never sees a replica's value.)"""
        cls = self._class_of(write.function)
        if cls is None or type(self.ctx.parent(write.node)) is cst.AugAssign:
            return False  # `self.n += 1` reads the previous call's value
        index = self.ctx.tree.index
        written = min(
            self._stores_in(write.function).get(write.attr, ()),
            default=index.get(write.node, -1),
        )
        reads = 0
        for node, store in self._self_attrs_of(cls).get(write.attr, ()):
            if store:
                continue
            if index.get(node, -1) < written or self._owner_function(node) is not write.function:
                return False
            reads += 1
        return reads > 0

    def _self_attrs_of(self, cls: cst.ClassDef) -> Dict[str, List[Tuple[cst.Attribute, bool]]]:
        found = self._self_attrs.get(cls)
        if found is None:
            found = {}
            for node in self.ctx.tree.descendants(cls.body):
                if _is_self_attr_any(node):
                    found.setdefault(node.attr.value, []).append((node, self._store_target(node)))
            self._self_attrs[cls] = found
        return found

    def _stores_in(self, function: Function) -> Dict[str, List[int]]:
        """attribute -> document positions of the `self.<attr>` store targets under `function`
        (nested functions included)."""
        found = self._stores.get(function)
        if found is None:
            found = {}
            index = self.ctx.tree.index
            for node in self.ctx.tree.descendants(function):
                if _is_self_attr_any(node) and self._store_target(node):
                    found.setdefault(node.attr.value, []).append(index.get(node, -1))
            self._stores[function] = found
        return found

    def _store_target(self, node: cst.CSTNode) -> bool:
        parent = self.ctx.parent(node)
        return type(parent) is cst.AssignTarget or (
            type(parent) is cst.AnnAssign and parent.target is node
        )

    def _owner_function(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda):
                return ancestor
        return None

    def _mentions_attr(self, expr: Optional[cst.CSTNode], attr: str) -> bool:
        if expr is None:
            return False
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if (
                type(node) is cst.Attribute
                and node.attr.value == attr
                and type(node.value) is cst.Name
            ):
                return True
        return False

    # -- classes ------------------------------------------------------------------------------

    def _on_own_submodule(self, write: StateWrite) -> bool:
        """Does the write set an attribute of a submodule (`self.<sub>.<attr> = ...`), one
        that `__init__` registers and nothing else rebinds?"""
        if write.kind != "item" or type(write.node) is not cst.Attribute:
            return False
        owner, _, _ = write.attr.rpartition(".")
        if not owner or "." in owner or "[" in owner:
            return False
        cls = self._class_of(write.function)
        return cls is not None and owner in self.submodules_of(cls)

    def submodules_of(self, cls: cst.ClassDef) -> Set[str]:
        """Attributes of `cls` holding a submodule: registered by `__init__` (or what only it
        calls) as a torch.nn layer or an object of an nn.Module class of this file, and assigned
        nowhere else in the class."""
        found = self._submodules.get(cls)
        if found is not None:
            return found
        found = set()
        modules: Modules = self.ctx.analysis(Modules)
        info = modules.classes.get(cls.name.value)
        if info is not None and info.node is cls:
            for name, attr in info.attrs.items():
                if attr.kind == "module" or (
                    attr.kind == "call" and _local_module_class(modules, attr.callee)
                ):
                    if self._assigned_only_by(cls, name, info.init_methods):
                        found.add(name)
        self._submodules[cls] = found
        return found

    def _assigned_only_by(self, cls: cst.ClassDef, attr: str, methods: Set[str]) -> bool:
        for node, store in self._self_attrs_of(cls).get(attr, ()):
            if not store:
                continue
            owner = self._owner_function(node)
            if type(owner) is not cst.FunctionDef or owner.name.value not in methods:
                return False
        return True

    def _class_of(self, func: Function) -> Optional[cst.ClassDef]:
        return enclosing_class(self.ctx, func)

    def attrs_of(self, cls: cst.ClassDef) -> Tuple[Set[str], Set[str]]:
        """(tensor attributes, container attributes) of `cls`: registered buffers and
        parameters and attributes assigned `nn.Parameter(...)` or a `torch.*` call; attributes
        assigned `{}`, `[]`, `dict()`, `OrderedDict()`... in any method; with those of its
        bases defined in this file (a subclass's `self.steps += 1` updates the buffer its base
        registered, in place)."""
        found = self._attrs.get(cls)
        if found is not None:
            return found
        self._attrs[cls] = (set(_NORM_BUFFERS), set())  # a base cycle ends here
        tensors: Set[str] = set(_NORM_BUFFERS)
        containers: Set[str] = set()
        classes = self.ctx.analysis(Modules).classes
        for base in cls.bases:
            if base.keyword is None and type(base.value) is cst.Name:
                info = classes.get(base.value.value)
                if info is not None and info.node is not cls:
                    base_tensors, base_containers = self.attrs_of(info.node)
                    tensors |= base_tensors
                    containers |= base_containers
        for node in self.ctx.tree.descendants(cls.body):
            if type(node) is cst.Call and type(node.func) is cst.Attribute:
                if node.func.attr.value in ("register_buffer", "register_parameter"):
                    name = argument(node, 0, "name")
                    if type(name) is cst.SimpleString:
                        tensors.add(str(name.evaluated_value))
            elif type(node) in (cst.Assign, cst.AnnAssign) and node.value is not None:
                targets = (
                    [t.target for t in node.targets]
                    if type(node) is cst.Assign
                    else [node.target]
                )
                for target in targets:
                    if not (
                        type(target) is cst.Attribute
                        and type(target.value) is cst.Name
                        and target.value.value == "self"
                    ):
                        continue
                    if self._is_tensor_value(node.value):
                        tensors.add(target.attr.value)
                    elif self._is_container_value(node.value):
                        containers.add(target.attr.value)
        found = self._attrs[cls] = (tensors, containers)
        return found

    def _is_container_value(self, value: cst.BaseExpression) -> bool:
        if type(value) in (cst.Dict, cst.List, cst.Set, cst.DictComp, cst.ListComp):
            return True
        if type(value) is cst.Call:
            func = value.func
            if type(func) is cst.Name and func.value in _CONTAINER_MAKERS:
                return True
            return self.names.is_(func, *_CONTAINER_MAKERS)
        return False

    def _is_tensor_value(self, value: cst.BaseExpression) -> bool:
        if type(value) is not cst.Call:
            return False
        if self.names.is_(value.func, *_TENSOR_MAKERS):
            return True
        return any(q.startswith("torch.") and not q.startswith("torch.nn.")
                   for q in self.names.qualified(value.func))

    # -- forward hooks ------------------------------------------------------------------------

    def hooks_in(self, cls: cst.ClassDef) -> List[HookWrite]:
        """Forward hooks registered in the methods of `cls` whose function writes to state of
        the instance: a bound method (`self._save`), a closure over `self`, a lambda, a factory
        call returning one (`self._hook(name)`, `get_activation(name, self.core_out)`)."""
        out: List[HookWrite] = []
        for method in _methods(cls):
            receiver = _receiver(method)
            if receiver is None:
                continue
            for node in self.ctx.tree.descendants(method.body):
                if not (
                    type(node) is cst.Call
                    and type(node.func) is cst.Attribute
                    and node.func.attr.value in FORWARD_HOOK_REGISTRARS
                ):
                    continue
                hook = argument(node, 0, "hook")
                if hook is None:
                    continue
                roots = {receiver: ""}
                writes, inside = self._hook_writes(hook, roots, cls, 0)
                if writes:
                    out.append(HookWrite(node, hook, writes, inside))
        return out

    def _hook_writes(self, hook, roots, cls, depth) -> Tuple[List[StateWrite], bool]:
        if depth > 3:
            return [], True
        if type(hook) is cst.Lambda:
            return self.in_function(hook, roots), True
        if type(hook) is cst.Attribute:
            if self.path_of(hook.value, roots) == "":
                method = _method_named(cls, hook.attr.value)
                if method is not None:
                    return self.in_method(method), True
            return [], True
        if type(hook) is cst.Name:
            func = self._function_bound_to(hook)
            if func is not None and self._inside(func, cls):
                return self.in_function(func, roots), True
            return [], True
        if type(hook) is cst.Call:
            if self.names.is_(hook.func, "functools.partial"):
                inner = positional(hook, 0)
                return self._hook_writes(inner, roots, cls, depth + 1) if inner else ([], True)
            return self._factory_writes(hook, roots, cls)
        return [], True

    def _factory_writes(self, call: cst.Call, roots, cls) -> Tuple[List[StateWrite], bool]:
        """`self._hook(name)` / `get_activation(name, self.core_out)`: the hook is the closure
        the factory returns; its parameters given state at the call denote that state."""
        factory: Optional[cst.FunctionDef] = None
        inner_roots: Dict[str, str] = {}
        callee = call.func
        if type(callee) is cst.Attribute and self.path_of(callee.value, roots) == "":
            factory = _method_named(cls, callee.attr.value)
            if factory is not None:
                receiver = _receiver(factory)
                if receiver is not None:
                    inner_roots[receiver] = ""
        elif type(callee) is cst.Name:
            factory = self._function_bound_to(callee)
        if factory is None:
            return [], True
        params = [p for p in factory.params.params]
        if inner_roots:
            params = params[1:]
        for index, param in enumerate(params):
            value = argument(call, index, param.name.value)
            path = self.path_of(value, roots) if value is not None else None
            if path:
                inner_roots[param.name.value] = path
        if not inner_roots:
            return [], True
        writes: List[StateWrite] = []
        for returned in _returned_functions(self, factory):
            writes.extend(self.in_function(returned, inner_roots))
        return writes, self._inside(factory, cls)

    def _function_bound_to(self, name: cst.Name) -> Optional[cst.FunctionDef]:
        bindings = self.scopes.lookup(name.value, name)
        if len(bindings) == 1 and type(bindings[0].node) is cst.FunctionDef:
            return bindings[0].node
        return None

    def _inside(self, node: cst.CSTNode, cls: cst.ClassDef) -> bool:
        return any(ancestor is cls for ancestor in self.ctx.ancestors(node))


# -- helpers ----------------------------------------------------------------------------------


_PLAIN_CALLS = ("str", "repr", "int", "float", "bool", "len", "format")


def _written_value(node: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The value stored by a write statement or mutating call (the last positional argument)."""
    if type(node) is cst.Assign or type(node) is cst.AugAssign or type(node) is cst.AnnAssign:
        return node.value
    if type(node) is cst.Call:
        values = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        return values[-1] if values else None
    return None


# Builtins whose result depends only on their arguments.
_SAME_RESULT_BUILTINS = frozenset(
    {"int", "float", "bool", "str", "round", "abs", "min", "max", "pow", "divmod", "len"}
)


def _not_batch_dim(element: cst.BaseSlice) -> bool:
    """`shape[1]`, `shape[-1]`, `shape[1:]`: a dimension DataParallel does not split (it
    scatters along dimension 0)."""
    if type(element) is cst.Index:
        value = element.value
        if type(value) is cst.Integer:
            return value.evaluated_value != 0
        return type(value) is cst.UnaryOperation and type(value.expression) is cst.Integer
    if type(element) is cst.Slice:
        lower = element.lower
        return type(lower) is cst.Integer and lower.evaluated_value >= 1
    return False


def _plain(value: Optional[cst.BaseExpression]) -> bool:
    """A string, number or bool: no tensor, no graph."""
    if type(value) in (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString):
        return True
    if type(value) in (cst.Integer, cst.Float):
        return True
    if type(value) is cst.Name and value.value in ("True", "False", "None"):
        return True
    if type(value) is cst.UnaryOperation:
        return _plain(value.expression)
    return (
        type(value) is cst.Call
        and type(value.func) is cst.Name
        and value.func.value in _PLAIN_CALLS
    )


def _is_self_attr_any(node: cst.CSTNode) -> bool:
    """`self.<anything>` (exact types: see walk.SCOPE_NODE_TYPES)."""
    if type(node) is not cst.Attribute:
        return False
    value = node.value
    return type(value) is cst.Name and value.value == "self"


def _local_module_class(modules: Modules, callee: Optional[str], depth: int = 0) -> bool:
    """Is `callee` ("<local>.Head") a class of this file that subclasses torch.nn.Module,
    directly or through other classes of the file?"""
    if callee is None or not callee.startswith(LOCAL_PREFIX) or depth > 4:
        return False
    cls: Optional[ModuleClass] = modules.classes.get(callee[len(LOCAL_PREFIX):])
    if cls is None:
        return False
    return any(
        base == MODULE or _local_module_class(modules, base, depth + 1) for base in cls.bases
    )


def _top(attr: str) -> str:
    """"blocks[].cache" -> "blocks": the attribute of the module itself."""
    return attr.split(".")[0].split("[")[0]


def _own_nodes(func: Function) -> Iterator[cst.CSTNode]:
    """Nodes of a function's body, not descending into nested functions, lambdas or classes."""
    stack: List[cst.CSTNode] = [func.body]
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(children(node)):
            if type(child) in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
                continue
            stack.append(child)


def _unpack(target: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    if type(target) is cst.Tuple or type(target) is cst.List:
        for element in target.elements:
            yield from _unpack(element.value)
    elif type(target) is cst.StarredElement:
        yield from _unpack(target.value)
    else:
        yield target


def _receiver(method: cst.FunctionDef) -> Optional[str]:
    """The name of a method's instance parameter (`self`); None for static/class methods."""
    for decorator in method.decorators:
        if type(decorator.decorator) is cst.Name and decorator.decorator.value in (
            "staticmethod",
            "classmethod",
        ):
            return None
    params = positional_params(method)
    return params[0].name.value if params else None


def _methods(cls: cst.ClassDef) -> Iterator[cst.FunctionDef]:
    body = cls.body
    if type(body) is cst.IndentedBlock:
        for statement in body.body:
            if type(statement) is cst.FunctionDef:
                yield statement


def _method_named(cls: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    for method in _methods(cls):
        if method.name.value == name:
            return method
    return None


def _returned_functions(writes: StateWrites, factory: cst.FunctionDef) -> Iterator[Function]:
    for node in _own_nodes(factory):
        if type(node) is cst.Return and node.value is not None:
            value = node.value
            if type(value) is cst.Lambda:
                yield value
            elif type(value) is cst.Name:
                func = writes._function_bound_to(value)
                if func is not None:
                    yield func


def _grad_off_decorated(names: Names, func: cst.FunctionDef) -> bool:
    for decorator in func.decorators:
        if disables_grad(names, decorator.decorator):
            return True
    return False


def _only_in_eval(test: cst.BaseExpression) -> bool:
    """Can `test` hold only in eval mode? (`not self.training`, `x and not self.training`)"""
    if type(test) is cst.BooleanOperation:
        if type(test.operator) is cst.And:
            return _only_in_eval(test.left) or _only_in_eval(test.right)
        return _only_in_eval(test.left) and _only_in_eval(test.right)
    return _training_side(test) is False


def _in_all_training(test: cst.BaseExpression) -> bool:
    """Does `test` hold whenever the module trains? (`self.training`, `tracing or
    self.training`): its `else` runs only in eval mode."""
    if type(test) is cst.BooleanOperation:
        if type(test.operator) is cst.Or:
            return _in_all_training(test.left) or _in_all_training(test.right)
        return _in_all_training(test.left) and _in_all_training(test.right)
    return _training_side(test) is True


def _training_side(test: cst.BaseExpression) -> Optional[bool]:
    """True when `test` holds in training mode (`self.training`), False when it holds in
    eval mode (`not self.training`), None when it is not about the mode."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = _training_side(test.expression)
        return None if inner is None else not inner
    if type(test) is cst.Attribute and test.attr.value == "training":
        return True
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        side = _training_side(test.left)
        comparator = test.comparisons[0].comparator
        if side is None or type(comparator) is not cst.Name:
            return None
        operator = test.comparisons[0].operator
        if comparator.value in ("True", "False"):
            equal = type(operator) in (cst.Equal, cst.Is)
            unequal = type(operator) in (cst.NotEqual, cst.IsNot)
            if not (equal or unequal):
                return None
            holds_when_true = (comparator.value == "True") == equal
            return side if holds_when_true else not side
    return None


def enabler_pattern(enabler: str) -> str:
    """What turns a dormant switch on, as text to look for: `a=` a keyword `a` passed to a call,
    `a` an attribute or method touched on an object other than `self`."""
    if enabler.endswith("="):
        return rf"\b{re.escape(enabler[:-1])}\s*=(?!=)"
    return rf"(?<!\bself)\.{re.escape(enabler)}\b"


def _is_off(value: Optional[cst.BaseExpression]) -> bool:
    return type(value) is cst.Name and value.value in ("None", "False")


def _guard_attribute(test: cst.BaseExpression) -> Optional[str]:
    """`self.a is not None`, `self.a`, or either as a conjunct of an `and`: "a"."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _guard_attribute(test.left) or _guard_attribute(test.right)
    if (
        type(test) is cst.Comparison
        and len(test.comparisons) == 1
        and type(test.comparisons[0].operator) is cst.IsNot
        and type(test.comparisons[0].comparator) is cst.Name
        and test.comparisons[0].comparator.value == "None"
    ):
        test = test.left
    if type(test) is cst.Attribute and type(test.value) is cst.Name:
        if test.value.value == "self":
            return test.attr.value
    return None


def _is_self_attr(node: cst.CSTNode, receiver: Optional[str], attr: str) -> bool:
    return (
        type(node) is cst.Attribute
        and type(node.value) is cst.Name
        and node.value.value == receiver
        and node.attr.value == attr
    )
