"""Batch elements through a training loop's body (TRL101): `BatchFlow.flow(source)` follows
the names a batch source binds and records where an element that was never moved to the device
meets one (the values and words are in `batchvalues.py`, the walk in `batchwalk.py`).
"""

from __future__ import annotations

import itertools
import re
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, cast

import libcst as cst

from ..base.callgraph import CallGraph
from ..base.calls import argument, keyword
from ..base.conditions import Conditions
from ..base.frameworks import Frameworks, loaders_prepared_by_framework
from ..base.names import TORCH_PACKAGES, Names, dotted_name, may_be_project
from ..base.nodes import own_method, target_names
from ...walk import own_nodes
from ..base.scopes import Scopes, bound_value
from ..base.vocabulary import LOSS_CALLEE, MODEL_WORDS, is_functional_loss
from ..device.expressions import Devices
from ..device.host_side import HostSide
from ..device.moves import MOVED, Moves, UNPLACED, WRAPPED
from ..parallel.parallel import Parallel
from .batchvalues import (
    Flow,
    MODULE_NOT_FORWARD,
    MOVING_LOADER,
    TENSOR_PRESERVING,
    TORCH_JOIN,
    Unmoved,
    name_words,
)
from .batchwalk import BatchWalker, condition_key
from .modes import dynamic_model_class, file_model_classes, model_classes, model_constructors
from .steps import TrainingSteps
from .structure import BatchSource, Loops, following_statements
from .. import Analysis


# torch.utils.data wrappers whose items are those of the dataset they are handed
_DATASET_WRAPPERS = ("DataLoader", "random_split", "Subset", "ConcatDataset")


