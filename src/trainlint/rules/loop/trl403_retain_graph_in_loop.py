"""TRL403 retain-graph-in-loop."""

from __future__ import annotations

from typing import List, Set

import libcst as cst

from ...analysis.base.calls import keyword
from ...analysis.base.dataflow import events_of
from ...analysis.loop.steps import TrainingSteps
from ...diagnostics import Severity
from ..base import Rule


class RetainGraphInLoop(Rule):
    """## What it does
    Reports `backward(retain_graph=True)` in a training loop when no other backward in the same
    iteration needs the retained graph: the graph is kept only for the *next* iteration.

    ## Why is this bad
    `retain_graph=True` is what the error "Trying to backward through the graph a second time
    ... Specify retain_graph=True if you need to backward through the graph a second time"
    suggests, so it is often added to silence it. The error came from a graph that outlives the
    iteration: a loss added to a running total (TRL401) or an RNN hidden state that is not
    detached (TRL402). With the graph retained, every step backpropagates through all previous
    iterations again: each step is slower than the last, and memory grows until CUDA runs out of
    memory. The gradients are wrong too: earlier batches contribute again at every step.

    ## Example
    ```python
    hidden = model.init_hidden(batch_size)
    for data, targets in batches:
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        optimizer.zero_grad()
        loss.backward(retain_graph=True)
        optimizer.step()
    ```

    ## Use instead
    ```python
    hidden = model.init_hidden(batch_size)
    for data, targets in batches:
        hidden = tuple(h.detach() for h in hidden)  # cut the graph of the previous batch
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```

    Not reported: a backward that retains the graph for a later backward of the same
    iteration, as GAN and multi-loss code does (`loss_d.backward(retain_graph=True)` then
    `loss_g.backward()`), `retain_graph=` with a non-literal value, `create_graph=True`
    (higher-order gradients), backward outside loops, framework-managed code, and loops where
    nothing carries a graph into the next iteration (every graph is rebuilt from leaf tensors,
    or from targets computed once before the loop, and what the loop carries is bookkeeping such
    as `iters = iters + 1` or `running = running + loss.item()`, also a total named like a
    loss whose every write adds numbers, `self.loss_sum = self.loss_sum + score * len(batch)`
    with `score` the `.item()` a step helper returns, or a best score kept with
    `best = max(best, acc)` where `acc` is a number): the flag is then redundant, not harmful.

    ## Fix safety
    There is no fix: the right change is to detach what outlives the iteration, which TRL401
    and TRL402 point at.
    """

    code = "TRL403"
    name = "retain-graph-in-loop"
    severity = Severity.WARNING
    markers = ("retain_graph",)

    def finish(self) -> None:
        steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        if not steps.file_backpropagates():
            return
        reported: Set[cst.CSTNode] = set()
        for loop in steps.all_loops():
            if steps.enclosing_loops(loop):
                continue  # outermost loops of each function; nested ones are inside
            if steps.library_owned(loop):
                continue
            events = list(events_of(steps.flow(loop)))
            if not any(e.kind == "step" for e in events):
                continue  # not a training loop: no optimizer step
            ordered: List = [e for e in events if e.kind == "backward"]
            grads = [
                node
                for node in self.ctx.tree.descendants(loop)
                if type(node) is cst.Call and steps.is_autograd_grad(node)
            ]
            index = self.ctx.tree.index
            for position, event in enumerate(ordered):
                call = event.node
                if event.kind != "backward" or call in reported:
                    continue
                if not _retains(call):
                    continue
                later = ordered[position + 1 :]
                if later:
                    continue
                if any(index.get(g, -1) > index.get(event.site, -1) for g in grads):
                    continue
                carried: Set[str] = set()
                for around in steps.enclosing_loops(event.site):
                    carried |= steps.carried_graph_names(around)
                if not carried:
                    continue  # every graph is rebuilt each iteration: the flag wastes one graph
                reported.add(call)
                shown = ", ".join(f"`{n}`" for n in sorted(carried)[:3])
                self.report(
                    call,
                    f"backward(retain_graph=True) with {shown} carried over: each backward() "
                    "goes through all earlier steps",
                    help=(
                        "no later backward in the iteration needs the retained graph; it only "
                        f"keeps alive the graph that {shown} carries into the next iteration, so "
                        "every backward() runs through all previous steps: slower each step, "
                        "memory grows until out of memory. Detach what is carried over "
                        "(TRL401, TRL402) and drop `retain_graph=True`."
                    ),
                )


def _retains(call: cst.Call) -> bool:
    value = keyword(call, "retain_graph")
    if value is None:
        return False
    if keyword(call, "create_graph") is not None:
        return False
    return type(value) is cst.Name and value.value == "True"
