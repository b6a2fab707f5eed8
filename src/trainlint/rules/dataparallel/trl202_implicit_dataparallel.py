"""TRL202 implicit-dataparallel."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from ...analysis.base.calls import argument, is_none, string_value
from ...analysis.parallel.parallel import DATA_PARALLEL, Parallel
from ...analysis.parallel.state_writes import StateWrites
from ...analysis.parallel.wraps import Wraps
from ...analysis.project.hierarchy import Hierarchy, classes_run_by, file_facts
from ...analysis.project.modules import Modules, forward_reach
from ...diagnostics import Diagnostic, Severity
from ..base import Rule


class ImplicitDataParallel(Rule):
    """## What it does
    Reports `nn.DataParallel(model)` switched on by the number of visible GPUs
    (`if torch.cuda.device_count() > 1:`, `elif n_gpu > 1:` with
    `n_gpu = torch.cuda.device_count()`) or as the fallback of a non-distributed branch
    (`if args.distributed: DDP(...) else: DataParallel(...)`), without `device_ids`, when the
    wrapped model is one that DataParallel breaks: a class it runs (the model's class, its
    parents, its submodules' classes, across the project) writes module state in `forward`
    or in a forward hook, the evidence TRL203 collects (a dict or list on `self` filled in
    forward, `self.core_out[name] = output` in a hook, a counter advanced in forward).

    ## Why is this bad
    The same command then trains differently depending on the machine: one visible GPU gives
    plain single-device training, several give DataParallel, which replicates the model into
    threads on every forward. Code that works on one GPU breaks only on the bigger box: state
    written to `self` in `forward` or in forward hooks is written by every replica thread at
    once, and training dies with errors such as

        RuntimeError: Trying to backward through the graph a second time

    which users then "fix" with `CUDA_VISIBLE_DEVICES=0`, turning DataParallel off. This is what
    happened to a depth-estimation project whose `parallelize()` fell back to DataParallel when
    `distributed` was false on a multi-GPU machine.

    Make the choice explicit (an opt-in flag such as `--data-parallel`, or `device_ids`), or
    use DistributedDataParallel, which PyTorch recommends even on one machine.

    ## Known problems
    Implicit DataParallel on its own changes speed, not results, so the rule needs evidence of
    harm and is quiet without it:

    - a model whose classes write no module state in forward or hooks (a torchvision or
      Hugging Face model, a tutorial's `nn.Linear`) is not reported;
    - a model class the analysis cannot name (built by a registry or a helper of another file)
      is reported only when a module class of the file, or of a project file it imports,
      writes such state, and the message says it assumed that class is the wrapped one;
    - explicit choices are not reported: an opt-in flag (`if args.data_parallel:`,
      `if args.multi_gpu and ...:`), `device_ids`, or a file that sets
      `os.environ["CUDA_VISIBLE_DEVICES"]` (from its config or arguments) and so decides the
      GPU set itself;
    - checkpoints saved from the wrapper with `module.` keys are TRL204's finding, not this
      rule's evidence.

    Under flake8, which sees one file, the model classes must be in that file.

    ## Example
    ```python
    class DepthModel(nn.Module):
        def __init__(self, backbone):
            super().__init__()
            self.backbone, self.features = backbone, {}
            backbone.layer4.register_forward_hook(self._store)

        def _store(self, module, inputs, output):
            self.features["layer4"] = output

        def forward(self, x):
            return self.backbone(x), self.features["layer4"]

    model = DepthModel(backbone).cuda()
    if args.distributed:
        model = DDP(model, device_ids=[args.gpu])
    elif torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    ```

    ## Use instead
    ```python
    if args.distributed:
        model = DDP(model, device_ids=[args.gpu])
    elif args.data_parallel:
        model = nn.DataParallel(model)
    ```
    (and keep the hook's features local to `forward`, see TRL203).

    ## Fix safety
    No fix: whether to keep DataParallel is the user's decision.
    """

    code = "TRL202"
    name = "implicit-dataparallel"
    severity = Severity.WARNING
    project = True
    # "class "/"from .": the model files whose forward writes are the evidence (as TRL203).
    markers = ("DataParallel", "class ", "from .")

    def finish(self) -> None:
        self.parallel: Parallel = self.ctx.analysis(Parallel)
        self.dp_classes: Dict[str, List[str]] = {}
        if not self._pins_visible_gpus():
            for call in self.ctx.nodes(cst.Call):
                if self.ctx.names.is_(call.func, DATA_PARALLEL):
                    self._check(call)

    def _pins_visible_gpus(self) -> bool:
        """`os.environ["CUDA_VISIBLE_DEVICES"] = ...` in the file: the GPU set is the script's
        (or its config's) explicit choice, not the machine's."""
        for string in self.ctx.nodes(cst.SimpleString):
            if string_value(string) != "CUDA_VISIBLE_DEVICES":
                continue
            index = self.ctx.parent(string)
            element = self.ctx.parent(index) if index is not None else None
            subscript = self.ctx.parent(element) if element is not None else None
            if type(subscript) is cst.Subscript and type(self.ctx.parent(subscript)) is (
                cst.AssignTarget
            ):
                return True
        return False

    def _check(self, call: cst.Call) -> None:
        device_ids = argument(call, 1, "device_ids")
        if device_ids is not None and not is_none(device_ids):
            return
        found = self._reason(call)
        if found is None:
            return
        reason, branch, evidence = found
        module = argument(call, 0, "module")
        classes = sorted(self.ctx.analysis(Wraps).classes_of(module)) if module else []
        wrapper = self.ctx.code(call.func)
        test = self.ctx.code(branch.test)  # type: ignore[attr-defined]
        if len(test) > 40 or "\n" in test:
            test = test.split("\n")[0][:37] + "..."
        why = "switched on by the GPU count" if reason == "count" else (
            "the non-distributed fallback"
        )
        decided = f"Whether `{wrapper}` wraps the model is decided by `{test}`."
        key = f"dp:{len(self.dp_classes)}"
        self.dp_classes[key] = classes
        self.candidate(
            key,
            call,
            f"DataParallel is {why}",
            related=[(evidence, "decided here")],
            help=(
                f"{decided} The same command then trains on one GPU on one machine and in DataParallel "
                "replica threads on another. DataParallel copies the module on every forward, "
                "and state written to `self` in forward or in hooks is written by every "
                'replica thread at once ("Trying to backward through the graph a second '
                'time", tensors from different GPUs mixed). Make it an explicit option '
                "(`--data-parallel`, `device_ids`) or use DistributedDataParallel."
            ),
        )

    def facts(self) -> Optional[Dict[str, object]]:
        facts = file_facts(self.ctx)
        facts["dp_classes"] = self.dp_classes
        facts["state_writers"] = self._state_writers()
        return facts

    def _state_writers(self) -> Dict[str, str]:
        """Classes of this file whose forward (or what it calls) or forward hooks write module
        state that DataParallel replicas share or carry (TRL203's evidence) -> the attribute."""
        writes = self.ctx.analysis(StateWrites)
        found: Dict[str, str] = {}
        for cls in self.ctx.analysis(Modules).classes.values():
            methods = {
                s.name.value: s for s in cls.node.body.body if type(s) is cst.FunctionDef
            }
            for name in sorted(forward_reach(cls)):
                for write in writes.in_method(methods[name]):
                    if write.kind == "item" or writes.carries_over(write):
                        found.setdefault(cls.name, write.attr)
            for hook in writes.hooks_in(cls.node):
                for write in hook.writes:
                    found.setdefault(cls.name, write.attr)
        return found

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        hierarchy = Hierarchy(project, cls.code)
        for display, keys in sorted(project.candidates(cls.code).items()):
            path = hierarchy.absolute(display)
            facts = hierarchy.facts_at(path) or {}
            for key in sorted(keys):
                names = facts.get("dp_classes", {}).get(key, [])
                if names:
                    hazard = _state_writer(hierarchy, path, names)
                    assumed = ""
                else:
                    # A model built by a registry or a helper of another file: any model class
                    # of this file or of the files it imports may be the one wrapped.
                    hazard = _nearby_state_writer(hierarchy, path)
                    assumed = " (if wrapped)"
                if hazard is None:
                    continue  # no module state written in forward: one GPU or many, same result
                writer, attr = hazard
                base = str(keys[key]["message"])
                diagnostic = project.candidate(
                    display,
                    cls.code,
                    key,
                    message=f"{base}, and `{writer}`{assumed} writes `self.{attr}` in forward",
                )
                if diagnostic is not None:
                    yield diagnostic

    def _reason(self, call: cst.Call) -> Optional[Tuple[str, cst.CSTNode, cst.CSTNode]]:
        parallel = self.parallel
        for branch, in_body in parallel.branches(call):
            test = branch.test  # type: ignore[attr-defined]
            if in_body and parallel.opt_in_flag(test) is not None:
                return None  # the user asked for DataParallel
            # The distributed/non-distributed split first: `args.distributed` may itself be
            # derived from device_count() (pytorch/examples' imagenet sets world_size from it),
            # but what the user reads in the code is "not distributed, so DataParallel".
            polarity = parallel.if_polarity(branch)
            if (in_body and polarity == -1) or (not in_body and polarity == 1):
                return "fallback", branch, test
            count = parallel.gpu_count_in(test)
            if count is not None:
                return "count", branch, test
        return None


def _state_writer(
    hierarchy: Hierarchy, importer: Path, names: List[str]
) -> Optional[Tuple[str, str]]:
    """(class, attribute) of a class the wrapped model runs that writes module state in
    forward or hooks; None when none does (or none can be named)."""
    run = classes_run_by(hierarchy, [("", importer, names)])
    for ref in sorted(run, key=lambda r: (str(r.path), r.name)):
        writers = (hierarchy.facts_at(ref.path) or {}).get("state_writers", {})
        if ref.name in writers:
            return ref.name, writers[ref.name]
    return None


def _nearby_state_writer(hierarchy: Hierarchy, path: Path) -> Optional[Tuple[str, str]]:
    """(class, attribute) of a state-writing module class of `path` or of a project file it
    imports, directly or through one more import."""
    files = {path} | hierarchy.imported_files(path)
    for imported in list(files):
        files |= hierarchy.imported_files(imported)
    for candidate in sorted(files, key=str):
        writers = (hierarchy.facts_at(candidate) or {}).get("state_writers", {})
        for name in sorted(writers):
            return name, writers[name]
    return None
