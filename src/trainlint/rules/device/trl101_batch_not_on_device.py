"""TRL101 batch-not-on-device."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.calls import keyword
from ...analysis.base.nodes import own_method, positional_params
from ...analysis.device.expressions import Devices
from ...analysis.device.host_side import HostSide
from ...analysis.device.moves import Moves, UNKNOWN_PLACEMENT
from ...analysis.loop.batchflow import BatchFlow
from ...analysis.loop.batchvalues import Element, Flow, Unmoved
from ...analysis.parallel.parallel import Parallel
from ...analysis.project.hierarchy import (
    ClassRef,
    Family,
    Hierarchy,
    deferred_candidates,
    module_file,
    resolution_facts,
)
from ...analysis.project.modules import Modules, attributes_from_init
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, PendingReport, Rule

_SAME_DEVICE = '"Expected all tensors to be on the same device"'


class BatchNotOnDevice(Rule):
    """## What it does
    Reports a tensor from a DataLoader batch that meets the device without ever being moved
    there. A typical case: `for images, labels in train_loader:` moves `images` with
    `.to(device)` but hands `labels` to `criterion(logits, labels)` as it came from the loader.

    Batch elements are followed from the loop (`for x, y in loader`, `enumerate(...)`, `tqdm(...)`,
    a dict or list of loaders such as `for inputs, labels in dataloaders[phase]`,
    nested and starred unpacking, `batch["labels"]`, `batch[2]`, `batch.labels`,
    `x, y = batch`, `next(iter(loader))`) through the names derived from them, and reported at
    their first use next to the device, also inside a function of the same file the loop hands
    them to (`train_step(model, images, labels)`):
    - an argument of a model that was moved (`model.to(device)`, `.cuda()`, a model passed into a
      function from a call site that moved it, or handed before the use to a function of the
      file that moves that parameter, `place_on(model, device)`: `Module.to` works in place;
      a function's parameter named `model` is its own variable, so a `train(model, ...)` that
      moves it says nothing about a check cell that ran the model on a CPU batch before the
      cell calling `train`), or of a callee named like a model (`model`,
      `net`, `self.encoder`, ...) while the loop moves other items of the same batch (a
      move of the model's own output, `self.loss(output.cuda(), label)`, is not one: it says
      nothing about where the model or the batch is);
    - a loss: a criterion object (named like one, or bound to an instance of a `...Loss` class
      such as `dice = smp.losses.DiceLoss(...)`), `nn.XxxLoss()(...)` or `F.*loss*` whose other
      argument is a model output or a moved tensor (not one built only from a class a call
      returns, `self.loss = get_class(conf.loss_class)(...)`: a class picked while the script
      runs, whose `forward` may take dicts and place what it reads; `getattr(nn, name)()` is
      still a torch criterion);
    - arithmetic or a comparison with a model output, `torch.cat`/`torch.stack` with one (not
      with one brought back, `generator(L.to(device)).detach().to("cpu")`: a host tensor).

    Moves are followed per path. An item moved on any path counts as moved, except where the
    moves sit in the arms of one `if`/`elif`/`else` that exclude each other:
    `if args.gpu is not None: images = images.cuda(args.gpu)` / `elif use_cuda: target =
    target.cuda()` moves `images` on one branch and `target` on the other, so whichever runs
    leaves one item on the CPU. Each combination of the conditions around the moves is then
    walked on its own, and the first branch's unmoved item is reported when every branch that
    moves part of the batch leaves another part on the CPU where it meets the device (inputs of a
    model that may be a DataParallel wrapper are not counted as failing; a branch that leaves the
    iteration with `continue`/`break`/`return`/`raise` before that is no path to it). A discarded
    `labels.to(device)` (its result not assigned) moves nothing: a tensor's `.to` returns a copy
    (a module's `.to` moves it in place and is a move). A use on the side of a CUDA flag where
    the script runs without CUDA (the `else` of `if torch.cuda.is_available():`, of `if CUDA:`
    with `CUDA = torch.cuda.is_available()`, or of `if args.cuda:` with `args.cuda = not
    args.no_cuda and torch.cuda.is_available()`) is on the CPU run, where nothing left the CPU.

    ## Why is this bad
    CUDA kernels need all their operands on one device. The loop runs until the first such use
    and then stops with

        RuntimeError: Expected all tensors to be on the same device, but found at least two
        devices, cuda:0 and cpu!

    (or, inside a convolution or linear layer, "Input type (torch.FloatTensor) and weight type
    (torch.cuda.FloatTensor) should be the same"). The extra tensors of a batch (tags, masks,
    box targets) are the ones that get forgotten: an image-tagging project's finetuning loop moved
    `image` but passed `image_tag` and `parse_tag` from the same batch straight into
    `model(image, caption, image_tag, parse_tag, ...)`, in two training functions and in the
    pretraining script.

    Inputs handed straight to a `DataParallel`, `FullyShardedDataParallel` or
    `DistributedDataParallel(device_ids=[...])` wrapper are moved by the wrapper, so they are
    not reported when only the wrapper can reach the call; they are when the unwrapped model can
    too (`if args.distributed: model = DDP(model, ...)` leaves the single-GPU path unwrapped).
    A loss module wrapped in DataParallel on some path (`criterion = nn.DataParallel(criterion)`)
    scatters its CPU labels too, so labels beside device features are not reported there.

    Not reported: elements moved by a helper (`to_device(batch, device)`, `send_to_device`,
    `move_to_device`, `batch_to_device`, `recursive_to`, `move_to`, any function of the same file
    whose body moves its argument or maps a mover over it, and the names listed in the
    `device-movers` option), by a comprehension (`{k: v.to(device) for k, v in batch.items()}`),
    by `batch = batch.to(device)`, items replaced one by one with what an imported helper
    returns (`for k, v in batch.items(): batch[k] = to_var(v)`: the helper may move them;
    `batch[k] = v.long()` still leaves them on the CPU), or by the loader itself (a collate_fn or dataset that moves,
    a prefetcher, a loader given `device=` such as legacy torchtext's `BucketIterator.splits(...,
    device=device)`, and a legacy torchtext iterator given no `device` at all, whose batches
    were built on the current GPU before torchtext 0.3 and on the CPU after: the code does not
    say which, also when a same-file caller passes it to the function that loops, or data
    moved before it is batched: `TensorDataset(x.to(device), y.to(device))`, or a dataset built
    from what a same-file helper returns moved, a same-file generator that yields slices of a
    tensor it built with `torch.tensor(..., device=device)`, and a producer of the batches
    handed the device the file moves things to: `d2l.data_iter_consecutive(corpus, bs, steps,
    device)`, `MyDataset(root, device)`, or a fastai loader, which moves every batch to the GPU
    itself: `MixUpLoader(data.trn_dl)` with `data = ImageClassifierData.from_paths(...)`, or a
    Hugging Face dataset formatted onto the device, `encoded.set_format(type="torch",
    device="cuda")`); a call in the `else` of `if isinstance(net,
    nn.Module):` (there `net` is a plain function, a from-scratch model on the CPU), and a
    model of unknown placement whose only evidence is a move of another item on a branch that
    excludes the call (`if use_gpu: images = images.cuda() ... else: model(images)`); values
    sent to a never-moved item's own device (`grad.to(imgs.device)` stays with `imgs` on the
    CPU, also when bound to a name, `std = self.std.to(inputs.device)`, or made there,
    `torch.tensor(norm.std, device=img.device)`, in a helper the item is handed to); items
    "moved" by a helper of the file named like a mover that hands its argument back untouched
    (a simulated GPU manager's `to_device` in a NumPy course trainer: nothing is on a device);
    items that are not tensors (paths, ids, captions, lengths, also written as one word,
    `seqlength`, which `pack_padded_sequence` wants on the CPU, or names used as text); a loop
    that moves no item of its batch, iterating a loader nothing in the file makes
    (a parameter no call of the file passes a loader for, an imported loader, what an imported or
    unknown function returns: `for x, y in loaders["test"]` with `loaders =
    build_loaders(...)` from the project): such a loop beside a model on the device fails on
    its first batch, which whoever ran it would have seen, or its loader delivers batches already
    on the device, and the file cannot tell which (a loader the file makes with `DataLoader(...)`
    or a class or function of its own, also through a wrapper class, `MixUpLoader(DataLoader(...),
    0.4)`, or that a call of the file passes in, is followed; so is a loop that moves some items
    and leaves others; a torch DataLoader the file makes over a dataset that a class or
    function of another project file builds, `DataLoader(PriceWindows("msft"))`, without worker
    processes, is left to the project phase, which reports only when that code moves nothing:
    a dataset may build its items on the GPU when it is made); an item the loop takes tensors out of, handed to a model whole (a DGL graph batch
    whose `batch_graphs.ndata["feat"]` is moved: an object holding tensors, not a tensor);
    labels compared only after `.cpu()`/`.item()`/`.numpy()` of the output;
    an item indexed by integers in arithmetic or a comparison, `pred[j] == labels[j]` with `j`
    from `range(...)` or the counter of `enumerate(...)`, or `labels[0]` (indexed down to one
    element it is a zero-dim tensor, which PyTorch lets meet CUDA tensors like a Python number;
    `labels[mask]` keeps a dimension, also with `mask` from `enumerate(masks)`); a whole batch
    handed over with `model(**data)` or `model(data)` after the loop moved items of it by key
    (`data["pixel_values"] = data["pixel_values"].to(device)`: which other keys a collator's
    or dataset's dict holds, and which the model reads, is not visible, while a keyed item
    passed on unmoved is still reported); an item
    handed to a method through an object (`trainer.detector.predict(image)`, `agent.act(state)`):
    from outside its class such a call runs a submodule only when a class of the file assigns
    that attribute a network (`self.encoder = nn.Sequential(...)`, so `model.encoder(images)` is
    followed), and a method may prepare and move its input itself; an item handed to a model
    whose class, defined in the same file, moves that argument in its own `forward` (`x =
    x.to("cuda")` at its top, or `ids, x, y = batch` then `x = x.to(gpu)`: the model places
    what it gets; the model is followed through other names, `model = model_or_path` to what
    the file's calls pass for it; also through a method or a
    submodule of a class of that file, `self.encoder(sentences)` whose embedding tokenises the
    strings and moves the tensor it builds, while a mask that joins the moved value only after
    the move is still reported), never reads it (`forward(self, x, lengths=None)` that
    ignores the lengths: a value nobody reads meets nothing), or uses it only on the host
    (lengths it packs a sequence with, `pack_padded_sequence(x, lengths)`, which wants them on
    the CPU, or turns into Python values, `lengths.clamp(max=t).cpu()`, `lens.tolist()`, also
    through a submodule of a class of the same file, `self.encoder(x, lengths)`), or whose class a lookup picks
    while the script runs (`Model = getattr(importlib.import_module(f"model.{name}"), name)`:
    a `forward` nobody can read here may place its inputs too; labels that meet its output in
    a loss are still reported), or whose class comes from another file of the project (`from
    models.nrms import NRMS`, or a star import, `from asr_model import *`, of the one module
    that defines it): the project phase reads that class's `forward`, or its nearest base's,
    and reports only when no class the model may be built from moves the argument (or uses it
    only on the host), or
    hands it to an attribute `__init__` keeps from a constructor argument that holds a
    DataParallel wrapper in every call building the model (`SegmentConsensus(8, net)` after
    `net = nn.DataParallel(net).cuda()`: the wrapper scatters the CPU clips itself);
    targets and lengths handed to a CTC loss (torch's `nn.CTCLoss` / `F.ctc_loss`, warp-ctc's
    `CTCLoss`), which take them on the CPU, also one a training function is handed by every
    call of it in the file (`train(model, loader, nn.CTCLoss())`); scripts that never move
    anything to a device; code whose device placement a framework manages
    (Lightning, Accelerate, HF Trainer, MMEngine, detectron2, ignite, DeepSpeed, default-device
    code); a loop inside a function that no cell of its notebook calls or hands on (a starter's
    training function left without the cell that runs it: nothing can import a notebook's
    function, so the loop never runs); what follows, in the loop, a statement that hands a call
    a name nothing in the file binds (an exercise's blank: `output = model(noisy_data)` under "#
    your code here" stops every iteration with NameError; what comes before it is still
    reported).

    When the batch is handed to a function imported from the project that may move it in place
    (`utils.to_cuda(batch)`), only the project phase of `trainlint check` can tell: it reads that
    function from the other file and reports only if it does not move its argument; the same
    holds for a model of a class imported from the project, and for both at once (a batch
    collated by another file's function, handed to a model of another file's class, is reported
    only when neither places the item). So does a file whose every move takes its device from
    one function of another project file (`.to(get_device())`): when that function returns only
    `"cpu"` (a GPU switch commented out), nothing of the file leaves the CPU and nothing is
    reported. Under flake8, which sees one file at
    a time, and when the other file is not part of the run, those findings are not reported
    (never a guess). Names configured with `device-movers` in
    `[tool.trainlint]` are read by `trainlint`; flake8 runs with the built-in names only.

    ## Example
    ```python
    device = torch.device("cuda")
    model = resnet50(num_classes=100).to(device)
    criterion = nn.CrossEntropyLoss()
    for images, labels in train_loader:
        images = images.to(device, non_blocking=True)
        logits = model(images)
        loss = criterion(logits, labels)  # labels are still on the CPU
    ```

    ## Use instead
    ```python
    device = torch.device("cuda")
    model = resnet50(num_classes=100).to(device)
    criterion = nn.CrossEntropyLoss()
    for images, labels in train_loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        logits = model(images)
        loss = criterion(logits, labels)
    ```

    ## Known problems
    A branch whose condition cannot be decided is assumed to be the one that runs whenever it
    moves everything: `if args.gpu is not None: images = images.cuda(args.gpu)` followed by
    `if torch.cuda.is_available(): target = target.cuda(args.gpu)` (two independent
    conditions, the ImageNet example's shape) is quiet, and so is an item moved only under an
    unrelated option (`if args.mixup: inputs = inputs.cuda()`) while the others are moved
    always, although a run without the option fails. The analysis cannot tell such an option
    from a flag that also decides where the model lives (`if args.cuda:` around every move),
    and it does not know whether two conditions are tied, so it stays quiet rather than guess.
    An item rebound on an optional branch after its move (`if args.aug: images =
    augment(images)`) is followed only as far as the helper is known: a helper of the same file
    or a library may return it on the device, so the item is unknown afterwards, not unmoved.
    `if` conditions that call something (`random.random() < p`) are taken as independent;
    conditions with the same text are taken to have the same value within one iteration.
    A loop that moves nothing of its batch, over a loader made in another file, is quiet even
    when that loader does deliver CPU batches: the file cannot show where they are, and such a
    loop fails on its first batch. So is one over a `DataLoader` the file makes around a dataset
    it is only handed (a parameter no call of the file passes a dataset for, perhaps split
    on the way by `random_split` or a helper of the file): a training utility whose callers in
    other files build that dataset from tensors already on the device. Under `trainlint check` over the whole project the loader's
    maker is not followed into the other file either.

    ## Fix safety
    The fix inserts `name = name.to(<device>)` right after the name is bound (the first line of
    the loop body, after moves already there), with the device expression the sibling moves of
    the same batch use, and `non_blocking=True` when they use it. It is offered only when exactly
    one such device expression exists. It is unsafe: the element may be something `.to()` does
    not accept (a list, a custom object), or the code may rely on it staying on the CPU.
    """

    code = "TRL101"
    name = "batch-not-on-device"
    severity = Severity.ERROR
    fix = "unsafe"
    markers = ("torch", ".to(", ".cuda(", "type_as(", "DataParallel", "device")
    options = {"device-movers": list}
    project = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._deferred: List[Tuple[Tuple[str, int], PendingReport, Optional[Dict[str, Any]]]] = []
        self._unknown_model: List[PendingReport] = []
        # candidate key -> the imported model class whose `forward` decides (project phase), or
        # {"device_only": True}: only the device function of another file decides
        self._forward_questions: Dict[str, Dict[str, Any]] = {}

    # -- the per-file phase -------------------------------------------------------------------

    def finish(self) -> None:
        flow_analysis = self.ctx.analysis(BatchFlow)
        seen: Set[cst.CSTNode] = set()
        for flow in flow_analysis.flows():
            if flow.quiet is not None:
                continue
            for finding in flow.findings:
                if finding.use in seen:
                    continue  # the same use reached from two sources (try/except StopIteration)
                seen.add(finding.use)
                self._finding(flow, finding)

    def _finding(self, flow: Flow, finding: Unmoved) -> None:
        element = finding.element
        message, help_text = self._message(flow, finding)
        fix = self._fix(flow, element)
        bound_at = flow.source.binding_statement
        assert bound_at is not None  # every BatchSource records its loop or `next()` assignment
        related: List[Tuple[cst.CSTNode, str]] = [(bound_at, "the batch is unpacked here")]
        carrier = next((e for e in element.lineage() if e.via is not None), None)
        if carrier is not None and carrier.via is not None:
            related.append((carrier.via, f"passed to this function as `{carrier.name}`"))
        first_move = next((m.call for m in flow.moves), None)
        if first_move is not None:
            related.append((first_move, "other items of the batch are moved here"))
        if finding.instead is not None:
            related.append(
                (
                    finding.instead.use,
                    f"on the other branch, `{finding.instead.element.name}` is the item left "
                    "on the CPU",
                )
            )
        helper = element.helper or flow.helper
        forward_question = None
        if finding.forward_of is not None:
            classes, argument = finding.forward_of
            forward_question = {
                "classes": classes,
                "arg": argument,
                "wrapped_init": finding.wrapped_init,
            }
        if helper is None and finding.forward_of is not None:
            # `model(images)` where `model = Net()` and `Net` comes from another file of the
            # project: its `forward` may move `images` itself. The project phase reads it.
            classes, argument = finding.forward_of
            key = f"forward{len(self._forward_questions)}"
            self._forward_questions[key] = {
                "classes": classes,
                "arg": argument,
                "unknown_model": self._model_of_unknown_placement(finding),
                "wrapped_init": finding.wrapped_init,
            }
            self.candidate(key, finding.use, message, fix=fix, related=related, help=help_text)
            return
        if helper is None and self._model_of_unknown_placement(finding):
            # `model(inputs)` where `model` comes from elsewhere (a parameter, another file)
            # and only the batch's other moves say it is on the device: it may be a
            # DataParallel / DDP(device_ids) wrapper, which moves its inputs itself. Decided
            # by the project phase: reported when no file of the project wraps a model so.
            pending = PendingReport(
                self, finding.use, None, message, self.severity, fix, tuple(related), help_text
            )
            self._unknown_model.append(pending)
            return
        if helper is None and self.ctx.analysis(Moves).device_function() is not None:
            # Every move of the file goes to `get_device()` of another project file, which may
            # return "cpu": the project phase reads it before anything is reported.
            key = f"device{len(self._forward_questions)}"
            self._forward_questions[key] = {"device_only": True}
            self.candidate(key, finding.use, message, fix=fix, related=related, help=help_text)
            return
        if helper is None:
            self.report(finding.use, message, fix=fix, related=related, help=help_text)
            return
        pending = PendingReport(
            self, finding.use, None, message, self.severity, fix, tuple(related), help_text
        )
        # A batch from another file's collate, handed to a model of another file's class:
        # reported only when neither the helper nor the model's `forward` places the item.
        self._deferred.append((helper, pending, forward_question))

    def _model_of_unknown_placement(self, finding: Unmoved) -> bool:
        if finding.kind != "model" or type(finding.sink) is not cst.Call:
            return False
        target = finding.sink.func
        if type(target) is cst.Attribute and target.attr.value == "forward":
            target = target.value
        return self.ctx.analysis(Moves).placement(target) == frozenset({UNKNOWN_PLACEMENT})

    def _wraps_inputs_here(self) -> bool:
        """Does this file wrap a model in DataParallel or DDP(device_ids=...)?"""
        for call, kind in self.ctx.analysis(Parallel).wrap_calls():
            if kind == "DataParallel":
                return True
            if keyword(call, "device_ids") is not None or len(call.args) > 1:
                return True
        return False

    def _message(self, flow: Flow, finding: Unmoved) -> Tuple[str, str]:
        """The headline (what is unmoved, where it meets the device) and the help (the
        error it raises, how it got there, the fix)."""
        element = finding.element
        source = flow.source
        assert source.binding_statement is not None  # set for every BatchSource
        loader = _short(source.loader_text, 25)
        named = element
        details = []
        carrier = next((e for e in element.lineage() if e.via is not None), None)
        if carrier is not None and carrier.origin is not None and carrier.via is not None:
            named = carrier.origin
            callee = _short(self.ctx.code(carrier.via.func), 30)
            details.append(
                f"It is passed to `{callee}(...)` on {self._line(carrier.via)} as "
                f"`{carrier.name}`."
            )
        discarded = next((e.discarded for e in element.lineage() if e.discarded), None)
        if discarded is not None:
            details.append(
                f"`{_short(self.ctx.code(discarded), 40)}` on {self._line(discarded)} returns a "
                "moved copy that is thrown away."
            )
        if finding.instead is not None:
            details.append(
                "The batch's items are moved on branches that exclude each other (`if`/`elif`), "
                "so no path moves all of them: whichever branch runs leaves one on the CPU."
            )
            opening = f"`{_short(named.name, 30)}` from `{loader}` is not moved on every branch"
            meets = ", yet meets the device in "
        else:
            opening = f"`{_short(named.name, 30)}` from `{loader}` is never moved to the device"
            meets = ", yet meets it in "
        # The operation it meets the device in gets what is left of about 100 characters.
        room = max(20, _HEADLINE - len(opening) - len(meets) - 2)
        sink = _short(self._describe(finding.sink, finding.use, min(room, 60)), room)
        headline = f"{opening}{meets}`{sink}`"
        details.append(
            f"On a GPU this fails with {_SAME_DEVICE}. Move it where the batch is unpacked "
            "(`.to(device)`), as the values it meets are."
        )
        return headline, " ".join(details)

    def _line(self, node: cst.CSTNode) -> str:
        """`line 12`, or `cell 3, line 4` in a notebook (rows as the reports show them)."""
        row = self.ctx.span(node)[0]
        cell = self.ctx.source.cell_of(row)
        if cell is not None:
            return f"cell {cell[0]}, line {cell[1]}"
        return f"line {row}"

    def _describe(self, sink: cst.CSTNode, use: cst.CSTNode, room: int = 60) -> str:
        """The sink as the message shows it: whole when it fits in `room`, else with what is
        not the element's own text elided."""
        code = self.ctx.code
        if getattr(sink, "lpar", None):  # `(preds == labels).float()`: the comparison itself
            whole = " ".join(code(sink.with_changes(lpar=[], rpar=[])).split())
        else:
            whole = " ".join(code(sink).split())
        if len(whole) <= room:
            return whole
        if type(sink) is cst.Call:
            head = _short(code(sink.func), 40)
            parts = []
            for index, arg in enumerate(sink.args):
                text = " ".join(code(arg.value).split())
                if arg.keyword is not None:
                    text = f"{arg.keyword.value}={text}"
                elif arg.star:
                    text = f"{arg.star}{text}"
                if arg.value is use or len(text) <= 20:
                    parts.append(_short(text, 40))
                else:
                    parts.append("...")
                if len(", ".join(parts)) > 50 and index < len(sink.args) - 1:
                    parts.append("...")
                    break
            shown = ", ".join(parts)
            while ", ..., ..." in shown:
                shown = shown.replace(", ..., ...", ", ...")
            return f"{head}({shown})"
        if type(sink) is cst.BinaryOperation:
            left = code(sink.left) if sink.left is use else "..."
            right = code(sink.right) if sink.right is use else "..."
            op = code(sink.operator).strip() if hasattr(sink, "operator") else "?"
            return f"{_short(left, 30)} {op} {_short(right, 30)}"
        if type(sink) is cst.Comparison:
            pieces = [_short(code(sink.left), 30) if sink.left is use else "..."]
            for target in sink.comparisons:
                value = target.comparator
                pieces.append(code(target.operator).strip())
                pieces.append(_short(code(value), 30) if value is use else "...")
            return " ".join(pieces)
        return _short(whole, 60)

    # -- the fix ------------------------------------------------------------------------------

    def _fix(self, flow: Flow, reported: Element) -> Optional[PendingFix]:
        # A value handed to a helper of this file is fixed in the caller, where it is bound.
        element: Optional[Element] = reported
        carrier = next((e for e in reported.lineage() if e.via is not None), None)
        if carrier is not None:
            element = carrier.origin
        if element is None or not element.fix_target or element.bound_at is None:
            return None
        target = element.fix_target
        if target is None or element.bound_at is None:
            return None
        discarded = element.discarded
        if (
            discarded is not None
            and type(discarded.func) is cst.Attribute
            and self.ctx.code(discarded.func.value) == target
        ):
            # `labels.to(device)` on its own line: keep its result.
            text = self.ctx.code(discarded)
            return self.unsafe_fix(
                f"Keep the moved copy: `{target} = {_short(text, 40)}`",
                self.ctx.replace(discarded, f"{target} = {text}"),
            )
        device = self._device_text(flow)
        if device is None:
            return None
        method, device_text, non_blocking = device
        args = device_text
        if non_blocking:
            args = f"{args}, non_blocking=True" if args else "non_blocking=True"
        line = f"{target} = {target}.{method}({args})"
        edit = self._insertion(element.bound_at, line)
        if edit is None:
            return None
        shown = device_text or method
        return self.unsafe_fix(f"Move `{target}` to `{shown}` right after it is bound", edit)

    def _device_text(self, flow: Flow) -> Optional[Tuple[str, str, bool]]:
        """(method, device expression, non_blocking) when the batch's moves agree on one."""
        found: Dict[Tuple[str, str], bool] = {}
        for move in flow.moves:
            if move.method == "type_as":
                continue
            method = "cuda" if move.method == "cuda" else "to"
            text = self.ctx.code(move.device) if move.device is not None else ""
            if method == "to" and not text:
                continue
            key = (method, " ".join(text.split()))
            found[key] = found.get(key, False) or move.non_blocking
        if len(found) != 1:
            return None
        (method, text), non_blocking = next(iter(found.items()))
        # The device expression must mean the same at the insertion point.
        unstable = flow.bound_names | set(flow.source.elements) | set(flow.source.roots)
        if text:
            names = {n.value for n in _names(cst.parse_expression(text))}
            if names & (unstable - {"self"}):
                return None
        return method, text, non_blocking

    def _insertion(self, bound_at: cst.CSTNode, line: str):
        moves = self.ctx.analysis(Moves)
        if type(bound_at) is cst.For or type(bound_at) is cst.While:
            body = bound_at.body
            if type(body) is not cst.IndentedBlock or not body.body:
                return None
            run = _leading_moves(list(body.body), moves)
            if run:
                return self.ctx.line_after(run[-1], line)
            return self.ctx.body_start(bound_at, line)
        if type(bound_at) is cst.SimpleStatementLine:
            block = self.ctx.parent(bound_at)
            statements = list(getattr(block, "body", []) or [])
            following = []
            if bound_at in statements:
                following = statements[statements.index(bound_at) + 1 :]
            run = _leading_moves(following, moves)
            return self.ctx.line_after(run[-1] if run else bound_at, line)
        return None

    # -- the project phase --------------------------------------------------------------------

    def facts(self) -> Optional[Dict[str, Any]]:
        moves = self.ctx.analysis(Moves)
        # Each function -> the parameters it moves; each class -> [-1] when any of its code
        # moves something (a dataset that builds its items on the device), else [].
        movers: Dict[str, List[int]] = {}
        for statement in self.ctx.module.body:
            if type(statement) is cst.FunctionDef:
                movers[statement.name.value] = sorted(moves.moved_params(statement))
            elif type(statement) is cst.ClassDef:
                movers[statement.name.value] = [-1] if moves.moves_in(statement) else []
        deferred = []
        unknown_model = []
        if self._deferred or self._unknown_model:
            from ...pending import resolve_reports

            diagnostics = resolve_reports(self.ctx, [p for _, p, _ in self._deferred])
            for ((helper, arg), _, forward), diagnostic in zip(self._deferred, diagnostics):
                deferred.append(
                    {
                        "helper": helper,
                        "arg": arg,
                        "diagnostic": diagnostic.to_dict(),
                        "forward": forward,
                    }
                )
            for diagnostic in resolve_reports(self.ctx, self._unknown_model):
                unknown_model.append(diagnostic.to_dict())
        facts: Dict[str, Any] = {
            "functions": movers,
            "helper_deferred": deferred,
            "unknown_model": unknown_model,
            "wraps_inputs": self._wraps_inputs_here(),
            "deferred": self._forward_questions,
            "device_function": self.ctx.analysis(Moves).device_function(),
            "cpu_functions": self.ctx.analysis(Devices).cpu_functions(),
        }
        if self._forward_questions or self.ctx.nodes(cst.ClassDef):
            facts.update(resolution_facts(self.ctx, self._class_facts(moves)))
        return facts

    def _class_facts(self, moves: Moves) -> Dict[str, object]:
        """Each class of the file (with bases) -> its bases and, when it defines `forward`,
        which arguments of a call of the module that `forward` moves: positions (`self` left
        out) and parameter names, for the files that build the class."""
        classes: Dict[str, object] = {}
        host_side = self.ctx.analysis(HostSide)
        for name, cls in self.ctx.analysis(Modules).classes.items():
            entry: Dict[str, Any] = {"bases": list(cls.bases)}
            forward = own_method(cls.node, "forward")
            if forward is not None:
                params = [p.name.value for p in positional_params(forward)][1:]
                moved = sorted(i - 1 for i in moves.moved_params(forward) if i > 0)
                host = sorted(i - 1 for i in host_side.host_params(forward) if i > 0)
                hands = {
                    str(index - 1): sorted(attributes)
                    for index, attributes in moves.handed_to_attributes(forward).items()
                }
                entry["forward"] = {"params": params, "moved": moved, "hands": hands, "host": host}
            if own_method(cls.node, "__init__") is not None:
                entry["from_init"] = attributes_from_init(cls.node)
            classes[name] = entry
        return classes

    @classmethod
    def check_project(cls, project) -> Iterable[Diagnostic]:
        facts = project.facts(cls.code)
        out: List[Diagnostic] = []
        modules = _module_index(project)
        # Files whose every move goes to a device function of the project that returns only
        # "cpu": nothing of theirs leaves the CPU, so no batch item meets a device there.
        on_cpu = {
            display
            for display, data in facts.items()
            if _returns_only_cpu(data.get("device_function"), display, facts, project, modules)
        }
        wraps_inputs = any(f.get("wraps_inputs") for f in facts.values())
        if not wraps_inputs:
            for display, data in facts.items():
                if display not in on_cpu:
                    out.extend(Diagnostic.from_dict(d) for d in data.get("unknown_model", []))
        for hierarchy, display, path, key, entry in deferred_candidates(project, cls.code):
            if entry is None or (entry.get("unknown_model") and wraps_inputs):
                continue
            if display in on_cpu:
                continue
            if entry.get("device_only"):
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    out.append(diagnostic)
                continue
            wrapped = entry.get("wrapped_init", [])
            verdicts = [
                _forward_moves(hierarchy, c, path, entry["arg"], wrapped) for c in entry["classes"]
            ]
            # Reported when no class the model may be built from places the argument: like an
            # undecidable branch, a choice of class is assumed to be the one that works.
            if verdicts and all(verdict is False for verdict in verdicts):
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    out.append(diagnostic)
        if not any(f.get("helper_deferred") for f in facts.values()):
            return out
        joint: Optional[Hierarchy] = None
        for display, data in facts.items():
            if display in on_cpu:
                continue
            importer = project.paths.get(display)
            for entry in data.get("helper_deferred", []):
                target = _helper_file(entry["helper"], importer, project, modules)
                if target is None or target not in facts:
                    continue  # cannot know what the helper does: stay quiet
                module, function = target, entry["helper"].rsplit(".", 1)[-1]
                functions = facts[module].get("functions", {})
                if function not in functions:
                    continue  # re-exported or not a plain function: unknown
                moved = functions[function]
                arg = entry["arg"]
                if moved and (arg < 0 or arg in moved):
                    continue  # the helper moves it
                forward = entry.get("forward")
                if forward is not None and importer is not None:
                    joint = joint or Hierarchy(project, cls.code)
                    verdicts = [
                        _forward_moves(joint, c, importer, forward["arg"], forward["wrapped_init"])
                        for c in forward["classes"]
                    ]
                    if not verdicts or not all(verdict is False for verdict in verdicts):
                        continue  # the model's `forward` places it, or may
                out.append(Diagnostic.from_dict(entry["diagnostic"]))
        return out


# -- helpers ----------------------------------------------------------------------------------


_HEADLINE = 105  # the longest headline the sink is shortened for


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if "(" in text and text.endswith(")"):
        head = text.split("(", 1)[0]
        if head and len(head) + 5 <= limit:
            return f"{head}(...)"
    return text[: limit - 3] + "..."


def _names(node: cst.CSTNode):
    stack = [node]
    while stack:
        current = stack.pop()
        if type(current) is cst.Name:
            yield current
        stack.extend(current.children)


def _leading_moves(statements, moves: Moves) -> List[cst.CSTNode]:
    """The statements at the start of `statements` that only move things to the device."""
    run: List[cst.CSTNode] = []
    for statement in statements:
        if type(statement) is not cst.SimpleStatementLine:
            break
        if not all(
            type(small) is cst.Assign and moves.is_moved(small.value)
            for small in statement.body
        ):
            break
        run.append(statement)
    return run


def _forward_moves(
    hierarchy: Hierarchy, qualname: str, importer: Path, argument: Any, wrapped: List[Any]
) -> Optional[bool]:
    """Does the `forward` of the class `qualname` (as imported in `importer`) move the
    argument a call of the module hands it at `argument` (a position, or a keyword), or use it
    only on the host (lengths it packs a sequence with)? True or
    False when the forward is read (the class's own, or the nearest base's that defines one):
    it moves the argument, or hands it to an attribute `__init__` keeps from a constructor
    argument that holds a DataParallel wrapper (`wrapped`, positions or keywords of the
    model's construction: `TSN(n, net)` with `net` wrapped), which scatters it to the GPUs;
    False for a class of a module outside the project (a library's model, read as before);
    None when the class is the project's but its `forward` cannot be read."""
    if "|" in qualname:
        # Star imports: the one alternative that names a class of the project is the class.
        defined = [q for q in qualname.split("|") if isinstance(hierarchy.resolve(q, importer), ClassRef)]
        if len(defined) != 1:
            return None
        qualname = defined[0]
    ref = hierarchy.resolve(qualname, importer)
    if not isinstance(ref, ClassRef):
        module = qualname.rsplit(".", 1)[0]
        if module.startswith(".") or hierarchy.module_file(module, importer) is not None:
            return None  # a file of the project that does not say
        return False
    for _, class_facts in hierarchy.ancestry(ref).members:
        forward = class_facts.get("forward")
        if not isinstance(forward, dict):
            continue
        params = forward.get("params", [])
        index = argument
        if isinstance(argument, str):
            index = params.index(argument) if argument in params else None
        if not isinstance(index, int):
            return False
        if index in forward.get("moved", []) or index in forward.get("host", []):
            return True  # placed by the model, or never meets the device
        return wrapped != [] and any(
            _kept_from(hierarchy.ancestry(ref), attribute, wrapped)
            for attribute in forward.get("hands", {}).get(str(index), [])
        )
    return None


def _kept_from(family: Family, attribute: str, wrapped: List[Any]) -> bool:
    """Does the `__init__` a construction of the class runs (its own, or the nearest base's
    that defines one) set `self.<attribute>` straight from one of the `wrapped` constructor
    arguments (position or name)? Positions only mean something in that `__init__`."""
    for _, class_facts in family.members:
        if "from_init" in class_facts:
            where = class_facts["from_init"].get(attribute)
            return where is not None and (where[0] in wrapped or where[1] in wrapped)
    return False


def _returns_only_cpu(
    function: Optional[str], display: str, facts, project, modules: Dict[Path, str]
) -> bool:
    """Is `function` (a qualified name as imported in the file `display`) a function of a
    project file of this run whose every return is the CPU device?"""
    if not function:
        return False
    target = _helper_file(function, project.paths.get(display), project, modules)
    if target is None or target not in facts:
        return False
    return function.rsplit(".", 1)[-1] in facts[target].get("cpu_functions", [])


def _module_index(project) -> Dict[Path, str]:
    """absolute file path -> display path, for the files of this run."""
    index = {}
    for display, path in project.paths.items():
        try:
            index[Path(os.path.realpath(path))] = display
        except OSError:
            continue
    return index


def _helper_file(helper: str, importer: Optional[Path], project, modules: Dict[Path, str]):
    """The display path of the project file that defines `helper` (a qualified name such as
    `utils.to_cuda` or `.misc.to_cuda`), or None when it is not among the files of the run."""
    module = helper.rsplit(".", 1)[0] if "." in helper.lstrip(".") else ""
    if not module or importer is None:
        return None
    root = Path(os.path.abspath(project.root))
    found = module_file(module, Path(os.path.abspath(importer)), root, project.is_file)
    return modules.get(Path(os.path.realpath(found))) if found is not None else None


__all__ = ["BatchNotOnDevice"]
