"""TRL402 hidden-state-not-detached."""

from __future__ import annotations

import re
from typing import List, Optional, Set

import libcst as cst

from ...analysis.base.callgraph import CallGraph
from ...analysis.base.calls import keyword
from ...analysis.base.dataflow import events_of
from ...analysis.base.names import dotted_name, dotted_targets
from ...analysis.base.scopes import Scopes
from ...analysis.loop.steps import TrainingSteps
from ...diagnostics import Severity
from ..base import PendingFix, Rule

_STATE_NAME = re.compile(
    r"(^|_)(h|c|hx|cx|hn|cn|h0|c0|hidden|hiddens|hid|state|states|memory|memories|mems|mem|"
    r"carry|rnn_state|lstm_state|hidden_state|hidden_states)(_|\d|$)",
    re.I,
)
_RECURRENT_CALLEE = re.compile(r"rnn|lstm|gru|cell|recurren|decoder|encoder|model|net", re.I)
_TENSOR_MAKERS = {
    "zeros",
    "ones",
    "randn",
    "rand",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "randn_like",
    "new_zeros",
    "new_ones",
    "tensor",
}


class HiddenStateNotDetached(Rule):
    """## What it does
    Reports a recurrent state (an RNN/LSTM/GRU hidden state, a memory, a carry) that a training
    loop feeds back into the model on the next batch without `.detach()`:
    `output, hidden = model(data, hidden)` in a loop that calls `backward()`, with `hidden`
    coming from the previous iteration.

    ## Why is this bad
    The returned hidden state still references the previous batch's graph. The first
    `backward()` frees that graph; the second batch's loss depends on it through `hidden`, so
    the second `backward()` fails:

        RuntimeError: Trying to backward through the graph a second time (or directly access
        saved tensors after they have already been freed). Saved intermediate values of the
        graph are freed when you call .backward() or autograd.grad(). Specify
        retain_graph=True if you need to backward through the graph a second time ...

    Adding `retain_graph=True`, as the message suggests, hides the error but backpropagates
    through the entire history every step: time and memory grow until the run dies (TRL403).
    Truncated backpropagation through time detaches the state at each batch boundary.

    ## Example
    ```python
    hidden = model.init_hidden(batch_size)
    for data, targets in batches:
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    def repackage_hidden(h):
        if isinstance(h, torch.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)

    hidden = model.init_hidden(batch_size)
    for data, targets in batches:
        hidden = repackage_hidden(hidden)
        optimizer.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        optimizer.step()
    ```

    Not reported: a state reset or detached each batch (any re-binding of it inside the loop,
    `h.detach_()`, or the loop's own target: `for i, states, actions in play(envs):`), a state carried only across the timesteps of one sequence with one
    backward after it (`for t in range(T): out, h = cell(x[t], h)` then `loss.backward()`),
    generation under `torch.no_grad()`, loops without a backward, framework-managed code, and
    a value fed back through a function rather than a module (`_, state = play_and_record(state,
    ...)`, `_, train_state = run_epoch(..., train_state=train_state)`: a `def` of the file, or
    a name imported or defined as a function or class, a function or class of an imported
    module, `ppo.learn(..., learn_state=learn_state)`, or, in a notebook with cells that do not
    parse, a name nothing analysed binds: the helper's cell may be one of them): what such a
    call hands back as the state may be an environment observation or a counter object, not a
    tensor with a graph. Nor a value that starts as a number and goes through a method of the
    file other than `forward` (`gpu_mem = 0` ... `gpu_mem = net.gpu_memory(gpu_mem)`, the peak
    memory); a state that starts as a tensor does not escape that way (`hidden =
    torch.zeros(...)` ... `logits, hidden = model.step(tokens, hidden)` is reported).

    ## Fix safety
    The fix inserts a line that detaches the state before the call (with the file's own
    `repackage_hidden`-style helper when it has one; else `.detach()`, or a tuple of detached
    tensors for an LSTM `(h, c)` state). It is unsafe: gradients no longer flow into earlier
    batches, which is what truncated backpropagation through time means, but it changes what
    the model learns compared with a run that never crashed.
    """

    code = "TRL402"
    name = "hidden-state-not-detached"
    severity = Severity.ERROR
    severity_note = "warning when the loop's backward retains the graph (no error: slower steps)"
    fix = "unsafe"
    markers = ("backward",)

    def finish(self) -> None:
        self.steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        if not self.steps.file_backpropagates():
            return
        for assign in self.ctx.nodes(cst.Assign):
            call = assign.value
            if type(call) is not cst.Call:
                continue
            carried = self._fed_back(assign, call)
            if not carried or self._number_through_a_method(assign, call, carried):
                continue
            if self.steps.library_owned(assign) or self.steps.grad_disabled(assign):
                continue
            for loop in self.steps.enclosing_loops(assign):
                if self._rebound_in(carried, loop, assign):
                    break  # reset or detached each iteration of this loop (and of outer ones)
                if not self.steps.has_backward(loop):
                    continue  # timesteps of one sequence: one backward after this loop
                self._report(assign, call, carried, loop)
                break

    def _fed_back(self, assign: cst.Assign, call: cst.Call) -> List[str]:
        """Names both passed to the call and bound from its result: the recurrent state."""
        bound: List[str] = []
        for target in assign.targets:
            bound.extend(dotted_targets(target.target))
        if not bound:
            return []
        passed: Set[str] = set()
        for arg in call.args:
            value = arg.value
            text = dotted_name(value)
            if text is not None:
                passed.add(text)
            elif type(value) is cst.Tuple or type(value) is cst.List:
                for element in value.elements:
                    inner = dotted_name(element.value)
                    if inner is not None:
                        passed.add(inner)
        carried = [name for name in bound if name in passed]
        if not carried or self._runs_a_function(call):
            return []
        callee = dotted_name(call.func) or ""
        if any(_STATE_NAME.search(name.split(".")[-1]) for name in carried):
            return carried
        if _RECURRENT_CALLEE.search(callee.split(".")[-1]) and re.search(
            r"rnn|lstm|gru|cell|recurren", callee, re.I
        ):
            return carried
        return []

    def _runs_a_function(self, call: cst.Call) -> bool:
        """Does `call` run a function (a `def` of the file other than a module's `forward`, or
        a name bound only by imports, defs and classes), or a name nothing analysed binds in a
        notebook with cells that did not parse, rather than a module object?"""
        function = self.ctx.analysis(CallGraph).callee(call)
        if function is not None:
            return function.name.value not in ("forward", "__call__")
        func = call.func
        if type(func) is cst.Name:
            bindings = self.ctx.analysis(Scopes).lookup(func.value, func)
            if not bindings:
                # defined, if anywhere, in a notebook cell that did not parse: unknown
                notebook = self.ctx.source.notebook
                return notebook is not None and bool(notebook.broken)
            return all(b.kind in ("import", "def", "class") for b in bindings)
        root = func
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is cst.Name and root is not func:
            # `ppo.learn(..., learn_state=state)`, `torch.FloatTensor(states)`: a function or
            # class of an imported module, not a module object of the script.
            bindings = self.ctx.analysis(Scopes).lookup(root.value, root)
            return bool(bindings) and all(b.kind == "import" for b in bindings)
        return False

    def _number_through_a_method(
        self, assign: cst.Assign, call: cst.Call, names: List[str]
    ) -> bool:
        """`gpu_mem = net.gpu_memory(gpu_mem)` after `gpu_mem = 0`: a value that starts as a
        number and goes through a method of the file other than `forward` (the peak memory, a
        counter) is no recurrent state of a module."""
        func = call.func
        if type(func) is not cst.Attribute or func.attr.value in ("forward", "__call__"):
            return False
        if not self.ctx.analysis(CallGraph).functions_named(func.attr.value):
            return False
        for name in names:
            values = self._initial_values(name, assign)  # the bindings before this one
            if not values or not all(type(v) in (cst.Integer, cst.Float) for v in values):
                return False
        return True

    def _rebound_in(self, names: List[str], loop, assign) -> bool:
        """Is the state re-bound (reset, detached) somewhere else in the loop? A name the loop
        itself binds each iteration (`for i, states, actions in play(envs):`) starts afresh."""
        if type(loop) is cst.For and set(dotted_targets(loop.target)) & set(names):
            return True
        for node in self.ctx.tree.descendants(loop):
            if node is assign:
                continue
            if type(node) is cst.Assign:
                for target in node.targets:
                    if set(dotted_targets(target.target)) & set(names):
                        return True
            elif type(node) in (cst.AnnAssign, cst.AugAssign):
                if dotted_name(node.target) in names:
                    return True
            elif type(node) is cst.For and set(dotted_targets(node.target)) & set(names):
                return True
            elif type(node) is cst.Call and type(node.func) is cst.Attribute:
                if node.func.attr.value in ("detach_", "zero_", "fill_", "copy_"):
                    root = node.func.value
                    while type(root) is cst.Subscript:
                        root = root.value
                    if dotted_name(root) in names:
                        return True
        return False

    def _report(self, assign: cst.Assign, call: cst.Call, names: List[str], loop) -> None:
        shown = ", ".join(f"`{n}`" for n in names)
        verb = "are" if len(names) > 1 else "is"
        if self._retains_graph(loop):
            # retain_graph=True: no error, every backward runs through all earlier batches.
            self.report(
                call,
                f"{shown} {verb} carried into the next batch with its graph: each backward() "
                "goes through all earlier ones",
                help=(
                    "the loop's backward(retain_graph=True) keeps the earlier batches' graphs, "
                    "so instead of an error every step backpropagates through all previous "
                    "batches: slower each step, memory grows until out of memory, and earlier "
                    "batches add to the gradients again. Detach the state at the start of each "
                    "batch and drop `retain_graph=True`."
                ),
                severity=Severity.WARNING,
                fix=self._fix(assign, call, names, loop),
                related=[(loop, "the loop that carries the state")],
            )
            return
        self.report(
            call,
            f"{shown} {verb} carried into the next batch with its autograd graph: the next "
            "backward() fails",
            help=(
                "the next backward() goes through this batch's graph, already freed: "
                '"RuntimeError: Trying to backward through the graph a second time (or directly '
                'access saved tensors after they have already been freed)". Detach the state '
                "at the start of each batch (truncated backpropagation through time)."
            ),
            fix=self._fix(assign, call, names, loop),
            related=[(loop, "the loop that carries the state")],
        )

    def _retains_graph(self, loop) -> bool:
        """Does every backward of the loop keep its graph (`retain_graph=True`)?"""
        backwards = [
            e.node
            for e in events_of(self.steps.flow(loop))
            if e.kind == "backward" and type(e.node) is cst.Call
        ]
        if not backwards:
            return False
        for call in backwards:
            value = keyword(call, "retain_graph")
            if not (type(value) is cst.Name and value.value == "True"):
                return False
        return True

    # -- fix ----------------------------------------------------------------------------------

    def _fix(
        self, assign: cst.Assign, call: cst.Call, names: List[str], loop
    ) -> Optional[PendingFix]:
        line = self.ctx.parent(assign)
        if type(line) is not cst.SimpleStatementLine or len(line.body) != 1:
            return None
        if any("." in n for n in names):
            return None
        in_tuple_arg = self._passed_in_tuple(call, names)
        if len(names) > 1 or in_tuple_arg:
            left = ", ".join(names)
            right = ", ".join(f"{n}.detach()" for n in names)
            code = f"{left} = {right}"
            message = f"Detach the state before the call: `{code}`"
            if any(self._maybe_none(n, loop) for n in names):
                return None
            return self.unsafe_fix(message, self.ctx.line_before(line, code))
        name = names[0]
        helper = self._detach_helper()
        if helper is not None:
            code = f"{name} = {helper}({name})"
        elif self._is_tensor(name, loop):
            code = f"{name} = {name}.detach()"
        else:
            code = (
                f"{name} = tuple(t.detach() for t in {name}) if isinstance({name}, tuple) "
                f"else {name}.detach()"
            )
        if self._maybe_none(name, loop) and helper is None:
            code = f"if {name} is not None:\n    {code}"
        return self.unsafe_fix(
            f"Detach `{name}` before it is fed back", self.ctx.line_before(line, code)
        )

    def _passed_in_tuple(self, call: cst.Call, names: List[str]) -> bool:
        for arg in call.args:
            if type(arg.value) is cst.Tuple or type(arg.value) is cst.List:
                for element in arg.value.elements:
                    if dotted_name(element.value) in names:
                        return True
        return False

    def _detach_helper(self) -> Optional[str]:
        """A function of this file that returns its argument detached (`repackage_hidden`)."""
        for function in self.ctx.nodes(cst.FunctionDef):
            params = function.params.params
            if len(params) != 1 or self.steps.scopes.enclosing_function(function) is not None:
                continue
            if not re.search(r"detach|repackage", function.name.value, re.I):
                continue
            body_code = self.ctx.code(function.body)
            if ".detach()" in body_code or ".data" in body_code:
                return function.name.value
        return None

    def _initial_values(self, name: str, loop) -> List[cst.BaseExpression]:
        index = self.ctx.tree.index
        function = self.steps.scopes.enclosing_function(loop)
        scope = function if function is not None else self.ctx.module
        out = []
        for node in self.ctx.tree.descendants(scope):
            if type(node) is cst.Assign and index[node] < index[loop]:
                for target in node.targets:
                    if dotted_name(target.target) == name:
                        out.append(node.value)
        return out

    def _maybe_none(self, name: str, loop) -> bool:
        return any(
            type(v) is cst.Name and v.value == "None" for v in self._initial_values(name, loop)
        )

    def _is_tensor(self, name: str, loop) -> bool:
        values = self._initial_values(name, loop)
        if not values:
            return False
        for value in values:
            if type(value) is not cst.Call:
                return False
            leaf = (dotted_name(value.func) or "").split(".")[-1]
            if leaf not in _TENSOR_MAKERS:
                return False
        return True