class BatchFlow(Analysis):
    """Batch elements through the loop body (see the section comment above)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)

        self.loops: Loops = ctx.analysis(Loops)
        self.moves = ctx.analysis(Moves)
        self.frameworks = ctx.analysis(Frameworks)
        self.names: Names = ctx.analysis(Names)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self.conditions: Conditions = ctx.analysis(Conditions)
        self._flows: Dict[cst.CSTNode, Flow] = {}
        # id(callee expression) -> (it, may be a model, its placement, named like a model);
        # the entry keeps the node alive, so the id stays its own.
        self._callees: Dict[int, Tuple[cst.CSTNode, bool, FrozenSet[str], bool]] = {}

        self._prepared = loaders_prepared_by_framework(ctx)
        self._submodules: Optional[FrozenSet[str]] = None
        self._move_devices: Optional[FrozenSet[str]] = None
        # receiver name -> its `name.set_format(...)` calls (Hugging Face datasets)
        self._set_format_calls: Optional[Dict[str, List[cst.Call]]] = None

    def flows(self) -> List[Flow]:
        return [self.flow(source) for source in self.loops.batch_sources()]

    def flow(self, source: BatchSource) -> Flow:
        found = self._flows.get(source.node)
        if found is None:
            found = self._flows[source.node] = self._run(source)
        return found

    # -- one source ---------------------------------------------------------------------------

    def _run(self, source: BatchSource) -> Flow:
        flow = Flow(source)
        managed = self.frameworks.managed(source.node) or self._prepared
        if managed is not None:
            flow.quiet = f"managed by {managed}"
            return flow
        reason = self._loader_moves(source, flow) or self._never_run_in_notebook(source)
        if reason is not None:
            flow.quiet = reason
            return flow
        body = self._body(source)
        walker = BatchWalker(self, source, flow, body)
        walker.start()
        walker.block(body)
        flow.bound_names = _bound_names(walker.body_nodes())
        if flow.findings and not self._moves_part_of_the_batch(walker):
            unseen = self._unseen_loader(source)
            if unseen is not None:
                flow.quiet = unseen
                flow.findings = []
                return flow
            if flow.helper is None:
                # `DataLoader(StockDataset(...))` with the class from another file: it may
                # build its items on the device; the project phase reads it
                flow.helper = self._project_dataset(source)
        self._exclusive_moves(source, flow, body, walker)
        self._drop_unreachable(flow, body)
        # `if CUDA: ... else: correct += (predicted == labels).sum()`: the CPU run's side.
        devices: Devices = self.ctx.analysis(Devices)
        flow.findings = [f for f in flow.findings if not devices.cuda_declined(f.use)]
        return flow

    def _never_run_in_notebook(self, source: BatchSource) -> Optional[str]:
        """A loop inside a function that no cell of the notebook calls or hands on (`def
        train_model(model, loader, ...)` left without the cell that runs it): nothing can import
        a notebook's function, so the loop never runs, and what its model is cannot be told."""
        if self.ctx.source.notebook is None:
            return None
        graph = self.ctx.analysis(CallGraph)
        for ancestor in self.ctx.ancestors(source.node):
            if type(ancestor) is cst.FunctionDef and not graph.named_in_file(
                ancestor, members=True
            ):
                return f"`{ancestor.name.value}` is never called in this notebook"
        return None

    def _drop_unreachable(self, flow: Flow, body: List[cst.BaseStatement]) -> None:
        """Unfinished code: a statement the body always runs hands a call a name nothing binds
        (`output = model(noisy_data)` under "# your code here"). Every iteration stops there
        with NameError, so nothing after it meets the device; findings before it stand."""
        index = self.ctx.tree.index
        for statement in body:
            if type(statement) is not cst.SimpleStatementLine:
                continue
            name = self._unbound_argument(statement)
            if name is None:
                continue
            stop = index.get(statement, -1)
            kept = [f for f in flow.findings if index.get(f.use, -1) < stop]
            if len(kept) < len(flow.findings) and not kept:
                flow.quiet = (
                    f"the loop reads `{name}`, which nothing binds: it stops there with NameError"
                )
            flow.findings = kept
            return

    def _unbound_argument(self, statement: cst.SimpleStatementLine) -> Optional[str]:
        for node in own_nodes(statement):
            if type(node) is not cst.Call:
                continue
            for expr in [node.func, *(arg.value for arg in node.args)]:
                if type(expr) is cst.Name and self.scopes.unbound(expr):
                    return expr.value
        return None

    # -- a loop that moves nothing of a batch the file does not show being made ---------------

    @staticmethod
    def _moves_part_of_the_batch(walker: BatchWalker) -> bool:
        return bool(walker.moved_here or walker.moved_in_helpers or walker.batch_moves)

    def _unseen_loader(self, source: BatchSource) -> Optional[str]:
        """Why a loop that moves no item of its batch is not evidence of a CPU batch: nothing
        in the file makes what it iterates. Such a loop beside a model on the device either
        fails on its first batch, where anyone who ran it would have seen it, or gets batches
        that are already on the device from a loader made elsewhere (a project's
        `get_dataloader` over `torch.cuda.FloatTensor` data, a library iterator): the file
        cannot tell which. A loop that moves some items and not others says the batch arrives
        on the CPU, and is followed whatever made the loader. None when the file shows a maker:
        a torch call (`DataLoader(...)`, `torch.split`), or a function or class of the file."""
        start = source.node.iter if isinstance(source.node, cst.For) else source.node.value
        outside: Set[int] = set()  # the calls that make a dataset handed in from outside
        for call in self._loader_chain(start):
            if id(call) in outside:
                continue
            qualified = self.names.qualified(call.func)
            if self._batches_a_dataset_from_outside(call, qualified):
                outside.update(id(c) for c in self._loader_chain(call.args[0].value))
                continue
            if self._local_definition(call.func) is not None:
                return None
            if any(q.split(".")[0] in TORCH_PACKAGES for q in qualified):
                return None
        text = self.ctx.code(start)
        if len(text) > 40:
            text = text[:37] + "..."
        return (
            f"nothing of the batch is moved and nothing in the file makes `{text}`: "
            "its batches may already be on the device"
        )

    def _project_dataset(self, source: BatchSource) -> Optional[Tuple[str, int]]:
        """The class or function of another project file that builds the dataset a loop's
        torch DataLoader batches (`DataLoader(dataset)` with `dataset =
        StockDataset(ticker)` from `stock_dataset.py`), as a helper that may move the batch:
        a loop that moves no item of its batch says nothing about where the items are made,
        and that file's code does (`torch.FloatTensor(windows).to("cuda")` in `__init__`).
        None when the loader loads in worker processes, which cannot use CUDA."""
        start = source.node.iter if isinstance(source.node, cst.For) else source.node.value
        for call in self._loader_chain(start):
            qualified = self.names.qualified(call.func)
            if not any(
                q.split(".")[0] in TORCH_PACKAGES and q.endswith(".DataLoader") for q in qualified
            ):
                continue
            if _in_worker_processes(call):
                return None  # forked workers cannot touch CUDA: the items come on the CPU
            dataset = argument(call, 0, "dataset")
            for value in self._loader_chain(dataset) if dataset is not None else ():
                if self._local_definition(value.func) is not None:
                    continue
                qualified = self.names.qualified(value.func)
                if not qualified or not all(may_be_project(q) for q in qualified):
                    continue  # torch's or a library's (also one a star import may shadow)
                helper = self.project_helper(value.func)
                if helper is not None and not helper.startswith("<"):
                    return helper, -1
        return None

    def _batches_a_dataset_from_outside(self, call: cst.Call, qualified) -> bool:
        """`DataLoader(train_set)` where `train_set` only ever arrives as a parameter that no
        call of this file passes a dataset for, perhaps split on the way (a training utility
        that the project's model wrappers call with a `TensorDataset` of tensors they moved to
        the device): the loader is made here, but what its batches hold, and where, is decided
        outside the file."""
        if not any(
            q.split(".")[0] in TORCH_PACKAGES and q.endswith(".DataLoader") for q in qualified
        ):
            return False
        if not call.args or call.args[0].keyword is not None:
            return False
        return self._handed_in_from_outside(call, 0)

    def _handed_in_from_outside(self, expr: cst.CSTNode, depth: int) -> bool:
        """Is the data `expr` holds handed in from outside the file: parameters no call of the
        file passes anything else for, through names, tuples, torch's dataset wrappers
        (`DataLoader`, `random_split`, `Subset`, `ConcatDataset`: their first argument) and
        functions of the file that return only such values (`split_dataset(dataset, 0.2)`)?"""
        if depth > 12:
            return False
        if isinstance(expr, (cst.Tuple, cst.List)):
            parts = [e.value for e in expr.elements]
            return bool(parts) and all(self._handed_in_from_outside(p, depth + 1) for p in parts)
        if type(expr) is cst.Call:
            qualified = self.names.qualified(expr.func)
            if any(
                q.split(".")[0] in TORCH_PACKAGES and q.split(".")[-1] in _DATASET_WRAPPERS
                for q in qualified
            ):
                data = argument(expr, 0, "dataset")
                if data is None:
                    data = argument(expr, 0, "datasets")
                return data is not None and self._handed_in_from_outside(data, depth + 1)
            local = self._local_definition(expr.func)
            if type(local) is cst.FunctionDef:
                returns = [
                    node.value for node in own_nodes(local)
                    if type(node) is cst.Return and node.value is not None
                ]
                return bool(returns) and all(
                    self._handed_in_from_outside(r, depth + 1) for r in returns
                )
            return False
        if type(expr) is not cst.Name:
            return False
        bindings = self.scopes.lookup(expr.value, expr)
        if not bindings:
            return False
        callgraph = self.loops.callgraph
        for binding in bindings:
            if binding.kind == "param" and type(binding.statement) is cst.FunctionDef:
                function = binding.statement
                for caller in [*callgraph.callers(function), *callgraph.constructions(function)]:
                    passed = callgraph.argument_for(caller, function, expr.value)
                    if passed is None or not self._handed_in_from_outside(passed, depth + 1):
                        return False
            elif binding.kind in ("assign", "annassign") and binding.value is not None:
                if not self._handed_in_from_outside(binding.value, depth + 1):
                    return False
            elif binding.kind == "unpack" and type(binding.statement) is cst.Assign:
                # train_set, val_set = split_dataset(dataset, val_size)
                if not self._handed_in_from_outside(binding.statement.value, depth + 1):
                    return False
            else:
                return False
        return True

    # -- moves on branches that exclude each other --------------------------------------------

    def _exclusive_moves(
        self, source: BatchSource, flow: Flow, body: List[cst.BaseStatement], walker: BatchWalker
    ) -> None:
        """The walk above joins branches optimistically: an item moved on one branch counts as
        moved. That hides `if args.gpu is not None: images = images.cuda(args.gpu)` /
        `elif use_cuda: target = target.cuda()`, where no path moves both. So when the batch's
        moves sit in the arms of an `if`/`elif`/`else`, each combination of the conditions
        around moves is walked on its own; when every path that moves part of the batch leaves
        another part on the CPU where it meets the device, the first such path's findings are
        added (with what another path leaves behind). A single path that moves everything keeps
        the batch quiet: the script may take it."""
        decisions: List[str] = []
        exclusive = False
        for node in walker.body_nodes():
            if type(node) is not cst.If or not self.moves.moves_in(node):
                continue
            key = condition_key(self.ctx, node)
            if key not in decisions:
                decisions.append(key)
            if node.orelse is not None and any(
                self.moves.moves_in(arm) for arm in _arms(node)[1:]
            ):
                exclusive = True
        if not exclusive or len(decisions) > _MAX_DECISIONS:
            return
        reported = {finding.use for finding in flow.findings}
        device_paths: List[List[Unmoved]] = []
        for taken in itertools.product((True, False), repeat=len(decisions)):
            scratch = Flow(source, helper=flow.helper)
            path = BatchWalker(self, source, scratch, body)
            path._nodes = walker._nodes
            path.textual = walker.textual
            path.choices = dict(zip(decisions, taken))
            path.start()
            path.block(body)
            certain = [f for f in scratch.findings if self._certain(f)]
            if path.exited and not certain:
                continue  # leaves the iteration before anything meets the device
            if not path.moved_here:
                continue  # nothing of the batch goes to the device: a run on the CPU
            if not certain:
                return  # a path that may run: everything it must move is moved, or may be
            device_paths.append(certain)
        if len(device_paths) < 2:
            return
        first, others = device_paths[0], device_paths[1:]
        for finding in first:
            if finding.use in reported:
                continue
            finding.instead = next(
                (f for path in others for f in path if f.element.name != finding.element.name),
                None,
            )
            if finding.instead is None:
                continue
            flow.findings.append(finding)

    def _body(self, source: BatchSource) -> List[cst.BaseStatement]:
        """The statements that see the batch: the loop body, or what follows `next(...)` (also
        after the `try`/`if` that holds it, up to the enclosing loop or function)."""
        body = list(source.body)
        if type(source.node) is cst.For:
            return body
        statement = self.ctx.parent(source.node)
        current = statement
        for _ in range(3):
            block = self.ctx.parent(current) if current is not None else None
            owner = self.ctx.parent(block) if block is not None else None
            if type(owner) not in (cst.Try, cst.If, cst.ExceptHandler, cst.Else, cst.Finally):
                break
            assert owner is not None  # a Try, If, ExceptHandler, Else or Finally here
            if type(owner) in (cst.ExceptHandler, cst.Else, cst.Finally):
                owner = self.ctx.parent(owner)
            if type(owner) is cst.If and type(self.ctx.parent(owner)) is cst.If:
                break
            body.extend(following_statements(self.ctx, owner))
            current = owner
        return body

    def _certain(self, finding: Unmoved) -> bool:
        """Does this finding fail whatever the model turns out to be? Inputs of a model that is
        only known by its name, or may be a DataParallel / DDP(device_ids) wrapper, may be
        moved by the wrapper (the rule asks the project phase about those)."""
        if finding.kind != "model" or type(finding.sink) is not cst.Call:
            return True
        target = finding.sink.func
        if type(target) is cst.Attribute and target.attr.value == "forward":
            target = target.value
        return self.moves.placement(target) == frozenset({MOVED})

    # -- loaders that deliver batches on the device -------------------------------------------

    def _loader_moves(self, source: BatchSource, flow: Flow) -> Optional[str]:
        start = source.node.iter if isinstance(source.node, cst.For) else source.node.value
        for call in self._loader_chain(start):
            dotted = dotted_name(call.func) or ""
            leaf = dotted.split(".")[-1]
            if MOVING_LOADER.search(leaf):
                return f"`{leaf}` delivers batches on the device"
            qualified = self.names.qualified(call.func)
            if any(q.split(".")[0] in _DEVICE_BATCH_LIBRARIES for q in qualified):
                # fastai 0.7's `data.trn_dl` (through a wrapper's `self.dl`, its constructor call
                # and the object it is an attribute of): the library moves every batch
                return f"`{dotted}` makes a loader that delivers batches on the device"
            if any(
                a.keyword is not None and a.keyword.value == "device" and not _cpu_device(a.value)
                for a in call.args
            ):
                # torchtext's (legacy) Iterator/BucketIterator build every batch field with
                # `torch.tensor(..., device=device)`, like any loader given a device
                return f"`{leaf}(..., device=...)` delivers batches on the device"
            handed = self._handed_the_device(call)
            if handed is not None:
                # `d2l.data_iter_consecutive(corpus, bs, steps, device)`, `MyDataset(root,
                # device)`: a producer of the batches given the device may build them there
                return f"`{leaf}` is given the device (`{handed}`) and may deliver batches on it"
            if "Iterator" in dotted and keyword(call, "device") is None:
                if any(q.startswith("torchtext.") for q in self.names.qualified(call.func)):
                    # Without `device=`, where legacy torchtext builds the batch depends on its
                    # version: before 0.3 `device=None` meant the current GPU, later the CPU.
                    return f"legacy torchtext's `{leaf}` places batches by its version"
            local = self._local_definition(call.func)
            if type(local) is cst.ClassDef and self.moves.moves_in(local):
                return f"`{leaf}` moves the batches"
            # The data is on the device before it is batched: `TensorDataset(x.to(device), ...)`,
            # or built from what a helper of the file returns moved (`df_to_tensors(df, device)`);
            # the default collate stacks device tensors into a device batch.
            if self.moves.move(call) is not None:
                return f"the data is moved before it is batched (`{self.ctx.code(call)[:60]}`)"
            collate = keyword(call, "collate_fn")
            if collate is not None and self._collate_moves(collate):
                # also where a helper hands `collate_fn=` on to the DataLoader it builds
                return "its collate_fn moves the batch"
            if type(local) is cst.FunctionDef and self._gives_device_values(local):
                return f"`{leaf}` returns tensors already on the device"
            if leaf.endswith("DataLoader") or self.names.matches_suffix(call.func, "DataLoader"):
                reason = self._dataloader_moves(call, flow)
                if reason is not None:
                    return reason
        return None

    def _handed_the_device(self, call: cst.Call) -> Optional[str]:
        """The argument of `call` that is the device the file moves things to (the same name or
        attribute as a move's device: `model.to(device)` ... `make_batches(corpus, device)`)."""
        if self._move_devices is None:
            texts = set()
            for node in self.ctx.tree.nodes(cst.Call):
                move = self.moves.move(node)
                if move is not None and move.device is not None:
                    if type(move.device) in (cst.Name, cst.Attribute):
                        texts.add(self.ctx.code(move.device))
            self._move_devices = frozenset(texts)
        for arg in call.args:
            value = arg.value
            if type(value) not in (cst.Name, cst.Attribute) or arg.star:
                continue
            text = self.ctx.code(value)
            if text in self._move_devices:
                return text
        return None

    def _loader_chain(self, expr: cst.CSTNode, depth: int = 0) -> List[cst.Call]:
        """Calls that make the iterated object: wrappers, the DataLoader, through names."""
        out: List[cst.Call] = []
        if depth > 4 or expr is None:
            return out
        for node in [expr, *self.ctx.tree.descendants(expr)]:
            if type(node) is cst.Call:
                out.append(node)
            elif type(node) is cst.Name:
                # `encoded.set_format(type="torch", device="cuda")` (Hugging Face datasets)
                # changes the dataset in place: its items, and so the batches, are made there
                out.extend(self._format_calls(node))
                for binding in self.scopes.lookup(node.value, node):
                    value = binding.value
                    if binding.kind == "unpack" and type(binding.statement) is cst.Assign:
                        value = binding.statement.value  # train_iter, val_iter = make(...)
                    if binding.kind in ("assign", "annassign", "unpack") and value is not None:
                        out.extend(self._loader_chain(value, depth + 1))
                    if binding.kind == "param" and type(binding.statement) is cst.FunctionDef:
                        # `def evaluate(model, iterator)`: what the file's callers pass for it
                        out.extend(self._passed_loaders(binding.statement, node.value, depth))
            elif type(node) is cst.Attribute and _is_self(node.value):
                for value in self.loops.self_assigned(node):
                    out.extend(self._loader_chain(value, depth + 1))
        return out

    def _format_calls(self, name: cst.Name) -> List[cst.Call]:
        """`name.set_format(...)` calls on the object `name` holds (the same bindings reach
        the receiver): a dataset told, in place, how to build its items."""
        if self._set_format_calls is None:
            self._set_format_calls = {}
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if (
                    type(func) is cst.Attribute
                    and func.attr.value == "set_format"
                    and type(func.value) is cst.Name
                ):
                    self._set_format_calls.setdefault(func.value.value, []).append(call)
        calls = self._set_format_calls.get(name.value, [])
        if not calls:
            return []
        bindings = {id(b) for b in self.scopes.lookup(name.value, name)}
        out = []
        for call in calls:
            receiver = cast(cst.Attribute, call.func).value
            if {id(b) for b in self.scopes.lookup(name.value, receiver)} & bindings:
                out.append(call)
        return out

    def _passed_loaders(
        self, function: cst.FunctionDef, param: str, depth: int
    ) -> List[cst.Call]:
        out: List[cst.Call] = []
        callgraph = self.loops.callgraph
        for call in [*callgraph.callers(function), *callgraph.constructions(function)]:
            passed = callgraph.argument_for(call, function, param)
            if passed is not None:
                out.extend(self._loader_chain(passed, depth + 1))
        return out

    def _dataloader_moves(self, call: cst.Call, flow: Flow) -> Optional[str]:
        collate = None
        dataset = call.args[0].value if call.args and call.args[0].keyword is None else None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "collate_fn":
                collate = arg.value
            if arg.keyword is not None and arg.keyword.value == "dataset":
                dataset = arg.value
        if collate is not None:
            # (a collate_fn that moves was already found by `_loader_moves`, for every call of
            # the chain; what is left is one imported from the project)
            local = self._local_definition(collate)
            if local is None and not _in_worker_processes(call):
                # An imported collate_fn of the project may move the batch; with worker
                # processes it cannot (CUDA cannot be used in forked workers).
                helper = self.project_helper(collate)
                if helper is not None:
                    flow.helper = (helper, -1)
        if type(dataset) is cst.Name:
            for binding in self.scopes.lookup(dataset.value, dataset):
                value = binding.value
                if type(value) is cst.Call:
                    local = self._local_definition(value.func)
                    if type(local) is cst.ClassDef and self.moves.moves_in(local):
                        return "its dataset returns tensors on the device"
        return None

    def _collate_moves(self, collate: cst.BaseExpression) -> bool:
        """A collate_fn that puts the batch on the device: a lambda or function of the file
        that moves (`.to(device)` in it, or a mover helper: `to_device(default_collate(b))`)."""
        if type(collate) is cst.Lambda and self.moves.moves_in(collate.body):
            return True
        if self.moves.is_mover_function(collate):
            return True
        local = self._local_definition(collate)
        if local is None:
            return False
        if self.moves.moves_in(local):
            return True
        return any(
            type(node) is cst.Call and self.moves.mover_call(node) for node in own_nodes(local)
        )

    def _gives_device_values(self, function: cst.FunctionDef) -> bool:
        """Does one of the function's own `return`s or `yield`s give values on the device:
        moved (`return x.to(device), y.to(device)`) or built there and cut from what was
        (`corpus = torch.tensor(ids, device=device)` ... `yield corpus[:, i:j], corpus[...]`, a
        generator that delivers its batches on the device)?"""
        for node in own_nodes(function.body):
            if type(node) is cst.Return or type(node) is cst.Yield:
                value = node.value
                if isinstance(value, cst.BaseExpression) and self._on_device(value, 0):
                    return True
        return False

    def _on_device(self, expr: cst.BaseExpression, depth: int) -> bool:
        if depth > 12:
            return False
        if self.moves.is_moved(expr):
            return True
        if type(expr) is cst.Tuple or type(expr) is cst.List:
            items = [e.value for e in expr.elements]
            return bool(items) and all(self._on_device(item, depth + 1) for item in items)
        if type(expr) is cst.Subscript:
            return self._on_device(expr.value, depth + 1)
        if type(expr) is cst.Call:
            func = expr.func
            device = keyword(expr, "device")
            if device is not None:  # torch.tensor(data, device=device), torch.zeros(..., device=d)
                qualified = self.names.qualified(func)
                return not _cpu_device(device) and any(q.startswith("torch.") for q in qualified)
            if type(func) is cst.Attribute and func.attr.value in TENSOR_PRESERVING:
                return self._on_device(func.value, depth + 1)  # corpus[...].view(b, -1)
            return False
        if type(expr) is cst.Name:
            # the binding of the name that comes last before this read, in its own scope
            index = self.ctx.tree.index
            at = index.get(expr, -1)
            before = [
                b for b in self.scopes.lookup(expr.value, expr) if index.get(b.node, -1) < at
            ]
            if not before:
                return False
            last = max(before, key=lambda b: index.get(b.node, -1))
            value = bound_value(last) if last.kind in ("assign", "annassign", "unpack") else None
            return value is not None and self._on_device(value, depth + 1)
        return False

    def _local_definition(self, func: cst.BaseExpression) -> Optional[cst.CSTNode]:
        """The def/class of this file that `func` names, if any."""
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) in (cst.FunctionDef, cst.ClassDef):
                    return binding.node
        if type(func) is cst.Attribute and _is_self(func.value):
            found = self.loops.callgraph.functions_named(func.attr.value)
            if len(found) == 1:
                return found[0]
        return None

    # -- imported helpers ---------------------------------------------------------------------

    def project_helper(self, func: cst.BaseExpression) -> Optional[str]:
        """The qualified name of an imported function that may belong to this project (so that
        only the project phase can tell whether it moves its argument), else None."""
        qualified = self.names.qualified(func)
        if not qualified:
            return None
        for qualname in sorted(qualified):
            return qualname if may_be_project(qualname) else None
        return None

    # -- what a callee is ---------------------------------------------------------------------

    def model_call(
        self, call: cst.Call, args_on_device: bool, siblings_moved: bool = False
    ) -> Tuple[bool, bool]:
        """(its output is on the device, its inputs must be) for a call that may run a model.

        A model is on the device when it was moved (or wrapped), or, for a callee named like a
        model (`model`, `net`, `self.encoder`, ...), when it gets moved tensors or the loop
        moves other items of the same batch (docs/architecture.md, "Evidence model": the model
        or the siblings were moved). Inputs given to a DataParallel/DDP(device_ids)/FSDP wrapper
        are moved by it."""
        target = _module_called(call)
        if self._no_module_here(call, target):
            return False, False
        # What the callee is does not depend on the call's arguments: the walk of each source
        # (and a helper's body, followed from each call) asks again for the same calls.
        known = self._callees.get(id(target))
        if known is None:
            if self._may_be_model(target):
                known = (target, True, self.moves.placement(target), _model_like(target))
            else:
                known = (target, False, frozenset(), False)
            self._callees[id(target)] = known
        _, may_be_model, placement, modelish = known
        if not may_be_model:
            return False, False
        plain = MOVED in placement
        wrapped = WRAPPED in placement
        # Sibling moves say nothing about a model seen built and never moved (`net =
        # TrainerNet()` whose forward ships inputs elsewhere itself).
        siblings = siblings_moved and UNPLACED not in placement
        evidence = modelish and (args_on_device or siblings)
        on_device = plain or wrapped or (modelish and args_on_device)
        inputs = plain or (evidence and not wrapped)
        return on_device, inputs

    def moved_by_forward(self, call: cst.Call, arg_index: int) -> bool:
        """Does the model's own `forward` move what argument `arg_index` hands it (`x =
        x.to("cuda")` at the top of `forward`, in a class of this file the model is built
        from), or use it only on the host (lengths for `pack_padded_sequence`, host_side.py)?
        A CPU item given to such a model meets the device only inside the model, which has
        placed it there itself, or never. A model of a class a lookup chooses while the script runs
        (`getattr(importlib.import_module(...), name)`) may do so too: nothing says it does
        not."""
        target = _module_called(call)
        if type(target) is not cst.Name:
            return False
        steps = self.ctx.analysis(TrainingSteps)
        if dynamic_model_class(steps, target.value, call):
            return True  # a forward nobody can read here may place its inputs itself
        host = self.ctx.analysis(HostSide)
        for cls in file_model_classes(steps, target.value, call):
            forward = own_method(cls, "forward")
            if forward is not None and (
                self.moves.forward_moves(forward, call, arg_index)
                or host.takes_on_host(forward, call, arg_index)
            ):
                return True
        return False

    def project_model_classes(self, call: cst.Call) -> Optional[List[str]]:
        """The qualified names of the classes the model `call` runs may be built from, when
        every one is imported and may belong to the project (`from models import NRMS, LSTUR`;
        `model = NRMS(...).to(device)` on one branch, `LSTUR(...)` on the other): their
        `forward`, in another file, may place its inputs itself, which only the project phase
        can read. None when a class is this file's, torch's or a known library's, or a binding
        builds no class. A class named through star imports is given as its alternatives,
        "utils.Net|model.Net". A trainer's `self.network(x)` is built where the class assigns
        `self.network`."""
        name = _model_name(_module_called(call))
        if name is None:
            return None
        found = model_classes(self.ctx.analysis(TrainingSteps), name, call, attributes=True)
        if not found:
            return None
        if not all(may_be_project(q) and not q.startswith("<") for q in set().union(*found)):
            return None
        # A name only star imports can bind offers one candidate per star import ("a.Net|b.Net"):
        # the project phase takes the one that defines it.
        return ["|".join(sorted(names)) for names in found]

    def wrapped_constructor_args(self, call: cst.Call) -> List[object]:
        """The arguments of the constructor of the model `call` runs that hold a DataParallel
        or DDP(device_ids) wrapper in every call that builds it (`TSN(n, net)` after `net =
        nn.DataParallel(net).cuda()`: [1]), by position or keyword: a `forward` that hands its
        input to such an attribute has the wrapper scatter it to the GPUs."""
        name = _model_name(_module_called(call))
        if name is None:
            return []
        built = model_constructors(
            self.ctx.analysis(TrainingSteps), name, call, attributes=True
        )
        common: Optional[Set[object]] = None
        for constructor in built or ():
            wrapped: Set[object] = set()
            for index, arg in enumerate(constructor.args):
                if arg.star or self.moves.placement(arg.value) != frozenset({WRAPPED}):
                    continue
                wrapped.add(arg.keyword.value if arg.keyword is not None else index)
            common = wrapped if common is None else common & wrapped
        return sorted(common or (), key=str)

    def runs_a_named_model(self, call: cst.Call) -> bool:
        """`self.model(data, target)`, `net.forward(x)`: a call that may run a module and is
        named like a model. What it returns is the model's output, not an item of the batch."""
        target = _module_called(call)
        return _model_like(target) and self._may_be_model(target)

    def _no_module_here(self, call: cst.Call, target: cst.BaseExpression) -> bool:
        """`else:` of `if isinstance(net, nn.Module):` (or under `if not isinstance(...)`): the
        callee is a plain function there (a from-scratch model), whatever is moved elsewhere."""
        text = self.ctx.code(target)
        for subject, cls, holds in self.conditions.instance_tests(call):
            if subject == text and not holds:
                classes = [e.value for e in cls.elements] if type(cls) is cst.Tuple else [cls]
                if any(
                    q == "torch.nn.Module" or q.endswith(".nn.Module")
                    for c in classes
                    for q in self.names.qualified(c)
                ):
                    return True
        return False

    def _may_be_model(self, target: cst.BaseExpression) -> bool:
        dotted = dotted_name(target)
        if dotted is None:
            return False
        if type(target) is cst.Attribute and target.attr.value in MODULE_NOT_FORWARD:
            return False
        root = dotted.split(".")[0]
        if root in ("self", "cls"):
            functions_named = self.loops.callgraph.functions_named
            if type(target) is cst.Attribute and functions_named(target.attr.value):
                return False  # a method of the class, not a submodule
            return True
        if type(target) is cst.Attribute and target.attr.value not in self._submodule_names():
            # `trainer.faster_rcnn.predict(img)`, `agent.act(state)`: from outside its class a
            # call through an attribute is a method as often as a submodule, and a method may
            # convert or move what it gets (a detector's `predict` runs each image through
            # `.cuda()`). It runs a model only when the file makes that attribute one.
            return False
        head = target
        while type(head) is cst.Attribute:
            head = head.value
        for binding in self.scopes.lookup(root, head):
            if binding.kind in ("import", "def", "class"):
                return False
        return bool(self.scopes.lookup(root, head)) or not self.names.qualified(target)

    def _submodule_names(self) -> FrozenSet[str]:
        """Attributes a class of this file assigns a call to (`self.encoder = Encoder()`) and
        defines no method of that name: called through an instance, they run a submodule."""
        if self._submodules is None:
            assigned: Set[str] = set()
            for node in self.ctx.tree.nodes(cst.Assign):
                assert isinstance(node, cst.Assign)
                if type(node.value) is not cst.Call:
                    continue
                for target in node.targets:
                    attribute = target.target
                    if (
                        type(attribute) is cst.Attribute
                        and type(attribute.value) is cst.Name
                        and attribute.value.value == "self"
                    ):
                        assigned.add(attribute.attr.value)
            functions_named = self.loops.callgraph.functions_named
            self._submodules = frozenset(a for a in assigned if not functions_named(a))
        return self._submodules

    def is_loss(self, call: cst.Call) -> bool:
        func = call.func
        if type(func) is cst.Call:  # nn.CrossEntropyLoss()(logits, labels)
            return any(q.endswith("Loss") for q in self.names.qualified(func.func))
        if any(is_functional_loss(q) for q in self.names.qualified(func)):
            return True
        dotted = dotted_name(func)
        if dotted is None:
            return False
        if not LOSS_CALLEE.search(dotted.split(".")[-1]):
            return self._bound_to_loss_class(func)
        root = dotted.split(".")[0]
        if self._built_by_a_factory(func, call):
            return False
        if root in ("self", "cls"):
            functions_named = self.loops.callgraph.functions_named
            if type(func) is cst.Attribute and functions_named(func.attr.value):
                return False
            return True
        head = func
        while type(head) is cst.Attribute:
            head = head.value
        bindings = self.scopes.lookup(root, head)
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind in ("import", "def", "class"):
                return False  # a function: it may move or convert what it gets
            if binding.kind in ("assign", "annassign") and type(binding.value) is cst.Call:
                local = self._local_definition(binding.value.func)
                if type(local) is cst.ClassDef and self.moves.moves_in(local):
                    return False  # a criterion of this file that moves its targets itself
        return True

    def _built_by_a_factory(self, func: cst.BaseExpression, call: cst.Call) -> bool:
        """`self.loss = utils.get_class(conf.loss_class)(**conf.loss)`: every value the callee
        may hold is an instance of a class that a call returns (a class picked while the script
        runs), not of a loss class anyone can name. Its `forward` may take dicts and place what
        it reads itself: its name alone does not make it a torch criterion."""
        values = self.ctx.analysis(Parallel).bound_values(func, call)
        if not values:
            return False
        for value in values:
            if type(value) is not cst.Call or type(value.func) is not cst.Call:
                return False
            maker = value.func
            if any(q.endswith("Loss") for q in self.names.qualified(maker.func)):
                return False
            if (
                type(maker.func) is cst.Name
                and maker.func.value == "getattr"
                and maker.args
                and any(
                    q.split(".")[0] in TORCH_PACKAGES
                    for q in self.names.qualified(maker.args[0].value)
                )
            ):
                return False  # `getattr(nn, args.loss)()`: whichever it is, a torch criterion
        return True

    def takes_cpu_targets(self, call: cst.Call) -> bool:
        """Is the loss `call` runs a CTC loss (torch's `nn.CTCLoss` / `F.ctc_loss`, warp-ctc's
        `CTCLoss`)? Its targets and lengths may stay on the CPU: cuDNN's CTC wants them there,
        torch's own kernel moves CPU targets to the log-probabilities' device itself, and
        warp-ctc takes CPU labels. Also through a name or `self.criterion` bound only to one, or
        a parameter every call of its function in the file passes one for."""
        func = call.func
        if type(func) is cst.Call:  # nn.CTCLoss()(log_probs, targets, ...)
            return _names_ctc(self.names.qualified(func.func))
        if _names_ctc(self.names.qualified(func)):
            return True
        values = self.ctx.analysis(Parallel).bound_values(func, call)
        if values and all(
            type(value) is cst.Call and _names_ctc(self.names.qualified(value.func))
            for value in values
        ):
            return True
        # A function's parameter: what the file's calls of the function pass for it
        # (`train(model, loader, criterion)` called with `criterion = nn.CTCLoss()`).
        built = (
            model_constructors(self.ctx.analysis(TrainingSteps), func.value, call)
            if type(func) is cst.Name
            else None
        )
        return bool(built) and all(_names_ctc(self.names.qualified(c.func)) for c in built or ())

    def _bound_to_loss_class(self, func: cst.BaseExpression) -> bool:
        """`dice = smp.losses.DiceLoss(mode="binary")`, `focal = FocalLoss()`: a name bound
        only to instances of a class named `...Loss` (not one of this file that moves things)."""
        if type(func) is not cst.Name:
            return False
        bindings = self.scopes.lookup(func.value, func)
        if not bindings:
            return False
        for binding in bindings:
            value = binding.value
            if binding.kind not in ("assign", "annassign") or type(value) is not cst.Call:
                return False
            if type(value.func) is cst.Call:
                return False
            names = set(self.names.qualified(value.func))
            dotted = dotted_name(value.func)
            if dotted:
                names.add(dotted)
            if not any(n.split(".")[-1].endswith("Loss") for n in names):
                return False
            local = self._local_definition(value.func)
            if type(local) is cst.ClassDef and self.moves.moves_in(local):
                return False
        return True

    def is_join(self, call: cst.Call) -> bool:
        return self.names.is_(call.func, *TORCH_JOIN)

    def is_torch_function(self, call: cst.Call) -> bool:
        """Is the callee surely PyTorch's? A name two star imports may provide (`from
        torch.utils.data import *` then `from idlmam import *`: `moveTo` is the later module's)
        is not known to be."""
        qualified = self.names.qualified(call.func)
        return bool(qualified) and all(q.startswith("torch.") for q in qualified)


