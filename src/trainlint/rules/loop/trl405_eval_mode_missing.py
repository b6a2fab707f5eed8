"""TRL405 eval-mode-missing."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple, cast

import libcst as cst

from ...analysis.base.conditions import Conditions
from ...analysis.base.dataflow import Event, Repeat, events_of, run
from ...analysis.base.identity import aliases
from ...analysis.base.names import dotted_name
from ...analysis.loop.modes import (
    eval_mode_returners,
    holds_module,
    imported_model_class,
    mode_free_classes,
    mode_free_model,
    plain_function,
    returned_in_eval_mode,
)
from ...analysis.loop.steps import TrainingSteps
from ...analysis.parallel.parallel import module_root
from ...analysis.project.hierarchy import (
    Hierarchy,
    class_question_facts,
    deferred_candidates,
)
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule
from ...analysis.base.nodes import enclosing_class, own_method, positional_params


class EvalModeMissing(Rule):
    """## What it does
    Reports an evaluation loop (over a validation/test loader, or in an `evaluate`/`validate`/
    `test` function) that calls the model without `model.eval()` or without
    `torch.no_grad()`/`torch.inference_mode()`, and a training loop that calls an evaluation
    which leaves the model in eval mode and then trains on without `model.train()`.

    ## Why is this bad
    In train mode, dropout drops activations and BatchNorm normalises with the statistics of
    the evaluation batch and updates its running averages with evaluation data: the reported
    accuracy is wrong (and varies with the batch size), and the evaluation changes the model.
    Without `no_grad()` every forward records an autograd graph: evaluation uses several times
    the memory it needs (CUDA out of memory on a batch size that trains fine) and runs slower.

    The other way round, a model left in eval mode trains with dropout off and BatchNorm
    frozen after the first evaluation. Nothing raises; the results are silently worse.

    ## Example
    ```python
    def validate(model, val_loader):
        correct = 0
        for images, labels in val_loader:
            correct += (model(images.cuda()).argmax(1) == labels.cuda()).sum().item()
        return correct

    for epoch in range(epochs):
        train_one_epoch(model, train_loader, optimizer)
        print(f"epoch {epoch}: {validate(model, val_loader)} correct")
    ```

    ## Use instead
    ```python
    @torch.no_grad()
    def validate(model, val_loader):
        model.eval()
        correct = 0
        for images, labels in val_loader:
            correct += (model(images.cuda()).argmax(1) == labels.cuda()).sum().item()
        model.train()
        return correct

    for epoch in range(epochs):
        train_one_epoch(model, train_loader, optimizer)
        print(f"epoch {epoch}: {validate(model, val_loader)} correct")
    ```

    A mode call whose result is thrown away, `_ = net.eval()` (a notebook hiding the module's
    echo), sets the mode of `net`, like `net.eval()`.

    Not reported: a caller that sets `model.eval()` (and `no_grad()`) before calling the
    evaluation function, a missing `no_grad()` where every chain of same-file calls that
    reaches the loop starts under it (up to five calls up: `with torch.no_grad():
    eval_single_ckpt(...)` in the `__main__` block, which reaches the loop through
    `eval_one_epoch`), an evaluation function whose callers are all in other files and that
    sets neither mode (the caller decides), a missing `no_grad()` in a module-level function
    that its own file never names when every call of it from the files that import it runs
    under `torch.no_grad()` (`with torch.no_grad(): validate(generator, ...)` in the trainer;
    one call with autograd on, or a file that hands the function on as a callback, keeps
    the finding), a missing `no_grad()` in a file that imports neither torch nor a library
    built on it (a course's NumPy framework: nothing records a graph), loops that
    backpropagate (adversarial evaluation, saliency) or use an object a library outside
    torch built around the model (`attack = torchattacks.PGD(model)` ... `attack(x, y)`,
    `cam = GradCAM(model=model, ...)` ... `cam(input_tensor=x)`: what it does with the modes
    and with autograd is not in the file, and attacks and Grad-CAM need gradients),
    framework-managed code (Lightning `validation_step`, Accelerate, HF
    Trainer, ignite handlers), a loop inside MONAI's `with eval_mode(model):` (eval mode and
    `no_grad()` both), and a missing `eval()` for a model of a class in the same file
    that has no layer whose behaviour depends on the mode (only convolutions, linear layers,
    pooling, activations: the CIFAR-10 tutorial's `Net`, also with a weight-init method that
    tests `isinstance(m, nn.BatchNorm2d)` or an activation its `forward` builds on the spot
    (`sigmoid = nn.Sigmoid()`), or an `nn.Sequential` of such layers;
    its submodules may be such classes of the file too, an attention pooling of two linear
    layers, or plain classes of the file with no base; its `forward` may call module-level
    helpers of the file that read no mode either, handed its own mode-free layers
    (`mem_update(self.conv1, x, mem, spike)`), and a custom autograd function's `apply`; a
    submodule handed in from outside (`self.backbone = backbone`) and called is unknown, so
    such a class is not mode-free; a `torch.jit.ScriptModule` subclass counts like an
    `nn.Module`), or a bare
    built-in layer such as `nn.Linear(784, 10)`; an `nn.LSTM`/`nn.GRU`/`nn.RNN`
    counts as mode-dependent only with more than one layer and a nonzero `dropout`, and a
    functional dropout or batch norm only when its `training` flag follows the mode
    (`F.dropout(x, training=self.training)`; Monte Carlo dropout with `training=True` drops
    in both modes, so `eval()` would change nothing). An `eval()` in the `__init__` of the
    class whose method evaluates `self.model`, with no method of the class turning training
    back on, holds in every method (a tester object that sets the mode once). The model
    may reach the loop as a parameter: `test(net, loader)` is judged by what the file's calls
    pass for `net` (`test(lenet, testloader)`, every one of them mode-free).
    `no_grad()` is still required. For such a model a missing `train()` is not reported either.
    A model whose parameters are all frozen before the loop, in its function
    (`model.requires_grad_(False)`, or `for p in model.parameters(): p.requires_grad = False`,
    with nothing rebinding `model` between; for `self.teacher`, anywhere in its class) records
    no graph on plain inputs: `no_grad()` is not required there.
    A "model" that is a plain `def`, a lambda or a `functools.partial` (a sliding-window
    inferer handed the network) has no modes and is not reported, nor is a method
    reached through an instance of a class of the file (`proto.run_model(net, x)`: a bound method
    has no `eval()`), or a member the class inherits from outside the file. An `eval()` in
    one branch of an `if` whose other branch calls `train()` (`if phase == "train":
    model.train() else: model.eval()`, also deeper in that branch: `else: if (epoch + 1) % 10
    == 0: net.eval() else: continue`, or an `if` without `else` whose body ends with `return`
    before the `train()` that follows it: `if self._cur_task > 0: self._network.eval();
    return`) is a deliberate choice; an `eval()` the helper undoes
    under the same test (`if self.emb_decoder is not None:` around both its `eval()` and, at the
    end, its `train()`) leaves the module as it was, and so does a helper that saves the mode
    before its `eval()` and puts it back at its end (`training = self.model.training` ... `if
    training: self.model.train()`, or `model.train(was_training)`; a `raise` between them ends
    the run, a `return` skips the restore and is reported); and a module only called under
    `no_grad()` in the loop (an EMA copy used for samples) is not trained there. Where the
    loop steps an optimizer, a module left in eval mode is trained only by a step of one that
    holds its parameters: a discriminator kept in eval mode to score the generator (its own
    optimizer clears those gradients before its update in train mode), or a decoder frozen
    while a latent code is fitted (`torch.optim.Adam([latent])`), is not updated there. An `eval()`
    under a branch the code before the loop settles is judged on the branch that runs: an agent
    whose `select_action` calls `self.dqn.eval()` only `if self.is_test:`, in a `train()` that
    sets `self.is_test = False` before its loop and never sets it in the loop (nor in what the
    loop calls), never leaves eval mode on while training; nor does an epoch helper whose update
    sits under `if not cross_valid:` when it is called with `cross_valid=True` after `eval()`.
    A helper's `eval()` of a model it made itself (`model = fit_fold(...)`; `model.eval()`
    in a cross-validation fold's helper) ends with the call: that model is not the caller's
    `model` of the same name, and the next fold builds a new one.
    `eval()` on the name a model is evaluated under counts through plain aliases
    (`generator.eval()`, then `model = generator`; `self.model.eval()`, then `model =
    self.model.module`, the module a DataParallel or DDP wrapper holds). PyTorch 0.3-era evaluation that wraps
    its inputs in `Variable(x, volatile=True)` (also moved on, `Variable(x,
    volatile=True).cuda()`, or a helper given the flag,
    `make_variable(x, volatile=True)`; what a model computes from such an input is volatile
    too, and so is what operations make of it, `points = gather(points.transpose(1,
    2).contiguous(), idx)`) turned the graph off the way that version asked and is not reported for a missing `no_grad()`, when the file uses none of 0.4's API (`.item()`,
    `.to(...)`, `torch.device`, `no_grad`): from 0.4 on the flag is ignored and the finding
    stands, while a file on the old API (`loss.data[0]`) fails on a newer PyTorch before its
    evaluation runs. A model that comes from a function of
    another project file which hands it back in eval mode (`model = get_model(ckpt,
    train=False)`, whose body ends `model.eval(); return model`) has its mode set: the project
    phase asks that file (also when the evaluation function receives the model from such a
    call site of its own file). So does a function of the same file, also for one element of the
    pair it returns (`encoder, decoder = load_networks(args)`, whose body calls
    `encoder.to(device).eval()` and `decoder.to(device).eval()` before `return encoder,
    decoder`; every `return` of the function must hand it back so, and an early `return
    model.cuda()` before the `eval()` does not). An evaluation loop after a bare `return` (a test the author
    switched off with `return` as its first line) never runs and is not reported, nor does
    one over a loader nothing in the file binds (`for batch in testing_data_loader:` after the
    test set was removed: NameError before the model runs). A mode set on
    the variable of a walk over a model's layers (`for m in net.backbone.modules(): if
    isinstance(m, nn.BatchNorm2d): m.eval()`, freezing a backbone's BatchNorm) is chosen layer
    by layer, on purpose, and is not the model's mode. A validation on a loop's last iteration
    (`if i == len(steps) - 1: model.eval(); validate(...)` as the last statement of `for i, ...
    in enumerate(loader)`) ends that loop: it is reported only when nothing sets `train()`
    again before the next training step (the next epoch). So does an early stop that clears
    the flag its `while` tests right before its `break` (`keep_training = False; break` under
    `while seen < limit and keep_training:`): training is over, while a bare `break` out of
    the pass over the loader lets the `while` start another one. A backward and step written under
    `if model.training:` (a textbook's one `run_epoch` for training and testing) do not run
    after `model.eval()`, so the test pass through that helper trains nothing; a check of the
    mode that only picks where a loss is logged guards nothing and changes no finding. An
    epoch helper that validates in the middle of its own batch loop is reported once, at that
    validation call, and not again at the call of the helper in the loop around it.
    A loop over seeds that builds its model anew at the top of each run (`model =
    build_model(args)`, a call not handed the old model) starts each run with a module in
    train mode, whatever mode the last run left its model in. An optimizer handed to a helper
    holds what its callers built it over (`train(loader, model, controller, optimizer)` with
    `optimizer` over `model.parameters()`: the controller, put in eval mode to sample from, is
    not trained by that step). The restore may also be written further down the loop's own
    body under the same test (`else: net.eval()` ... `else: net.requires_grad_(True).train()`),
    or at the top of the next iteration under the same test as the `eval()` (`if
    args.train_backbone: backbone.train()` before the training steps, the same `if` before its
    `eval()`), with nothing the test reads assigned in the loop, or through a module built
    from the evaluated one (`d_net = Distiller(t_net, s_net)`, then `d_net.train()` at the
    top of each epoch: a module keeps what it is given as submodules, and a class of another
    file is taken to; a copy, `copy.deepcopy(model)`, does not). An `eval()` that comes with
    `requires_grad_(False)` of the same module, run whenever the `eval()` is, with nothing
    switching its gradients back on later, freezes the module (a text encoder whose training
    stops at a given step): it is not trained again. Mode calls under `isinstance(net,
    nn.Module)` (d2l's helpers, which also take plain functions) run for a module.

    The mode matters when the forward records the graph, so a model left in eval mode is
    reported only when a later forward runs it (`model(x)`, `model.forward(x)`, or a call that
    is handed the model and is not followed, like `data_parallel(model, x)`) before a backward:
    an evaluation between a step's forward and its backward (a vocoder that synthesises a sample
    mid-step) is not reported when the next step sets the mode again before its forward.

    ## Known problems
    A forward the analysis cannot see (the model run through an object that holds it, such as
    `engine.step(batch)`) does not count, so a model left in eval mode and trained only that way
    is not reported.

    ## Fix safety
    The fix inserts `model.eval()` before the evaluation loop, decorates the evaluation function
    with `@torch.no_grad()` when nothing in it backpropagates, and inserts `model.train()` right
    after an evaluation call that leaves the model in eval mode. It is unsafe: it changes what the
    code computes (that is the point), and a model that deliberately stays in train mode (test-
    time dropout for MC-dropout uncertainty) would change too.
    """

    code = "TRL405"
    name = "eval-mode-missing"
    severity = Severity.WARNING
    fix = "unsafe"
    # Measured on seven held-back sets of real code, each at its first look: 17 true and 15
    # false findings (53 %). Each false shape found was fixed in the shared analysis, but new
    # code keeps showing new ones (mode flags, aliases, helpers that set the mode elsewhere).
    # It earns the default set back with a first look at 90 %.
    preview = True
    markers = ("torch",)
    # The model's class may be defined in another file of the project: that file says whether
    # it has any mode-dependent layer.
    project = True

    def finish(self) -> None:
        self.steps: TrainingSteps = self.ctx.analysis(TrainingSteps)
        # Findings about a missing mode whose model is an instance of a class imported from
        # another file: key -> {"class": its qualified name, "message"/"help": the finding
        # without its mode part, or None when nothing else is left}.
        self.deferred: Dict[str, Dict[str, Optional[str]]] = {}
        for loop, model_call in self.steps.eval_loops():
            if self.steps.library_owned(loop):
                continue
            self._check_eval_loop(loop, model_call)
        self._check_restore()

    # -- evaluation loops ---------------------------------------------------------------------

    def _check_eval_loop(self, loop: cst.For, model_call: cst.Call) -> None:
        model = dotted_name(model_call.func) or "model"
        function = self.steps.scopes.enclosing_function(loop)
        callers = self.steps.callers(function) if function is not None else []
        if self._plain_function(model, loop, function):
            return  # a `def`/lambda has no modes, and its graph is dropped with each result
        sets_eval_itself = self._eval_before(loop, model, function)
        if function is not None and not callers and not sets_eval_itself:
            if self._from_outside(model, function):
                return  # called from other files only: the caller decides both modes
        missing_eval = not sets_eval_itself and not self._callers_set_eval(function, model)
        if missing_eval and mode_free_model(self.steps, model, loop):
            missing_eval = False  # no dropout/BatchNorm/...: eval() would change nothing
        missing_no_grad = not self._grad_off(model_call, model, loop)
        if not (missing_eval or missing_no_grad):
            return
        imported_class = self._imported_origin(model, loop, function) if missing_eval else None
        mode_effect = (
            "dropout and BatchNorm run in training mode: wrong metrics, and BatchNorm running "
            "statistics are updated with evaluation data"
        )
        graph_effect = (
            "every forward records an autograd graph: the evaluation holds activations it does "
            "not need (more memory than inference, slower)"
        )
        if missing_eval and missing_no_grad:
            what = f"without `{model}.eval()` and without `torch.no_grad()`"
            help = (
                f"{mode_effect}; and {graph_effect}. Call `{model}.eval()` before the loop and "
                "run it under `torch.no_grad()` (or `torch.inference_mode()`)."
            )
        elif missing_eval:
            what = f"without `{model}.eval()`"
            help = f"{mode_effect}. Call `{model}.eval()` before the loop."
        else:
            what = "without `torch.no_grad()`"
            help = (
                f"{graph_effect}. Run the loop under `torch.no_grad()` (or "
                "`torch.inference_mode()`)."
            )
        message = f"evaluation loop calls `{model}` {what}"
        fix = self._eval_fix(loop, model, function, missing_eval, missing_no_grad)
        # A function only other files call may be called under their `torch.no_grad()`.
        grad_from = self._called_only_elsewhere(function) if missing_no_grad else None
        if imported_class is None and grad_from is None:
            self.report(model_call, message, help=help, fix=fix)
            return
        key = f"eval:{len(self.candidates)}"
        self.deferred[key] = {
            "class": imported_class,
            # the model may also come from a project function that returns it in eval mode
            "mode": "eval",
            # If the class turns out mode-free, what is left is the missing no_grad().
            "message": (
                f"evaluation loop calls `{model}` without `torch.no_grad()`"
                if missing_no_grad
                else None
            ),
            "help": (
                f"{graph_effect}. Run the loop under `torch.no_grad()` (or "
                "`torch.inference_mode()`)."
            ),
            # If every call from the files importing the function turns the graph off, what
            # is left is the missing eval().
            "grad_from": grad_from,
            "eval_message": (
                f"evaluation loop calls `{model}` without `{model}.eval()`"
                if missing_eval and imported_class is None
                else None
            ),
            "eval_help": f"{mode_effect}. Call `{model}.eval()` before the loop.",
        }
        self.candidate(key, model_call, message, help=help, fix=fix)

    def _called_only_elsewhere(self, function) -> Optional[str]:
        """The name of a module-level function that no code of its own file calls or names
        (other files import and call it): whether its loop runs with autograd off is decided
        where it is called, which the project phase reads."""
        if function is None or function.decorators:
            return None
        if type(self.ctx.parent(function)) is not cst.Module:
            return None  # a method or a nested function: its callers cannot be named
        if self.steps.loops.callgraph.named_in_file(function):
            return None  # called or handed on in its own file: that file decides
        return function.name.value

    def _imported_origin(self, model: str, at, function) -> Optional[str]:
        """The one imported class or function that builds the model, here or, for a parameter,
        at every same-file call site (`model = get_model(args, train=False)` in the `__main__`
        block that calls `evaluate(model)`): the project phase asks its file about it."""
        found = imported_model_class(self.steps, model, at)
        if found is not None or function is None or "." in model:
            return found
        if not self._from_outside(model, function):
            return None
        origins = {
            imported_model_class(self.steps, self._passed_as(call, function, model), call)
            for call in self.steps.callers(function)
        }
        if len(origins) == 1:
            return origins.pop()
        return None

    def _plain_function(self, model: str, at, function, depth: int = 3) -> bool:
        """The evaluated "model" is a `def` or lambda: here, or passed in by every same-file
        caller of the evaluation function (through up to `depth` callers)."""
        if plain_function(self.steps, model, at):
            return True
        if function is None or depth <= 0 or "." in model:
            return False
        if not self._from_outside(model, function):
            return False
        callers = self.steps.callers(function)
        return bool(callers) and all(
            self._plain_function(
                self._passed_as(call, function, model),
                call,
                self.steps.scopes.enclosing_function(call),
                depth - 1,
            )
            for call in callers
        )

    def _from_outside(self, model: str, function: cst.FunctionDef) -> bool:
        """Is the model a parameter of the function, or an attribute of `self`?"""
        root = model.split(".")[0]
        if root in ("self", "cls"):
            return True
        params = function.params
        every = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
        return any(p.name.value == root for p in every)

    def _eval_before(self, loop, model: str, function, follow_aliases: bool = True) -> bool:
        """`model.eval()` in the function before the loop, or inside the loop; also on a name
        the model is an alias of (`srgan_generator.eval()`, then `model = srgan_generator`)."""
        if follow_aliases and "." not in model:
            for alias in aliases(model, loop, self.steps.scopes, self.steps.names) - {model}:
                if self._eval_before(loop, alias, function, follow_aliases=False):
                    return True
        index = self.ctx.tree.index
        start = index[function] if function is not None else 0
        end = _last_index(self.ctx, loop)
        for call in self.ctx.nodes(cst.Call):
            at = index[call]
            if at < start or at > end:
                continue
            if self.steps.scopes.enclosing_function(call) is not function:
                continue
            event = self.steps.event(call)
            if event is not None and event.kind == "eval" and _same_module(event.receiver, model):
                return True
            if self._eval_context(call, model):
                return True
        for event in events_of(self.steps.flow(loop)):
            if event.kind == "eval" and _same_module(event.receiver, model):
                return True
        return (
            self._loaded_in_eval_mode(model, function, start, index[loop])
            or self._eval_at_construction(model, function)
            or returned_in_eval_mode(self.steps, model, loop)
        )

    def _eval_at_construction(self, model: str, function) -> bool:
        """`self.model.eval()` in the `__init__` of the method's class, and no method of the
        class turns it back (`self.model.train()`, `self.train()`): a tester object that puts
        its model in eval mode once, when it is built, evaluates in eval mode everywhere."""
        if function is None or not model.startswith("self."):
            return False
        cls = enclosing_class(self.ctx, function)
        init = own_method(cls, "__init__") if cls is not None else None
        if cls is None or init is None or init is function:
            return False
        set_in_init = False
        for node in self.ctx.tree.descendants(cls):
            event = self.steps.event(node) if type(node) is cst.Call else None
            if event is None or not _same_module(event.receiver, model):
                continue
            if event.kind == "train":
                return False
            if event.kind == "eval" and self.steps.scopes.enclosing_function(node) is init:
                set_in_init = True
        return set_in_init

    def _loaded_in_eval_mode(self, model: str, function, start: int, end: int) -> bool:
        """`model = AutoModel.from_pretrained(...)`: Hugging Face returns the model in eval mode
        (unless `.train()` is called on it before the loop)."""
        loaded = False
        for node in self.ctx.nodes(cst.Assign):
            at = self.ctx.tree.index[node]
            if at < start or at > end or self.steps.scopes.enclosing_function(node) is not function:
                continue
            value = node.value
            if (
                type(value) is cst.Call
                and type(value.func) is cst.Attribute
                and value.func.attr.value == "from_pretrained"
                and any(_same_module(dotted_name(t.target), model) for t in node.targets)
            ):
                loaded = True
        if not loaded:
            return False
        for call in self.ctx.nodes(cst.Call):
            at = self.ctx.tree.index[call]
            if start <= at <= end:
                event = self.steps.event(call)
                if (
                    event is not None
                    and event.kind == "train"
                    and _same_module(event.receiver, model)
                ):
                    return False
        return True

    def _eval_context(self, call: cst.Call, model: str) -> bool:
        """detectron2's `with inference_context(model):` (sets eval, restores train)."""
        leaf = (dotted_name(call.func) or "").split(".")[-1]
        if leaf in ("inference_context", "eval_mode", "evaluating", "eval_context"):
            return True
        return False

    def _callers_set_eval(self, function, model: str, depth: int = 2) -> bool:
        if function is None or depth <= 0:
            return False
        callers = self.steps.callers(function)
        if not callers:
            return False
        for call in callers:
            passed = self._passed_as(call, function, model)
            caller = self.steps.scopes.enclosing_function(call)
            if self._eval_before(call, passed, caller):
                continue
            if self._callers_set_eval(caller, passed, depth - 1):
                continue
            return False
        return True

    def _passed_as(self, call: cst.Call, function: cst.FunctionDef, model: str) -> str:
        """The caller's name for the callee's `model` (a parameter, or a global/attribute)."""
        root, _, rest = model.partition(".")
        params = positional_params(function)
        if (
            params
            and params[0].name.value in ("self", "cls")
            and type(call.func) is cst.Attribute
        ):
            params = params[1:]
        position = None
        for i, param in enumerate(params):
            if param.name.value == root:
                position = i
        if position is None:
            return model
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == root:
                text = dotted_name(arg.value)
                return (f"{text}.{rest}" if rest else text) if text else model
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position < len(positional):
            text = dotted_name(positional[position].value)
            if text:
                return f"{text}.{rest}" if rest else text
        return model

    def _grad_off(self, model_call: cst.Call, model: str, loop) -> bool:
        if self.steps.grad_disabled(model_call):
            return True
        # Frozen parameters record no graph: `model.requires_grad_(False)`, or every
        # `p.requires_grad = False` over `model.parameters()`, before the loop.
        return self.steps.frozen_at(model, loop, _covers)

    def _eval_fix(
        self, loop, model, function, missing_eval, missing_no_grad
    ) -> Optional[PendingFix]:
        edits = []
        notes = []
        if missing_eval:
            edits.append(self.ctx.line_before(loop, f"{model}.eval()"))
            notes.append(f"`{model}.eval()` before the loop")
        if missing_no_grad:
            decorator = self._no_grad_decorator(function)
            if decorator is None:
                if not edits:
                    return None
            else:
                edits.append(decorator)
                notes.append("`@torch.no_grad()` on the function")
        return self.unsafe_fix("Add " + " and ".join(notes), *edits)

    def _no_grad_decorator(self, function):
        if function is None or not self._torch_imported():
            return None
        for node in self.ctx.tree.descendants(function):
            if type(node) is cst.Call and (
                self.steps.is_backward(node) or self.steps.is_autograd_grad(node)
            ):
                return None
        if self.steps.scopes.enclosing_function(function) is not None:
            return None
        if function.decorators:
            return self.ctx.line_before(function.decorators[0], "@torch.no_grad()")
        return self.ctx.line_before(function, "@torch.no_grad()")

    def _torch_imported(self) -> bool:
        for binding in self.steps.scopes.module_scope.bindings.get("torch", []):
            if binding.kind == "import" and binding.qualname == "torch":
                return True
        return False

    # -- restoring train mode -----------------------------------------------------------------

    def _check_restore(self) -> None:
        steps = self.steps
        # Only an eval event (`x.eval()`, `x.train(False)`) can be left unrestored: without
        # such a call in the file there is nothing to follow through the loops.
        if not any(
            type(call.func) is cst.Attribute and call.func.attr.value in ("eval", "train")
            for call in self.ctx.nodes(cst.Call)
        ):
            return
        trained = steps.trained_models()
        if not trained:
            return
        self._held: Dict[Tuple[str, str, cst.CSTNode], bool] = {}
        left_in_eval: List[Tuple[str, Event]] = []
        for loop in steps.all_loops():
            if steps.enclosing_loops(loop) or self.steps.library_owned(loop):
                continue
            flow = steps.flow(loop)
            if not steps.has_backward(loop):
                continue
            found: List[Tuple[str, Event]] = []
            chosen = (
                self._eval_chosen_for_training(flow)
                | self._eval_chosen_by_branch(flow)
                | self._eval_with_a_freeze(loop, flow)
            )
            restored = self._eval_undone_under_the_same_guard(flow) | self._eval_undone_next_time(
                loop, flow
            )

            # A state is the set of (module, its eval event, how far it got): the modules left
            # in eval mode, whether a forward has run one of them since (_RAN), and whether a
            # backward has then left gradients in its parameters (_GRAD). The mode matters when
            # the graph is recorded, so a backward is trained in eval mode only after such a
            # forward: an evaluation between a step's forward and its backward (a helper that
            # samples audio mid-step) changes nothing if the next step resets the mode first.
            # Where the loop steps an optimizer, the module is trained only by a step of one
            # that holds its parameters: a discriminator kept in eval mode for the generator's
            # loss, or a decoder frozen while a latent code is fitted, is not updated there.
            steps_here = any(e.kind == "step" for e in events_of(flow))

            def transfer(event: Event, state):
                if event.kind == "eval" and event.receiver is not None and event in chosen:
                    # The training helper picks eval mode itself before its steps (frozen
                    # BatchNorm in linear probing): whatever mode came before does not matter.
                    receiver = _strip(event.receiver)
                    return (frozenset(s for s in state if not _same_module(s[0], receiver)),)
                if event.kind == "eval" and event.receiver is not None and event not in restored:
                    if steps.made_in_helper(event):
                        return (state,)  # the helper's own model, gone when it returns
                    receiver = _strip(event.receiver)
                    if receiver in trained or _strip(_unparam(receiver)) in trained:
                        return (state | {(receiver, event, _SET)},)
                    return (state,)
                if event.kind == "train" and event.receiver is not None:
                    # `d_net.train()` with `d_net = Distiller(t_net, s_net)`: the distiller's
                    # mode switch reaches the student it holds
                    receiver = _strip(event.receiver)
                    return (
                        frozenset(
                            s for s in state
                            if not _same_module(s[0], receiver)
                            and not self._holds(receiver, s[0], event.node)
                        ),
                    )
                if event.kind == "fresh" and event.receiver is not None:
                    # `model = build_model(args)` at the top of each seed: a new module, in
                    # train mode, replaces the one left in eval mode
                    receiver = _strip(event.receiver)
                    return (frozenset(s for s in state if not _covers(receiver, s[0])),)
                if event.kind == "in_train_mode" and event.receiver is not None:
                    # `if model.training: loss.backward()` after `model.eval()`: this branch
                    # does not run on this path
                    guard = _strip(event.receiver)
                    if any(_runs_module(r, guard) for r, _, _ in state):
                        return ()
                    return (state,)
                if event.kind == "forward":
                    ran = frozenset(
                        (r, e, _RAN)
                        for r, e, stage in state
                        if stage == _SET and any(_runs_module(run, r) for run in event.runs)
                    )
                    if ran:
                        kept = frozenset(s for s in state if (s[0], s[1], _RAN) not in ran)
                        return (kept | ran,)
                    return (state,)
                if event.kind == "backward":
                    if not steps_here:
                        found.extend((r, e) for r, e, stage in state if stage != _SET)
                        return (state,)
                    return (frozenset((r, e, _GRAD if s == _RAN else s) for r, e, s in state),)
                if event.kind in ("step", "zero") and event.receiver is not None:
                    held = steps.stepped_modules(event.receiver, event.site)

                    def holds(module: str) -> bool:
                        return held is None or any(_same_module(m, module) for m in held)

                    if event.kind == "step":
                        found.extend((r, e) for r, e, s in state if s == _GRAD and holds(r))
                    elif held is not None:  # the gradients of the modules it holds are cleared
                        return (
                            frozenset((r, e, _RAN if s == _GRAD and holds(r) else s)
                                      for r, e, s in state),
                        )
                return (state,)

            run(Repeat(flow, loop), {frozenset()}, transfer)
            left_in_eval.extend(found)
        # One cause, one finding: an epoch helper whose own batch loop validates mid-epoch is
        # reported in that loop, at the validation call; the loop that calls the helper reaches
        # the same `eval()` through one more call and does not report it again.
        nearest: Dict[cst.CSTNode, int] = {}
        for _, event in left_in_eval:
            nearest[event.node] = min(nearest.get(event.node, len(event.via)), len(event.via))
        reported: Set[cst.CSTNode] = set()
        # The states are sets: when one site leaves several modules in eval mode, the one named
        # is chosen by name, not by the order a set happened to hand them over in.
        index = self.ctx.tree.index
        left_in_eval.sort(key=lambda pair: (index.get(pair[1].site, -1), pair[0]))
        for receiver, event in left_in_eval:
            if event.site in reported or len(event.via) > nearest[event.node]:
                continue
            reported.add(event.site)
            if mode_free_model(self.steps, receiver, event.site):
                continue  # no dropout/BatchNorm/...: training in eval mode changes nothing
            self._report_restore(
                receiver, event, imported_model_class(self.steps, receiver, event.site)
            )

    def _holds(self, holder: str, module: str, at: cst.CSTNode) -> bool:
        key = (holder, module, at)
        if key not in self._held:
            self._held[key] = holds_module(
                self.steps, _strip(_unparam(holder)), _strip(_unparam(module)), at
            )
        return self._held[key]

    def _eval_chosen_for_training(self, flow) -> Set[Event]:
        """`model.eval()` written in a helper before a backward in the same helper: MoCo's
        linear-classification `train()` sets eval mode on purpose so BatchNorm statistics of the
        frozen backbone stay fixed. (A helper that evaluates *after* its training steps is the
        bug this rule is about, so the order inside the helper matters.)"""
        events = list(events_of(flow))
        index = self.ctx.tree.index
        backward_at: Dict[cst.CSTNode, List[int]] = {}
        for event in events:
            if event.kind == "backward" and event.via:
                backward_at.setdefault(event.via[-1], []).append(index.get(event.node, -1))
        chosen: Set[Event] = set()
        for event in events:
            if event.kind != "eval" or not event.via:
                continue
            where = index.get(event.node, -1)
            if any(where < at for at in backward_at.get(event.via[-1], ())):
                chosen.add(event)
        return chosen

    def _eval_undone_under_the_same_guard(self, flow) -> Set[Event]:
        """`if self.decoder is not None: self.decoder.eval()` ... `if self.decoder is not None:
        self.decoder.train()` at the end of the same validation helper (or further down the
        loop's own body, `else: net.eval()` ... `else: net.requires_grad_(True).train()`): the
        `train()` runs whenever the `eval()` did, so the module is left as it was found. So does a
        helper that saves the mode before its `eval()` and puts it back at its end (`training =
        self.model.training` ... `if training: self.model.train()`). A `raise` between them
        ends the run as well (`raise ValueError("loss is nan")` inside the validation)."""
        events = list(events_of(flow))
        conditions: Conditions = self.ctx.analysis(Conditions)
        index = self.ctx.tree.index
        undone: Set[Event] = set()
        for event in events:
            if event.kind != "eval" or event.receiver is None:
                continue
            for other in events:
                if not (
                    other.kind in ("train", "restore")
                    # the same call of the helper, or both written in the loop itself
                    and (other.site is event.site or not event.via)
                    and other.via == event.via
                    and other.receiver is not None
                    and _same_module(other.receiver, event.receiver)
                ):
                    continue
                after = other.node
                if other.kind == "restore":
                    saved = self.steps.saved_mode(cast(cst.Call, other.node))
                    if saved is None or index.get(saved[0], -1) > index.get(event.node, -1):
                        continue  # the mode was saved after the eval(): eval is put back
                    after = saved[1]
                if conditions.runs_whenever(event.node, after, past_raise=True):
                    undone.add(event)
                    break
        return undone

    def _eval_undone_next_time(self, loop, flow) -> Set[Event]:
        """`if args.train_backbone: backbone.train()` at the top of each epoch and `if
        args.train_backbone: backbone.eval()` before its validation: the next epoch's `train()`
        runs whenever the `eval()` did, before any training step of that epoch."""
        events = list(events_of(flow))
        conditions: Conditions = self.ctx.analysis(Conditions)
        index = self.ctx.tree.index
        backward_at = [index.get(e.site, -1) for e in events if e.kind == "backward"]
        undone: Set[Event] = set()
        for event in events:
            if event.kind != "eval" or event.via or event.receiver is None:
                continue
            for other in events:
                if (
                    other.kind == "train"
                    and not other.via
                    and _same_module(other.receiver, event.receiver)
                    and all(index.get(other.node, -1) < at for at in backward_at)
                    and conditions.runs_again_before(event.node, other.node, loop)
                ):
                    undone.add(event)
                    break
        return undone

    def _eval_with_a_freeze(self, loop, flow) -> Set[Event]:
        """`text_encoder.train(False)` next to `text_encoder.requires_grad_(False)` when a
        fine-tuning script stops training the text encoder: the module is frozen, not
        evaluated, and a module nothing unfreezes is not trained again whatever its mode. The
        freeze must run whenever the `eval()` does (the same guards, nothing leaving between)."""
        events = list(events_of(flow))
        conditions: Conditions = self.ctx.analysis(Conditions)
        frozen = self.steps.frozen_modules()
        chosen: Set[Event] = set()
        for event in events:
            if event.kind != "eval" or event.receiver is None:
                continue
            call = event.node
            if type(call) is not cst.Call or type(call.func) is not cst.Attribute:
                continue
            module = dotted_name(module_root(call.func.value))
            if module is None or self.steps.unfrozen_after(module, loop):
                continue
            for text, sites in frozen.items():
                if text != module:
                    continue
                if any(
                    conditions.runs_whenever(event.node, site)
                    or conditions.runs_whenever(site, event.node)
                    for site in sites
                ):
                    chosen.add(event)
        return chosen

    def _eval_chosen_by_branch(self, flow) -> Set[Event]:
        """`if phase == "train": model.train() else: model.eval()`: an `eval()` in one branch
        of an `if` whose other branch calls `train()` on the same module is a deliberate choice
        of mode (phase loops, linear probing with frozen BatchNorm), not a forgotten one; also
        when the `eval()` sits deeper in that branch (`else: if (epoch + 1) % 10 == 0:
        net.eval() else: continue`, a phase loop that validates every tenth epoch)."""
        events = list(events_of(flow))
        chosen: Set[Event] = set()
        for event in events:
            if event.kind != "eval" or event.receiver is None:
                continue
            for branch_if, side in self._enclosing_branches(event.node):
                after = {id(s) for s in self._after_exiting_body(branch_if, side)}
                if any(
                    other.kind == "train"
                    and _same_module(other.receiver, event.receiver)
                    and (
                        self._branch_of(other.node, branch_if) not in (None, side)
                        or any(id(a) in after for a in self.ctx.ancestors(other.node))
                    )
                    for other in events
                ):
                    chosen.add(event)
                    break
        return chosen

    def _after_exiting_body(self, branch_if, side) -> List[cst.CSTNode]:
        """`if self._cur_task > 0: self._network.eval(); return` then `self._network.train()`:
        when the `if` has no `else` and its body ends by leaving the block, the statements after
        it in the same block are its other arm. Empty otherwise."""
        if type(branch_if) is not cst.If or branch_if.orelse is not None:
            return []
        if side is not branch_if.body or type(side) is not cst.IndentedBlock or not side.body:
            return []
        last = side.body[-1]
        if type(last) is not cst.SimpleStatementLine or not any(
            type(small) in (cst.Return, cst.Raise, cst.Continue, cst.Break) for small in last.body
        ):
            return []
        block = self.ctx.parent(branch_if)
        statements = list(getattr(block, "body", ()))
        if not any(statement is branch_if for statement in statements):
            return []
        index = next(i for i, statement in enumerate(statements) if statement is branch_if)
        return statements[index + 1:]

    def _branch_of(self, node, top) -> Optional[cst.CSTNode]:
        """Which branch of the if/elif chain `top` holds `node` (None: it is not inside)."""
        return next((side for chain, side in self._enclosing_branches(node) if chain is top), None)

    def _enclosing_branches(self, node) -> List[Tuple[cst.CSTNode, cst.CSTNode]]:
        """The if/elif chains around `node` within its loop body or function, innermost first:
        the outermost `if` of each chain, with the branch that holds `node` (the `if`'s body,
        an `elif`'s body, or the `else`)."""
        found: List[Tuple[cst.CSTNode, cst.CSTNode]] = []
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.For, cst.While):
                break
            if type(ancestor) is cst.If and (child is ancestor.body or child is ancestor.orelse):
                side: cst.CSTNode = ancestor.body
                if child is not ancestor.body:
                    side = cast(cst.CSTNode, child)  # the `elif` (its body below) or `else`
                chain: cst.CSTNode = ancestor
                parent = self.ctx.parent(chain)
                while type(parent) is cst.If and parent.orelse is chain:
                    chain, parent = parent, self.ctx.parent(parent)
                if all(known is not chain for known, _ in found):
                    found.append((chain, side.body if isinstance(side, cst.If) else side))
            child = ancestor
        return found

    def _report_restore(
        self, receiver: str, event: Event, imported_class: Optional[str] = None
    ) -> None:
        shown = receiver if not receiver.startswith("<param:") else "the model"
        if event.via:
            call = event.site
            callee = dotted_name(call.func) if type(call) is cst.Call else None
            where = f"`{callee or 'this call'}(...)` leaves `{shown}` in eval mode"
        else:
            where = f"`{shown}.eval()` is not undone"
        message = f"{where} and the loop trains it again without `{shown}.train()`"
        if len(message) > 100:  # long attribute chains: the headline names the module once
            message = f"{where}; the loop trains it on without `train()`"
        help = (
            "later training steps run with dropout off and BatchNorm statistics frozen; "
            f"nothing raises, the results are silently worse. Call `{shown}.train()` after "
            "the evaluation (or at the top of each training epoch)."
        )
        fix = self._restore_fix(receiver, event)
        if imported_class is None:
            self.report(event.site, message, help=help, fix=fix)
            return
        key = f"restore:{len(self.candidates)}"
        self.deferred[key] = {"class": imported_class, "message": None, "help": None}
        self.candidate(key, event.site, message, help=help, fix=fix)

    # -- the project phase: a model class defined in another file -----------------------------

    def facts(self) -> Optional[Dict[str, object]]:
        facts = class_question_facts(
            self.ctx,
            self.deferred,  # type: ignore[arg-type]
            {
                "mode_free_classes": mode_free_classes(self.steps),
                "eval_mode_returners": eval_mode_returners(self.steps),
            },
        )
        # How this file calls what it imports (`evaluate(model, loader)` under `with
        # torch.no_grad():`), for the file that defines the function and leaves it to them.
        calls, named = self.steps.loops.callgraph.imported_calls()
        if calls or named:
            facts = facts if facts is not None else {}
            grad_off: Dict[str, List[bool]] = {}
            for leaf, call in calls:
                grad_off.setdefault(leaf, []).append(self.steps.grad_disabled(call))
            facts["imported_calls_grad_off"] = {"calls": grad_off, "named": named}
        return facts

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        for hierarchy, display, path, key, entry in deferred_candidates(project, cls.code):
            if entry is None:
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    yield diagnostic
                continue
            imported_class = entry.get("class")
            # A class or callers in files flake8 does not hand over are unknown: no claim.
            eval_settled = imported_class is not None and (
                hierarchy.listed_class(imported_class, path, "mode_free_classes")
                or hierarchy.unread_class(imported_class, path)
                or (
                    entry.get("mode") == "eval"
                    and _returns_eval_mode(hierarchy, imported_class, path)
                )
            )
            grad_from = entry.get("grad_from")
            grad_settled = grad_from is not None and (
                not project.complete or _callers_turn_grad_off(project, cls.code, path, grad_from)
            )
            if not eval_settled and not grad_settled:
                diagnostic = project.candidate(display, cls.code, key)
            elif eval_settled and grad_settled:
                diagnostic = None
            else:
                # What is left: the missing no_grad() (the class is mode-free) or the missing
                # eval() (the callers turn the graph off).
                message, help = (
                    (entry["message"], entry["help"])
                    if eval_settled
                    else (entry.get("eval_message"), entry.get("eval_help"))
                )
                diagnostic = (
                    project.candidate(
                        display, cls.code, key, message=message, help=help, drop_fix=True
                    )
                    if message is not None
                    else None
                )
            if diagnostic is not None:
                yield diagnostic

    def _restore_fix(self, receiver: str, event: Event) -> Optional[PendingFix]:
        if not event.via or receiver.startswith("<param:"):
            return None
        statement = self.ctx.statement_of(event.site)
        line = self.ctx.parent(statement) if statement is not None else None
        if type(line) is not cst.SimpleStatementLine or len(line.body) != 1:
            return None
        if type(statement) in (cst.Return, cst.Break, cst.Continue, cst.Raise):
            return None
        return self.unsafe_fix(
            f"Return to training mode after the evaluation: `{receiver}.train()`",
            self.ctx.line_after(line, f"{receiver}.train()"),
        )


