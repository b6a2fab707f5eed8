"""TRL107 mixed-device-placement."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.calls import string_literal
from ...analysis.base.conditions import Conditions
from ...analysis.base.frameworks import Frameworks
from ...analysis.device.choices import DeviceChoices
from ...analysis.device.mixed import BarePlacement, ChosenPlacement, MixedPlacements
from ...analysis.project.hierarchy import module_file
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule

# How the sites are linked, closest first (`MixedPlacements.one_path`).
_LINKS = ("function", "calls", "class", "caller")
_SAME_DEVICE = (
    '"Expected all tensors to be on the same device, but found at least two devices, '
    'cuda:1 and cuda:0"'
)


class MixedDevicePlacement(Rule):
    """## What it does
    Reports a placement on the bare current GPU (`.cuda()`, `.to("cuda")`, `device="cuda"`,
    `torch.device("cuda")`, `"cuda:0"`) in code that, on the same path, also places things on a
    device chosen by the user or the caller: a `--device` option or config field
    (`args.device`, `cfg.device`, `self.args.device`, unless the script overwrites it with a
    bare device), a function parameter used as the device (`def train(model, loader,
    device)`, unless every call of it in the file passes a bare CUDA device), or an attribute
    set from one (`self.device = device`). The same function doing both is the precise form;
    the two halves may also sit in a function and the helpers it calls, in two functions one
    caller runs, or in methods of one class.

    ## Why is this bad
    `"cuda"` without an index means the *current* device, and the current device stays GPU 0
    unless something sets it. With `--device cuda:1` (or a caller passing `device="cuda:1"`),
    the model and the tensors placed on `device` go to GPU 1 while everything placed with
    `.cuda()` goes to GPU 0; the first operation that meets both fails with

        RuntimeError: Expected all tensors to be on the same device, but found at least two
        devices, cuda:1 and cuda:0!

    or, where the two halves never meet, runs with part of the work on GPU 0, next to whatever
    else uses it. With `--device cpu`, `.cuda()` still needs a GPU. This is the shape of an
    incident in a detector's training code: run with `cuda:1`, the code that followed the
    device option and the code that said `"cuda"` put their tensors on different GPUs.

    Not reported when the file sets the current device on that path
    (`torch.cuda.set_device(...)`, `with torch.cuda.device(...)`, `CUDA_VISIBLE_DEVICES`
    written to the environment, a launcher or helper that sets it such as Accelerate or
    `init_distributed_mode`): then `"cuda"` is the chosen GPU. A `set_device` that runs only on
    one branch (`if args.distributed:`) covers the placements on that branch only. Not reported
    when the choice is itself a bare CUDA device (`device = "cuda" if
    torch.cuda.is_available() else "cpu"`), a rank's GPU (`torch.device("cuda", local_rank)`,
    which TRL103 and TRL305 look at), another tensor's `.device` or an accelerator's device
    (`accelerator.device`), or a literal GPU (`"cuda:1"` beside `.cuda()` is as often two
    models placed on purpose; TRL102 reports the literal); nor for a bare placement under
    `if args.device == "cuda":` or on a branch that cannot run with the chosen placement
    (`if distributed: model.to(device)` / `else: model.cuda()`), in framework-managed code or
    in tests.

    **Preview rule, warning.** Whether it fails depends on the device the run is given: with
    the default (`cuda`, or `cuda:0`) both halves are on GPU 0. The finding assumes that the
    device option exists to be used with another value.

    ## Example
    ```python
    def train_one_epoch(model, loader, optimizer, device):
        model.to(device)
        for images, targets in loader:
            images = images.to(device)
            targets = targets.cuda()
            loss = F.cross_entropy(model(images), targets)
    ```

    ## Use instead
    ```python
    def train_one_epoch(model, loader, optimizer, device):
        model.to(device)
        for images, targets in loader:
            images = images.to(device)
            targets = targets.to(device)
            loss = F.cross_entropy(model(images), targets)
    ```

    ## Fix safety
    In the function that holds both placements (or another method of the same class, for
    `self.device`), when the chosen device is a name or attribute visible at the bare
    placement, the fix replaces `.cuda(...)` with `.to(<device>, ...)` and a bare `"cuda"`
    device argument with the chosen device. It is unsafe: with `--device cpu` the fixed code
    keeps the value on the CPU where `.cuda()` put it on a GPU, and code that relied on GPU 0
    (a second model kept there on purpose) changes. Elsewhere no fix is offered: which device
    the other function should use is not in the code.

    ## Known problems
    The rule cannot show its failure on CPU PyTorch (it needs two GPUs; the CUDA stand-in of
    the fix-execution tests puts every device on the CPU), so it has no oracle; as a warning
    it needs no entry in `no_oracle.toml`. A `--device` option restricted to
    `choices=["cpu", "cuda"]` cannot name another GPU, but is still taken as a choice (with
    `cpu`, `.cuda()` fails instead). Paths are followed through this file's calls only. A
    `device` parameter of a function that no call of its own file passes is decided by the
    project phase: reported when a file of the project that imports its module reads a device
    option (or writes a literal other GPU) and none of those files sets the current device, or
    when nothing in the project imports it (its callers may pass any device); not reported when
    its importers only pass bare devices. A `set_device` that runs unconditionally anywhere in
    the file (in a helper that may be called late) is taken to cover every path.
    """

    code = "TRL107"
    name = "mixed-device-placement"
    severity = Severity.WARNING
    fix = "unsafe"
    preview = True
    markers = ("cuda", "device", "CUDA", "Accelerator", "init_dist")
    project = True

    def finish(self) -> None:
        mixed: MixedPlacements = self.ctx.analysis(MixedPlacements)
        if not mixed.bare():
            return
        choices: DeviceChoices = self.ctx.analysis(DeviceChoices)
        frameworks: Frameworks = self.ctx.analysis(Frameworks)
        chosen = [
            c
            for c in mixed.chosen()
            if frameworks.managed(c.call) is None
            and not choices.in_test_code(c.call)
        ]
        if not chosen:
            return
        evidence = choices.current_device_evidence()
        if any(self._branch_of(e) is None for e in evidence):
            return  # the current device is set on every path
        branches = [(e, self._branch_of(e)) for e in evidence]
        for bare in mixed.bare():
            if frameworks.managed(bare.call) is not None or choices.in_test_code(bare.call):
                continue
            if self._guarded_by_bare_choice(bare.call):
                continue
            ancestors = set(self.ctx.ancestors(bare.call))
            if any(block in ancestors for _, block in branches):
                continue  # on the branch that sets the current device
            match = self._closest(mixed, bare, chosen)
            if match is None:
                continue
            choice, link = match
            self._report(mixed, bare, choice, link, [e for e, _ in branches])

    # -- where the current device is set ------------------------------------------------------

    def _branch_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The block of the innermost `if` (within its function) that `node` runs under, or
        None when it runs on every path (an `if` about the GPU itself counts as every path:
        its other branch is a run without one)."""
        child: cst.CSTNode = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Module):
                return None
            if type(ancestor) is cst.If or type(ancestor) is cst.Else:
                test = ancestor.test if type(ancestor) is cst.If else None
                if test is not None and _about_the_gpu(self.ctx.code(test)):
                    child = ancestor
                    continue
                return child
            child = ancestor
        return None

    def _guarded_by_bare_choice(self, node: cst.CSTNode) -> bool:
        """Under `if args.device == "cuda":`: the choice is the bare GPU there."""
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                return False
            test = getattr(ancestor, "test", None)
            if type(ancestor) not in (cst.If, cst.IfExp) or test is None:
                continue
            if type(test) is not cst.Comparison or len(test.comparisons) != 1:
                continue
            target = test.comparisons[0]
            if type(target.operator) is not cst.Equal:
                continue
            sides = (test.left, target.comparator)
            for side, other in (sides, sides[::-1]):
                if string_literal(side) == "cuda" and not self.ctx.code(other).endswith(".type"):
                    return True
        return False

    # -- which choice the bare placement fights -----------------------------------------------

    def _closest(
        self, mixed: MixedPlacements, bare: BarePlacement, chosen: List[ChosenPlacement]
    ) -> Optional[Tuple[ChosenPlacement, str]]:
        best: Optional[Tuple[ChosenPlacement, str]] = None
        conditions: Conditions = self.ctx.analysis(Conditions)
        for choice in chosen:
            if conditions.exclusive(choice.call, bare.call):
                continue  # branches no run takes together
            link = mixed.one_path(choice.call, bare.call)
            if link is None:
                continue
            if best is None or _LINKS.index(link) < _LINKS.index(best[1]):
                best = (choice, link)
                if link == "function":
                    break
        return best

    # -- the report ---------------------------------------------------------------------------

    def _report(
        self,
        mixed: MixedPlacements,
        bare: BarePlacement,
        choice: ChosenPlacement,
        link: str,
        conditional_setters: List[cst.CSTNode],
    ) -> None:
        device = _short(self.ctx.code(choice.expr), 30)
        if link == "function":
            where = "this function places on"
        else:
            owner = mixed.owner(choice.call)
            if type(owner) is cst.FunctionDef:
                where = f"`{owner.name.value}()` places on"
            else:
                where = "the script places on"
        headline = (
            f"`{bare.form}` places this on the current GPU (GPU 0), but {where} the chosen "
            f"`{device}`"
        )
        what = {
            "option": f"`{device}` comes from the command line or the config",
            "parameter": f"`{device}` is whatever the caller passes",
            "attribute": f"`{device}` is set from the caller's or the user's choice",
        }[choice.origin]
        details = [
            f"{what}; `{bare.form}` means the current device, which stays GPU 0 unless "
            "`torch.cuda.set_device` is called.",
            f"With another GPU chosen (`cuda:1`) the two halves meet on different GPUs: "
            f"{_SAME_DEVICE}.",
        ]
        if conditional_setters:
            details.append("`torch.cuda.set_device` runs only on another branch.")
        details.append(
            f"Place it on `{device}` too, or call `torch.cuda.set_device(...)` once the device "
            "is chosen."
        )
        related: List[Tuple[cst.CSTNode, str]] = [
            (choice.call, f"placed on the chosen `{device}` here")
        ]
        made = choice.made.name if type(choice.made) is cst.Param else choice.made
        if made is not choice.expr:
            related.append((made, "the device is chosen here"))
        fix = self._fix(bare, choice, link) if link in ("function", "class") else None
        if choice.origin == "parameter" and not mixed.caller_in_file(choice.made):
            # Called from another file: what it passes, and whether that file sets the
            # current device, is the project phase's question.
            key = str(len(self.candidates))
            self.candidate(key, bare.node, headline, fix=fix, related=related,
                           help=" ".join(details))
            return
        self.report(bare.node, headline, fix=fix, related=related, help=" ".join(details))

    # -- the project phase --------------------------------------------------------------------

    def facts(self) -> Optional[Dict[str, Any]]:
        choices: DeviceChoices = self.ctx.analysis(DeviceChoices)
        evidence = choices.current_device_evidence()
        return {
            "sets_current_device": any(self._branch_of(e) is None for e in evidence),
            "makes_choice": self.ctx.analysis(MixedPlacements).makes_choice(),
            "imports": sorted(_imported_modules(self.ctx.module)),
        }

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        """A function whose `device` parameter only files of the project pass: reported when a
        file importing it chooses a device (`args.device`, `"cuda:1"`) and none of them sets
        the current device; reported as well when nothing of the project imports it (a
        library function: its callers may pass any device)."""
        candidates = project.candidates(cls.code)
        for display, keys in sorted(candidates.items()):
            path = project.paths.get(display)
            importers = []
            if path is not None:
                importers = _importers(project, cls.code, Path(os.path.abspath(path)))
            if importers:
                facts = [project.facts_of(p, cls.code) or {} for p in importers]
                if any(f.get("sets_current_device") for f in facts):
                    continue
                if not any(f.get("makes_choice") for f in facts):
                    continue  # the callers pass a bare or unknown device
            for key in sorted(keys, key=int):
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    yield diagnostic

    def _fix(
        self, bare: BarePlacement, choice: ChosenPlacement, link: str
    ) -> Optional[PendingFix]:
        expr = choice.expr
        root = expr
        while type(root) is cst.Attribute:
            root = root.value
        if type(root) is not cst.Name or not self.ctx.scopes.lookup(root.value, bare.call):
            return None  # the chosen device is not visible at the bare placement
        if link == "class" and root.value != "self":
            return None
        text = self.ctx.code(expr)
        if "\n" in text:
            return None
        if bare.device is not None:
            edit = self.ctx.replace(bare.device, text)
            return self.unsafe_fix(f"Place it on `{_short(text, 30)}`", edit)
        func = bare.call.func
        if type(func) is not cst.Attribute:
            return None
        args = [text]
        for arg in bare.call.args:
            if arg.star or arg.keyword is None:
                return None
            args.append(f"{arg.keyword.value}={self.ctx.code(arg.value)}")
        receiver = self.ctx.code(func.value)
        edit = self.ctx.replace(bare.call, f"{receiver}.to({', '.join(args)})")
        return self.unsafe_fix(f"Use `.to({_short(text, 30)})` instead of `.cuda()`", edit)