# -- helpers for the dataflow -----------------------------------------------------------------


def _names_ctc(qualified: FrozenSet[str]) -> bool:
    """`torch.nn.CTCLoss`, `torch.nn.functional.ctc_loss`, `warpctc_pytorch.CTCLoss`."""
    return any(q.split(".")[-1] in ("CTCLoss", "ctc_loss") for q in qualified)


# Libraries whose data objects hand back batches already on the device: fastai's loaders (0.7's
# `ModelData.trn_dl`, v1's `DataBunch`, v2's `DataLoaders`) move every batch to the GPU. (Which
# other names are libraries and which are the project's own modules a file alone cannot tell.)
_DEVICE_BATCH_LIBRARIES = frozenset({"fastai"})


# At most 2**5 paths are walked for one batch; beyond that the optimistic join alone decides.
_MAX_DECISIONS = 5


def _arms(node: cst.If) -> List[cst.CSTNode]:
    """The blocks of an `if`/`elif`/`else` chain, in order."""
    arms: List[cst.CSTNode] = [node.body]
    current = node.orelse
    while current is not None:
        arms.append(current.body)
        current = current.orelse if type(current) is cst.If else None
    return arms


def _bound_names(nodes: Sequence[cst.CSTNode]) -> Set[str]:
    """Names bound by `nodes` (the own nodes of some statements)."""
    found: Set[str] = set()
    for node in nodes:
        if type(node) is cst.Assign:
            for t in node.targets:
                found |= target_names(t.target)
        elif isinstance(node, _TARGET_BINDERS):
            found |= target_names(node.target)
        elif type(node) is cst.AsName:
            found |= target_names(node.name)
    return found