def _callers_turn_grad_off(project, code: str, path: Path, name: str) -> bool:
    """Does every call of function `name` (defined in `path`, which never calls it) from the
    files that import it, or its module, run with autograd off? At least one such call must be
    seen, and none may be hidden: an importer that hands the function on (a callback) or that
    holds no facts of this rule may call it any way."""
    seen = 0
    for importer in sorted(project.importers_of(name, path)):
        facts = project.facts_of(importer, code)
        if not isinstance(facts, dict):
            return False  # not read by this rule: it may call the function any way
        uses = facts.get("imported_calls_grad_off")
        if uses is None:
            continue  # it calls nothing it imports
        if name in uses["named"]:
            return False
        grad_off = uses["calls"].get(name, [])
        if not all(grad_off):
            return False
        seen += len(grad_off)
    return seen > 0


def _returns_eval_mode(hierarchy: Hierarchy, qualname: str, importer) -> bool:
    """Is `qualname` (as imported in `importer`) a function of the project whose file found
    that it returns its model in eval mode (`eval_mode_returners`)?"""
    module, _, name = qualname.rpartition(".")
    if not module:
        return False
    found = hierarchy.module_file(module, Path(importer))
    if found is None:
        return False
    facts = hierarchy.facts_at(found) or {}
    return name in facts.get("eval_mode_returners", ())


