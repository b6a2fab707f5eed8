"""TRL301 ddp-unused-parameters."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

from ...analysis.base.vocabulary import is_test_file
from ...analysis.project.hierarchy import ClassRef, Family, Hierarchy, file_facts
from ...analysis.project.mmconfig import MMConfig, MM_CONFIG_MARKERS
from ...analysis.parallel.wraps import Wraps, is_local, local_name
from ...analysis.project.modules import ALL, Modules, escaped
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule

DDP_ERROR = "Expected to have finished reduction in the prior iteration before starting a new one"
_KINDS = {"parameter": "nn.Parameter", "container": "module container", "module": "submodule"}


class DdpUnusedParameters(Rule):
    """## What it does
    Reports a parameter or submodule that an `nn.Module` subclass registers in `__init__`
    (`self.p = nn.Parameter(...)`, `self.head = nn.Linear(...)`, `register_parameter`,
    `add_module`, `nn.ModuleList`/`nn.Sequential`, a module class of the project) that no method
    of the class, its parents or its subclasses reads, or that `forward` reads only under a
    data-dependent branch (`if random.random() < p:`, `if boxes.numel() > 0:`, `if
    np.any(masks.cpu().numpy() > 0):`), when the project's DDP wrap has neither
    `find_unused_parameters=True` nor `static_graph=True`. A branch on the module's own
    configuration (`if np.sum(self.kinds) == 1 and self.kinds[2]:`) is not data-dependent: it
    takes the same side at every step of one model.

    ## Why is this bad
    DistributedDataParallel all-reduces gradients bucket by bucket as autograd produces them.
    A parameter that took no part in the loss never gets a gradient, its bucket never becomes
    ready, and the first iteration's reduction never finishes. The next iteration fails on every
    rank:

        RuntimeError: Expected to have finished reduction in the prior iteration before starting
        a new one. This error indicates that your module has parameters that were not used in
        producing loss.

    One GPU trains fine, so the bug surfaces only on the multi-GPU run: an MMDetection user
    added `self.class_embed = nn.Parameter(torch.zeros(embed_dims, 512))` to a DETR head's
    `__init__`, never used it, and DDP failed on iteration 2.

    The rule is an error when the project trains with DDP (a DDP wrap, `init_process_group`,
    torchrun or `torch.distributed.launch` usage, `LOCAL_RANK`, an MMEngine/MMDetection config
    that builds the class with `type=`, in it or in its `_base_` files). When the CLI, which
    reads the whole project, finds nothing that trains with DDP, no failure is established and
    the rule is quiet; under flake8, which sees one file, it is a warning then (the DDP launch
    may be in a file flake8 was not given);
    such a config whose DDP wrap sets `find_unused_parameters = True` (top level or
    `model_wrapper_cfg`, not commented out) or `static_graph=True` silences it. A DDP option
    read from configuration is decided against the project's configs: from a config the script
    loads with `Config.fromfile` (`cfg.get("find_unused_parameters", False)`), the finding
    stands when the project's configs exist and none sets it, and is dropped when one does (or
    when the project holds no config to read); from a command-line option the script declares
    (`args.find_unused_parameters`, default False) it is a warning that assumes the flag is
    not passed, dropped when a file of the project passes it. Any other expression may be
    True, and the rule stays quiet. It follows the class's parents and subclasses across the
    files of the project (also files outside the run that the checked files import), through
    packages' re-exports (`from .heads import *`, honouring `__all__`), and into installed
    frameworks: a parent class from mmdet, timm or transformers is read (never imported) from
    the analysed environment (the `python` setting, `$VIRTUAL_ENV`, else trainlint's own
    interpreter) and judged like a class of the project; builtin and typing bases (`object`,
    `abc.ABC`, `Generic[T]`, `Protocol`) read nothing of a subclass. It stays quiet where a
    use may hide: a parent class the environment does not have or whose source cannot be read
    (its `forward` may read the attribute; trainlint does not guess),
    `getattr(self, name)`, iteration over `self.children()`/`modules()`/`parameters()`,
    `self.__dict__`, frozen parameters (`requires_grad_(False)`, `p.requires_grad = False`),
    classes without a `forward` anywhere in their family (abstract bases), classes nothing in
    the project builds (under the CLI: no decorator, no use of the name in their file other
    than the definition, and no other file or notebook naming them; dead code), buffers
    (`register_buffer` is not a parameter), containers built empty and never added to
    (`self.blocks = nn.ModuleList()`: no parameters), and attributes read on another object
    (`self.head.class_embed`), stand-in models in test files unless the test wraps them in DDP,
    and files that wrap their models in a `DistributedDataParallel` of their own (`from model
    import DistributedDataParallel as DDP`, a project class that all-reduces the gradients it
    finds), or that wrap nothing in DDP and average gradients by hand after backward
    (`dist.all_reduce(param.grad.data)`, skipping parameters without one): their process
    group and ranks are no evidence of PyTorch's reducer. Nor is a process group in a project
    whose code never names `DistributedDataParallel` (or a `DDP` alias) outside comments and
    imports no framework that wraps models in DDP for the user (HF Trainer, Accelerate,
    Lightning, DeepSpeed, the MM runners, detectron2, fairseq, ignite, ...): nothing there
    builds a reducer.
    Under flake8, which sees one file, only that file is evidence.

    ## Example
    ```python
    class DETRHead(nn.Module):
        def __init__(self, embed_dims, num_classes):
            super().__init__()
            self.cls_branch = nn.Linear(embed_dims, num_classes)
            self.class_embed = nn.Parameter(torch.zeros(embed_dims, 512))  # never used

        def forward(self, query):
            return self.cls_branch(query)

    model = DDP(DETRHead(256, 80).to(device), device_ids=[local_rank])
    ```

    ## Use instead
    Use the parameter in `forward`, or delete it:
    ```python
    class DETRHead(nn.Module):
        def __init__(self, embed_dims, num_classes):
            super().__init__()
            self.cls_branch = nn.Linear(embed_dims, num_classes)

        def forward(self, query):
            return self.cls_branch(query)

    model = DDP(DETRHead(256, 80).to(device), device_ids=[local_rank])
    ```
    If parameters are unused on purpose (a branch taken on some iterations only), tell DDP:
    `DDP(model, device_ids=[local_rank], find_unused_parameters=True)`.

    ## Fix safety
    The fix adds `find_unused_parameters=True` to the DDP call when that call is in the file of
    the finding. It is unsafe: DDP then traverses the autograd graph every iteration (slower),
    the parameter stays dead weight, and together with reentrant activation checkpointing it
    fails with "Expected to mark a variable ready only once" (TRL302). Using or deleting the
    parameter is usually the better fix.
    """

    code = "TRL301"
    name = "ddp-unused-parameters"
    severity = Severity.ERROR
    severity_note = (
        "warning under flake8 when its one file shows no DDP training, and when DDP's option "
        "comes from a command-line flag assumed not passed"
    )
    fix = "unsafe"
    # Every file that imports may link a class to the script that wraps it in DDP.
    markers = ("class ", "torch", "find_unused", "import ") + MM_CONFIG_MARKERS
    project = True

    def finish(self) -> None:
        modules = self.ctx.analysis(Modules)
        judged = set(modules.classes)
        if is_test_file(self.ctx):
            # Stand-in models of unit tests (an optimizer test's toy model) never train; only
            # those the test itself wraps in DDP are judged.
            judged = {
                local_name(q)
                for site in self.ctx.analysis(Wraps).ddp_sites()
                for q in site.classes
                if is_local(q)
            }
        fix = None
        for cls in modules.classes.values():
            if ALL in cls.frozen or cls.name not in judged:
                continue
            reads = cls.reads()
            for attr in cls.attrs.values():
                if attr.frozen or attr.name in reads or escaped(attr.name, cls.escapes):
                    continue
                if fix is None:
                    fix = self._fix() or False
                # The message is the project phase's: it knows the parents and the DDP wrap.
                self.candidate(f"{cls.name}.{attr.name}", attr.node, "", fix=fix or None)

    def facts(self):
        facts = file_facts(self.ctx)
        config = self.ctx.analysis(MMConfig)
        if config.is_config:
            # Merged with its `_base_` chain in the project phase (`MMConfigs`).
            facts["mm_config"] = config.facts()
        return facts

    def _fix(self) -> Optional[PendingFix]:
        """`find_unused_parameters=True` on the one DDP call of this file that has no option."""
        sites = self.ctx.analysis(Wraps).ddp_sites()
        if len(sites) != 1 or sites[0].options or not sites[0].call.args:
            return None
        return self.unsafe_fix(
            "Let DDP tolerate unused parameters: `find_unused_parameters=True`",
            self.ctx.append_argument(sites[0].call, "find_unused_parameters=True"),
        )

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        candidates = project.candidates(cls.code)
        if not candidates:
            return
        hierarchy = Hierarchy(project, cls.code)
        configs = hierarchy.configs
        for display, keys in sorted(candidates.items()):
            path = _absolute(project, display)
            facts = hierarchy.facts_at(path) or {}
            evidence = hierarchy.evidence(path)
            if hierarchy.tolerates_unused(evidence) is not None:
                continue
            signals = training_signals(project, hierarchy, evidence)
            # A DDP option read from a command-line option nobody passes: assumed off.
            assumed = hierarchy.assumptions(evidence)
            for key in sorted(keys):
                name, attr = key.split(".", 1)
                ref = ClassRef(path, name)
                found = _message(hierarchy, evidence, facts, ref, attr)
                if found is None:
                    continue
                message, help = found
                if assumed:
                    message += " (assuming " + " and ".join(assumed) + ")"
                subclasses = hierarchy.subclasses(ref)
                family = [ref.name] + [sub.name for sub in subclasses]
                if configs.naming(family, tolerant=True):
                    continue
                if project.complete and not _may_be_built(project, hierarchy, [ref, *subclasses]):
                    continue  # nothing in the project names the class: no run builds it
                named = signals or configs.naming(family)
                if not named and project.complete:
                    # The CLI sees the whole project: nothing in it trains with DDP, so no
                    # reduction waits for this parameter.
                    continue
                diagnostic = project.candidate(
                    display,
                    cls.code,
                    key,
                    message=message,
                    help=help,
                    severity=Severity.ERROR if named and not assumed else Severity.WARNING,
                )
                if diagnostic is not None:
                    yield diagnostic


def _may_be_built(project, hierarchy: Hierarchy, refs: List[ClassRef]) -> bool:
    """Can a run build one of `refs` (a class and its subclasses)? Its own file uses its name
    other than to define it (a call, a base, `__all__`, a registry string) or decorates it, or
    another file of the project, a notebook's code included, names it (a file defining a class
    of the same name of its own means that one). A class nobody names is dead code: no DDP run
    holds its parameters."""
    for ref in refs:
        facts = hierarchy.class_facts(ref)
        if facts is None or facts.get("named_in_file", True):
            return True
        pattern = re.compile(rf"\b{re.escape(ref.name)}\b")
        for path in project.files_matching(pattern):
            if path == ref.path:
                continue
            other = hierarchy.facts_at(path)
            if other is None or ref.name not in other.get("classes", {}):
                return True
    return False


def training_signals(project, hierarchy: Hierarchy, evidence) -> List[str]:
    """Why the project trains these classes with DDP ("train.py: init_process_group", ...),
    from the code of the files that import them; empty when nothing says so. MM-style configs
    are the other signal (`MMConfigs`)."""
    return [
        f"{hierarchy.display(path)}: {signal}" for path, signal in hierarchy.ddp_signals(evidence)
    ]


def _absolute(project, display: str) -> Path:
    return Path(os.path.abspath(project.paths.get(display, Path(display))))


def _message(
    hierarchy: Hierarchy, evidence, facts: dict, ref: ClassRef, attr: str
) -> Optional[Tuple[str, str]]:
    """The finding's headline and help, or None when the attribute is (or may be) used."""
    class_facts = facts.get("classes", {}).get(ref.name)
    if class_facts is None or attr not in class_facts.get("attrs", {}):
        return None
    registered = class_facts["attrs"][attr]
    family: Family = hierarchy.family(ref)
    if not family.complete or not family.is_module or not family.has_forward:
        return None
    if family.frozen(attr) or family.reads_unconditionally(attr):
        return None
    outside = hierarchy.frozen_outside(evidence)
    if attr in outside or ALL in outside or hierarchy.read_outside(ref.path, attr):
        return None
    if registered["kind"] == "call" and not _has_parameters(hierarchy, registered, ref.path):
        return None
    what = _KINDS.get(registered["kind"], "submodule")
    readers = family.branch_readers(attr)
    if readers:
        return (
            f"`self.{attr}` ({what} of `{ref.name}`) is read only under a data-dependent branch "
            f"(in `{readers[0]}`)",
            "Under DDP an iteration that skips it leaves its gradient reduction unfinished and "
            f'the next iteration raises "{DDP_ERROR}". Make every iteration use it, or pass '
            "`find_unused_parameters=True` to DDP.",
        )
    return (
        f"`self.{attr}` ({what}) is registered in `{ref.name}` but nothing in its class "
        "hierarchy reads it",
        f"No method of `{ref.name}` (nor of its parents or subclasses) reads it, so under DDP "
        "it gets no gradient: the first iteration's gradient reduction never finishes and "
        f'iteration 2 raises "{DDP_ERROR}". Use it, delete it, or pass '
        "`find_unused_parameters=True` to DDP.",
    )


def _has_parameters(hierarchy: Hierarchy, registered: dict, importer: Path, depth=0) -> bool:
    """Does a submodule built by `Callee(...)` own parameters? Only project classes can tell."""
    resolved = hierarchy.resolve(registered.get("callee") or "?", importer)
    if not isinstance(resolved, ClassRef) or depth > 4:
        return False
    family = hierarchy.ancestry(resolved)
    if not family.complete or not family.is_module:
        return False
    for member, facts in family.members:
        for sub in facts.get("attrs", {}).values():
            if sub["kind"] != "call" or _has_parameters(hierarchy, sub, member.path, depth + 1):
                return True
    return False


__all__ = ["DdpUnusedParameters", "training_signals"]
