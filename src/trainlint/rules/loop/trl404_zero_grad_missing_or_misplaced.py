"""TRL404 zero-grad-missing-or-misplaced."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from ...analysis.base.dataflow import Event, Repeat, events_of, run
from ...analysis.base.names import dotted_name
from ...analysis.loop.modes import file_model_classes, model_classes
from ...analysis.loop.stepexprs import strip_wrapper
from ...analysis.loop.steps import TrainingSteps
from ...analysis.project.hierarchy import class_question_facts, deferred_candidates
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule


class ZeroGradMissingOrMisplaced(Rule):
    """## What it does
    Reports a training loop that calls `backward()` and an optimizer `step()` but never resets
    the gradients (`optimizer.zero_grad()`, `model.zero_grad()`, `p.grad = None`), and a
    `zero_grad()` that runs after `backward()` and before `step()` in the same iteration.
    Assigning a gradient from itself (`param.grad = accelerator.reduce(param.grad)`, averaging
    across processes by hand) keeps it: only a new value (`None`, zeros) is a reset.

    The loop is read as a whole: statements inside `if`/`with`/`try`, helper functions of the
    same file, and the wrap-around to the next iteration. A `zero_grad()` inside
    `if (step + 1) % accumulation_steps == 0:` is the gradient-accumulation idiom and is fine.

    ## Why is this bad
    `backward()` *adds* into `.grad`. Without a reset, every step uses the sum of all gradients
    since the start of training: the effective learning rate grows with the step count and
    training diverges or stalls. Nothing raises; the loss curve is silently wrong.

    A `zero_grad()` between `backward()` and `step()` throws the fresh gradients away: the
    optimizer steps with zeros (only weight decay and momentum move the weights), and the model
    does not learn, again without any error.

    ## Example
    ```python
    for images, labels in loader:
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()

    for images, labels in loader:
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for images, labels in loader:
        loss = criterion(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```

    Not reported: gradient accumulation (`zero_grad()` under `if (i + 1) % k == 0:`), a reset in
    a helper function of the same file, LBFGS-style `optimizer.step(closure)` (the closure
    zeroes and backpropagates), a `zero_grad()` of another optimizer or module (GANs), resetting
    one parameter's gradient between backward and step (freezing), or a part of the model the
    loop runs when the optimizer is built where the analysis cannot see which modules it holds
    (`self.model.bottleneck.zero_grad()` after backward, `self.opt` from a base class in
    another file: the step still applies the rest), and framework-managed code
    (Lightning, Accelerate, DeepSpeed engines, HF Trainer, ignite) where the library does it; nor
    a script or notebook that uses no PyTorch at all (a course's NumPy framework whose
    `mlp.backward(dLdA)` assigns each layer's gradient afresh). A loop that backpropagates is
    taken to run at least once, as it does in any run that trains: a Hessian refresh that
    backpropagates and clears after the step is not reported for the path on which the next
    iteration's `for micro in range(cfg.accumulation_steps):` would run no micro-batch.

    A model whose own `forward` resets its gradients (`self.zero_grad()` at the top of
    `forward`, as a 2018 BiLSTM-CRF tagger does, or in a method `forward` calls) resets them on
    every call: a loop that calls such a model is not reported. Its class is read in this file
    or, when it is imported (star imports included), in the project file that defines it.

    ## Known problems
    A reset in a `forward` inherited from a base class is not seen (only the class the model is
    built from is read), so such a loop is still reported. A loop over a model whose class
    another file of the project defines is not reported under flake8, which sees one file at a
    time and cannot tell whether that class resets the gradients (`trainlint check` reads it).

    ## Fix safety
    For a missing reset, the fix inserts `optimizer.zero_grad()` right after the
    `optimizer.step()` line (under the same condition, so accumulation keeps working). It is
    unsafe: it changes the gradients every following step uses, which is the point, but a loop
    that deliberately accumulates over the whole run would change too. A misplaced
    `zero_grad()` has no fix: where it belongs depends on the accumulation scheme.
    """

    code = "TRL404"
    name = "zero-grad-missing-or-misplaced"
    severity = Severity.ERROR
    fix = "unsafe"
    # "zero_grad": a file whose model class resets its own gradients in `forward` (and calls
    # no backward) tells the files that train that model so, in the project phase.
    markers = ("backward", "zero_grad")
    # The model a loop calls may be of a class defined in another file, whose `forward` resets
    # its gradients.
    project = True

    def finish(self) -> None:
        steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        self.steps = steps
        # Findings about a missing reset whose loop calls models of imported classes:
        # key -> {"classes": the qualified names those classes may have}.
        self.deferred: Dict[str, Dict[str, List[str]]] = {}
        if not steps.file_backpropagates():
            return
        reported: Set[cst.CSTNode] = set()
        missing = []
        misplaced = []
        for loop in steps.all_loops():
            if steps.library_owned(loop):
                continue
            flow = steps.flow(loop)
            events = list(events_of(flow))
            backwards = [e for e in events if e.kind == "backward"]
            if not backwards:
                continue
            if any(e.kind == "step" and e.closure for e in events):
                continue  # LBFGS: the closure zeroes and backpropagates
            if any(self._engine_backward(steps, e, loop) for e in backwards):
                continue
            step_events = [e for e in events if e.kind == "step"]
            if not step_events:
                continue
            if any(e.kind == "zero" for e in events):
                misplaced.extend(self._misplaced(steps, loop, flow))
            elif not self._unknown_helper_gets_optimizer(steps, loop, step_events):
                missing.append((loop, step_events, backwards[0], events))
        # One finding per reset, where it is written rather than through a helper call.
        misplaced.sort(key=lambda pair: len(pair[0].via))
        for zero, step in misplaced:
            if zero.node in reported:
                continue
            reported.add(zero.node)
            self._report_misplaced(zero, step)
        # One finding per step: in the loop where the step is written (not reached through a
        # helper), else the innermost loop.
        depth = {loop: len(steps.enclosing_loops(loop)) for loop, _, _, _ in missing}
        missing.sort(key=lambda m: (min(len(e.via) for e in m[1]), -depth[m[0]]))
        for loop, step_events, backward, events in missing:
            if any(e.node in reported for e in step_events):
                continue
            reported.update(e.node for e in step_events)
            resetting = self._models_resetting_gradients(steps, events)
            if resetting is True:
                continue  # the model of this file resets its gradients in its own forward
            step = min(step_events, key=lambda e: len(e.via))
            self._report_missing(loop, step, backward, resetting or [])

    # -- missing ------------------------------------------------------------------------------

    def _engine_backward(self, steps: TrainingSteps, event: Event, loop) -> bool:
        """DeepSpeed's `engine.backward(loss)` + `engine.step()`: the engine resets gradients.
        (Accelerate's and Fabric's `backward(loss)` do not: their loops call `zero_grad()`.)"""
        call = event.node
        if type(call) is not cst.Call or type(call.func) is not cst.Attribute:
            return False
        if not call.args:
            return False  # `loss.backward()`
        receiver = dotted_name(call.func.value) or ""
        if "engine" in receiver.split(".")[-1].lower():
            return True
        for node, _ in steps.loops.calls_in(loop.body):
            func = node.func
            if type(func) is cst.Attribute and func.attr.value == "step":
                if dotted_name(func.value) == receiver:
                    return True
        return False

    def _unknown_helper_gets_optimizer(self, steps, loop, step_events: List[Event]) -> bool:
        """A call this file cannot see into receives the optimizer: it may reset gradients."""
        optimizers = {e.receiver for e in step_events if e.receiver}
        for call, _ in steps.loops.calls_in(loop.body):
            if steps.loops.callee(call) is not None:
                continue
            func = dotted_name(call.func) or ""
            if func.split(".")[-1] in ("step", "scale", "unscale_", "update", "clip_grad_norm_"):
                continue
            for arg in call.args:
                if dotted_name(arg.value) in optimizers:
                    return True
        return False

    def _models_resetting_gradients(
        self, steps: TrainingSteps, events: List[Event]
    ) -> Union[bool, List[str]]:
        """True when a model the loop calls is of a class of this file whose `forward` resets
        its gradients; else the qualified names the imported classes of the models it calls
        may have (the project phase asks the files that define them)."""
        imported: Set[str] = set()
        for event in events:
            if event.kind != "forward":
                continue
            for model in event.runs:
                if model.startswith("<") or "." in model:
                    continue
                if any(
                    steps.resets_own_gradients(cls)
                    for cls in file_model_classes(steps, model, event.site)
                ):
                    return True
                for names in model_classes(steps, model, event.site) or ():
                    imported.update(
                        q for q in names if not q.startswith(("<", "torch.", "builtins."))
                    )
        return sorted(imported)

    def _report_missing(
        self, loop: cst.CSTNode, step: Event, backward: Event, imported: List[str]
    ) -> None:
        optimizer = step.receiver or "optimizer"
        if optimizer.startswith("<param:"):
            optimizer = "optimizer"
        message = (
            f"this loop calls backward() and `{optimizer}.step()` but never zero_grad(): "
            "gradients add up across steps"
        )
        details = dict(
            help=(
                "backward() adds to `.grad`, so every step applies the sum of all past "
                "gradients; nothing raises (silently wrong). Call "
                f"`{optimizer}.zero_grad()` once per step, before backward() or after step()."
            ),
            fix=self._missing_fix(step, optimizer),
            related=[(backward.site, "gradients accumulate here")],
        )
        if not imported:
            self.report(step.site, message, **details)  # type: ignore[arg-type]
            return
        key = f"missing:{len(self.candidates)}"
        self.deferred[key] = {"classes": imported}
        self.candidate(key, step.site, message, **details)

    # -- the project phase: a model class defined in another file -----------------------------

    def facts(self) -> Optional[Dict[str, object]]:
        return class_question_facts(
            self.ctx,
            self.deferred,  # type: ignore[arg-type]
            {"grad_resetting_classes": self.steps.grad_resetting_classes()},
        )

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        for hierarchy, display, path, key, entry in deferred_candidates(project, cls.code):
            if entry is not None and any(
                hierarchy.listed_class(qualname, path, "grad_resetting_classes")
                or hierarchy.unread_class(qualname, path)
                for qualname in entry["classes"]
            ):
                continue  # its forward resets the gradients on every call, or may (unread)
            diagnostic = project.candidate(display, cls.code, key)
            if diagnostic is not None:
                yield diagnostic

    def _missing_fix(self, step: Event, optimizer: str) -> Optional[PendingFix]:
        if step.via or step.receiver is None or step.receiver.startswith("<param:"):
            return None
        statement = self.ctx.statement_of(step.node)
        if type(statement) is not cst.Expr or statement.value is not step.node:
            return None
        line = self.ctx.parent(statement)
        if type(line) is not cst.SimpleStatementLine or len(line.body) != 1:
            return None
        return self.unsafe_fix(
            f"Reset the gradients after the step: `{optimizer}.zero_grad()`",
            self.ctx.line_after(line, f"{optimizer}.zero_grad()"),
        )

    # -- misplaced ----------------------------------------------------------------------------

    def _misplaced(self, steps: TrainingSteps, loop, flow) -> List[Tuple[Event, Event]]:
        found: List[Tuple[Event, Event]] = []
        ran = {module for e in events_of(flow) if e.kind == "forward" for module in e.runs}

        def transfer(event: Event, state):
            kind = event.kind
            if kind == "backward":
                return ("grads",)
            if kind == "zero":
                if state == "grads" and event.full:
                    return (("zeroed", event),)
                return (state,)
            if kind == "step" and not event.closure:
                if isinstance(state, tuple) and state[0] == "zeroed":
                    zero = state[1]
                    if self._same_gradients(steps, zero, event, ran):
                        found.append((zero, event))
                return ("stepped",)
            return (state,)

        run(Repeat(flow, loop), {"clean"}, transfer)
        # A reset written before a backward that precedes the step (`zero_grad(params)` at the
        # top of a helper, then the micro-batch backward loop) is in the right place; the
        # analysis reaches it "after backward" only by assuming the micro-batch loop runs zero
        # times, or a step skipped on one path (fp16 overflow), which is not the intended path.
        order = {id(e): i for i, e in enumerate(events_of(flow))}
        kept = []
        for zero, step in found:
            start, end = order.get(id(zero), -1), order.get(id(step), -1)
            between = [
                e
                for e in events_of(flow)
                if e.kind == "backward" and start < order[id(e)] < end
            ]
            if start < end and between:
                continue
            kept.append((zero, step))
        return kept

    def _report_misplaced(self, zero: Event, step: Event) -> None:
        what = self.ctx.code(zero.node) if type(zero.node) is cst.Call else "zero_grad()"
        if len(what) > 30 or "\n" in what:
            what = "zero_grad()"
        optimizer = step.receiver or "optimizer"
        if optimizer.startswith("<param:"):
            optimizer = "optimizer"
        self.report(
            zero.site,
            f"`{what}` runs between backward() and `{optimizer}.step()`: the step uses "
            "zeroed gradients",
            help=(
                "the gradients backward() computed are cleared before the optimizer uses them, "
                "so the model does not learn; nothing raises (silently wrong). Reset the "
                "gradients before backward() or after step()."
            ),
            related=[(step.site, "the step that sees zeroed gradients")],
        )

    def _same_gradients(
        self, steps: TrainingSteps, zero: Event, step: Event, ran: Set[str]
    ) -> bool:
        """Does this reset clear what this step applies? (`ran`: the modules the loop runs.)"""
        if zero.receiver is None or step.receiver is None:
            return True
        if zero.receiver == step.receiver:
            return True
        zero_node = zero.node
        if type(zero_node) is cst.Call and type(zero_node.func) is cst.Attribute:
            if steps.is_optimizer(zero_node.func.value):
                return False  # another optimizer (GANs, multi-optimizer training)
        owners = steps.optimizer_modules(step.receiver)
        receiver = zero.receiver
        if receiver.endswith(".module"):
            receiver = receiver[: -len(".module")]
        if owners:
            return receiver in owners
        # An optimizer built elsewhere (a base class's `self.opt`): a reset of a part of the
        # model the loop runs (`self.model.latent_bottleneck.zero_grad()` after backward)
        # freezes that part, and the step still applies the rest.
        return not any(receiver.startswith(f"{strip_wrapper(module)}.") for module in ran)