# How far a module left in eval mode got: set, run by a forward, given gradients by a backward.
_SET, _RAN, _GRAD = 0, 1, 2


def _strip(text: str) -> str:
    return text[: -len(".module")] if text.endswith(".module") else text


def _unparam(text: str) -> str:
    if text.startswith("<param:") and text.endswith(">"):
        return text[len("<param:") : -1]
    return text


def _runs_module(run: str, module: str) -> bool:
    """Does a forward of `run` run `module`: the module itself, a wrapper's `.module`, or a
    module that holds it (`self.model(x)` runs `self.model.backbone`)? Not one of its
    submodules (`model.head(x)` leaves the rest of `model` unrun)."""
    run, module = _strip(run), _strip(_unparam(module))
    return run == module or module.startswith(run + ".") or _strip(_unparam(run)) == module


def _same_module(a: Optional[str], b: Optional[str]) -> bool:
    if a is None or b is None:
        return False
    a, b = _strip(a), _strip(b)
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _covers(frozen: str, model: str) -> bool:
    """Is `model` the module `frozen` or a part of it? Freezing `vgg.features` leaves the
    classifier head of `vgg` recording a graph; freezing `vgg` freezes its parts too."""
    frozen, model = _strip(frozen), _strip(model)
    return model == frozen or model.startswith(frozen + ".")


def _last_index(ctx, node) -> int:
    index = ctx.tree.index
    last = index[node]
    for child in ctx.tree.descendants(node):
        last = max(last, index[child])
    return last
