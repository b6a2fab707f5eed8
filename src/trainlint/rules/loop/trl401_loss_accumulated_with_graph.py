"""TRL401 loss-accumulated-with-graph."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.dataflow import events_of
from ...analysis.base.names import dotted_name, dotted_targets
from ...analysis.base.nodes import bound_on_every_path
from ...analysis.base.vocabulary import GRAPHLESS_READS
from ...analysis.loop.graphtensors import GraphTensors
from ...analysis.loop.stepexprs import name_leaves
from ...analysis.loop.steps import TrainingSteps
from ...analysis.loop.summaries import FunctionSummaries, LoopGraphs, element_loop
from ...analysis.project.hierarchy import pending_callees
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule

_LOSS_TEXT = re.compile(r"loss|criterion|err", re.I)
_TENSOR_METHODS_ON_ACCUMULATOR = (
    "item",
    "cpu",
    "cuda",
    "to",
    "detach",
    "backward",
    "numpy",
    "tolist",
    "float",
    "mean",
    "sum",
    "clone",
    "zero_",
    "div_",
    "add_",
)


class LossAccumulatedWithGraph(Rule):
    """## What it does
    Reports a loss added to a running total or list that outlives the iteration
    (`total_loss += loss`, `total = total + loss`, `losses.append(loss)`) while the loss still
    holds its autograd graph, in a loop where autograd records.

    It is an error when the accumulator itself is backpropagated inside the loop
    (`total_loss.backward()`): the second iteration fails. It is info-level when the loss is
    backpropagated in the same iteration (its `backward()` frees the saved activations, so the
    total keeps only the graph's nodes, host-side bookkeeping that grows slowly).

    Helpers and containers are followed one call deep, also into other files of the project
    (the project phase reads their summaries): a step helper that returns its loss
    (`loss = train_step(batch); running += loss`, info-level when the helper already ran
    `backward()`), the step's output dict kept in a list (`outputs.append(out)`), totals summed
    per key over the loss dict (`for k, v in losses.items(): totals[k] += v`), and a meter
    method or function that adds its argument's values to state that outlives the call
    (`meter.update(loss_dict)` whose body does `self.sum[k] += v`). A helper whose returns
    hold no graph (`.item()`, floats, a dict computed under `no_grad()`, a pair such as
    `return loss.item(), correct` unpacked into `batch_loss, batch_correct`) is not reported; one
    whose summary is unknown (a library, a mixed return) is not either.

    **Preview rule.** Measured on public repositories it was never tuned on, it has found no
    true positive yet (one debatable finding on the dev split), and all six of its findings on
    the held-back repositories were false: whether a value records a graph is decided for the
    whole file, so a JAX notebook's list of losses and a from-scratch model's hand-written
    weight updates looked like graph-carrying totals. Run it with `--preview` or select TRL401.

    ## Why is this bad
    A loss tensor references the whole graph that produced it (activations of every layer).
    Adding it to a total that lives across iterations chains every iteration's graph to the
    next. When nothing backpropagates the loss in the iteration (an evaluation loop without
    `no_grad()`), the saved activations stay referenced: memory grows each step until the run
    dies with CUDA out of memory. When the loss is backpropagated, `backward()` frees the
    activations and what grows is the autograd bookkeeping on the host (measured with PyTorch
    2.13 on a 4-layer MLP: under 1 MB per step, against about 19 MB per step for one layer's
    activations kept without backward). PyTorch's FAQ ("My model reports cuda runtime error(2): out
    of memory") gives exactly this example and the fix `total_loss += float(loss)`.

    Backpropagating the accumulator fails on the second iteration, because its graph includes
    the first iteration's, already freed by the first `backward()`:

        RuntimeError: Trying to backward through the graph a second time (or directly access
        saved tensors after they have already been freed).

    ## Example
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss
    ```

    ```python
    class LossMeter:
        def __init__(self):
            self.sums = {}

        def update(self, losses):
            for name, value in losses.items():
                self.sums[name] = self.sums.get(name, 0.0) + value


    criterion = nn.CrossEntropyLoss()
    val_loader = DataLoader(val_set, batch_size=64)
    meter = LossMeter()
    for x, y in val_loader:
        logits = model(x)
        meter.update({"ce": criterion(logits, y), "l2": logits.pow(2).mean()})
    ```

    ## Use instead
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
    ```

    ```python
    class LossMeter:
        def __init__(self):
            self.sums = {}

        def update(self, losses):
            for name, value in losses.items():
                self.sums[name] = self.sums.get(name, 0.0) + value.item()


    criterion = nn.CrossEntropyLoss()
    val_loader = DataLoader(val_set, batch_size=64)
    meter = LossMeter()
    for x, y in val_loader:
        logits = model(x)
        meter.update({"ce": criterion(logits, y), "l2": logits.pow(2).mean()})
    ```

    Not reported: accumulating under `torch.no_grad()`/`inference_mode()` (also when every
    caller of the function runs it there), a total reset on every path through the iteration
    before it is used (`loss = l1(...)` in each arm of an `if`/`elif`/`else: raise`, then
    `loss += stft_loss`), and
    the deliberate multi-step loss: terms summed in a loop and backpropagated once after it, or
    returned to be backpropagated by the caller (`loss = 0; for t in ...: loss += crit(...)`
    then `loss.backward()`), including windowed sums backpropagated and reset inside the loop,
    a slot of a numpy array (`losses = np.zeros(n)` then `losses[i] += loss`: numpy converts
    the loss to a float), and files where nothing can require grad: a from-scratch network in a plain class whose
    `torch.zeros(...).normal_()` weights are updated by hand-written gradients (`w -= lr * dw`)
    has no `nn.Module`, `nn.Parameter`, `requires_grad`, optimizer or library-built model, so
    no value carries a graph whatever it is called, and files that import neither torch nor a
    library built on it (a course's NumPy framework whose losses are floats).

    ## Fix safety
    For a numeric accumulator (started at `0`/`0.0`, only used as a number) the fix reads the
    value with `.item()`; otherwise (a tensor total, a list, a total that is returned) it adds
    `.detach()`, so the total stays a tensor on the same device. Both are safe when the value is
    known to be a tensor (a backpropagated loss, a PyTorch loss function or `nn.*Loss` module,
    arithmetic on one): the value is the same and nothing backpropagates through the total (that
    case is the error, reported without a safe fix). On the result of a call of unknown type
    (`total += compute_loss(batch)`) the fix is unsafe, and a value read out of a container
    (`res["train_loss"]`) gets none. For the error, an unsafe fix backpropagates this iteration's loss instead of
    the total and accumulates its value; it changes the gradients, which is the intent.
    """

    code = "TRL401"
    name = "loss-accumulated-with-graph"
    severity = Severity.WARNING
    severity_note = (
        "error when the accumulator is backpropagated in the loop; info when the loss is "
        "backpropagated in the same iteration"
    )
    fix = "sometimes"
    markers = ("loss", "criterion")
    project = True
    # Measured on real code it was never tuned on (benchmarks/precision/), it has found no true
    # positive yet and its findings on held-back repositories were false: whether a value
    # records a graph is decided per file, not per value (a JAX notebook's loss list, a
    # from-scratch model's hand-written updates). It earns the default set with per-value
    # evidence of a graph source.
    preview = True

    def finish(self) -> None:
        self.steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        self.summaries: FunctionSummaries = self.ctx.analysis(FunctionSummaries)
        self._graph_names_cache: dict[cst.CSTNode, Set[str]] = {}
        self._loop_graphs: Dict[cst.CSTNode, LoopGraphs] = {}
        self._pending: Dict[str, Dict[str, Any]] = {}
        self._assumed: Optional[Tuple[str, str]] = None  # (name, imported callee) assumed a graph
        candidates: List[Tuple[cst.CSTNode, str, cst.BaseExpression, str]] = []
        for node in self.ctx.nodes(cst.AugAssign):
            if type(node.operator) in (cst.AddAssign, cst.SubtractAssign):
                target = dotted_name(node.target) or _subscript_text(self.ctx, node.target)
                if target:
                    candidates.append((node, target, node.value, "sum"))
        for node in self.ctx.nodes(cst.Assign):
            if len(node.targets) != 1 or type(node.value) is not cst.BinaryOperation:
                continue
            target = dotted_name(node.targets[0].target)
            binary = node.value
            if (
                target
                and type(binary.operator) in (cst.Add, cst.Subtract)
                and dotted_name(binary.left) == target
            ):
                candidates.append((node, target, binary.right, "sum"))
            elif type(binary.operator) is cst.Add and _reads_own_slot(node.targets[0].target, binary.left):
                # `totals[k] = totals.get(k, 0) + v`
                slot = _subscript_text(self.ctx, node.targets[0].target)
                if slot:
                    candidates.append((node, slot, binary.right, "sum"))
        for node in self.ctx.nodes(cst.Call):
            func = node.func
            if (
                type(func) is cst.Attribute
                and func.attr.value == "append"
                and len(node.args) == 1
                and not node.args[0].keyword
            ):
                target = dotted_name(func.value) or _subscript_text(self.ctx, func.value)
                if target:
                    candidates.append((node, target, node.args[0].value, "list"))
        backpropagated = self._backpropagated = self._backpropagated_names()
        for node, target, value, kind in candidates:
            text = self.ctx.code(value)
            if not (
                _LOSS_TEXT.search(text)
                or any(n in text for n in backpropagated)
                or self._maybe_summarised(node, text)
            ):
                continue  # cheap filter: nothing loss-like is added
            self._check(node, target, value, kind)
        self._check_kept_arguments()

    def _backpropagated_names(self) -> Set[str]:
        found: Set[str] = set()
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "backward":
                found.update(name_leaves(self.steps.backward_tensor(call)))
        return found

    # -- helpers summarised elsewhere ---------------------------------------------------------

    def _emit(
        self, node, headline, help, severity, fix, related, freed_texts, holder_texts=None
    ) -> None:
        """Report, or, while an imported helper is assumed to return a graph tensor, record a
        candidate the project phase confirms from that helper's summary: `freed_texts` say it
        when the helper backpropagated what it returns, `holder_texts` when it returns a dict
        or list holding the loss (kept in a list: the container keeps the graph too)."""
        if self._assumed is None:
            self.report(node, headline, help=help, severity=severity, fix=fix, related=related)
            return
        key = f"returns:{self.ctx.tree.index[node]}"
        self.candidate(key, node, headline, help=help, severity=severity, fix=fix, related=related)
        entry: Dict[str, Any] = {"callee": self._assumed[1], "needs": "returns"}
        if freed_texts is not None and severity is not Severity.ERROR:
            entry["freed"] = [freed_texts[0], freed_texts[1]]
        if holder_texts is not None:
            freed_holder = holder_texts[2] is Severity.INFO
            entry["holder"] = [holder_texts[0], holder_texts[1], freed_holder]
        self._pending[key] = entry

    def _maybe_summarised(self, node, text: str) -> bool:
        """Cheap: could a summary make this value a graph tensor (an element of a loss dict,
        a name bound to a helper's result)?"""
        loops = self.steps.enclosing_loops(node)
        if not loops:
            return False
        for loop in loops[:-1]:
            source = loop.iter if type(loop) is cst.For else None
            if (
                type(source) is cst.Call
                and type(source.func) is cst.Attribute
                and source.func.attr.value in ("items", "values")
            ):
                return True
        outer = loops[-1]
        bound = self._graphs_of(outer).seeds | set(self._imported_results(outer))
        return any(name in text for name in bound)

    def _imported_results(self, loop) -> Dict[str, str]:
        """Names bound in the loop to the result of an imported function (name -> its qualified
        name): `loss = train_step(...)` with `from engine import train_step`."""
        out: Dict[str, str] = {}
        for node in self.ctx.tree.descendants(loop):
            if type(node) is not cst.Assign or type(node.value) is not cst.Call:
                continue
            qualname = self._imported(node.value.func)
            if qualname is None:
                continue
            for target in node.targets:
                text = dotted_name(target.target)
                if text:
                    out[text] = qualname
        return out

    def _imported(self, func) -> Optional[str]:
        """`f` / `mod.f` bound by an import of something not PyTorch: its qualified name."""
        root = func
        rest: List[str] = []
        while type(root) is cst.Attribute:
            rest.insert(0, root.attr.value)
            root = root.value
        if type(root) is not cst.Name:
            return None
        bindings = self.ctx.scopes.lookup(root.value, root)
        if len(bindings) != 1 or bindings[0].kind != "import" or not bindings[0].qualname:
            return None
        qualname = ".".join([bindings[0].qualname, *rest])
        if qualname.split(".")[0] in _LIBRARY_ROOTS:
            return None
        return qualname

    def _check_assuming(self, node, target, value, kind, outer) -> None:
        imported = self._imported_results(outer)
        for name in name_leaves(value):
            if name in imported:
                self._assumed = (name, imported[name])
                try:
                    self._check(node, target, value, kind)
                finally:
                    self._assumed = None
                return

    # -- arguments a helper keeps -------------------------------------------------------------

    def _check_kept_arguments(self) -> None:
        """`tracker.update(loss_dict)` whose method adds the values to `self.sums`, or
        `accumulate(totals, losses)` adding them to the caller's `totals`, in a training loop."""
        for call in self.ctx.nodes(cst.Call):
            loops = self.steps.enclosing_loops(call)
            if not loops or type(self.ctx.parent(call)) is not cst.Expr:
                continue
            function = self.summaries.callee(call)
            imported: Optional[Tuple[str, Optional[str]]] = None
            keeps: Dict[str, str] = {}
            summary: Dict[str, object] = {}
            if function is not None:
                summary = self.summaries.of(function)
                keeps = summary.get("keeps") or {}  # type: ignore[assignment]
                if not keeps:
                    continue
            else:
                imported = self._imported_callee(call)
                if imported is None:
                    continue
            loop = loops[0]
            if self.steps.library_owned(call) or self.steps.grad_disabled(call):
                continue
            if not (self.steps.is_step_loop(loop) or self.steps.is_batch_loop(loop)):
                continue
            names = self._graph_names(loops[-1])
            freed = self.steps.freed_names(loops[-1]) | self._graphs_of(loops[-1]).freed
            for position, arg in enumerate(call.args):
                if arg.star:
                    continue
                leaves = [
                    leaf
                    for leaf in self.steps.graph_leaves(arg.value, names)
                    if not self.steps.recorded_without_grad(leaf)
                ]
                if not leaves:
                    continue
                slot = arg.keyword.value if arg.keyword is not None else position
                if imported is None:
                    where = keeps.get(str(self.summaries.argument_position(call, arg, summary)))
                    if where is None:
                        continue
                    store = self._store(call, where, loop)
                    if store is None:
                        continue
                else:
                    store = None
                shown = self.ctx.code(arg.value)
                if len(shown) > 30 or "\n" in shown:
                    shown = "the loss"
                else:
                    shown = f"`{shown}`"
                was_freed = all(dotted_name(leaf) in freed for leaf in leaves)
                called = self.ctx.code(call.func)
                if imported is None:
                    headline, help, severity = _kept_texts(called, shown, store or "", was_freed)
                    self.report(call, headline, help=help, severity=severity)
                    continue
                key = f"keeps:{self.ctx.tree.index[call]}:{slot}"
                headline, help, severity = _kept_texts(called, shown, "?", was_freed)
                self.candidate(key, call, headline, help=help, severity=severity)
                self._pending[key] = {
                    "callee": imported[0],
                    "method": imported[1],
                    "needs": "keeps",
                    "slot": slot,
                    "called": called,
                    "shown": shown,
                    "freed": was_freed,
                    "receiver": self._lasting_receiver(call, loop),
                    "arguments": [
                        self._lasting_argument(a.value, loop) if not a.star else False
                        for a in call.args
                    ],
                }

    def _imported_callee(self, call: cst.Call) -> Optional[Tuple[str, Optional[str]]]:
        """(qualified name, method) of a call into another module: `accumulate(...)` imported,
        or `meter.update(...)` on an instance of an imported class."""
        func = call.func
        if type(func) is cst.Name:
            qualname = self._imported(func)
            return (qualname, None) if qualname else None
        if type(func) is cst.Attribute:
            cls = self.summaries.instance_class(func.value)
            if cls is not None and type(cls) is not cst.ClassDef:
                qualname = self._imported(cls)
                if qualname:
                    return qualname, func.attr.value
        return None

    def _store(self, call: cst.Call, where: str, loop) -> Optional[str]:
        """What the kept value lives in, as the caller sees it, when that outlives the loop's
        iteration: the receiver's attribute, or the caller's container argument."""
        if where.startswith("self."):
            if not self._lasting_receiver(call, loop):
                return None
            cls = self.summaries.instance_class(call.func.value)  # type: ignore[attr-defined]
            owner = (
                cls.name.value
                if type(cls) is cst.ClassDef
                else self.ctx.code(call.func.value)  # type: ignore[attr-defined]
            )
            return f"{owner}.{where[len('self.'):]}"
        position = int(where.split(":", 1)[1])
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position >= len(positional) or not self._lasting_argument(positional[position].value, loop):
            return None
        return self.ctx.code(positional[position].value)

    def _lasting_receiver(self, call: cst.Call, loop) -> bool:
        func = call.func
        if type(func) is not cst.Attribute:
            return False
        receiver = func.value
        if type(receiver) is cst.Name and receiver.value == "self":
            return True
        return self._lasting_argument(receiver, loop)

    def _lasting_argument(self, expr, loop) -> bool:
        """A name (or `self.x`) bound before `loop` and never re-bound inside it."""
        text = dotted_name(expr)
        if text is None:
            return False
        if type(expr) is cst.Name:
            bindings = self.ctx.scopes.lookup(expr.value, expr)
            if not bindings or any(
                b.kind not in ("assign", "annassign", "unpack") for b in bindings
            ):
                return False
        return not self._assignments(text, loop)

    # -- the project phase --------------------------------------------------------------------

    def facts(self) -> Optional[Dict[str, Any]]:
        summaries = self.summaries.all() if hasattr(self, "summaries") else {}
        if not summaries and not getattr(self, "_pending", None):
            return None
        return {"summaries": summaries, "pending": getattr(self, "_pending", {})}

    @classmethod
    def check_project(cls, project) -> Iterable[Diagnostic]:
        for display, key, entry, facts, name in pending_callees(project, cls.code):
            method = entry.get("method")
            summary = (facts.get("summaries") or {}).get(f"{name}.{method}" if method else name)
            if not isinstance(summary, dict):
                continue
            found = _confirm(project, display, cls.code, key, entry, summary)
            if found is not None:
                yield found

    # -- one accumulation ---------------------------------------------------------------------

    def _check(self, node, target: str, value, kind: str) -> None:
        loops = self.steps.enclosing_loops(node)
        if not loops:
            return
        if self.steps.library_owned(node) or self.steps.grad_disabled(node):
            return
        if type(node) is cst.AugAssign and self.steps.numpy_element(node.target):
            return  # `losses[i] += loss` into `np.zeros(n)` stores a float
        names = set(self._graph_names(loops[-1]))
        freed = set(self.steps.freed_names(loops[-1])) if loops[0] is not loops[-1] else set()
        elements: Set[str] = set()
        while len(loops) > 1:
            # `for k, v in loss_dict.items(): totals[k] += v`: each `v` is one of the
            # iteration's graph tensors, and the total lives across the enclosing loop.
            element = element_loop(loops[0], names | freed)
            if element is None:
                break
            elements.add(element)
            names.add(element)
            source: Any = getattr(loops[0], "iter", None)
            if (dotted_name(source.func.value) or "") in freed:
                freed.add(element)
            loops = loops[1:]
        loop = loops[0]
        if not (self.steps.is_step_loop(loop) or self.steps.is_batch_loop(loop)):
            return  # loss terms, stages, timesteps: summed within one training step
        assumed = self._assumed
        if assumed is not None:
            names |= self.steps.graph_names(loops[-1], {assumed[0]})
        leaves = [
            leaf
            for leaf in self.steps.graph_leaves(value, names)
            if dotted_name(leaf) != target and not self.steps.recorded_without_grad(leaf)
        ]
        if not leaves:
            if assumed is None:
                self._check_assuming(node, target, value, kind, loops[-1])
            return
        if not self._carried(node, target, loop):
            return
        backward = self._backward_of(target, loop)
        if backward is not None:
            if self._rebound_after(target, loop, backward):
                return  # a windowed sum: backpropagated and reset inside the loop
            self._emit(
                node,
                f"`{target}` sums the loss across iterations and is backpropagated: the second "
                "backward() fails",
                (
                    "the total's graph includes the previous iteration's, already freed by its "
                    'backward(): "RuntimeError: Trying to backward through the graph a second '
                    'time (or directly access saved tensors after they have already been '
                    'freed)". Backpropagate this iteration\'s loss and accumulate its value.'
                ),
                Severity.ERROR,
                self._error_fix(node, target, leaves, backward, kind),
                [(backward, "the accumulator is backpropagated here")],
                None,
            )
            return
        if self._used_as_loss_later(target, loop, returned=not self.steps.is_step_loop(loop)):
            return  # summed, then one backward after the loop (or by the caller)
        numeric = kind == "sum" and self._numeric(target, loop)
        read = "item()" if numeric else "detach()"
        shown = _shown(self.ctx, leaves[0])
        freed |= self.steps.freed_names(loop) | self._graphs_of(loops[-1]).freed
        holders = self._graphs_of(loops[-1]).holders
        was_freed = all(dotted_name(leaf) in freed for leaf in leaves)
        holding = any(dotted_name(leaf) in holders or _bound_to_literal(self.ctx, leaf) for leaf in leaves)
        if holding:
            read = ""  # a dict or list holding the loss: keep values read from its tensors
        headline, help, severity = _total_texts(target, shown, read, was_freed)
        fix = self._read_fix(f"Accumulate `{shown}.{read}`", leaves, read, holders)
        self._emit(
            node,
            headline,
            help,
            severity,
            fix,
            (),
            _total_texts(target, shown, read, True),
            _total_texts(target, shown, "", was_freed) if kind == "list" else None,
        )

    def _read_fix(
        self, message: str, leaves, read: str, holders: Set[str] = frozenset()  # type: ignore[assignment]
    ) -> Optional[PendingFix]:
        """`.detach()`/`.item()` on each leaf: safe when every leaf is known to be a tensor,
        unsafe when one is of unknown type (a helper's result), none when a leaf is only the
        container the value is read from (`res["train_loss"]`: a dict has no `.detach()`) or
        is itself a dict, list or tuple holding the graph (a step's output dict)."""
        tensors: GraphTensors = self.ctx.analysis(GraphTensors)
        if any(tensors.read_through(leaf) for leaf in leaves):
            return None
        if any(dotted_name(leaf) in holders or _bound_to_literal(self.ctx, leaf) for leaf in leaves):
            return None
        edits = [self.ctx.replace(leaf, f"{self.ctx.code(leaf)}.{read}") for leaf in leaves]
        if all(tensors.known(leaf, self._backpropagated) for leaf in leaves):
            return self.safe_fix(message, *edits)
        return self.unsafe_fix(message, *edits)

    def _graph_names(self, loop) -> Set[str]:
        found = self._graph_names_cache.get(loop)
        if found is None:
            seeds = self._graphs_of(loop).seeds
            found = self._graph_names_cache[loop] = self.steps.graph_names(loop, seeds)
        return found

    def _graphs_of(self, loop) -> LoopGraphs:
        found = self._loop_graphs.get(loop)
        if found is None:
            found = self._loop_graphs[loop] = LoopGraphs(self.summaries, loop)
        return found

    def _carried(self, node, target: str, loop) -> bool:
        """Does the accumulator keep its value from one iteration to the next? Not when every
        path through the iteration re-binds it before this accumulation (`loss = l1(...)` in
        each arm of an `if`/`elif`/`else: raise`, then `loss += stft_loss`)."""
        container = target.split("[", 1)[0] if "[" in target else None

        def binds(small: cst.CSTNode) -> bool:
            if type(small) is cst.AnnAssign:
                return small.value is not None and dotted_name(small.target) == target
            if type(small) is not cst.Assign or self._is_self_accumulation(small, target):
                return False
            bound = {n for t in small.targets for n in dotted_targets(t.target)}
            # `totals[k] += v`: a fresh `totals = {}` earlier in the iteration resets it too
            return target in bound or (container is not None and container in bound)

        return not bound_on_every_path(self.ctx, node, loop, binds)

    def _is_self_accumulation(self, assign: cst.Assign, target: str) -> bool:
        value = assign.value
        return type(value) is cst.BinaryOperation and dotted_name(value.left) == target

    def _assignments(self, target: str, within) -> List[cst.Assign | cst.AnnAssign]:
        out: List[cst.Assign | cst.AnnAssign] = []
        for node in self.ctx.tree.descendants(within):
            if type(node) is cst.Assign:
                if any(dotted_name(t.target) == target for t in node.targets):
                    out.append(node)
                elif any(
                    (type(t.target) is cst.Tuple or type(t.target) is cst.List)
                    and any(dotted_name(e.value) == target for e in t.target.elements)
                    for t in node.targets
                ):
                    out.append(node)
            elif type(node) is cst.AnnAssign and dotted_name(node.target) == target:
                out.append(node)
        return out

    def _backward_of(self, target: str, loop) -> Optional[cst.Call]:
        for event in events_of(self.steps.flow(loop)):
            if event.kind != "backward" or event.via or type(event.node) is not cst.Call:
                continue
            tensor = self.steps.backward_tensor(event.node)
            if target in set(name_leaves(tensor)):
                return event.node
        return None

    def _rebound_after(self, target: str, loop, backward: cst.Call) -> bool:
        index = self.ctx.tree.index
        return any(index[a] > index[backward] for a in self._assignments(target, loop))

    def _used_as_loss_later(self, target: str, loop, returned: bool) -> bool:
        """Backpropagated after the loop (directly or through a name computed from it, like
        `loss = losses[i]`), or, when `returned`, returned for the caller to backpropagate."""
        function = self.steps.scopes.enclosing_function(loop)
        scope = function if function is not None else self.ctx.module
        index = self.ctx.tree.index
        end = _last_index(self.ctx, loop)
        later = [n for n in self.ctx.tree.descendants(scope) if index[n] > end]
        derived = {target}
        for _ in range(2):
            for node in later:
                if type(node) is cst.Assign and any(
                    _mentions(node.value, name) for name in derived
                ):
                    for t in node.targets:
                        text = dotted_name(t.target)
                        if text:
                            derived.add(text)
        for node in later:
            if type(node) is cst.Call and self.steps.is_backward(node):
                tensor = self.steps.backward_tensor(node)
                if any(n in derived for n in name_leaves(tensor)) or any(
                    _mentions(tensor, name) for name in derived
                ):
                    return True
            if returned and type(node) is cst.Return and node.value is not None:
                if self.steps.scopes.enclosing_function(node) is function and _mentions(
                    node.value, target, detached_ok=False
                ):
                    return True
        return False

    def _numeric(self, target: str, loop, ignore: Optional[cst.CSTNode] = None) -> bool:
        """Started at a number literal and only used as a number in its function (`ignore`:
        the backward call the error fix rewrites)."""
        function = self.steps.scopes.enclosing_function(loop)
        scope = function if function is not None else self.ctx.module
        inits = [
            a
            for a in self._assignments(target, scope)
            if not (type(a) is cst.Assign and self._is_self_accumulation(a, target))
        ]
        if target.startswith("self."):
            inits += [a for a in self._assignments(target, self.ctx.module) if a not in inits]
        if not inits:
            return False
        for assign in inits:
            if not _is_number(assign.value):
                return False
        for node in self.ctx.tree.descendants(scope):
            if type(node) is cst.Attribute and dotted_name(node.value) == target:
                if ignore is not None and self.ctx.parent(node) is ignore:
                    continue
                if node.attr.value in _TENSOR_METHODS_ON_ACCUMULATOR or node.attr.value in (
                    "data",
                    "device",
                    "grad",
                ):
                    return False
            if type(node) is cst.Call and node.args:
                callee = dotted_name(node.func) or ""
                if callee.startswith(("torch.", "dist.", "distributed.")) and any(
                    dotted_name(a.value) == target for a in node.args
                ):
                    return False
            if type(node) is cst.Return and node.value is not None:
                if _mentions(node.value, target):
                    return False
        return True

    def _error_fix(self, node, target, leaves, backward: cst.Call, kind) -> Optional[PendingFix]:
        if len(leaves) != 1 or kind != "sum":
            return None
        leaf = leaves[0]
        loss = dotted_name(leaf)
        if loss is None or self.ctx.analysis(GraphTensors).read_through(leaf):
            return None
        tensor = self.steps.backward_tensor(backward)
        if tensor is None or dotted_name(tensor) != target:
            return None
        numeric = self._numeric(target, self.steps.enclosing_loops(node)[0], ignore=backward)
        read = "item()" if numeric else "detach()"
        return self.unsafe_fix(
            f"Backpropagate `{loss}` and accumulate `{loss}.{read}`",
            self.ctx.replace(leaf, f"{self.ctx.code(leaf)}.{read}"),
            self.ctx.replace(tensor, loss),
        )


_LIBRARY_ROOTS = {
    "torch", "torchvision", "transformers", "accelerate", "lightning", "pytorch_lightning",
    "numpy", "np", "timm", "mmengine", "mmcv", "mmdet", "detectron2", "deepspeed", "ignite",
}


def _total_texts(target: str, shown: str, read: str, freed: bool):
    """(headline, help, severity) of a running total kept with its graph (`read` empty: the
    value is a dict or list holding the loss, whose tensors' values are to be kept)."""
    advice = (
        f"Accumulate `{shown}.{read}`"
        if read
        else f"Keep `.item()` values of the tensors `{shown}` holds"
    )
    if freed:
        # backward() freed the saved activations: the total keeps only the graph's nodes.
        return (
            f"`{target}` keeps each step's freed autograd nodes alive via `{shown}`: host "
            "memory grows slowly",
            f"`{shown}` is backpropagated in the same iteration, which frees its saved "
            "activations; the total still references every iteration's autograd nodes "
            "(host memory, far less than the activations) until it is reset. "
            f"{advice} to keep only the value{'' if read else 's'}.",
            Severity.INFO,
        )
    return (
        f"`{target}` keeps every iteration's graph and activations alive through `{shown}`",
        f"nothing in the iteration backpropagates `{shown}` and frees its graph, so the "
        "saved activations of every iteration stay referenced: memory grows each step "
        "until the run fails with out of memory (PyTorch FAQ: \"My model reports cuda "
        f"runtime error(2): out of memory\"). {advice} instead.",
        None,
    )


def _kept_texts(called: str, shown: str, store: str, freed: bool):
    """(headline, help, severity) of an argument a helper adds to lasting state."""
    where = f"`{store}`" if store != "?" else "its state"
    if freed:
        return (
            f"`{called}(...)` keeps {shown} in {where} across iterations: autograd nodes "
            "pile up",
            f"{shown} is backpropagated in the same iteration, which frees its saved "
            f"activations, but `{called}` adds the tensors themselves, not their values, to state that "
            "outlives the step: every iteration's autograd nodes stay referenced (host memory) "
            "until it is reset. Pass `.item()`/`.detach()` values, or convert inside the helper.",
            Severity.INFO,
        )
    return (
        f"`{called}(...)` keeps {shown} in {where} across iterations, with its autograd graph",
        f"`{called}` adds the tensors themselves, not their values, to state that outlives the step, "
        "and nothing in the iteration backpropagates it: every iteration's saved activations "
        "stay referenced and memory grows each step until the run fails with out of memory. "
        "Pass `.item()`/`.detach()` values, or convert inside the helper.",
        None,
    )


def _confirm(project, display: str, code: str, key: str, entry, summary) -> Optional[Diagnostic]:
    if entry.get("needs") == "returns":
        holder = entry.get("holder")
        if summary.get("returns") == "holder" and holder:
            # the step's output dict kept in a list: no `.detach()` applies to the dict
            return project.candidate(
                display,
                code,
                key,
                message=holder[0],
                help=holder[1],
                severity=Severity.INFO if holder[2] else Severity.WARNING,
                drop_fix=True,
            )
        if summary.get("returns") != "tensor":
            return None
        freed = entry.get("freed")
        if summary.get("backward") and freed:
            return project.candidate(
                display, code, key, message=freed[0], help=freed[1], severity=Severity.INFO
            )
        return project.candidate(display, code, key)
    keeps = summary.get("keeps") or {}
    slot = entry.get("slot")
    params = summary.get("params") or []
    position = params.index(slot) if isinstance(slot, str) and slot in params else slot
    where = keeps.get(str(position)) if isinstance(position, int) else None
    if where is None:
        return None
    if where.startswith("self."):
        if not entry.get("method") or not entry.get("receiver"):
            return None
        store = f"{entry['callee'].rsplit('.', 1)[-1]}.{where[len('self.'):]}"
    else:
        other = int(where.split(":", 1)[1])
        arguments = entry.get("arguments") or []
        if other >= len(arguments) or not arguments[other]:
            return None
        store = f"argument {other + 1}"
    headline, help, severity = _kept_texts(
        entry["called"], entry["shown"], store, bool(entry.get("freed"))
    )
    return project.candidate(display, code, key, message=headline, help=help, severity=severity)


def _shown(ctx, leaf) -> str:
    """How messages name the value that carries the graph: its code, or for a long call its
    function (`L1loss(...)`); never a stand-in name, which could be another variable's."""
    text = ctx.code(leaf)
    if len(text) <= 30 and "\n" not in text:
        return text
    function = dotted_name(leaf.func) if type(leaf) is cst.Call else None
    if function is not None and len(function) <= 30:
        return f"{function}(...)"
    return " ".join(text.split())[:27] + "..."


def _reads_own_slot(target, left) -> bool:
    """`totals[k] = totals.get(k, 0) + v`: the left operand reads the slot being assigned."""
    if type(target) is not cst.Subscript or type(left) is not cst.Call:
        return False
    func = left.func
    return (
        type(func) is cst.Attribute
        and func.attr.value == "get"
        and dotted_name(func.value) is not None
        and dotted_name(func.value) == dotted_name(target.value)
    )


def _bound_to_literal(ctx, leaf) -> bool:
    """A name bound (only) to a dict, list or tuple display: a holder, not a tensor."""
    if type(leaf) is not cst.Name:
        return False
    bindings = ctx.scopes.lookup(leaf.value, leaf)
    return bool(bindings) and all(
        b.kind == "assign" and type(b.value) in (cst.Dict, cst.List, cst.Tuple) for b in bindings
    )


def _subscript_text(ctx, node) -> Optional[str]:
    """`stats["loss"]` / `losses[k]`: the accumulator's source text (a dict or list slot)."""
    if type(node) is cst.Subscript and dotted_name(node.value):
        return ctx.code(node)
    return None


def _is_number(value) -> bool:
    if type(value) in (cst.Integer, cst.Float):
        return True
    if type(value) is cst.UnaryOperation:
        return _is_number(value.expression)
    return False


def _mentions(expr, target: str, detached_ok: bool = True) -> bool:
    if expr is None:
        return False
    stack = [expr]
    while stack:
        node = stack.pop()
        if dotted_name(node) == target:
            return True
        if type(node) is cst.Attribute:
            if not detached_ok and node.attr.value in GRAPHLESS_READS:
                continue
            stack.append(node.value)
            continue
        if type(node) is cst.Call:
            stack.append(node.func)
            stack.extend(a.value for a in node.args)
            continue
        for name in ("left", "right", "expression", "value", "elements", "slice"):
            child = getattr(node, name, None)
            if isinstance(child, cst.CSTNode):
                stack.append(child)
            elif isinstance(child, (list, tuple)):
                for item in child:
                    inner = getattr(item, "value", item)
                    if isinstance(inner, cst.CSTNode):
                        stack.append(inner)
                    sl = getattr(item, "slice", None)
                    if type(sl) is cst.Index:
                        stack.append(sl.value)
    return False


def _last_index(ctx, node) -> int:
    index = ctx.tree.index
    last = index[node]
    for child in ctx.tree.descendants(node):
        last = max(last, index[child])
    return last
