"""TRL105 new-tensor-off-device."""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.frameworks import Frameworks
from ...analysis.base.names import dotted_name
from ...analysis.base.scopes import reads_of_binding
from ...analysis.base.vocabulary import LOSS_FUNCTIONS
from ...analysis.base.vocabulary import is_test_file, never_mentions_accelerator
from ...analysis.device.tensors import COMBINING_FUNCTIONS, COMBINING_METHODS, DeviceTensors
from ...analysis.loop.batchflow import BatchFlow
from ...diagnostics import Severity
from ..base import PendingFix, Rule

# Wrappers whose forward copies the inputs to the module's device: DDP when given device_ids
# (first), DataParallel (scatter).
_INPUT_MOVING_WRAPPERS = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
)

_DEFAULT_DEVICE_CONTEXTS = ("torch.set_default_device", "torch.device context")
# Stops: past these the value is no longer a CPU tensor next to device tensors.
_STOP_METHODS = frozenset({"item", "tolist", "numpy", "cpu", "size", "dim", "numel"})

Sink = Tuple[cst.CSTNode, List[cst.Name], str]  # (where, device partners, what it meets)


class NewTensorOffDevice(Rule):
    """## What it does
    Reports a tensor created without `device=` (`torch.zeros`, `ones`, `full`, `empty`,
    `rand`, `randn`, `randint`, `randperm`, `arange`, `linspace`, `logspace`, `eye`, and
    `torch.tensor([...])`) inside a function (`forward`, a training step, a helper) or a loop
    at a script's top level (a training loop written inline), when the new tensor is then
    combined with a tensor on the model's device: arithmetic or comparison with it,
    `torch.cat`/`stack`/`where`/`matmul` with it, `x.masked_fill(mask, ...)`, a loss with a model
    output, or a call of a layer that has parameters.

    **Preview rule.** Measured on public repositories it was never tuned on, one of its four
    findings was true (a first look at the held-back repositories: 1 true, 2 false; a second,
    later set: 1 false). The false ones are branches it cannot tell apart: a factory on the CPU
    branch of `if self.gpu_mode:` meets only CPU tensors, and the legacy `.type(Tensor)` casts
    (now followed) moved the others. Run it with `--preview` or select TRL105.

    ## Why is this bad
    Factories create their tensor on the default device, the CPU. The code works on a CPU-only
    laptop and fails on the first GPU run:

        RuntimeError: Expected all tensors to be on the same device, but found at least two
        devices, cuda:0 and cpu!

    or, for an RNN's initial state, "Input and hidden tensors are not at the same device".
    Masks, position ids, noise and targets built inside `forward` are the usual culprits.

    Not reported: straight-line top-level code of a script or notebook (a smoke test of the
    model on a CPU sample before `model.to(device)` further down or in a later cell: at the top
    level a model counts as on the device only after the statement that moves it), a model a
    function builds for itself (`gen = Generator(z).get_gen()` in a shape test) which only a
    move of another `gen` elsewhere in the file would place, a tensor
    moved where its name is rebound (`w = w.cuda()`, also under `if use_cuda:`, as `w =
    w.cuda() if use_cuda else w`, `w = helper(w, gpu)`, in a tuple, `zeros, ones =
    zeros.cuda(), ones.cuda()`, or the legacy `z =
    Variable(z).to(device)` earlier in the same loop body), a tensor made on the side of the
    code that runs without CUDA (the `else` of `if torch.cuda.is_available():`, or of an `if`
    whose other arm makes the same value and only moves it: `if self.gpu_mode: alpha =
    torch.rand(n).cuda() else: alpha = torch.rand(n)`, or a conditional expression written the
    same way, `torch.zeros(1).cuda() if args.cuda else torch.zeros(1)`; arms that differ
    otherwise, such as
    `torch.full(..., device=dev)` against `torch.ones(n)` under `if label_smoothing:`, still
    are),
    `device=None` (the CPU: nothing meets a device tensor), calls of
    functions only named like losses (`plot_losses`: a loss is a torch loss function or an
    `nn.*Loss` object), targets and lengths handed to a CTC loss (`nn.CTCLoss`,
    `F.ctc_loss`: it takes them on the CPU; input lengths made with `torch.full(...)` each step
    are right there), `torch.zeros_like(x)`, `x.new_zeros(...)`, `device=` given, tensors moved
    afterwards (`.to(x.device)`, `.cuda()`, `.type_as(x)`, or the legacy `.type(Tensor)` with
    `Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`), 0-dim tensors such as
    `torch.tensor(2.0)` (PyTorch accepts CPU scalars next to CUDA tensors), code under
    `torch.set_default_device(...)` or `with torch.device(...):`, files that never mention a
    device or an accelerator (CPU-only code), and test files (`tests/`, `test_*.py`: a test
    picks its devices itself and fails loudly on a mismatch). Layers without parameters (`nn.ReLU`,
    `nn.Dropout`, pooling) accept CPU inputs and are not counted.

    ## Example
    ```python
    class Tagger(nn.Module):
        def __init__(self, dim, num_tags):
            super().__init__()
            self.encoder = nn.TransformerEncoderLayer(dim, nhead=4, batch_first=True)
            self.head = nn.Linear(dim, num_tags)

        def forward(self, x, lengths):
            padding = torch.arange(x.size(1))[None, :] >= lengths[:, None]
            noise = torch.randn(x.shape)
            return self.head(self.encoder(x + noise, src_key_padding_mask=padding))

    model = Tagger(256, 17).to("cuda")
    ```

    ## Use instead
    ```python
    class Tagger(nn.Module):
        def __init__(self, dim, num_tags):
            super().__init__()
            self.encoder = nn.TransformerEncoderLayer(dim, nhead=4, batch_first=True)
            self.head = nn.Linear(dim, num_tags)

        def forward(self, x, lengths):
            padding = torch.arange(x.size(1), device=x.device)[None, :] >= lengths[:, None]
            noise = torch.randn(x.shape, device=x.device)
            return self.head(self.encoder(x + noise, src_key_padding_mask=padding))

    model = Tagger(256, 17).to("cuda")
    ```

    ## Fix safety
    The fix adds `device=<t>.device`, where `<t>` is the device tensor the new tensor is
    combined with, or else the tensor known to be on the device that is bound last before it
    (a batch moved with `.to(device)`, an argument of `forward`; not another result of the
    step), and only when that name is already bound where the tensor is created. It is unsafe: on a CPU-only run nothing changes, but code
    that relied on the tensor being on the CPU (a later `.numpy()`) would now need a copy.
    """

    code = "TRL105"
    name = "new-tensor-off-device"
    severity = Severity.ERROR
    fix = "unsafe"
    markers = ("torch",)
    # Below the default set's bar on unseen code (see the docstring): earns it with the branch
    # a factory runs on established, not assumed.
    preview = True

    def finish(self) -> None:
        ctx = self.ctx
        if self._cpu_only() or is_test_file(ctx):
            return
        self.tensors: DeviceTensors = ctx.analysis(DeviceTensors)
        frameworks: Frameworks = ctx.analysis(Frameworks)
        for call in ctx.nodes(cst.Call):
            if not self.tensors.factory_without_device(call):
                continue
            if frameworks.managed(call) in _DEFAULT_DEVICE_CONTEXTS:
                continue
            if self.tensors.devices.cuda_declined(call) or self.tensors.on_cpu_twin(call):
                continue  # the run without CUDA: `else` of `if torch.cuda.is_available():`
            scope = self.tensors.scope_node(call)
            if type(scope) is not cst.FunctionDef and not self._in_loop(call):
                # A script's or notebook's straight-line top level (a smoke test on a CPU
                # sample, an example) is not a training step; a loop there is one.
                continue
            sink = self._follow(call, scope, 0, set())
            if sink is None:
                continue
            where, partners, meets = sink
            partner = self._partner(call, scope, partners)
            headline, help_text = self._message(call, meets, partner)
            self.report(
                call,
                headline,
                help=help_text,
                fix=self._fix(call, partner),
                related=(
                    [(where, "combined with a device tensor here")] if where is not call else []
                ),
            )

    # -- where the new tensor goes ------------------------------------------------------------

    def _follow(self, expr: cst.CSTNode, scope, depth: int, seen: Set[cst.CSTNode]):
        """Follow the value of `expr` up the expression and through names; the first place
        where it meets a device tensor, or None."""
        if depth > 4 or expr in seen:
            return None
        seen.add(expr)
        tensors = self.tensors
        current = expr
        while True:
            parent = self.ctx.parent(current)
            if parent is None:
                return None
            if type(parent) is cst.Attribute and parent.value is current:
                call = self.ctx.parent(parent)
                method = parent.attr.value
                if type(call) is cst.Call and call.func is parent:
                    if method in ("to", "cuda", "type_as", "type"):
                        if tensors.moves_to_device(call):
                            return None  # moved (also `.type(Tensor)` with a CUDA type)
                        current = call
                        continue
                    if method in _STOP_METHODS:
                        return None
                    if method in COMBINING_METHODS:
                        sink = self._args_sink(call, current, scope)
                        if sink is not None:
                            return sink
                    current = call
                    continue
                if method in ("shape", "device", "dtype", "ndim"):
                    return None
                current = parent
                continue
            if type(parent) is cst.Subscript and parent.value is current:
                current = parent
                continue
            if type(parent) in (cst.SubscriptElement, cst.Index, cst.Slice):
                return None  # used as an index: CPU indices into CUDA tensors are fine
            if type(parent) is cst.UnaryOperation:
                current = parent
                continue
            if type(parent) is cst.BinaryOperation:
                other = parent.right if parent.left is current else parent.left
                if tensors.on_device(other, scope):
                    return parent, tensors.device_partners(other, scope), "operand"
                current = parent
                continue
            if type(parent) is cst.ComparisonTarget:
                comparison = self.ctx.parent(parent)
                if type(comparison) is cst.Comparison:
                    others = [comparison.left] + [
                        c.comparator for c in comparison.comparisons if c is not parent
                    ]
                    sink = self._any_on_device(comparison, others, scope, "operand")
                    if sink is not None:
                        return sink
                    current = comparison
                    continue
                return None
            if type(parent) is cst.Comparison and parent.left is current:
                others = [c.comparator for c in parent.comparisons]
                sink = self._any_on_device(parent, others, scope, "operand")
                if sink is not None:
                    return sink
                current = parent
                continue
            if type(parent) in (cst.Element, cst.StarredElement):
                container = self.ctx.parent(parent)
                if type(container) is cst.List or type(container) is cst.Tuple:
                    current = container
                    continue
                return None
            if type(parent) is cst.Arg:
                call = self.ctx.parent(parent)
                if type(call) is not cst.Call:
                    return None
                return self._call_sink(call, parent, current, scope, depth, seen)
            if type(parent) is cst.IfExp and parent.test is not current:
                current = parent
                continue
            if type(parent) is cst.AugAssign:
                if parent.value is current and tensors.on_device(parent.target, scope):
                    partners = tensors.device_partners(parent.target, scope)
                    return parent, partners, "operand"
                return None
            if type(parent) is cst.Assign and parent.value is current:
                targets = [t.target for t in parent.targets]
            elif type(parent) is cst.AnnAssign and parent.value is current:
                targets = [parent.target]
            else:
                return None
            for target in targets:
                if type(target) is not cst.Name:
                    continue
                uses = reads_of_binding(self.ctx, target, parent)
                if any(self._rebound_by_move(use, target.value) for use in uses):
                    return None  # `w = w.cuda()` a few lines on (perhaps under `if use_cuda:`)
                for use in uses:
                    if self.tensors.scope_node(use) is not scope:
                        continue
                    found = self._use_sink(use, scope, depth + 1, seen)
                    if found is not None:
                        return found
            return None

    def _rebound_by_move(self, use: cst.Name, name: str) -> bool:
        """`w = w.cuda()`, `w = w.to(dev)`, `w = helper(w, gpu)`: the name is rebound to the
        value moved, or handed to a call that may move it (a helper the analysis does not
        follow), so the tensor created above is not what meets the device tensors."""
        expr: cst.CSTNode = use
        parent = self.ctx.parent(expr)
        if type(parent) is cst.Attribute and parent.value is expr:
            call = self.ctx.parent(parent)
            if not (type(call) is cst.Call and call.func is parent):
                return False
            if not self.tensors.moves_to_device(call):
                return False
            expr = call
        elif type(parent) is cst.Arg:
            call = self.ctx.parent(parent)
            if type(call) is not cst.Call:
                return False
            if any(q.startswith("torch.") for q in self.ctx.names.qualified(call.func)):
                return False  # torch.cat(...) and friends do not move
            expr = call
        else:
            return False
        holder = self.ctx.parent(expr)
        # `Variable(w.cuda())` (pre-0.4 code) is the moved tensor itself
        while type(holder) is cst.Arg and holder.value is expr:
            wrapper = self.ctx.parent(holder)
            if not (
                type(wrapper) is cst.Call
                and wrapper.args[0] is holder
                and self.ctx.names.is_(wrapper.func, "torch.autograd.Variable")
            ):
                break
            expr, holder = wrapper, self.ctx.parent(wrapper)
        if type(holder) is cst.IfExp:
            # `x = x.cuda() if use_cuda else x`: moved wherever the device is used
            other = holder.orelse if holder.body is expr else holder.body
            if not (type(other) is cst.Name and other.value == name):
                return False
            expr, holder = holder, self.ctx.parent(holder)
        if type(holder) is cst.Element:
            # `zeros, ones = zeros.cuda(), ones.cuda()`: the same position of a tuple target
            values = self.ctx.parent(holder)
            if not isinstance(values, (cst.Tuple, cst.List)):
                return False
            assign = self.ctx.parent(values)
            if not isinstance(assign, cst.Assign) or assign.value is not values:
                return False
            position = next(i for i, e in enumerate(values.elements) if e is holder)
            for target in assign.targets:
                names = target.target
                if isinstance(names, (cst.Tuple, cst.List)) and len(names.elements) == len(
                    values.elements
                ):
                    bound = names.elements[position].value
                    if isinstance(bound, cst.Name) and bound.value == name:
                        return True
            return False
        return (
            type(holder) is cst.Assign
            and holder.value is expr
            and any(type(t.target) is cst.Name and t.target.value == name for t in holder.targets)
        )

    def _use_sink(self, use: cst.Name, scope, depth, seen):
        parent = self.ctx.parent(use)
        if type(parent) is cst.AugAssign and parent.target is use:
            if self.tensors.on_device(parent.value, scope):
                return parent, self.tensors.device_partners(parent.value, scope), "operand"
            return None
        return self._follow(use, scope, depth, seen)

    def _call_sink(self, call: cst.Call, arg: cst.Arg, current, scope, depth, seen):
        tensors = self.tensors
        names = self.ctx.names
        func = call.func
        others = [a.value for a in call.args if a is not arg]
        if names.is_(func, *COMBINING_FUNCTIONS):
            return self._any_on_device(call, others, scope, "operand")
        if type(func) is cst.Attribute and func.attr.value in COMBINING_METHODS:
            if tensors.on_device(func.value, scope):
                return call, tensors.device_partners(func.value, scope), "operand"
            return None
        if tensors.calls_device_model(call, scope):
            if self._wrapper_moves_inputs(func):
                return None
            partners: List[cst.Name] = []
            for other in others:
                partners.extend(tensors.device_partners(other, scope))
            return call, partners, "model"
        if self._is_loss(func):
            if call.args and arg is not call.args[0] and self.ctx.analysis(
                BatchFlow
            ).takes_cpu_targets(call):
                return None  # a CTC loss takes its targets and lengths on the CPU
            return self._any_on_device(call, others, scope, "loss")
        qualified = names.qualified(func)
        if any(q.startswith("torch.") for q in qualified) and (call.args and call.args[0] is arg):
            # torch.tril(torch.ones(T, T)), torch.flip(...): still the new CPU tensor
            return self._follow(call, scope, depth, seen)
        return None

    def _wrapper_moves_inputs(self, func: cst.CSTNode) -> bool:
        """`ddp_model(torch.randn(...))` where `ddp_model = DDP(model, device_ids=[i])` or
        `DataParallel(model)`: the wrapper copies its inputs to its device before forward."""
        if type(func) is not cst.Name:
            return False
        names = self.ctx.names
        for assign in self.ctx.nodes(cst.Assign):
            if not any(
                type(t.target) is cst.Name and t.target.value == func.value
                for t in assign.targets
            ):
                continue
            value = assign.value
            if type(value) is not cst.Call:
                continue
            if names.is_(value.func, *_INPUT_MOVING_WRAPPERS[1:]):
                return True
            if names.is_(value.func, _INPUT_MOVING_WRAPPERS[0]) and (
                len(value.args) > 1
                or any(
                    a.keyword is not None and a.keyword.value == "device_ids" for a in value.args
                )
            ):
                return True
        return False

    def _any_on_device(self, where, exprs, scope, meets: str):
        tensors = self.tensors
        for other in exprs:
            if tensors.on_device(other, scope):
                return where, tensors.device_partners(other, scope), meets
        return None

    def _args_sink(self, call: cst.Call, receiver, scope):
        others = [a.value for a in call.args]
        return self._any_on_device(call, others, scope, "operand")

    def _is_loss(self, func: cst.CSTNode) -> bool:
        """A loss the code shows: `F.cross_entropy`, or a name bound to an `nn.*Loss(...)`.
        A name that only looks like a loss (`plot_losses`, `self.criterion` set where the
        analysis cannot see) is not evidence."""
        names = self.ctx.names
        for qualified in names.qualified(func):
            if qualified.startswith("torch.") and qualified.split(".")[-1] in LOSS_FUNCTIONS:
                return True
        if type(func) is not cst.Name:
            return False
        bindings = self.ctx.scopes.lookup(func.value, func)
        return bool(bindings) and all(
            b.kind in ("assign", "annassign")
            and type(b.value) is cst.Call
            and any(
                q.startswith("torch.nn.") and q.endswith("Loss")
                for q in names.qualified(b.value.func)
            )
            for b in bindings
        )

    # -- report -------------------------------------------------------------------------------

    def _partner(self, call: cst.Call, scope, partners: List[cst.Name]) -> Optional[str]:
        index = self.ctx.tree.index
        at = index.get(call, 0)
        for partner in partners:
            bindings = self.ctx.scopes.lookup(partner.value, call)
            if bindings and all(b.kind == "param" or index.get(b.node, at) < at for b in bindings):
                return partner.value
        # Else the device tensor bound last before the new one (everything a step touches on
        # the device is on the same device): only a tensor known to be there, one moved there
        # (`x = x.to(device)`) or an argument of `forward`. Other names the step computed (a
        # dict of metrics, token ids still on the CPU) say nothing about the device.
        names = self.tensors.device_names(scope)
        # A name the file calls (`generator(z)`) holds a model, and a module has no `.device`.
        called = {c.func.value for c in self.ctx.nodes(cst.Call) if type(c.func) is cst.Name}
        best, best_at = None, (-1, -1)
        for name in names - called:
            bindings = self.ctx.scopes.lookup(name, call)
            if not bindings:
                continue
            if not all(b.kind == "param" or index.get(b.node, at) < at for b in bindings):
                continue
            # Prefer inputs (moved batches, forward's arguments) over intermediate results.
            moved = any(_is_move(b.value) for b in bindings)
            param = all(b.kind == "param" for b in bindings)
            if param and any(getattr(b.node, "default", None) is not None for b in bindings):
                continue  # `targets=None` may be None
            if not (moved or (param and self.tensors.is_forward_like(scope))):
                continue
            where = max(index.get(b.node, 0) for b in bindings)
            rank = (2, where) if moved else (1, -where)
            if best is None or rank > best_at or (rank == best_at and name < best):
                best, best_at = name, rank
        return best

    def _message(self, call: cst.Call, meets: str, partner: Optional[str]) -> Tuple[str, str]:
        text = self.ctx.code(call)
        if len(text) > 34 or "\n" in text:
            text = self.ctx.code(call.func) + "(...)"
        if meets == "model":
            use = "passed to a layer or model on the device"
        elif meets == "loss":
            use = "passed to a loss with a device tensor"
        else:
            use = "combined with a device tensor"
        advice = f"`device={partner}.device`" if partner else "the `device=` of the tensor it meets"
        headline = f"`{text}` creates a CPU tensor that is then {use}"
        help_text = (
            'On a GPU this fails with "Expected all tensors to be on the same device, but '
            f'found at least two devices, cuda:0 and cpu!". Create it with {advice}.'
        )
        return headline, help_text

    def _fix(self, call: cst.Call, partner: Optional[str]) -> Optional[PendingFix]:
        if partner is None or not call.args or self._cast_to_legacy_type(call):
            return None
        return self.unsafe_fix(
            f"Create it on the device: `device={partner}.device`",
            self.ctx.append_argument(call, f"device={partner}.device"),
        )

    def _cast_to_legacy_type(self, call: cst.Call) -> bool:
        """`torch.randn(n).type(torch.FloatTensor)`: the cast names a (CPU) tensor type and
        would copy a tensor created on the device back to the CPU, so `device=` fixes nothing."""
        parent = self.ctx.parent(call)
        if type(parent) is not cst.Attribute or parent.attr.value != "type":
            return False
        cast = self.ctx.parent(parent)
        if type(cast) is not cst.Call or not cast.args:
            return False
        target = dotted_name(cast.args[0].value) or ""
        return target.endswith("Tensor") or type(cast.args[0].value) is cst.SimpleString

    def _in_loop(self, node: cst.CSTNode) -> bool:
        return any(type(a) in (cst.For, cst.While) for a in self.ctx.ancestors(node))

    def _cpu_only(self) -> bool:
        return never_mentions_accelerator(self.ctx.source.text)


def _is_move(value) -> bool:
    return (
        type(value) is cst.Call
        and type(value.func) is cst.Attribute
        and value.func.attr.value in ("to", "cuda")
    )
