"""TRL103 device-index-without-set-device."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import libcst as cst

from ...analysis.base.frameworks import Frameworks
from ...analysis.device.choices import DeviceChoice, DeviceChoices, Placement
from ...analysis.parallel.parallel import Parallel
from ...analysis.project.hierarchy import Hierarchy, import_qualnames
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule
from ...analysis.base.nodes import positional_params

# Stands for the custom ops in a candidate's help until the project phase names them.
_OPS = "{custom-ops}"
# How many project imports away the custom ops may be: train.py -> models/__init__.py ->
# models/detector.py -> models/ops/functions.py -> the compiled module.
_IMPORT_DEPTH = 4


class DeviceIndexWithoutSetDevice(Rule):
    """## What it does
    Follows a CUDA device with a chosen index from where it is made (a literal `"cuda:1"`,
    `torch.device("cuda", 1)`, `.cuda(1)`, or a number given at run time: `args.gpu`,
    `f"cuda:{args.gpu}"`, `torch.device("cuda", args.local_rank)`, `LOCAL_RANK` from the
    environment, a `device="cuda:1"` default) to the places that put tensors and models on it,
    and reports it when the file never sets the *current* device and custom CUDA ops that
    launch on the current device are loaded: imported by the file itself or by a project module
    it imports (`mmcv.ops`, mmdet/mmrotate ops, detectron2's layers, a compiled
    `_ext`/`_C`/`*_cuda` module, a `torch.utils.cpp_extension` build, or a module the project's
    setup.py builds with `CUDAExtension(...)`).

    ## Why is this bad
    `.to("cuda:1")` moves tensors, but the current device stays GPU 0. Everything that uses the
    current device keeps running there: the CUDA context, `torch.cuda.*` calls without an
    argument, and custom CUDA ops (compiled extensions such as `mmcv.ops`, deformable attention,
    NMS kernels) that launch on the current device instead of their inputs' device. Those
    kernels then read memory of the wrong GPU and return zeros, **without an error**. In a real
    incident a detector trained with `device="cuda:1"` trained normally (the loss went down) but
    evaluated to AP 0 and AR 0 everywhere, so no best checkpoint was ever saved;
    `torch.cuda.set_device(1)`, or `CUDA_VISIBLE_DEVICES=1` with `device="cuda"`, fixed it.
    Under DDP the same mistake puts every rank's context and NCCL buffers on GPU 0.

    Not reported when neither the file nor the project modules it imports (up to four imports
    away) import such ops: native torch ops (convolutions, `stft`,
    torchvision's ops) run on their inputs' device, and what remains (a CUDA context on GPU 0)
    is not a failure the analysis can establish. Not reported in a file that calls
    `init_process_group`: a process group without `set_device` is TRL305's finding, and one
    cause gives one finding. Not reported when the file sets the current device: `torch.cuda.set_device(...)`,
    `with torch.cuda.device(...)`, `CUDA_VISIBLE_DEVICES` written to `os.environ`, or a
    distributed entry point that sets it (`init_distributed_mode`, mmcv/mmengine `init_dist`,
    timm `init_distributed_device`, detectron2 `launch`, Accelerate, Fabric, DeepSpeed); nor in
    framework-managed code, tests, or deliberate model-parallel placement on several GPUs.
    In a module without `if __name__ == "__main__":` (a trainer class, `train_utils.py`), a rank
    or GPU id placed inside its functions is not reported either: the script that imports the
    module chose it and sets the current device (a literal `"cuda:1"` there still is).
    `dist.barrier(device_ids=[rank])` and HF `pipeline(device=i)` (which runs under
    `with torch.cuda.device(i)`) are not placements, and neither is a DataParallel replica's
    GPU other than its output device (`1` in `DataParallel(model, device_ids=[0, 1])`):
    DataParallel runs each replica's forward with that replica's device current.

    ## Example
    ```python
    from mmcv.ops import nms

    device = torch.device("cuda:1")
    model = Detector().to(device)
    ```

    ## Use instead
    ```python
    from mmcv.ops import nms

    device = torch.device("cuda:1")
    torch.cuda.set_device(device)
    model = Detector().to(device)
    ```

    ## Fix safety
    The fix inserts `torch.cuda.set_device(device)` right after the device is made (guarded by
    `if ....type == "cuda":` when the same variable may hold a CPU device). It is safe: it only
    makes the current device the one the code already places everything on. It is not offered
    when the index may be `None` at run time (`.cuda(args.gpu)` with no default), for a
    parameter without a default, or when the file does not import `torch` itself.
    """

    code = "TRL103"
    name = "device-index-without-set-device"
    severity = Severity.ERROR
    fix = "safe"
    # Beyond the words of a device choice: the model modules whose custom-op imports the
    # project phase needs (`from mmcv.ops import ...`, `import MSDeformAttnKernel` beside torch).
    markers = ("cuda", "device", "gpu", "rank", "torch", "mmcv", "mmdet", "mmrotate",
               "detectron2", "Extension")
    project = True

    def finish(self) -> None:
        choices: DeviceChoices = self.ctx.analysis(DeviceChoices)
        if choices.current_device_evidence():
            return
        # Without custom ops in this file, the project phase looks for them in the project
        # modules it imports; native torch ops follow their inputs' device.
        custom = choices.custom_ops()
        if self.ctx.analysis(Parallel).process_group_inits():
            return  # a process group's missing set_device is TRL305's finding
        frameworks: Frameworks = self.ctx.analysis(Frameworks)
        library = self._library_module()
        groups: Dict[object, Tuple[DeviceChoice, List[Placement]]] = {}
        for placement in choices.placements():
            if placement.replica:
                continue  # DataParallel makes a replica's device current while it runs
            choice = choices.trace(placement.expr, placement.as_index)
            if choice is None or not choice.chosen:
                continue
            if not placement.direct and choice.is_index:
                continue  # a bare number handed to some function is not a device
            if frameworks.managed(placement.call) is not None:
                continue
            if library and choice.device.origin != "literal" and self._in_def(placement.call):
                continue  # the script that imports this module decides the current device
            if choices.in_test_code(placement.call) or choices.in_test_code(choice.made):
                continue
            if choices.multi_gpu_scope(placement.call) or choices.multi_gpu_scope(choice.made):
                continue
            if choice.param and type(choice.made) is not cst.Param:
                if not self._default_used(choice):
                    continue
            key = self._key(choice)
            if key not in groups:
                groups[key] = (choice, [])
            groups[key][1].append(placement)
        # `device = torch.device("cuda", local_rank)` and `device_ids=[local_rank]` are one
        # choice: report it once, where the index is made.
        for key in list(groups):
            if key not in groups:
                continue
            choice, placements = groups[key]
            if choice.index_made is None:
                continue
            if choice.index_made in groups:
                index_key: object = choice.index_made  # bound to a name: keyed by itself
            else:
                index_choice = choices.trace(choice.index_made, True)
                if index_choice is None:
                    continue
                index_key = self._key(index_choice)
            if index_key not in groups or index_key == key:
                continue
            index_choice, index_placements = groups[index_key]
            if index_choice.name is not None:
                index_placements.extend(placements)  # report where the index is bound
                del groups[key]
            else:
                placements.extend(index_placements)  # report where the device is made
                del groups[index_key]
        for choice, placements in groups.values():
            node = choice.made.name if type(choice.made) is cst.Param else choice.made
            related: List[Tuple[cst.CSTNode, str]] = [(placements[0].call, "placed on it here")]
            if choice.source is not None:
                related.append((choice.source, "its default comes from here"))
            headline, help_text = self._message(choice, f"`{custom}`" if custom else _OPS)
            fix = self._fix(choice, placements[0])
            if custom is not None:
                self.report(node, headline, help=help_text, fix=fix, related=related)
            else:
                key = str(len(self.candidates))
                self.candidate(key, node, headline, help=help_text, fix=fix, related=related)

    def facts(self) -> Optional[Dict[str, object]]:
        choices: DeviceChoices = self.ctx.analysis(DeviceChoices)
        return {
            "custom_ops": choices.custom_ops(),
            "extensions": choices.compiled_extensions(),
            "imports": import_qualnames(self.ctx),  # for Hierarchy.imported_files
        }

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        """Confirm a file's candidates when a project module it imports loads custom ops."""
        candidates = project.candidates(cls.code)
        if not candidates:
            return
        hierarchy = Hierarchy(project, cls.code)
        extensions = _project_extensions(project, hierarchy)
        for display, keys in sorted(candidates.items()):
            path = hierarchy.absolute(display)
            found = _custom_ops_reached(hierarchy, path, extensions)
            if found is None:
                continue
            ops, where = found
            text = f"`{ops}`" if where is None else f"`{ops}` via {hierarchy.display(where)}"
            for key in sorted(keys):
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is None:
                    continue
                yield dataclasses.replace(
                    diagnostic, help=(diagnostic.help or "").replace(_OPS, text) or None
                )

    # -- modules imported by the script that runs ---------------------------------------------

    def _library_module(self) -> bool:
        """No `if __name__ == "__main__":`: a module that a script imports (a trainer class, a
        `train_utils.py`). A rank or GPU id it receives was chosen, and the current device set,
        by that script (the FSDP, minGPT-DDP and mmdet examples do it there)."""
        for node in self.ctx.nodes(cst.If):
            if "__name__" in self.ctx.code(node.test) and "__main__" in self.ctx.code(node.test):
                return False
        return True

    def _in_def(self, node: cst.CSTNode) -> bool:
        return any(type(a) in (cst.FunctionDef, cst.ClassDef) for a in self.ctx.ancestors(node))

    # -- grouping -----------------------------------------------------------------------------

    def _key(self, choice: DeviceChoice) -> object:
        """A bound device is one choice; inline ones (`.cuda(2)`, `.cuda(args.gpu)` in several
        places) group by function and device."""
        if choice.name is not None:
            return choice.made
        function = self.ctx.scopes.enclosing_function(choice.made)
        device = choice.device
        if device.origin == "literal":
            return (function, device.kind, device.index)
        return (function, device.index_text or self.ctx.code(choice.made))

    def _default_used(self, choice: DeviceChoice) -> bool:
        """Is the parameter's default used by some call of the function in this file?"""
        function = choice.statement
        if type(function) is not cst.FunctionDef or choice.name is None:
            return False
        params = positional_params(function)
        position = next((i for i, p in enumerate(params) if p.name.value == choice.name), None)
        if position is not None and params and params[0].name.value in ("self", "cls"):
            position -= 1
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            called = func.value if type(func) is cst.Name else None
            if type(func) is cst.Attribute:
                called = func.attr.value
            if called != function.name.value:
                continue
            if any(arg.star for arg in call.args):
                continue
            if any(
                arg.keyword is not None and arg.keyword.value == choice.name for arg in call.args
            ):
                continue
            positional = sum(1 for arg in call.args if arg.keyword is None)
            if position is None or positional <= position:
                return True
        return False

    # -- message ------------------------------------------------------------------------------

    def _message(self, choice: DeviceChoice, custom: str) -> Tuple[str, str]:
        device = choice.device
        if device.origin == "literal":
            what = f"cuda:{device.index}"
        else:
            shown = choice.name if choice.is_index and choice.name else device.index_text
            if shown and len(shown) > 25:
                shown = shown[:22] + "..."
            shown = f" (`{shown}`)" if shown else ""
            if device.origin == "rank":
                what = f"this process's GPU{shown}"
            else:
                what = f"a GPU chosen at run time{shown}"
        target = choice.name
        if target is None:
            made = self.ctx.code(choice.made)
            target = made if len(made) <= 40 and "\n" not in made else "device"
        headline = f"tensors go to {what}; custom CUDA ops launch on the current device, still GPU 0"
        help_text = (
            f"Custom CUDA ops (compiled extensions such as {custom}) launch on the current "
            "device, not on their inputs' device: with "
            "the inputs on another GPU they read the wrong memory and can return zeros "
            "without an error (a detector trained this way evaluates to AP 0). Call "
            f"`torch.cuda.set_device({target})` right after choosing the device, or select "
            'the GPU with CUDA_VISIBLE_DEVICES and use "cuda".'
        )
        return headline, help_text

    # -- fix ----------------------------------------------------------------------------------

    def _fix(self, choice: DeviceChoice, first: Placement) -> Optional[PendingFix]:
        ctx = self.ctx
        anchor = choice.statement if choice.statement is not None else first.call
        if not self._torch_bound(anchor):
            return None
        made = choice.made
        if choice.name is not None and (
            type(choice.statement) is cst.Assign or type(choice.statement) is cst.AnnAssign
        ):
            if choice.is_index and not _never_none(made):
                return None
            code = self._set_device(choice, choice.name)
            message = f"Set the current device: `torch.cuda.set_device({choice.name})`"
            return self.safe_fix(message, ctx.line_after(choice.statement, code))
        if choice.param:
            if type(made) is cst.Param or choice.is_index or choice.name is None:
                return None
            function = choice.statement
            if type(function) is not cst.FunctionDef:
                return None
            code = self._set_device(choice, choice.name)
            message = f"Set the current device: `torch.cuda.set_device({choice.name})`"
            edit = self._function_start(function, code)
            return self.safe_fix(message, edit) if edit is not None else None
        if choice.name is not None or choice.fallback:
            return None
        if type(made) in (cst.Attribute, cst.Subscript) or (
            type(made) is cst.Call and choice.is_index
        ):
            if not (_never_none(made) or self._checked_not_none(first.call, made)):
                if not (choice.source is not None and type(choice.source) is cst.Integer):
                    return None
        statement = ctx.statement_of(first.call)
        if statement is None:
            return None
        text = ctx.code(made)
        if "\n" in text:
            return None
        return self.safe_fix(
            f"Set the current device: `torch.cuda.set_device({text})`",
            ctx.line_before(statement, f"torch.cuda.set_device({text})"),
        )

    def _set_device(self, choice: DeviceChoice, name: str) -> str:
        call = f"torch.cuda.set_device({name})"
        if not choice.fallback or choice.is_index:
            return call
        made = choice.made
        is_device_object = type(made) is cst.Call and self.ctx.names.is_(
            made.func, "torch.device"
        )
        test = f"{name}.type" if is_device_object else f"torch.device({name}).type"
        return f'if {test} == "cuda":\n    {call}'

    def _function_start(self, function: cst.FunctionDef, code: str):
        body = function.body
        if type(body) is not cst.IndentedBlock or not body.body:
            return None
        first = body.body[0]
        if (
            type(first) is cst.SimpleStatementLine
            and len(first.body) == 1
            and type(first.body[0]) is cst.Expr
            and type(first.body[0].value) in (cst.SimpleString, cst.ConcatenatedString)
        ):
            if len(body.body) == 1:
                return self.ctx.line_after(first.body[0], code)
            return self.ctx.line_before(body.body[1], code)
        return self.ctx.body_start(function, code)

    def _checked_not_none(self, node: cst.CSTNode, made: cst.CSTNode) -> bool:
        """Inside `if <made> is not None:` (or `if <made>:` / `if <made> >= 0:`)?"""
        text = self.ctx.code(made)
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.If:
                test = self.ctx.code(ancestor.test).replace(" ", "")
                compact = text.replace(" ", "")
                if test in (f"{compact}isnotNone", compact) or test.startswith(f"{compact}>="):
                    return True
        return False

    def _torch_bound(self, at: cst.CSTNode) -> bool:
        for binding in self.ctx.scopes.lookup("torch", at):
            if binding.kind == "import" and binding.qualname == "torch":
                return True
        return False


def _never_none(node: cst.CSTNode) -> bool:
    """An `int(...)`/`str(...)`/literal/device value: never None at run time."""
    if type(node) in (cst.Integer, cst.SimpleString, cst.FormattedString):
        return True
    if type(node) is cst.Call:
        func = node.func
        leaf = func.attr.value if type(func) is cst.Attribute else getattr(func, "value", "")
        return leaf in ("int", "str", "device")
    return False


def _project_extensions(project, hierarchy: Hierarchy) -> List[str]:
    """Module names the project builds as compiled extensions (its setup.py's
    `CUDAExtension(...)`), from the files of the run and, on the CLI, the project's other files."""
    paths = {path for path, _facts in hierarchy.known_files()}
    paths.update(project.files_matching(_EXTENSION_WORDS))
    names: List[str] = []
    for path in sorted(paths):
        names.extend((hierarchy.facts_at(path) or {}).get("extensions", ()))
    return sorted(set(names))


def _custom_ops_reached(
    hierarchy: Hierarchy, path: Path, extensions: List[str]
) -> Optional[Tuple[str, Optional[Path]]]:
    """The custom ops loaded by `path` or the project modules it imports, and the module that
    imports them (None: `path` itself, through one of the project's compiled extensions)."""
    own = _ops_of(hierarchy.facts_at(path), extensions)
    if own is not None:
        return own, None
    for imported in hierarchy.imported_closure(path, _IMPORT_DEPTH):
        ops = _ops_of(hierarchy.facts_at(imported), extensions)
        if ops is not None:
            return ops, imported
    return None


def _ops_of(facts: Optional[dict], extensions: List[str]) -> Optional[str]:
    if not facts:
        return None
    if facts.get("custom_ops"):
        return str(facts["custom_ops"])
    for qualname in dict(facts.get("imports") or {}).values():
        name = str(qualname)
        if any(name == e or name.startswith(e + ".") for e in extensions):
            return str(name)
    return None


_EXTENSION_WORDS = re.compile(r"\b(?:CUDAExtension|CppExtension)\b")
