"""TRL501 host-sync-in-hot-loop."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.names import dotted_name
from ...analysis.base.vocabulary import is_test_file
from ...analysis.loop.steps import TrainingSteps
from ...diagnostics import Severity
from ..base import Rule

_SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
_CONVERSIONS = {"float", "int", "bool"}
_MODULE_READS = {"parameters", "named_parameters", "state_dict", "buffers", "modules"}
_HOST_FACTORIES = tuple(
    f"torch.{name}" for name in ("tensor", "zeros", "ones", "full", "arange", "empty", "as_tensor")
)
# A script that never names an accelerator runs on the CPU: `.item()` there waits for nothing.
_ACCELERATOR_WORDS = re.compile(
    r"cuda|device|accelerat|\bmps\b|xla|deepspeed|fabric|\bdistributed\b|\bddp\b|\bgpu", re.I
)
_GUARD_WORDS = re.compile(
    r"log|print|verbose|display|report|interval|freq|every|debug|should|vis|tensorboard|"
    r"wandb|writer|summary|save|sample|plot|show|ckpt|checkpoint|eval|valid|test|monitor|"
    r"last|first|warmup|profil|track",
    re.I,
)


class HostSyncInHotLoop(Rule):
    """## What it does
    Reports a device-to-host read in every iteration of a training loop: `loss.item()`,
    `.cpu()`, `.numpy()`, `.tolist()`, `float(loss)`, `print(loss)`, when it is not under a
    logging guard such as `if step % log_interval == 0:`. Info level: off by default, on with
    `--select TRL5` or `ALL`.

    ## Why is this bad
    CUDA kernels run asynchronously: the Python loop normally queues the next step's work while
    the GPU is still busy with this one. Reading a value on the host makes the CPU wait until
    every queued kernel has finished, every iteration: the GPU then idles while Python prepares
    the next batch. On small or fast models this costs a noticeable share of throughput.

    ## Example
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
        pbar.set_postfix(loss=loss.item())
    ```

    ## Use instead
    ```python
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()          # stays on the GPU, no sync
        if step % log_interval == 0:
            pbar.set_postfix(loss=loss.item())  # one sync every log_interval steps
    ```

    Not reported: reads under an `if` on the step count (`%`, `==`) or a logging flag, reads in
    evaluation loops (no backward), reads after the loop, reads in a loop that only runs once
    per epoch, scripts that never name an accelerator (CPU-only), tensors made on the host
    (`torch.tensor([...])` without `device=`), `m.cpu().parameters()` (a module move), and test
    files (`tests/`, `test_*.py`: they read values to assert on them).

    ## Fix safety
    There is no fix: where to log is the author's choice.
    """

    code = "TRL501"
    name = "host-sync-in-hot-loop"
    severity = Severity.INFO
    markers = ("backward",)

    def finish(self) -> None:
        calls = self.ctx.nodes(cst.Call)
        if not any(
            type(c.func) is cst.Attribute and c.func.attr.value == "backward" for c in calls
        ):
            return
        if is_test_file(self.ctx):
            return  # tests read values to assert on them; speed is not the point
        if not self._names_an_accelerator():
            return  # a CPU-only script: nothing to wait for
        self.steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        self._graph: Dict[cst.CSTNode, Set[str]] = {}
        self._hot_functions: Dict[cst.CSTNode, bool] = {}
        # One finding per site: the reads of one statement (`print(a.item(), b.item())`)
        # wait for the GPU once, at the first of them.
        sites: Dict[cst.CSTNode, List[Tuple[cst.Call, str]]] = {}
        for call in calls:
            kind = self._sync(call)
            if kind is None:
                continue
            if not self._hot(call):
                continue
            if self.steps.library_owned(call):
                continue
            statement = self.ctx.statement_of(call) or call
            sites.setdefault(statement, []).append((call, kind))
        for reads in sites.values():
            call, kind = reads[0]
            shown = self.ctx.code(call)
            if len(shown) > 40 or "\n" in shown:
                shown = kind
            more = f" (and {len(reads) - 1} more reads here)" if len(reads) > 1 else ""
            self.report(
                call,
                f"`{shown}`{more} makes the CPU wait for the GPU every training step (a host sync)",
                help=(
                    "the host stops queueing work until the GPU has finished everything before "
                    "this read, every step. Log every N steps (`if step % log_interval == 0:`) "
                    "or accumulate on the device with `.detach()` and read once per epoch."
                ),
            )

    # -- what syncs ---------------------------------------------------------------------------

    def _sync(self, call: cst.Call) -> Optional[str]:
        func = call.func
        if type(func) is cst.Attribute:
            attr = func.attr.value
            if attr in _SYNC_METHODS and not call.args:
                if self._inner_sync(func.value):
                    return None  # `.cpu().numpy()`: reported once, at the first read
                if self._cpu_tensor(func.value):
                    return None  # `scale = torch.tensor([1.0])`: already on the host
                parent = self.ctx.parent(call)
                if type(parent) is cst.Attribute and parent.attr.value in _MODULE_READS:
                    return None  # `m.cpu().parameters()`: moves a module, reads no value
                return f".{attr}()"
            if attr == "to" and call.args:
                first = call.args[0].value
                if type(first) is cst.SimpleString and first.evaluated_value == "cpu":
                    if not self._inner_sync(func.value):
                        return '.to("cpu")'
            return None
        if type(func) is cst.Name and (func.value in _CONVERSIONS or func.value == "print"):
            if self.ctx.scopes.lookup(func.value, func):
                return None  # shadowed by a local definition
            loops = self.steps.enclosing_loops(call)
            if not loops:
                return None
            names = self._graph_names(loops[-1])
            for arg in call.args:
                if any(True for _ in self.steps.graph_leaves(arg.value, names)):
                    return f"{func.value}()"
        return None

    def _names_an_accelerator(self) -> bool:
        """Any identifier or (non-docstring) string in the code naming a device or launcher."""
        for name in self.ctx.nodes(cst.Name):
            if _ACCELERATOR_WORDS.search(name.value):
                return True
        for string in self.ctx.nodes(cst.SimpleString):
            if type(self.ctx.parent(string)) is cst.Expr:
                continue  # a docstring or a bare string statement
            if _ACCELERATOR_WORDS.search(string.value):
                return True
        return False

    def _cpu_tensor(self, expr: cst.CSTNode) -> bool:
        """`t` or `t[0]` where every binding of `t` is `torch.tensor/zeros/...(...)` made
        without `device=`: a host tensor."""
        while type(expr) is cst.Subscript:
            expr = expr.value
        if type(expr) is not cst.Name:
            return False
        bindings = self.ctx.scopes.lookup(expr.value, expr)
        if not bindings:
            return False
        for binding in bindings:
            value = binding.value
            if binding.kind != "assign" or type(value) is not cst.Call:
                return False
            if not self.ctx.names.is_(value.func, *_HOST_FACTORIES):
                return False
            if any(arg.keyword is not None and arg.keyword.value == "device" for arg in value.args):
                return False
        return True

    def _inner_sync(self, expr: cst.CSTNode) -> bool:
        while True:
            if type(expr) is cst.Call:
                func = expr.func
                if type(func) is cst.Attribute and func.attr.value in _SYNC_METHODS:
                    return True
                expr = func.value if type(func) is cst.Attribute else func
            elif type(expr) is cst.Attribute or type(expr) is cst.Subscript:
                expr = expr.value
            else:
                return False

    def _graph_names(self, loop) -> Set[str]:
        found = self._graph.get(loop)
        if found is None:
            found = self._graph[loop] = self.steps.graph_names(loop)
        return found

    # -- where ----------------------------------------------------------------------------------

    def _hot(self, node: cst.CSTNode) -> bool:
        """Runs once per training step, not under a logging guard."""
        loops = self.steps.enclosing_loops(node)
        if loops:
            loop = loops[0]
            return self.steps.is_step_loop(loop) and not self._guarded(node, loop)
        function = self.steps.scopes.enclosing_function(node)
        if function is None or self._guarded(node, function):
            return False
        found = self._hot_functions.get(function)
        if found is None:
            found = False
            for caller in self.steps.callers(function):
                outer = self.steps.enclosing_loops(caller)
                if outer and self.steps.is_step_loop(outer[0]):
                    if not self._guarded(caller, outer[0]):
                        found = True
                        break
            self._hot_functions[function] = found
        return found

    def _guarded(self, node: cst.CSTNode, until: cst.CSTNode) -> bool:
        child = node
        for ancestor in self.ctx.ancestors(node):
            if ancestor is until:
                return False
            if type(ancestor) is cst.If and child is ancestor.body:
                if self._guard_test(ancestor.test):
                    return True
            if type(ancestor) is cst.ExceptHandler:
                return True  # the error path
            child = ancestor
        return False

    def _guard_test(self, test: cst.BaseExpression) -> bool:
        for node in [test, *self.ctx.tree.descendants(test)]:
            if type(node) is cst.BinaryOperation and type(node.operator) is cst.Modulo:
                return True
            if type(node) is cst.Comparison:
                if any(type(t.operator) is cst.Equal for t in node.comparisons):
                    return True
            if type(node) in (cst.Name, cst.Attribute):
                text = dotted_name(node) or ""
                if _GUARD_WORDS.search(text.split(".")[-1]):
                    return True
        return False