_TARGET_BINDERS = (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)


def _in_worker_processes(call: cst.Call) -> bool:
    """Does this DataLoader(...) load in worker processes (num_workers given and not 0)?"""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "num_workers":
            value = arg.value
            return not (type(value) is cst.Integer and int(value.value, 0) == 0)
    return False


def _is_self(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "self"


def _model_name(target: cst.BaseExpression) -> Optional[str]:
    """`model` or `self.network`: how a model the call runs is named, when the analysis can
    look its construction up."""
    if type(target) is cst.Name:
        return target.value
    if type(target) is cst.Attribute and type(target.value) is cst.Name:
        if target.value.value == "self":
            return f"self.{target.attr.value}"
    return None


def _module_called(call: cst.Call) -> cst.BaseExpression:
    """`model(x)` and `model.forward(x)` both call `model`."""
    target = call.func
    if type(target) is cst.Attribute and target.attr.value == "forward":
        return target.value
    return target


def _model_like(target: cst.BaseExpression) -> bool:
    dotted = dotted_name(target) or ""
    for part in dotted.split("."):
        if part in ("self", "cls"):
            continue
        for word in name_words(part):
            if word in MODEL_WORDS or word.endswith("net") or word.startswith("model"):
                return True
        if re.match(r"^net[A-Z]", part):
            return True
    return False


def _cpu_device(value: cst.BaseExpression) -> bool:
    """`device="cpu"`, `device=torch.device("cpu")`, or legacy torchtext's `device=-1`."""
    if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
        return type(value.expression) is cst.Integer and value.expression.value == "1"
    if type(value) is cst.Call and value.args:
        value = value.args[0].value  # torch.device("cpu")
    return type(value) is cst.SimpleString and value.value.strip("\"'") == "cpu"
