"""TRL305 ddp-without-set-device."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from ...analysis.base.callgraph import CallGraph
from ...analysis.base.calls import argument, keyword
from ...analysis.base.frameworks import Frameworks
from ...analysis.base.names import dotted_name
from ...analysis.base.nodes import is_self_attr
from ...analysis.parallel.parallel import INIT_PROCESS_GROUP, Parallel
from ...analysis.project.hierarchy import Hierarchy, candidate_files, import_qualnames
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule

_CUDA = re.compile(r"\bcuda\b|nccl|device_ids", re.I)
_SETTERS = ("set_device", "set_device_index")
# Launchers that choose the device for each process themselves.
_LAUNCHERS = ("lightning", "accelerate", "mmengine", "deepspeed")


class DdpWithoutSetDevice(Rule):
    """## What it does
    Reports `torch.distributed.init_process_group(...)` with the NCCL backend (or no backend, or
    one chosen at run time whose default is not known to be another backend: a `--backend`
    option defaulting to `"gloo"` is the gloo the script runs with) in a script that uses CUDA, when nothing in the file sets the
    process's current device: no `torch.cuda.set_device(...)`, no
    `torch.accelerator.set_device_index(...)`, no `with torch.cuda.device(...)`, no `device_id=`
    argument to `init_process_group`, no per-process `CUDA_VISIBLE_DEVICES`.

    ## Why is this bad
    Every process starts with `cuda:0` as its current device. Moving the model with
    `.to(local_rank)` does not change that: NCCL communicators, `barrier()`, tensors created with
    `device="cuda"` or `.cuda()`, and CUDA contexts all land on GPU 0. Typical results are a
    second ~500 MB context per process on GPU 0 (out of memory there first), collectives that
    hang, and

        NCCL error: invalid usage ... Duplicate GPU detected : rank 1 and rank 0 both on CUDA
        device 1a000

    Calling `torch.cuda.set_device(local_rank)` before `init_process_group` makes each process
    use its own GPU for everything that says "cuda". Scripts run by Lightning, Accelerate,
    MMEngine or DeepSpeed launchers are not reported: those set the device. Nor is a file that
    calls a function of another project file that sets the device (`make_data_parallel()` of
    model.py calling `torch.cuda.set_device(device)`, directly or through the helper file's own
    functions), or builds a class of another file whose `__init__` sets it (a trainer built
    right after the group starts), also through a star import (`from examples import *`); the
    project phase follows the call (under flake8, only this file is seen).
    An `init_process_group` inside a function this file never runs or names (`setup()` of a
    utils package), or in a method of a class it never builds or names (a `Trainer` whose
    `__init__` starts the group), is judged by the project files that import it: reported when they exist and
    none of them sets the device, not reported when one does (the FSDP example's script calls
    `setup()` and then `torch.cuda.set_device(local_rank)`) or when no importer is found.
    A group of one process (`world_size=1`, written as a literal: a single-GPU run that only
    needs a group for SyncBatchNorm) is not reported: that process's GPU is cuda:0, the
    current device already.
    This rule owns a missing `set_device` in a file that initialises a process group
    (`Parallel.process_group_inits`): TRL103 leaves that cause to it.

    ## Example
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("nccl")
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    ```

    ## Fix safety
    The fix inserts `torch.cuda.set_device(<local rank>)` on the line before
    `init_process_group`, when an expression holding the local rank is in reach there (a
    variable read from `LOCAL_RANK` or called `local_rank`, the process index of an
    `mp.spawn` worker, `args.local_rank`, or `os.environ["LOCAL_RANK"]` in a torchrun script)
    and `torch` is imported. It is safe: it only changes which GPU "cuda" means in each
    process, to the one the process was launched for. A script whose backend may also be gloo
    (`"nccl" if torch.cuda.is_available() else "gloo"`) runs without a GPU per process too
    (on CPU, or with more processes than GPUs), where that call raises: it gets no fix.
    """

    code = "TRL305"
    name = "ddp-without-set-device"
    severity = Severity.WARNING
    fix = "safe"
    # Measured on held-back real code at first look: 1 true and 2 false findings (a helper of
    # another file setting the device, a one-process group), both shapes since fixed; holdout79
    # added 7 false ones (set_device in a trainer class or a star-imported helper, fixed; a
    # lab's ranks that pass their GPU to every call, left). It stays a preview rule until
    # its first looks show 90 %.
    preview = True
    # "set_device": a helper file that sets the device for the file that initialises the group.
    markers = ("init_process_group", "set_device")
    project = True

    def finish(self) -> None:
        ctx = self.ctx
        self.sets_device_in = self._functions_setting_device()
        # Keys of candidates whose init_process_group sits in a function nothing in this file
        # runs (`setup()` of a utils module): the files that import it decide.
        self.inits_for_importers: List[str] = []
        if not _CUDA.search(ctx.source.text):
            return  # CPU-only code: gloo is the default there
        parallel: Parallel = ctx.analysis(Parallel)
        frameworks: Frameworks = ctx.analysis(Frameworks)
        if any(frameworks.uses(name) for name in _LAUNCHERS):
            return
        if parallel.sets_device():
            return
        for call in ctx.nodes(cst.Call):
            if not ctx.names.is_(call.func, INIT_PROCESS_GROUP):
                continue
            if frameworks.managed(call) or keyword(call, "device_id") is not None:
                continue
            if _literal_int(keyword(call, "world_size")) == 1:
                continue  # one process: its GPU is cuda:0, the current device already
            backend = argument(call, 0, "backend")
            which = self._backend(backend)
            if which is None:
                continue
            key = f"init:{len(self.candidates)}"
            if self._run_only_by_importers(call):
                self.inits_for_importers.append(key)
            self.candidate(
                key,
                call,
                f"`init_process_group` with {which}, but the current CUDA device is never set",
                help=(
                    "Every process keeps cuda:0 as its current device, so NCCL's communicator, "
                    '`barrier()` and anything created with "cuda" land on GPU 0: extra memory '
                    'there, hangs, or "Duplicate GPU detected". Call '
                    "`torch.cuda.set_device(local_rank)` before `init_process_group`."
                ),
                # No fix where the script also runs with gloo (no GPU per process there).
                fix=None if self._may_be_gloo(backend) else self._fix(call, parallel),
            )

    def _run_only_by_importers(self, call: cst.Call) -> bool:
        """Is `call` inside a module-level function this file never calls or names (a helper
        for other files: `def setup(): dist.init_process_group("nccl")` in utils), or in a
        method of a module-level class it never builds or names (a `Trainer` whose
        `__init__` starts the group, built by the training script)?"""
        function = None
        for ancestor in self.ctx.ancestors(call):
            if type(ancestor) is cst.FunctionDef:
                function = ancestor
        if function is None:
            return False
        owner: cst.CSTNode = function
        block = self.ctx.parent(function)
        cls = self.ctx.parent(block) if type(block) is cst.IndentedBlock else None
        if isinstance(cls, cst.ClassDef):
            owner = cls
        if self.ctx.parent(owner) is not self.ctx.module:
            return False
        assert isinstance(owner, (cst.FunctionDef, cst.ClassDef))
        # Called, passed to mp.spawn, or otherwise used here (a member of that name too).
        return not self.ctx.analysis(CallGraph).named_in_file(owner, members=True)

    # -- the project phase: set_device in a helper of another file --------------------------

    def _functions_setting_device(self) -> List[str]:
        """Module-level functions of this file that set the current CUDA device, directly or
        through the file's other functions (`make_data_parallel` calling set_device), and
        module-level classes that set it when built (a `Trainer` whose `__init__` calls
        set_device, or a function or method of the file that does)."""
        functions = {
            statement.name.value: statement
            for statement in self.ctx.module.body
            if type(statement) is cst.FunctionDef
        }
        direct = set()
        calls: Dict[str, Set[str]] = {}
        for name, function in functions.items():
            calls[name] = set()
            for node in self.ctx.tree.descendants(function):
                if type(node) is not cst.Call:
                    continue
                func = node.func
                if type(func) is cst.Attribute and func.attr.value in _SETTERS:
                    direct.add(name)
                elif type(func) is cst.Name and func.value in functions:
                    calls[name].add(func.value)
        found = set(direct)
        changed = True
        while changed:
            changed = False
            for name, callees in calls.items():
                if name not in found and callees & found:
                    found.add(name)
                    changed = True
        classes = [s for s in self.ctx.module.body if type(s) is cst.ClassDef]
        return sorted(found | {c.name.value for c in classes if self._built_sets_device(c, found)})

    def _built_sets_device(self, cls: cst.ClassDef, functions: Set[str]) -> bool:
        """Does building `cls` set the current device: its `__init__` calls set_device, a
        function of `functions`, or a method of the class that calls set_device?"""
        methods = {
            statement.name.value: statement
            for statement in getattr(cls.body, "body", ())
            if type(statement) is cst.FunctionDef
        }

        def sets(node: cst.CSTNode, follow: bool) -> bool:
            for call in self.ctx.tree.descendants(node):
                if type(call) is not cst.Call:
                    continue
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in _SETTERS:
                    return True
                if type(func) is cst.Name and func.value in functions:
                    return True
                if follow and type(func) is cst.Attribute and is_self_attr(func, func.attr.value):
                    method = methods.get(func.attr.value)
                    if method is not None and sets(method, False):
                        return True
            return False

        init = methods.get("__init__")
        return init is not None and sets(init, True)

    def _called_names(self) -> List[str]:
        """`helper` and `module.helper` called in this file (what imports may resolve)."""
        found = set()
        for call in self.ctx.nodes(cst.Call):
            name = dotted_name(call.func)
            if name is not None and name.count(".") <= 1:
                found.add(name)
        return sorted(found)

    def facts(self) -> Optional[Dict[str, object]]:
        return {
            "imports": import_qualnames(self.ctx),
            "called": self._called_names() if self.candidates else [],
            "sets_device_in": self.sets_device_in,
            "star_imports": list(self.ctx.scopes.module_scope.star_imports),
            "sets_device": self.ctx.analysis(Parallel).sets_device(),
            "inits_for_importers": self.inits_for_importers,
        }

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        for hierarchy, display, path, keys in candidate_files(project, cls.code):
            helper = _device_setting_helper(hierarchy, path)
            for_importers = (hierarchy.facts_at(path) or {}).get("inits_for_importers", ())
            for key in keys:
                if helper is not None:
                    continue  # `make_data_parallel()` of model.py calls set_device
                if key in for_importers and not _importers_leave_device_unset(hierarchy, path):
                    continue  # the scripts that run this helper set the device, or none is seen
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    yield diagnostic

    def _backend(self, backend: Optional[cst.BaseExpression]) -> Optional[str]:
        """How the message names the backend, or None when it is not NCCL: a literal, the
        default (NCCL for CUDA tensors), a name bound to literals, or a run-time choice whose
        default the file shows (`add_argument("--backend", default="gloo")`, a config
        dataclass's `backend: str = "gloo"`)."""
        if backend is None:
            return "the default backend (NCCL on GPUs)"
        value = _literal(backend)
        if value is None and type(backend) is cst.Name:
            bindings = self.ctx.scopes.lookup(backend.value, backend)
            values = [_literal(b.value) if b.value is not None else None for b in bindings]
            if values and all(v is not None for v in values):
                nccl = any("nccl" in v.lower() for v in values)  # type: ignore[union-attr]
                return "NCCL" if nccl else None
        if value is None:
            default = self._default_of(backend)
            if default is not None and "nccl" not in default.lower():
                return None  # run as configured by default, the group is not NCCL
            if default is not None:
                return f"NCCL (the default of `{self.ctx.code(backend)}`)"
            return "a run-time backend (usually NCCL on GPUs)"
        return "NCCL" if "nccl" in value.lower() else None

    def _default_of(self, expr: cst.BaseExpression) -> Optional[str]:
        """The literal default of a command-line or config option read as `args.<name>`."""
        if type(expr) is not cst.Attribute:
            return None
        name = expr.attr.value
        flags = {f"--{name}", f"--{name.replace('_', '-')}"}
        for node in self.ctx.nodes(cst.AnnAssign):
            target = node.target
            if type(target) is cst.Name and target.value == name and node.value is not None:
                if any(type(a) is cst.ClassDef for a in self.ctx.ancestors(node)):
                    return _literal(node.value)
        for call in self.ctx.nodes(cst.Call):
            if type(call.func) is not cst.Attribute or call.func.attr.value != "add_argument":
                continue
            if any(_literal(arg.value) in flags for arg in call.args if arg.keyword is None):
                default = keyword(call, "default")
                return _literal(default) if default is not None else None
        return None

    def _may_be_gloo(self, backend: Optional[cst.BaseExpression]) -> bool:
        """The script also runs with gloo (`"nccl" if torch.cuda.is_available() else "gloo"`,
        a name bound to either): a configuration without a GPU per process, where an inserted
        `set_device(local_rank)` raises."""
        if backend is None:
            return False
        values: List[Optional[cst.BaseExpression]] = [backend]
        if type(backend) is cst.Name:
            values = [b.value for b in self.ctx.scopes.lookup(backend.value, backend)]
        for value in values:
            if value is None:
                continue
            for node in [value, *self.ctx.tree.descendants(value)]:
                text = _literal(node)
                if text is not None and "gloo" in text.lower():
                    return True
        return False

    def _fix(self, call: cst.Call, parallel: Parallel) -> Optional[PendingFix]:
        line = self._statement_line(call)
        if line is None:
            return None
        torch_name = parallel.module_name("torch", call)
        rank = parallel.local_rank_expr(call)
        if torch_name is None or rank is None:
            return None
        code = f"{torch_name}.cuda.set_device({rank})"
        return self.safe_fix(
            f"Set this process's GPU first: `{code}`", self.ctx.line_before(line, code)
        )

    def _statement_line(self, call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        for ancestor in self.ctx.ancestors(call):
            if type(ancestor) is cst.SimpleStatementLine:
                holder = self.ctx.parent(ancestor)
                if type(holder) in (cst.IndentedBlock, cst.Module):
                    return ancestor
                return None
            if isinstance(ancestor, (cst.BaseCompoundStatement, cst.Lambda)):
                return None
        return None


def _literal_int(node: Optional[cst.CSTNode]) -> Optional[int]:
    if type(node) is cst.Integer:
        return int(node.value)
    return None


def _literal(node: Optional[cst.CSTNode]) -> Optional[str]:
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _importers_leave_device_unset(hierarchy: Hierarchy, path: Path) -> bool:
    """Do project files import the helper file at `path`, and does none of them set the
    current device? With no importer in sight (a library module, or flake8's one file) the
    path the script takes is unknown: no."""
    importers = hierarchy.importers(path) - {Path(os.path.abspath(path))}
    if not importers:
        return False
    return not any((hierarchy.facts_at(i) or {}).get("sets_device") for i in importers)


def _device_setting_helper(hierarchy: Hierarchy, path: Path) -> Optional[str]:
    """A function of another project file, called in `path`, that sets the current device."""
    facts = hierarchy.facts_at(path) or {}
    imports = facts.get("imports", {})
    for called in facts.get("called", ()):
        head, _, rest = called.partition(".")
        imported = imports.get(head)
        if imported is None and not rest:
            # `from examples import *` ... `distributed_model(model, args)`
            for module in facts.get("star_imports", ()):
                star_file = hierarchy.module_file(module, path)
                star_facts = (hierarchy.facts_at(star_file) or {}) if star_file else {}
                if called in star_facts.get("sets_device_in", ()):
                    return f"{module}.{called}"
            continue
        if imported is None:
            continue
        qualified = f"{imported}.{rest}" if rest else imported
        module, _, function = qualified.rpartition(".")
        if not module:
            continue
        helper_file = hierarchy.module_file(module, path)
        if helper_file is None:
            continue
        helper_facts = hierarchy.facts_at(helper_file) or {}
        if function in helper_facts.get("sets_device_in", ()):
            return qualified
    return None
