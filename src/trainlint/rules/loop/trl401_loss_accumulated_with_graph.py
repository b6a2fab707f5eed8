"""TRL401 loss-accumulated-with-graph."""

from __future__ import annotations

import re
from typing import List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.dataflow import events_of
from ...analysis.base.names import dotted_name
from ...analysis.loop.graphtensors import GraphTensors
from ...analysis.loop.stepexprs import name_leaves
from ...analysis.loop.steps import TrainingSteps
from ...diagnostics import Severity
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

    Not reported: accumulating under `torch.no_grad()`/`inference_mode()` (also when every
    caller of the function runs it there), a total reset every iteration before it is used, and
    the deliberate multi-step loss: terms summed in a loop and backpropagated once after it, or
    returned to be backpropagated by the caller (`loss = 0; for t in ...: loss += crit(...)`
    then `loss.backward()`), including windowed sums backpropagated and reset inside the loop,
    and files where nothing can require grad: a from-scratch network in a plain class whose
    `torch.zeros(...).normal_()` weights are updated by hand-written gradients (`w -= lr * dw`)
    has no `nn.Module`, `nn.Parameter`, `requires_grad`, optimizer or library-built model, so
    no value carries a graph whatever it is called.

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

    def finish(self) -> None:
        self.steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        self._graph_names_cache: dict[cst.CSTNode, Set[str]] = {}
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
            if not (_LOSS_TEXT.search(text) or any(n in text for n in backpropagated)):
                continue  # cheap filter: nothing loss-like is added
            self._check(node, target, value, kind)

    def _backpropagated_names(self) -> Set[str]:
        found: Set[str] = set()
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "backward":
                found.update(name_leaves(self.steps.backward_tensor(call)))
        return found

    # -- one accumulation ---------------------------------------------------------------------

    def _check(self, node, target: str, value, kind: str) -> None:
        loops = self.steps.enclosing_loops(node)
        if not loops:
            return
        loop = loops[0]
        if self.steps.library_owned(node) or self.steps.grad_disabled(node):
            return
        if not (self.steps.is_step_loop(loop) or self.steps.is_batch_loop(loop)):
            return  # loss terms, stages, timesteps: summed within one training step
        names = self._graph_names(loops[-1])
        leaves = [
            leaf
            for leaf in self.steps.graph_leaves(value, names)
            if dotted_name(leaf) != target and not self.steps.recorded_without_grad(leaf)
        ]
        if not leaves:
            return
        if not self._carried(node, target, loop):
            return
        backward = self._backward_of(target, loop)
        if backward is not None:
            if self._rebound_after(target, loop, backward):
                return  # a windowed sum: backpropagated and reset inside the loop
            self.report(
                node,
                f"`{target}` sums the loss across iterations and is backpropagated: the second "
                "backward() fails",
                help=(
                    "the total's graph includes the previous iteration's, already freed by its "
                    'backward(): "RuntimeError: Trying to backward through the graph a second '
                    'time (or directly access saved tensors after they have already been '
                    'freed)". Backpropagate this iteration\'s loss and accumulate its value.'
                ),
                severity=Severity.ERROR,
                fix=self._error_fix(node, target, leaves, backward, kind),
                related=[(backward, "the accumulator is backpropagated here")],
            )
            return
        if self._used_as_loss_later(target, loop, returned=not self.steps.is_step_loop(loop)):
            return  # summed, then one backward after the loop (or by the caller)
        numeric = kind == "sum" and self._numeric(target, loop)
        read = "item()" if numeric else "detach()"
        shown = self.ctx.code(leaves[0])
        if len(shown) > 30 or "\n" in shown:
            shown = "loss"
        freed = self.steps.freed_names(loop)
        if all(dotted_name(leaf) in freed for leaf in leaves):
            # backward() freed the saved activations: the total keeps only the graph's nodes.
            headline = (
                f"`{target}` keeps each step's freed autograd nodes alive through `{shown}`: "
                "host memory grows slowly"
            )
            help = (
                f"`{shown}` is backpropagated in the same iteration, which frees its saved "
                "activations; the total still references every iteration's autograd nodes "
                "(host memory, far less than the activations) until it is reset. "
                f"Accumulate `{shown}.{read}` to keep only the value."
            )
            severity = Severity.INFO
        else:
            headline = (
                f"`{target}` keeps every iteration's graph and activations alive through "
                f"`{shown}`"
            )
            help = (
                f"nothing in the iteration backpropagates `{shown}` and frees its graph, so the "
                "saved activations of every iteration stay referenced: memory grows each step "
                "until the run fails with out of memory (PyTorch FAQ: \"My model reports cuda "
                f"runtime error(2): out of memory\"). Accumulate `{shown}.{read}` instead."
            )
            severity = None
        self.report(
            node,
            headline,
            help=help,
            severity=severity,
            fix=self._read_fix(f"Accumulate `{shown}.{read}`", leaves, read),
        )

    def _read_fix(self, message: str, leaves, read: str) -> Optional[PendingFix]:
        """`.detach()`/`.item()` on each leaf: safe when every leaf is known to be a tensor,
        unsafe when one is of unknown type (a helper's result), none when a leaf is only the
        container the value is read from (`res["train_loss"]`: a dict has no `.detach()`)."""
        tensors: GraphTensors = self.ctx.analysis(GraphTensors)
        if any(tensors.read_through(leaf) for leaf in leaves):
            return None
        edits = [self.ctx.replace(leaf, f"{self.ctx.code(leaf)}.{read}") for leaf in leaves]
        if all(tensors.known(leaf, self._backpropagated) for leaf in leaves):
            return self.safe_fix(message, *edits)
        return self.unsafe_fix(message, *edits)

    def _graph_names(self, loop) -> Set[str]:
        found = self._graph_names_cache.get(loop)
        if found is None:
            found = self._graph_names_cache[loop] = self.steps.graph_names(loop)
        return found

    def _carried(self, node, target: str, loop) -> bool:
        """Does the accumulator keep its value from one iteration to the next? Not when it is
        unconditionally re-bound in the loop before this accumulation."""
        index = self.ctx.tree.index
        at = index[node]
        enclosing = set(self.ctx.ancestors(node))
        for assign in self._assignments(target, loop):
            if index[assign] >= at or assign is node:
                continue
            if type(assign) is cst.Assign and self._is_self_accumulation(assign, target):
                continue
            line = self.ctx.parent(assign)
            statement_block = self.ctx.parent(line) if line is not None else None
            if statement_block in enclosing:
                return False
        return True

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
            if not detached_ok and node.attr.value in ("item", "detach", "data", "tolist"):
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
