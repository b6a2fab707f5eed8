"""TRL303 sampler-set-epoch-missing."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

import libcst as cst

from ...analysis.base.calls import argument, is_false, is_none
from ...analysis.base.dataflow import events_of
from ...analysis.base.frameworks import Frameworks
from ...analysis.base.names import dotted_name
from ...analysis.base.nodes import names_in
from ...analysis.base.vocabulary import EVAL_FUNCTION
from ...analysis.loop.loaders import LoaderFlow, LoaderUse, is_torch_dataloader
from ...analysis.loop.steps import TrainingSteps
from ...analysis.parallel.parallel import BATCH_SAMPLER, DISTRIBUTED_SAMPLER
from ...analysis.project.hierarchy import pending_callees
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule


class SamplerSetEpochMissing(Rule):
    """## What it does
    Reports a `DistributedSampler` whose DataLoader is iterated inside an epoch loop that never
    calls `sampler.set_epoch(epoch)` (directly, or in a helper the loop calls).

    ## Why is this bad
    A DistributedSampler shuffles with a generator seeded by `seed + epoch`, and `epoch` only
    changes when you call `set_epoch`. Without it every epoch visits the data in exactly the same
    order on every rank, as if shuffling were off after the first epoch. Nothing fails; the model
    just trains on a fixed sequence of batches, which usually costs accuracy. PyTorch's
    documentation: "calling the set_epoch() method at the beginning of each epoch before
    creating the DataLoader iterator is necessary to make shuffling work properly across
    multiple epochs. Otherwise, the same ordering will be always used."

    Samplers built with `shuffle=False`, and code run by a framework (Lightning, Accelerate,
    MMEngine, ... call `set_epoch` for you) are not reported, nor a loader that is only
    evaluated: every pass over it is handed to a function of another file named for evaluation
    (`evaluate(model, val_loader, device)`, not `train_and_evaluate`), or iterated in the file
    when nothing in the file can change weights (no `step()`, no optimizer, no call named for
    training or updating, no gradient written into a weight by hand), as in a script that
    re-runs a sharded evaluation set after each round of head pruning, `backward()` for
    importance scores included, or iterated only in functions named for evaluation whose
    loops neither backpropagate nor step (`def test(self): for batch in self.test_ds: ...`, its
    helpers followed), or in loops under `torch.no_grad()` that neither backpropagate nor step
    (a validation pass inside the training function), directly or through an object such a
    function makes around it (an apex-style `CudaPrefetcher(val_loader)` in `validate()`) or a
    library wrapper whose result only such loops iterate (`val_batches =
    pl.ParallelLoader(val_loader, [device]).per_device_loader(device)` on a TPU). A loader
    also handed to any other function is reported. When a
    project builder returns several loaders (`train_ds, test_ds = load_data(...)`), the help
    names the one whose sampler is never told the epoch.

    The loader is followed where it travels in the file: kept in a dict and read back with the
    same key (`self.data_loader["train"]`), through a same-file function that returns its
    argument unchanged (`loader = announce(loader)`), and into an endless generator rebound
    under the same name (`loader = sample_data(loader)` whose `while True: for batch in
    loader: yield batch` restarts the loader forever), and into a class of this file that keeps
    it (`self.batches = iter(loader)` in a prefetcher whose `next()` draws a batch): the loop
    that starts the loader over is the one around where the object is made (the epoch loop
    around `train()`), not the `while` that draws one pass from it, and the draws belong to the
    objects made from this loader, not to every object of the class. The generator is reported too: its
    `while True` loop is the epoch loop, and each restart repeats the first pass's order unless
    the generator calls `set_epoch` with a pass counter (there is no epoch variable to fix
    with, so no fix is offered). A loader handed to a library call whose result replaces it
    (`loader = backend.distribute(loader)`) is not followed: that call may re-wrap it and set
    the epoch itself.

    ## Example
    ```python
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer)
    ```

    ```python
    loaders = {
        "train": DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set)),
        "val": DataLoader(val_set, batch_size=64),
    }
    for epoch in range(args.epochs):
        for x, y in loaders["train"]:
            train_step(model, x, y)
    ```

    ## Use instead
    ```python
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer)
    ```

    ```python
    loaders = {
        "train": DataLoader(train_set, batch_size=64, sampler=DistributedSampler(train_set)),
        "val": DataLoader(val_set, batch_size=64),
    }
    for epoch in range(args.epochs):
        loaders["train"].sampler.set_epoch(epoch)
        for x, y in loaders["train"]:
            train_step(model, x, y)
    ```

    Across files, the project phase joins the two halves: a function of one file that returns
    a DataLoader built with a shuffling DistributedSampler (`get_train_loader()` in
    `data_load.py`, alone or in a returned tuple) and the file that imports it and re-iterates
    the loader in an epoch loop without `loader.sampler.set_epoch(epoch)`; the finding is on
    the call in the importing file.

    ## Fix safety
    The fix inserts `sampler.set_epoch(epoch)` as the first statement of the epoch loop, using the
    sampler's name (guarded by `if sampler is not None:` when the name is None on the
    non-distributed path) or `loader.sampler` when the sampler was built inline (or in the
    function of another file that built the loader). It is safe:
    `set_epoch` only changes the shuffling seed of the following epochs. It is offered only when
    the epoch loop has a loop variable and the sampler or its loader has a name there.
    """

    code = "TRL303"
    name = "sampler-set-epoch-missing"
    severity = Severity.WARNING
    fix = "safe"
    markers = ("DistributedSampler", "loader", "Loader")
    project = True

    def finish(self) -> None:
        ctx = self.ctx
        names = ctx.names
        self.flow: LoaderFlow = ctx.analysis(LoaderFlow)
        frameworks: Frameworks = ctx.analysis(Frameworks)
        self._builders: Dict[str, Dict[str, Any]] = {}
        self._pending: Dict[str, Dict[str, Any]] = {}
        for call in ctx.nodes(cst.Call):
            if not names.is_(call.func, DISTRIBUTED_SAMPLER):
                continue
            if frameworks.managed(call) or is_false(argument(call, 3, "shuffle")):
                continue
            self._check(call, frameworks)
        self._check_imported_builders(frameworks)

    def _check(self, sampler: cst.Call, frameworks: Frameworks) -> None:
        flow = self.flow
        sampler_refs = flow.references(sampler)
        if self._set_epoch_anywhere(sampler_refs):
            return
        loaders = self._loaders_of(sampler_refs)
        if not loaders:
            return
        self._record_builders(loaders)
        epoch_loops: List[Tuple[cst.CSTNode, LoaderUse, cst.Call, str]] = []
        every_loader_ref: List[cst.CSTNode] = []
        for loader, how in loaders:
            loader_refs = flow.references(loader)
            every_loader_ref.extend(loader_refs)
            if self._set_epoch_anywhere(loader_refs, through_loader=True):
                return
            for use in flow.uses(loader):
                if frameworks.managed(use.site):
                    return
                for loop in self.flow.loops_drawing(use.site, loader_refs):
                    if self._loop_sets_epoch(loop, sampler_refs, loader_refs):
                        return
                    epoch_loops.append((loop, use, loader, how))
        uses = [use for _, use, _, _ in epoch_loops]
        if not epoch_loops or self._only_evaluated(uses, every_loader_ref):
            return
        loop, use, loader, how = self._epoch_loop(epoch_loops)
        row_note = "the loader is iterated again on every pass of this loop"
        sampler_text = self._sampler_name(sampler) or "the DistributedSampler"
        message = (
            f"{sampler_text} is never told the epoch: no `set_epoch()` in the loop "
            "re-iterating its DataLoader"
        )
        self.report(
            sampler,
            message,
            help=(
                "Every epoch then shuffles into the same order on every rank (no error, just a "
                "fixed batch sequence). Call `sampler.set_epoch(epoch)` at the start of each "
                "epoch."
            ),
            fix=self._fix(sampler, loop, loader, how),
            related=[(loop, row_note)],
        )

    # -- loaders built in another file --------------------------------------------------------

    def _record_builders(self, loaders: List[Tuple[cst.Call, str]]) -> None:
        """Module-level functions of this file that return the sampler's DataLoader (alone or
        at a position of a returned tuple), for the files that import and iterate it."""
        for loader, how in loaders:
            if self._set_epoch_anywhere(self.flow.references(loader), through_loader=True):
                continue
            for ref in self.flow.references(loader):
                node, parent = self.flow._climb(ref)
                position: Optional[int] = None
                if type(parent) is cst.Element and type(self.ctx.parent(parent)) is cst.Tuple:
                    tuple_node = self.ctx.parent(parent)
                    position = list(tuple_node.elements).index(parent)  # type: ignore[union-attr]
                    parent = self.ctx.parent(tuple_node) if tuple_node is not None else None
                if type(parent) is not cst.Return:
                    continue
                function = self.ctx.scopes.enclosing_function(parent)
                if function is None or self.ctx.parent(function) is not self.ctx.module:
                    continue
                entry = self._builders.setdefault(function.name.value, {})
                entry[str(position)] = how

    def _check_imported_builders(self, frameworks: Frameworks) -> None:
        """`loader = build_train_loader(...)` imported from a file of the project: if that file
        builds the loader with a DistributedSampler (the project phase checks), the epoch loop
        here must tell it the epoch."""
        for call in self.ctx.nodes(cst.Call):
            qualname = self._imported(call.func)
            if qualname is None or frameworks.managed(call):
                continue
            parent = self.ctx.parent(call)
            starts: List[Tuple[Optional[int], List[cst.CSTNode]]] = []
            if type(parent) is cst.Assign and parent.value is call:
                targets = [t.target for t in parent.targets]
                if all(type(t) is cst.Name for t in targets):
                    starts.append((None, [call]))
                elif len(targets) == 1 and type(targets[0]) in (cst.Tuple, cst.List):
                    elements = targets[0].elements  # type: ignore[attr-defined]
                    for index, element in enumerate(elements):
                        if type(element.value) is cst.Name:
                            starts.append((index, self.flow._target_references(element.value)))
            elif type(parent) is cst.Arg or type(parent) is cst.For:
                starts.append((None, [call]))
            for position, refs in starts:
                found = self._unset_epoch_loop(refs, frameworks)
                if found is None:
                    continue
                loop, _use = found
                key = f"built:{self.ctx.tree.index[call]}:{position}"
                name = qualname.rsplit(".", 1)[-1]
                # `train_ds, test_ds = load_data(...)`: say which of the loaders it is
                which = (
                    f"This is `{self.ctx.code(refs[0])}`, one of the loaders `{name}()` returns. "
                    if position is not None
                    else ""
                )
                self.candidate(
                    key,
                    call,
                    f"the DistributedSampler of `{name}()`'s loader is never told the epoch in "
                    "the loop re-iterating it",
                    help=(
                        which + "Every epoch then shuffles into the same order on every rank (no error, "
                        "just a fixed batch sequence). Call `loader.sampler.set_epoch(epoch)` at "
                        "the start of each epoch."
                    ),
                    fix=self._loader_fix(call, loop, position),
                    related=[(loop, "the loader is iterated again on every pass of this loop")],
                )
                self._pending[key] = {"callee": qualname, "position": position}

    def _unset_epoch_loop(self, refs: List[cst.CSTNode], frameworks: Frameworks):
        """The first loop that re-iterates the loader the references evaluate to without
        telling its sampler the epoch, or None (no such loop, a framework, a set_epoch)."""
        loader_refs: List[cst.CSTNode] = []
        for ref in refs:
            for found in self.flow.references(ref):
                if found not in loader_refs:
                    loader_refs.append(found)
        if self._set_epoch_anywhere(loader_refs, through_loader=True):
            return None
        epoch_loops = []
        for ref in refs:
            for use in self.flow.uses(ref):
                if frameworks.managed(use.site):
                    return None
                for loop in self.flow.loops_drawing(use.site, loader_refs):
                    if self._loop_sets_epoch(loop, [], loader_refs):
                        return None
                    epoch_loops.append((loop, use, None, "sampler"))
        uses = [use for _, use, _, _ in epoch_loops]
        if not epoch_loops or self._only_evaluated(uses, loader_refs):
            return None
        loop, use, _loader, _how = self._epoch_loop(epoch_loops)
        return loop, use

    def _only_evaluated(self, uses: List[LoaderUse], loader_refs: List[cst.CSTNode]) -> bool:
        """Are the loader's batches only ever evaluated? Every pass is handed to a function of
        another file named for evaluation (`evaluate(model, val_loader, device)`), or iterated
        here in a file where nothing can change weights, or in functions named for evaluation
        (directly, or by an object of a class of this file that the evaluation function made
        around the loader): the repeated order then changes no result."""
        steps = self.ctx.analysis(TrainingSteps)
        handed = [use for use in uses if use.kind != "loop"]
        if handed and not all(
            self._evaluation_call(use.site) or self._wrapped_for_evaluation(steps, use.site)
            for use in handed
        ):
            return False
        if len(handed) == len(uses):
            return True
        if not steps.file_may_update_weights():
            return True
        return all(
            self._evaluation_loop(steps, use.site)
            or self._drawn_by_evaluation_wrapper(steps, use.site, loader_refs)
            for use in uses
            if use.kind == "loop"
        )

    def _evaluation_loop(self, steps: TrainingSteps, site: cst.CSTNode) -> bool:
        """`def test(self): for batch in self.test_ds: ...`, or a loop under `torch.no_grad()`
        (a validation pass inside the training function), with no backward and no step in
        what the loop runs (its helpers followed): an evaluation pass, whose order changes no
        result, in a file that trains elsewhere."""
        if type(site) not in (cst.For, cst.While):
            return False
        function = steps.scopes.enclosing_function(site)
        named = function is not None and _named_for_evaluation(function.name.value)
        if not (named or steps.loops.under_no_grad(site)):
            return False  # decided before the loop's flow is built
        return not any(e.kind in ("backward", "step") for e in events_of(steps.flow(site)))

    def _wrapped_for_evaluation(self, steps: TrainingSteps, site: cst.CSTNode) -> bool:
        """`val_batches = pl.ParallelLoader(val_loader, [device]).per_device_loader(device)`: a
        library wrapper (methods of its result followed) bound to a name that only evaluation
        passes iterate (see `_evaluation_loop`). Whatever the wrapper does with the sampler,
        the order of an evaluation pass changes no result."""
        if type(site) is not cst.Call:
            return False
        node: cst.CSTNode = site
        while True:
            parent = self.ctx.parent(node)
            outer = self.ctx.parent(parent) if type(parent) is cst.Attribute else None
            if type(outer) is not cst.Call or outer.func is not parent:
                break
            node = outer
        assign = self.ctx.parent(node)
        if type(assign) is not cst.Assign or assign.value is not node:
            return False
        if len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Name:
            return False
        uses = self.flow.every_read_draws(assign.targets[0].target)
        return uses is not None and all(
            use.kind == "loop" and self._evaluation_loop(steps, use.site) for use in uses
        )

    def _drawn_by_evaluation_wrapper(
        self, steps: TrainingSteps, site: cst.CSTNode, loader_refs: List[cst.CSTNode]
    ) -> bool:
        """`prefetcher = CudaPrefetcher(val_loader)` in `validate()`, whose methods draw with
        `next(self.batches)`: the draws belong to the objects made around this loader, not to
        every caller of the class's methods (the training loop's prefetcher is another object).
        True when every such object is made in a function named for evaluation that neither
        backpropagates nor steps (its helpers followed)."""
        made = self.flow.objects_made_from(site, loader_refs)
        for call in made:
            function = self.ctx.scopes.enclosing_function(call)
            if function is None or not _named_for_evaluation(function.name.value):
                return False
            body = function.body
            statements = body.body if type(body) is cst.IndentedBlock else ()
            for statement in statements:
                if any(e.kind in ("backward", "step") for e in events_of(steps.flow(statement))):
                    return False
        return bool(made)

    def _evaluation_call(self, site: cst.CSTNode) -> bool:
        """`evaluate(...)`, `validate(...)`, `engine.test(...)`: a call of a function this file
        does not define whose name says it evaluates, and does not say it trains."""
        if type(site) is not cst.Call:
            return False
        return _named_for_evaluation((dotted_name(site.func) or "").split(".")[-1])

    def _loader_fix(self, call: cst.Call, loop, position: Optional[int]) -> Optional[PendingFix]:
        """`loader.sampler.set_epoch(epoch)` first in the epoch loop, when the loader has one
        name bound before it (the project phase drops it unless the sampler is the loader's
        `sampler=`)."""
        epoch = _loop_variable(loop)
        parent = self.ctx.parent(call)
        if epoch is None or type(loop) is not cst.For or type(parent) is not cst.Assign:
            return None
        if any(a is loop for a in self.ctx.ancestors(call)):
            return None
        target = parent.targets[0].target if len(parent.targets) == 1 else None
        if position is not None and type(target) in (cst.Tuple, cst.List):
            elements = target.elements  # type: ignore[union-attr]
            target = elements[position].value if position < len(elements) else None
        if type(target) is not cst.Name:
            return None
        body = loop.body
        if type(body) is not cst.IndentedBlock or not body.body:
            return None
        bindings = self.ctx.scopes.lookup(target.value, body.body[0])
        if len(bindings) != 1 or bindings[0].node is not target:
            return None
        edit = self.ctx.body_start(loop, f"{target.value}.sampler.set_epoch({epoch})")
        if edit is None:
            return None
        return self.safe_fix(
            f"Call `{target.value}.sampler.set_epoch({epoch})` first in the epoch loop", edit
        )

    def _imported(self, func) -> Optional[str]:
        """A function imported by name (`from data_load import build_loader`) or through its
        module (`data_load.build_loader`): its qualified name; None otherwise."""
        root = func
        rest: List[str] = []
        while type(root) is cst.Attribute:
            rest.insert(0, root.attr.value)
            root = root.value
        if type(root) is not cst.Name or len(rest) > 1:
            return None
        bindings = self.ctx.scopes.lookup(root.value, root)
        if len(bindings) != 1 or bindings[0].kind != "import" or not bindings[0].qualname:
            return None
        qualname = ".".join([bindings[0].qualname, *rest])
        if qualname.split(".")[0] in ("torch", "accelerate", "lightning", "pytorch_lightning"):
            return None
        return qualname

    # -- the project phase --------------------------------------------------------------------

    def facts(self) -> Optional[Dict[str, Any]]:
        builders = getattr(self, "_builders", None)
        pending = getattr(self, "_pending", None)
        if not builders and not pending:
            return None
        return {"builders": builders or {}, "pending": pending or {}}

    @classmethod
    def check_project(cls, project) -> Iterable[Diagnostic]:
        for display, key, entry, facts, name in pending_callees(project, cls.code):
            built = (facts.get("builders") or {}).get(name) or {}
            how = built.get(str(entry.get("position")))
            if how is None:
                continue
            found = project.candidate(display, cls.code, key, drop_fix=how != "sampler")
            if found is not None:
                yield found

    # -- where the sampler goes ---------------------------------------------------------------

    def _loaders_of(self, sampler_refs: List[cst.CSTNode]) -> List[Tuple[cst.Call, str]]:
        """DataLoader calls fed by the sampler: ("sampler" | "batch" | "kwargs")."""
        out: List[Tuple[cst.Call, str]] = []
        names = self.ctx.names
        for ref in sampler_refs:
            node, parent = self.flow._climb(ref)
            if type(parent) is cst.Arg and parent.value is node:
                call = self.ctx.parent(parent)
                if type(call) is not cst.Call:
                    continue
                if is_torch_dataloader(names, call) and _arg_is(call, parent, 3, "sampler"):
                    out.append((call, "sampler"))
                elif names.is_(call.func, BATCH_SAMPLER) or (dotted_name(call.func) or "").endswith(
                    "BatchSampler"
                ):
                    for batch_ref in self.flow.references(call):
                        inner, holder = self.flow._climb(batch_ref)
                        if type(holder) is cst.Arg and holder.value is inner:
                            loader = self.ctx.parent(holder)
                            if (
                                type(loader) is cst.Call
                                and is_torch_dataloader(names, loader)
                                and _arg_is(loader, holder, 4, "batch_sampler")
                            ):
                                out.append((loader, "batch"))
            elif type(parent) is cst.DictElement and parent.value is node:
                key = parent.key
                if type(key) is cst.SimpleString and key.evaluated_value == "sampler":
                    out.extend((c, "kwargs") for c in self._loaders_with_kwargs(parent))
        return out

    def _loaders_with_kwargs(self, element: cst.DictElement) -> List[cst.Call]:
        """`kw = {"sampler": s, ...}` / `kw.update({"sampler": s})` -> `DataLoader(**kw)`."""
        dict_node = self.ctx.parent(element)
        holder = self.ctx.parent(dict_node) if dict_node is not None else None
        name: Optional[str] = None
        if type(holder) is cst.Assign and len(holder.targets) == 1:
            target = holder.targets[0].target
            if type(target) is cst.Name:
                name = target.value
        elif type(holder) is cst.Arg:
            call = self.ctx.parent(holder)
            if type(call) is cst.Call and type(call.func) is cst.Attribute:
                if call.func.attr.value == "update" and type(call.func.value) is cst.Name:
                    name = call.func.value.value
        if name is None:
            return []
        function = self.ctx.scopes.enclosing_function(element)
        out = []
        for call in self.ctx.nodes(cst.Call):
            if not is_torch_dataloader(self.ctx.names, call):
                continue
            if self.ctx.scopes.enclosing_function(call) is not function:
                continue
            for arg in call.args:
                if arg.star == "**" and type(arg.value) is cst.Name and arg.value.value == name:
                    out.append(call)
        return out

    # -- set_epoch ----------------------------------------------------------------------------

    def _set_epoch_anywhere(self, refs: List[cst.CSTNode], through_loader: bool = False) -> bool:
        """`s.set_epoch(...)` on a reference of the sampler (or `loader.sampler.set_epoch`,
        `loader.batch_sampler.sampler.set_epoch`, `loader.batch_sampler.set_epoch`)."""
        for ref in refs:
            node = ref
            for _ in range(3):
                parent = self.ctx.parent(node)
                if not (type(parent) is cst.Attribute and parent.value is node):
                    break
                attr = parent.attr.value
                if attr == "set_epoch":
                    return True
                if not through_loader or attr not in ("sampler", "batch_sampler"):
                    break
                node = parent
        return False

    def _loop_sets_epoch(self, loop, sampler_refs, loader_refs) -> bool:
        """The loop calls `set_epoch` (through same-file helpers), or hands the sampler, or the
        loader together with the epoch variable (or a value made from it, `epoch + 1`), to a
        function this file cannot see."""
        loops = self.flow.loops
        epoch = _loop_variable(loop)
        handed = set(sampler_refs)
        loader_set = set(loader_refs)
        for call, _ in loops.calls_in(loop.body, 3):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "set_epoch":
                return True
            if self.flow._called_function(call)[0] is not None:
                continue
            args = [a.value for a in call.args]
            if any(a in handed for a in args):
                return True
            if any(a.keyword is not None and a.keyword.value == "sampler" for a in call.args):
                return True
            if epoch is not None and any(a in loader_set for a in args):
                if any(epoch in names_in(a) for a in args):
                    return True
        return False

    def _epoch_loop(self, found):
        """The loop to name in the report and to fix: one whose variable says epoch, else the
        innermost."""
        for entry in found:
            variable = _loop_variable(entry[0])
            if variable is not None and "epoch" in variable.lower():
                return entry
        return found[0]

    # -- the fix ------------------------------------------------------------------------------

    def _fix(self, sampler: cst.Call, loop, loader: cst.Call, how: str) -> Optional[PendingFix]:
        epoch = _loop_variable(loop)
        if epoch is None or type(loop) is not cst.For:
            return None
        if any(a is loop for a in self.ctx.ancestors(sampler)):
            return None  # a new sampler every epoch: set_epoch must follow its creation
        body = loop.body
        if type(body) is not cst.IndentedBlock or not body.body:
            return None
        first = body.body[0]
        code = self._sampler_expression(sampler, loader, how, first, loop)
        if code is None:
            return None
        expr, guard = code
        if guard:
            indent = self.ctx.module.default_indent
            text = f"if {expr} is not None:\n{indent}{expr}.set_epoch({epoch})"
        else:
            text = f"{expr}.set_epoch({epoch})"
        edit = self.ctx.body_start(loop, text)
        if edit is None:
            return None
        return self.safe_fix(f"Call `{expr}.set_epoch({epoch})` first in the epoch loop", edit)

    def _sampler_expression(self, sampler, loader, how, at, loop) -> Optional[Tuple[str, bool]]:
        scopes = self.ctx.scopes
        index = self.ctx.tree.index
        loop_start = index.get(loop, -1)
        # A name bound to the sampler (or to `sampler if distributed else None`).
        for ref in self.flow.references(sampler):
            if type(ref) is not cst.Name:
                continue
            bindings = scopes.lookup(ref.value, at)
            if not bindings or any(index.get(b.node, loop_start) >= loop_start for b in bindings):
                continue
            guard = False
            ok = True
            for binding in bindings:
                value = binding.value
                if value is sampler:
                    continue
                if type(value) is cst.IfExp and sampler in (value.body, value.orelse):
                    other = value.orelse if value.body is sampler else value.body
                    if is_none(other):
                        guard = True
                        continue
                if binding.kind in ("assign", "annassign") and is_none(value):
                    guard = True
                    continue
                ok = False
            if ok:
                return ref.value, guard
        # The loader's name, when the sampler is built inline in it.
        direct = argument(loader, 3, "sampler") if how == "sampler" else None
        batch = argument(loader, 4, "batch_sampler") if how == "batch" else None
        if type(batch) is cst.Name:
            values = [b.value for b in scopes.lookup(batch.value, batch)]
            batch = values[0] if len(values) == 1 else None
        attribute = None
        if direct is sampler:
            attribute = "sampler"
        elif type(batch) is cst.Call and batch.args and batch.args[0].value is sampler:
            attribute = "batch_sampler.sampler"
        if attribute is None:
            return None
        for ref in self.flow.references(loader):
            if type(ref) is not cst.Name:
                continue
            bindings = scopes.lookup(ref.value, at)
            if bindings and all(
                b.value is loader and index.get(b.node, loop_start) < loop_start for b in bindings
            ):
                return f"{ref.value}.{attribute}", False
        return None

    def _sampler_name(self, sampler: cst.Call) -> Optional[str]:
        node, parent = self.flow._climb(sampler)
        if type(parent) is cst.Assign and len(parent.targets) == 1:
            target = parent.targets[0].target
            text = dotted_name(target)
            if text is not None:
                return f"`{text}`"
        return None


def _named_for_evaluation(name: str) -> bool:
    """`evaluate`, `validate`, `test`, not `train_and_evaluate`."""
    return bool(EVAL_FUNCTION.search(name)) and "train" not in name.lower()


def _arg_is(call: cst.Call, arg: cst.Arg, index: int, keyword: str) -> bool:
    if arg.keyword is not None:
        return arg.keyword.value == keyword
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return index < len(positional) and positional[index] is arg


def _loop_variable(loop: cst.CSTNode) -> Optional[str]:
    if type(loop) is cst.For and type(loop.target) is cst.Name:
        return loop.target.value
    return None