def _importers(project, code: str, path: Path) -> List[Path]:
    """The files of the project that import the module at `path`."""
    stem = path.stem if path.stem != "__init__" else path.parent.name
    root = Path(os.path.abspath(project.root))
    found = []
    for importer in project.files_importing(stem):
        importer = Path(os.path.abspath(importer))
        if importer == path:
            continue
        facts = project.facts_of(importer, code) or {}
        for module in facts.get("imports", []):
            if module_file(module, importer, root, project.is_file) == path:
                found.append(importer)
                break
    return found


def _imported_modules(module: cst.Module) -> Set[str]:
    """Module names this file imports (`engine`, `.engine`, `pkg.engine` for `from pkg import
    engine`), as `module_file` resolves them."""
    found: Set[str] = set()
    for statement in module.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.Import:
                for alias in small.names:
                    found.add(_dotted(alias.name))
            elif type(small) is cst.ImportFrom:
                dots = "." * len(small.relative)
                base = dots + (_dotted(small.module) if small.module is not None else "")
                if base:
                    found.add(base)
                names = small.names
                if isinstance(names, cst.ImportStar):
                    continue
                for alias in names:
                    name = _dotted(alias.name)
                    joined = f"{base}.{name}" if base and not base.endswith(".") else base + name
                    found.add(joined)
    return found


def _dotted(node: cst.CSTNode) -> str:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _about_the_gpu(test: str) -> bool:
    lowered = test.lower()
    return any(word in lowered for word in ("cuda", "gpu", "device"))


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["MixedDevicePlacement"]
