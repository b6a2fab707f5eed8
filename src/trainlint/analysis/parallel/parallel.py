"""Data-parallel and distributed facts: wrappers, distributed branches, samplers, local ranks.

Questions the DataParallel (TRL2xx) and DDP (TRL3xx) rules share:

- Is an expression a DataParallel / DistributedDataParallel wrapper? (`wrap_kind(expr)` for a wrap
  call, peeling `.cuda()`/`.to(...)` chains; `wrapper_state(expr, at)` for a name or `self.attr`
  that may be bound to one: every binding that reaches `at`, some, or none).
- Is a piece of code on the distributed or the non-distributed path? `polarity(test)` reads an
  `if` test: +1 when it holds in distributed runs (`args.distributed`, `args.local_rank != -1`,
  `world_size > 1`, `dist.is_initialized()`), -1 when it holds in non-distributed runs
  (`not args.distributed`, `local_rank == -1`, `args.launcher == "none"`), 0 when it says
  nothing. An `if` whose body wraps in DDP, builds a DistributedSampler or calls
  `init_process_group` counts as a distributed test too. `non_distributed_branch(node)` is the
  `if` that puts `node` on the non-distributed side.
- Is a test a GPU count (`torch.cuda.device_count() > 1`, `n_gpu > 1` with
  `n_gpu = torch.cuda.device_count()`, `args.n_gpu` assigned from it) or an explicit opt-in flag
  (`args.data_parallel`, `args.multi_gpu`)?
- Does the file read an environment variable (`os.environ["LOCAL_RANK"]`, `.get`, `getenv`), set
  the current CUDA device, and which local-rank expression is in reach at a point (for fixes)?
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Set, Tuple

import libcst as cst

from ..base.callgraph import CallGraph
from ..base.calls import argument, string_literal, string_value
from ..base.identity import RETURNS_RECEIVER, returned_module, same_module
from ..base.names import Names, dotted_name
from ..base.nodes import is_self_attr, self_and_descendants
from ..base.scopes import Binding, Scopes
from .. import Analysis


DATA_PARALLEL = "torch.nn.DataParallel"
DISTRIBUTED_DATA_PARALLEL = "torch.nn.parallel.DistributedDataParallel"
DDP_NAMES = (DISTRIBUTED_DATA_PARALLEL, "apex.parallel.DistributedDataParallel")
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
BATCH_SAMPLER = "torch.utils.data.BatchSampler"
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
CONVERT_SYNC_BATCHNORM = "torch.nn.SyncBatchNorm.convert_sync_batchnorm"
DEVICE_COUNT = ("torch.cuda.device_count", "torch.accelerator.device_count")
SPAWN = ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")

# Calls that return the module they are called on (or a cast of it): `DDP(m).cuda()` is DDP.
# The one table of such calls is analysis/base/identity.py.
MODULE_RETURNING = RETURNS_RECEIVER

# Words that make a test about distributed training.
_DIST_WORDS = {"dist", "dist_url", "launcher", "num_processes", "use_dist", "multi_node", "nprocs"}
_DIST_PARTS = ("distributed", "world_size", "local_rank", "is_initialized")
_OPT_IN = re.compile(
    r"^(use_|enable_|with_)?(data_?parallel|dp|multi_?gpus?|parallel|dataparallel)$", re.I
)
_NEGATIVE_LITERALS = {"-1", "None", "False", "'none'", '"none"', "''", '""'}


@dataclass
class WrapState:
    """What the bindings of a name that reach a point are: DP/DDP wrappers or not."""

    every: bool = False  # every reaching binding is a wrapper (and there is one)
    some: bool = False  # at least one reaching binding is a wrapper
    kinds: Set[str] = field(default_factory=set)  # "DataParallel", "DistributedDataParallel"
    sites: List[cst.Call] = field(default_factory=list)  # the wrap calls


class Parallel(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self._wrap_calls: Optional[List[Tuple[cst.Call, str]]] = None
        self._env_reads: Optional[Set[str]] = None
        self._sets_device: Optional[bool] = None
        self._spawned: Optional[Set[cst.FunctionDef]] = None

    # -- wrappers -----------------------------------------------------------------------------

    def wrap_kind(self, expr: Optional[cst.CSTNode]) -> Optional[str]:
        """ "DataParallel" / "DistributedDataParallel" when `expr` is a wrap call (peeling
        `.cuda()`, `.to(...)`); else None."""
        for _ in range(6):
            if type(expr) is not cst.Call:
                return None
            if self.names.is_(expr.func, DATA_PARALLEL):
                return "DataParallel"
            if self.names.is_(expr.func, *DDP_NAMES):
                return "DistributedDataParallel"
            # `.cuda()`, `.to(d)`, `convert_sync_batchnorm(...)`: the same module
            expr = returned_module(expr, self.names)
        return None

    def wrap_calls(self) -> List[Tuple[cst.Call, str]]:
        """Every DP/DDP wrap call of the file, with its kind."""
        if self._wrap_calls is None:
            found = []
            for call in self.ctx.nodes(cst.Call):
                if self.names.is_(call.func, DATA_PARALLEL):
                    found.append((call, "DataParallel"))
                elif self.names.is_(call.func, *DDP_NAMES):
                    found.append((call, "DistributedDataParallel"))
            self._wrap_calls = found
        return self._wrap_calls

    def wrapper_state(self, expr: cst.CSTNode, at: Optional[cst.CSTNode] = None) -> WrapState:
        """Whether `expr` (a name or `self.attr`) holds a DP/DDP wrapper where it is evaluated."""
        state = WrapState()
        # In `model = convert_sync_batchnorm(model)` the argument is the binding before.
        values = self.bound_values(expr, self.evaluation_point(at or expr))
        if values is None or not values:
            return state
        wrappers = 0
        cycles = 0
        for value in values:
            kind = None
            peeled = same_module(value, self.names) if value is not None else None
            if type(peeled) is cst.Call:
                kind = self.wrap_kind(peeled)
                if kind is not None:
                    state.sites.append(self._wrap_call_of(peeled))
            elif type(peeled) is cst.Name or type(peeled) is cst.Attribute:
                inner = self._wrapper_state_inner(peeled)
                if inner is None:
                    # `model = model.apply(init)` in a loop, read back by itself: it holds
                    # what the other bindings give it, and adds nothing of its own
                    cycles += 1
                    continue
                if inner.every:
                    kind = next(iter(inner.kinds))
                elif inner.some:
                    state.some = True
                    state.kinds |= inner.kinds
                state.sites.extend(inner.sites)
            if kind is not None:
                wrappers += 1
                state.kinds.add(kind)
        state.some = state.some or wrappers > 0
        state.every = wrappers == len(values) - cycles and wrappers > 0
        return state

    def _wrapper_state_inner(self, value: cst.CSTNode) -> Optional[WrapState]:
        """What the name `value` (peeled from a binding's value) holds where that binding
        reads it; None when that read is already being followed (a loop's `m = m.apply(f)`
        reaches itself)."""
        depth = getattr(self, "_depth", 0)
        if depth > 3:
            return WrapState()
        following: Set[int] = getattr(self, "_following", set())
        if id(value) in following:
            return None
        self._depth = depth + 1
        self._following = following | {id(value)}
        try:
            return self.wrapper_state(value, self.evaluation_point(value))
        finally:
            self._depth = depth
            self._following = following

    def evaluation_point(self, node: cst.CSTNode) -> cst.CSTNode:
        """Where the names in `node` are looked up: for the value of `x = f(x)`, the assignment
        statement itself (its target comes first in document order but binds after)."""
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.Assign, cst.AnnAssign, cst.AugAssign):
                if getattr(ancestor, "value", None) is not None:
                    return ancestor
            if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                break
        return node

    def _wrap_call_of(self, expr: cst.CSTNode) -> cst.Call:
        while type(expr) is cst.Call:
            if self.names.is_(expr.func, DATA_PARALLEL, *DDP_NAMES):
                return expr
            inner = returned_module(expr, self.names)
            if inner is None:
                break
            expr = inner
        return expr  # type: ignore[return-value]

    def bound_values(
        self, expr: cst.CSTNode, at: cst.CSTNode
    ) -> Optional[List[Optional[cst.CSTNode]]]:
        """The values a name / `self.attr` may hold at `at` (None entries: unknown values)."""
        if type(expr) is cst.Name:
            bindings = self.scopes.lookup(expr.value, at)
            out: List[Optional[cst.CSTNode]] = []
            for binding in bindings:
                if binding.kind in ("assign", "annassign") and binding.value is not None:
                    out.append(binding.value)
                else:
                    out.append(None)
            return out
        if (
            type(expr) is cst.Attribute
            and type(expr.value) is cst.Name
            and expr.value.value == "self"
        ):
            cls = self._enclosing_class(at)
            if cls is None:
                return None
            attr = expr.attr.value
            values: List[Optional[cst.CSTNode]] = []
            for node in self.ctx.tree.descendants(cls.body):
                if type(node) is cst.Assign:
                    if any(is_self_attr(t.target, attr) for t in node.targets):
                        if not self._only_later(node, at):
                            values.append(node.value)
                elif type(node) is cst.AnnAssign and is_self_attr(node.target, attr):
                    if not self._only_later(node, at):
                        values.append(node.value)
            return values
        return None

    def _only_later(self, assign: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Does `assign` come after `at` in the same function, with no loop of that function
        around both? Then it cannot give `self.attr` its value at `at` in that call (the
        conversion in `initialize()` before `self.network = DDP(self.network, ...)` on the next
        line); an assignment in another method may have run before, in any order."""
        function = self.scopes.enclosing_function(at)
        if function is None or self.scopes.enclosing_function(assign) is not function:
            return False
        index = self.ctx.tree.index
        if index.get(assign, -1) <= index.get(at, -1):
            return False
        for ancestor in self.ctx.ancestors(at):
            if ancestor is function:
                return True
            if type(ancestor) in (cst.For, cst.While) and any(
                a is ancestor for a in self.ctx.ancestors(assign)
            ):
                return False
        return True

    def _enclosing_class(self, node: cst.CSTNode) -> Optional[cst.ClassDef]:
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.ClassDef:
                return ancestor
        return None

    # -- distributed and non-distributed paths ------------------------------------------------

    def polarity(self, test: cst.BaseExpression) -> int:
        """+1: true in distributed runs; -1: true in non-distributed runs; 0: unknown."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            return -self.polarity(test.expression)
        if type(test) is cst.BooleanOperation:
            left_side, right_side = self.polarity(test.left), self.polarity(test.right)
            if type(test.operator) is cst.And:
                # Both must hold: one distributed-only side makes the whole test distributed-only.
                if 1 in (left_side, right_side) and -1 not in (left_side, right_side):
                    return 1
                if -1 in (left_side, right_side) and 1 not in (left_side, right_side):
                    return -1
                return 0
            if left_side == right_side:
                return left_side
            return 0
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            if not self._mentions_distributed(test.left):
                return 0
            target = test.comparisons[0]
            op = target.operator
            right = self.ctx.code(target.comparator).strip()
            lowered = right.lower()
            equal = type(op) in (cst.Equal, cst.Is, cst.In)
            unequal = type(op) in (cst.NotEqual, cst.IsNot, cst.NotIn)
            if right in _NEGATIVE_LITERALS or lowered in ("'none'", '"none"'):
                if equal:
                    return -1
                if unequal:
                    return 1
                if type(op) is cst.GreaterThan:
                    return 1  # local_rank > -1 / world_size > 0 ... running distributed
                return 0
            if right == "1":
                if type(op) in (cst.Equal, cst.LessThanEqual):
                    return -1
                if type(op) in (cst.GreaterThan, cst.NotEqual):
                    return 1
                return 0
            if right == "2":
                if type(op) is cst.LessThan:
                    return -1
                if type(op) is cst.GreaterThanEqual:
                    return 1
                return 0
            if right == "True":
                return 1 if equal else -1 if unequal else 0
            # `local_rank in [-1, 0]`, `local_rank == 0`: "is this the main process", not a mode.
            return 0
        if self._mentions_distributed(test):
            return 1
        return 0

    def if_polarity(self, node: cst.CSTNode) -> int:
        """The polarity of an `if` statement: its test, or what its body does."""
        test = getattr(node, "test", None)
        if test is None:
            return 0
        found = self.polarity(test)
        if found == 0 and type(node) is cst.If and self._body_is_distributed(node.body):
            return 1
        return found

    def non_distributed_branch(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The `if` (or conditional expression) that puts `node` on the non-distributed path."""
        for branch, in_body in self.branches(node):
            polarity = self.if_polarity(branch)
            if (in_body and polarity == -1) or (not in_body and polarity == 1):
                return branch
        return None

    def branches(self, node: cst.CSTNode) -> Iterator[Tuple[cst.CSTNode, bool]]:
        """The `if`s and conditional expressions around `node` in its function, innermost
        first, with True when `node` is in the branch taken when the test holds."""
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return
            if type(ancestor) in (cst.If, cst.IfExp):
                if child is ancestor.body:
                    yield ancestor, True
                elif child is ancestor.orelse:
                    yield ancestor, False
            child = ancestor

    def _mentions_distributed(self, expr: cst.CSTNode) -> bool:
        """Does a name in `expr` speak of distributed mode (`args.distributed`, `world_size`,
        `dist.is_initialized()`, a `ddp` flag)? Module paths (`torch.distributed.get_rank`)
        do not count: only the last name of a dotted chain does."""
        for node in self_and_descendants(self.ctx, expr):
            if type(node) not in (cst.Name, cst.Attribute):
                continue
            parent = self.ctx.parent(node)
            if type(parent) is cst.Attribute:
                continue  # part of a longer chain: only the chain's last name counts
            assert isinstance(node, (cst.Name, cst.Attribute))  # the types kept above
            word = (node.value if isinstance(node, cst.Name) else node.attr.value).lower()
            if _is_distributed_word(word):
                return True
        return False

    def _body_is_distributed(self, body: cst.CSTNode) -> bool:
        for node in self.ctx.tree.descendants(body):
            if type(node) is cst.Call and self.names.is_(
                node.func, *DDP_NAMES, INIT_PROCESS_GROUP, DISTRIBUTED_SAMPLER
            ):
                return True
        return False

    # -- GPU counts and opt-in flags ----------------------------------------------------------

    def gpu_count_in(self, test: cst.CSTNode, _depth: int = 0) -> Optional[cst.CSTNode]:
        """The `device_count()` call a test depends on (directly or through a name/attribute
        assigned from it), or None."""
        if _depth > 3:
            return None
        for node in self_and_descendants(self.ctx, test):
            if type(node) is cst.Call and self.names.is_(node.func, *DEVICE_COUNT):
                return node
            if type(node) is cst.Name:
                parent = self.ctx.parent(node)
                if type(parent) is cst.Attribute and node is parent.attr:
                    continue
                for binding in self.scopes.lookup(node.value, node):
                    if binding.kind in ("assign", "annassign", "augassign") and binding.value:
                        found = self.gpu_count_in(binding.value, _depth + 1)
                        if found is not None:
                            return found
            elif type(node) is cst.Attribute:
                text = dotted_name(node)
                if text is None or "." not in text:
                    continue
                for assign in self.ctx.nodes(cst.Assign):
                    if any(dotted_name(t.target) == text for t in assign.targets):
                        found = self.gpu_count_in(assign.value, _depth + 1)
                        if found is not None:
                            return found
        return None

    def opt_in_flag(self, test: cst.CSTNode) -> Optional[cst.CSTNode]:
        """A flag the user sets to ask for DataParallel (`args.data_parallel`, `multi_gpu`)."""
        if type(test) is cst.UnaryOperation:
            return None
        if type(test) is cst.BooleanOperation:
            return self.opt_in_flag(test.left) or self.opt_in_flag(test.right)
        leaf = None
        if type(test) is cst.Name:
            leaf = test.value
        elif type(test) is cst.Attribute:
            leaf = test.attr.value
        elif type(test) is cst.Call and type(test.func) in (cst.Name, cst.Attribute):
            # `getattr(args, "data_parallel", False)`, `cfg.get("data_parallel")`
            for arg in test.args:
                if type(arg.value) is cst.SimpleString:
                    value = string_value(arg.value)
                    if isinstance(value, str) and _OPT_IN.match(value):
                        return test
            return None
        if leaf is not None and _OPT_IN.match(leaf):
            return test
        return None

    # -- environment, devices, ranks ----------------------------------------------------------

    def reads_env(self, variable: str) -> bool:
        """Does the file read `variable` from the environment (`os.environ[...]`, `.get`,
        `os.getenv`, `"X" in os.environ`)?"""
        if self._env_reads is None:
            found: Set[str] = set()
            for string in self.ctx.nodes(cst.SimpleString):
                value = string_value(string)
                if not isinstance(value, str) or not value.isupper():
                    continue
                if self._is_env_read(string):
                    found.add(value)
            self._env_reads = found
        return variable in self._env_reads

    def _is_env_read(self, string: cst.SimpleString) -> bool:
        parent = self.ctx.parent(string)
        if type(parent) is cst.Element:
            # `env2int(["OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"], 0)`: one of the names a
            # helper of the file looks up in turn
            sequence = self.ctx.parent(parent)
            if sequence is None or type(sequence) not in (cst.List, cst.Tuple):
                return False
            arg = self.ctx.parent(sequence)
            return type(arg) is cst.Arg and self._handed_to_env_reader(arg)
        if type(parent) is cst.Index:
            element = self.ctx.parent(parent)
            subscript = self.ctx.parent(element) if element is not None else None
            if type(subscript) is cst.Subscript:
                if "environ" in self.ctx.code(subscript.value):
                    return not _is_store_target(self.ctx, subscript)
            return False
        if type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is cst.Call:
                func = dotted_name(call.func) or ""
                if func.endswith(_ENV_GETTERS):
                    return True
                return self._handed_to_env_reader(parent)  # `env_int("LOCAL_RANK", 0)`
            return False
        if type(parent) is cst.Comparison:
            return any("environ" in self.ctx.code(c.comparator) for c in parent.comparisons)
        return False

    def _handed_to_env_reader(self, arg: cst.Arg) -> bool:
        """Is `arg` an argument of a function of this file that reads the environment with a
        key it does not spell out (`os.environ.get(name, -1)` for each name it is given)?"""
        call = self.ctx.parent(arg)
        if type(call) is not cst.Call:
            return False
        function = self.ctx.analysis(CallGraph).callee(call)
        if function is None:
            return False
        for node in self.ctx.tree.descendants(function):
            if type(node) is cst.Call and (dotted_name(node.func) or "").endswith(_ENV_GETTERS):
                key = node.args[0].value if node.args else None
                if key is not None and type(key) is not cst.SimpleString:
                    return True
            elif type(node) is cst.Subscript and "environ" in self.ctx.code(node.value):
                index = node.slice[0].slice if node.slice else None
                if type(index) is cst.Index and type(index.value) is not cst.SimpleString:
                    return True
        return False

    def sets_device(self) -> bool:
        """Does the file choose the current CUDA device (`torch.cuda.set_device`,
        `torch.accelerator.set_device_index`, `with torch.cuda.device(...)`, a per-process
        `CUDA_VISIBLE_DEVICES`)?"""
        if self._sets_device is None:
            found = False
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in (
                    "set_device",
                    "set_device_index",
                ):
                    found = True
                    break
                if self.names.is_(func, "torch.cuda.device"):
                    holder = self.ctx.parent(call)
                    assert holder is not None  # a call always has a parent
                    if type(self.ctx.parent(holder)) is cst.With:
                        found = True
                        break
            if not found:
                for string in self.ctx.nodes(cst.SimpleString):
                    if string_value(string) == "CUDA_VISIBLE_DEVICES":
                        parent = self.ctx.parent(string)
                        element = self.ctx.parent(parent) if parent is not None else None
                        subscript = self.ctx.parent(element) if element is not None else None
                        if type(subscript) is cst.Subscript and _is_store_target(
                            self.ctx, subscript
                        ):
                            found = True
                            break
            self._sets_device = found
        return self._sets_device

    def process_group_inits(self) -> List[cst.Call]:
        """The `init_process_group(...)` calls of the file. In a file that sets up a process
        group, a missing `set_device` is the distributed setup's subject (TRL305), not the
        device placement's (TRL103): one cause, one finding."""
        return [
            call
            for call in self.ctx.nodes(cst.Call)
            if self.names.is_(call.func, INIT_PROCESS_GROUP)
        ]

    def mpi_launched(self) -> bool:
        """Does every process group of the file use the MPI backend (`init_process_group(
        backend="mpi")`)? MPI takes each process's rank and the world size from its own
        launcher (`mpirun`, `srun --mpi`), which passes no `--local_rank` and sets no
        `LOCAL_RANK`: such a script is not run by torch's launchers."""
        inits = self.process_group_inits()
        return bool(inits) and all(
            (string_literal(argument(call, 0, "backend")) or "").lower() == "mpi"
            for call in inits
        )

    def spawned_functions(self) -> Set[cst.FunctionDef]:
        """Functions handed to `torch.multiprocessing.spawn(fn, ...)`: their first parameter
        is the process index, the local rank on one node."""
        if self._spawned is None:
            found: Set[cst.FunctionDef] = set()
            for call in self.ctx.nodes(cst.Call):
                if not self.names.is_(call.func, *SPAWN) or not call.args:
                    continue
                fn = call.args[0].value
                if type(fn) is cst.Name:
                    for binding in self.scopes.lookup(fn.value, fn):
                        if type(binding.node) is cst.FunctionDef:
                            found.add(binding.node)
            self._spawned = found
        return self._spawned

    def local_rank_expr(self, at: cst.CSTNode) -> Optional[str]:
        """Source text of an expression in reach at `at` that holds this process's local rank,
        for fixes: a name read from LOCAL_RANK or called `local_rank`, the process index of a
        spawned worker, `args.local_rank`, or `int(os.environ["LOCAL_RANK"])` in a script that
        reads it. None when there is none."""
        index = self.ctx.tree.index
        position = index.get(at, -1)
        function = self.scopes.enclosing_function(at)
        scope_nodes: List[cst.CSTNode] = [function] if function is not None else []
        scope_nodes.append(self.ctx.module)
        candidates: List[Tuple[int, str]] = []
        for scope_node in scope_nodes:
            scope = self.scopes.by_node.get(scope_node)
            if scope is None:
                continue
            for name, bindings in scope.bindings.items():
                if not self._bound_before(bindings, position, index):
                    continue
                if self.scopes.lookup(name, at) != bindings and not any(
                    b in self.scopes.lookup(name, at) for b in bindings
                ):
                    continue
                if any(self._reads_local_rank(b) for b in bindings):
                    candidates.append((0, name))
                elif "local_rank" in name.lower() and all(
                    b.kind in ("assign", "annassign", "param", "unpack") for b in bindings
                ):
                    candidates.append((1, name))
        if function is not None and function in self.spawned_functions():
            params = function.params.params
            if params:
                candidates.append((2, params[0].name.value))
        if candidates:
            return sorted(candidates)[0][1]
        for attribute in self.ctx.nodes(cst.Attribute):
            if attribute.attr.value == "local_rank" and type(attribute.value) is cst.Name:
                root = attribute.value.value
                if root == "self":
                    continue
                if self.scopes.lookup(root, at):
                    return f"{root}.local_rank"
        if self.reads_env("LOCAL_RANK"):
            os_name = self.module_name("os", at)
            if os_name is not None:
                return f'int({os_name}.environ["LOCAL_RANK"])'
        return None

    def _bound_before(self, bindings: List[Binding], position: int, index) -> bool:
        for binding in bindings:
            if binding.kind == "param":
                continue
            if index.get(binding.node, position + 1) > position:
                return False
        return True

    def _reads_local_rank(self, binding: Binding) -> bool:
        value = binding.value
        if value is None:
            return False
        for node in self_and_descendants(self.ctx, value):
            if type(node) is cst.SimpleString and string_value(node) == "LOCAL_RANK":
                return True
        return False

    def module_name(self, module: str, at: cst.CSTNode) -> Optional[str]:
        """The local name under which `module` (e.g. "torch", "os") is visible at `at`."""
        name = module.split(".")[0]
        bindings = self.scopes.lookup(name, at)
        if bindings and all(
            b.kind == "import" and (b.qualname or "").split(".")[0] == name for b in bindings
        ):
            return name
        return None


# -- helpers ----------------------------------------------------------------------------------


def _is_distributed_word(word: str) -> bool:
    return (
        word in _DIST_WORDS or any(part in word for part in _DIST_PARTS) or "ddp" in word.split("_")
    )


def _is_store_target(ctx, node: cst.CSTNode) -> bool:
    parent = ctx.parent(node)
    return type(parent) is cst.AssignTarget or (
        type(parent) in (cst.AugAssign, cst.AnnAssign) and parent.target is node
    )


def module_root(expr: cst.CSTNode) -> cst.CSTNode:
    """`model.to(device).cuda()` -> `model`: strip the nn.Module methods that return the module
    they are called on."""
    for _ in range(6):
        if (
            type(expr) is cst.Call
            and type(expr.func) is cst.Attribute
            and expr.func.attr.value in MODULE_RETURNING
        ):
            expr = expr.func.value
            continue
        break
    return expr


_ENV_GETTERS = ("environ.get", "getenv", "environ.setdefault")
