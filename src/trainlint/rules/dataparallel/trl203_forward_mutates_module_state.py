"""TRL203 forward-mutates-module-state."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from ...analysis.base.vocabulary import LOSS_CALLEE
from ...analysis.parallel.state_writes import (
    HookWrite,
    StateWrite,
    StateWrites,
    enabler_pattern,
)
from ...analysis.parallel.wraps import DP_KIND, Wraps
from ...analysis.project.hierarchy import (
    ClassRef,
    Family,
    Hierarchy,
    classes_run_by,
    file_facts,
)
from ...analysis.project.construction import Construction
from ...analysis.project.mentions import Mentions
from ...analysis.project.wrapped_model import WrappedModels
from ...analysis.project.modules import Modules, forward_reach
from ...diagnostics import Diagnostic, Severity
from ..base import Rule


class ForwardMutatesModuleState(Rule):
    """## What it does
    Reports an `nn.Module` whose `forward` (or a method `forward` calls) or whose forward hook
    (`register_forward_hook(fn)` / `register_forward_pre_hook(fn)`, with `fn` a bound method,
    a closure, a lambda or a factory returning one) writes state of the module:
    `self.x = ...`, `self.cache[k] = ...`, `self.feats.append(...)`, `bank[name] = output` in a
    hook made by `get_activation(name, self.core_out)`.

    It is an error when the project wraps the class in `nn.DataParallel` (an instance of it or
    of a subclass, or of a class whose `__init__` builds it as a submodule; also through a
    helper such as `parallelize(config, model)`). It is a warning when a file that uses the
    class's module (imports it, directly or not), or the project, wraps a model whose class
    cannot be named (built by a registry or a dynamic import), in a file that can build objects
    of this class: the class's file is that file or one it imports, by import lines or by
    `import_module` of a literal module or a package prefix (`import_module("model." + name)`
    may load any module of package `model`, not a loss of package `loss`; an `import_module` of
    a name nobody can tell may load anything), and where the code that builds that model can
    reach the class: the code that builds and changes the wrapped value (its assignments,
    attributes set on it, `model.add_module(...)`, helpers it is handed to; a metric loss built
    beside it is not part of it), or, when that value comes from a caller or leaves its
    function, the wrapping file and the files that import it, and what they name, followed
    through helpers, registries (a decorator's or a module-level `MODELS["unet"] = UNet`), a
    module named as a whole (`getattr(flows, args.flow)(channels=3)`: what it offers that
    accepts that call) and a package that imports its own
    submodules by name (a layer that only a model nobody builds uses is never run; a lookup by
    computed name, `globals()[name]`, may build anything). A class named like a loss
    (`ComboLoss`, a criterion) is not taken for such an unnamed model: scripts build their
    criterion beside the model and wrap the model (a loss held by a wrapped model the analysis
    names is still an error). Otherwise the rule is quiet: in
    projects without DataParallel, or that use it only around other, known models (whose
    classes and submodules do not include this one), or only with one device (`device_ids=[gpu]`,
    or the `device_ids` a DistributedDataParallel wrap of the same file is given, which holds
    one device: DataParallel then calls the module itself), the writes are harmless
    (DistributedDataParallel runs one model per process).

    ## Why is this bad
    On every forward, DataParallel copies the module to each GPU (a shallow copy) and runs the
    copies in threads. The PyTorch documentation warns that "any updates to the running module
    in forward will be lost": an attribute set in `forward` is set on a copy that is thrown away
    (`model.last_attention` is never updated). Worse, containers created in `__init__` (a dict
    or list on `self`) are the same object in every copy: all replica threads write into it at
    once, and the values read back mix tensors from different GPUs and different graphs. The
    depth-estimation models that store decoder features with `self.core_out[name] = output` in
    forward hooks train on one GPU and die on several with

        RuntimeError: Trying to backward through the graph a second time (or directly access
        saved tensors after they have already been freed)

    or with "Expected all tensors to be on the same device".

    Not reported: in-place updates of the module's own tensors (`self.running_mean.mul_(m)`,
    `self.num_batches_tracked += 1` on a registered buffer, also one a base class of the same
    file registers, `self.queue[:, i] = k`), which
    DataParallel keeps for the replica on `device_ids[0]` (BatchNorm relies on it); writes
    after a `continue`, `return` or `raise` of their block, which never run; writes under
    `torch.no_grad()` / `torch.inference_mode()` (a block or the method's decorator); writes on
    the eval-only branch of `self.training` (inference caches; a cache filled on the training
    branch is reported); local variables and local containers; strings and numbers put into a
    container (bookkeeping, no graph), and fresh CPU tensors of torch factories
    (`self.targets[n] = torch.arange(n)`, no `device=`, no `requires_grad=True`: no graph and
    no GPU, whichever replica stores them); a value every replica computes alike, stored into a
    shared object (`self.config.num_buckets = n` with `n` from constants, the module's
    attributes and `x.shape[1]`: DataParallel splits only the batch dimension, so the racing
    writes agree); a write into an object the same call made a few statements before, on
    every path to the write (`self.weight = target.clone()`, then `self.weight[self.weight
    == 0] = w0`, or `self.attack = make_attack()` then `self.attack.transform = t`: on a
    replica that object is the replica's own; an alias such as `self.w = self.shared` makes
    none); a flag updated the same way on every call
    (`self.training |= self.export`: the next forward applies it again); classes that are not
    modules, such as a legacy `torch.autograd.Function` keeping `self.saved = x` for its own
    `backward` (it is built afresh for each call and never replicated). An attribute set in
    `forward` (not in a hook) is only
    lost on the replica, so it is reported only when it matters (an attribute of a
    submodule `__init__` registers, `self.head.last_scores = s`, is one too: DataParallel
    replicates submodules, so the replica sets it on its own copy; that the submodule's own
    methods read it in a later call is not seen, a known problem): read by a method of the class
    or its relatives, or by a module holding it as a submodule in a method outside what its
    forward runs (`def attention_map(self): return self.encoder.last_attention`; a read in the
    holder's forward right after calling the submodule reads the replica's own copy, also
    through a getter of the submodule, `self.backbone.get_layers()`, when every call of the
    getter in the project's texts is one a holder makes in what its forward runs or in its
    `__init__`; under flake8 the other files cannot be counted, and the getter counts as read
    after the call), or read on
    a model object in the project where it may be the wrapped module: through the
    wrapper's `.module` (`model.module.list_att`), or in a file that wraps a model itself or
    builds the class by name (a plain `model.list_att` in a demo that does neither reads a model
    nobody wrapped, `build(opt, data_parallel=False)`: on the wrapper it would raise
    AttributeError; a read inside a function the project only ever calls from a module's
    `forward`, handing it the module itself, `self.board.collect(self)`, reads the taps of
    the replica that runs that call, as it left them), and neither a replica's
    own cache (`self.x = self.x.to(device)`, a write under `if self.x is None:`) nor a scratch
    value read back only later in the same method, nor a write under `if self.x is not None:`
    (or `if self.x:`) whose `self.x` starts as None in `__init__` and is set otherwise only by
    methods `forward` does not reach, when nothing in the files that use the class calls one of
    them or sets `.x` (a dropout's mask-replay context made only by `init_context()`: the
    branch never runs), nor a helper's write where every call of
    the helper from `forward` runs under `torch.no_grad()` or under an `if` that tests what it
    sets (`if max_pos > self.weights.size(0): self.make_weights(max_pos)`: a position table
    each replica rebuilds when it finds it too short), nor state that each call sets afresh and
    only that call reads (a decoder's recurrent state reset at the top of `forward` and read by
    its step helper; another method that reads it must set it first too), nor a value
    computed only from the module's own state, under tests of that state, and read only later in
    that call (`if self.last_sched.item() > 0: self.n_coarse = self.sched[1][...]` before the
    sampling helpers: every replica computes what the original would). Forward hooks are different: they keep the
    `self` they were made with, the original module, so every write of a hook is shared. A
    hook registered only behind a switch nothing turns on is not reported: under `if
    self.gradcam:` with `gradcam=False` the constructor's default, or in a method
    (`set_gradcam_hook()`) the class calls only from there, when no code of the project passes
    `gradcam=`, touches `.gradcam` on an object or calls `.set_gradcam_hook()` (a flag passed by
    position from another file is not seen: a known problem).

    Under flake8, which sees one file, the DataParallel wrap must be in the same file.

    ## Example
    ```python
    class DepthModel(nn.Module):
        def __init__(self, backbone):
            super().__init__()
            self.backbone = backbone
            self.features = {}
            backbone.layer4.register_forward_hook(self._store)

        def _store(self, module, inputs, output):
            self.features["layer4"] = output

        def forward(self, x):
            depth = self.backbone(x)
            return depth, self.features["layer4"]

    model = nn.DataParallel(DepthModel(resnet_backbone()).cuda())
    ```

    ## Use instead
    ```python
    class DepthModel(nn.Module):
        def __init__(self, backbone):
            super().__init__()
            self.backbone = backbone

        def forward(self, x):
            features = {}
            handle = self.backbone.layer4.register_forward_hook(
                lambda module, inputs, output: features.__setitem__("layer4", output)
            )
            try:
                depth = self.backbone(x)
            finally:
                handle.remove()
            return depth, features["layer4"]

    model = nn.DataParallel(DepthModel(resnet_backbone()).cuda())
    ```
    or return the values from `forward`, or train with DistributedDataParallel.

    ## Fix safety
    No fix: where the values should go instead (returned from `forward`, kept local to it, or a
    switch to DistributedDataParallel) is the author's choice, and no single edit is safe for
    all of them (see docs/architecture.md, "Fixes and fix safety").
    """

    code = "TRL203"
    name = "forward-mutates-module-state"
    severity = Severity.WARNING
    severity_note = "error when the class is wrapped in DataParallel in the project"
    project = True
    # "import": a package's __init__.py re-exporting model classes (`from .core import Net`)
    # holds no torch code, but the hierarchy needs its imports to resolve `models.Net`, and a
    # helper that builds a model from imported classes is on the way from a wrap to them.
    markers = ("class ", "torch", "import")

    def finish(self) -> None:
        self.writes: StateWrites = self.ctx.analysis(StateWrites)
        self.recorded: Dict[str, int] = {}
        self.hooked: Dict[str, Set[str]] = {}
        # class -> method -> attributes assigned by the method or what it calls (below), and
        # class -> what a call of the module runs: the project phase tells a reader of a value
        # lost with the replica from a method that sets it afresh before use.
        self.sets_afresh: Dict[str, Dict[str, List[str]]] = {}
        self.reach: Dict[str, List[str]] = {}
        # Every class with a base: whether it is an nn.Module is decided across files.
        for cls in self.ctx.analysis(Modules).classes.values():
            methods = {
                s.name.value: s for s in cls.node.body.body if type(s) is cst.FunctionDef
            }
            self.reach[cls.name] = sorted(forward_reach(cls))
            self.sets_afresh[cls.name] = self._assigned_through_calls(cls, methods)
            reached = [methods[name] for name in sorted(forward_reach(cls))]
            for method in reached:
                self._record_method(cls.name, method, reached, cls.node)
            for hook in self.writes.hooks_in(cls.node):
                self._record_hook(cls.name, hook, self.writes.hook_dormant_until(hook, cls.node))

    # -- candidates ---------------------------------------------------------------------------

    def _record_method(
        self,
        cls: str,
        method: cst.FunctionDef,
        reached: List[cst.FunctionDef],
        node: cst.ClassDef,
    ) -> None:
        seen: Set[str] = set()
        helper = method.name.value != "forward"
        # A helper's finding names the method with its class; that `forward` calls it is a
        # detail for the help (long class and attribute names keep the headline short).
        name = method.name.value
        where = f"`{cls}.{name}`" if helper else f"`forward` of `{cls}`"
        reached_by = f"`forward` calls `{name}`. " if helper else ""
        callers = [m for m in reached if m is not method]
        for write in self.writes.in_method(method):
            if write.attr in seen:
                continue
            if helper and self.writes.quiet_at_every_call(method, callers, write.attr):
                continue  # called only under no_grad, or to rebuild the cache it tests
            seen.add(write.attr)
            lost = write.kind == "assign"  # set on the replica: matters only if read
            if lost and self.writes.carries_over(write):
                what = f"advances `self.{write.attr}`, lost with the replica"
                help = (
                    "Under nn.DataParallel each forward runs on fresh per-GPU replicas, so "
                    f"`self.{write.attr}` stays at its initial value (the update is lost with "
                    "the replica). Keep such state outside the module, or return it from "
                    "forward."
                )
                effect = "carried"  # reads its own lost value: wrong at every call
            else:
                what, help = _what(write)
                effect = "lost" if lost else "shared"
            reached_names = {m.name.value for m in reached}
            enablers = self.writes.dormant_until(write, node, reached_names)
            if enablers is not None:
                # `if self.context_stack is not None:` with the stack made only by
                # `init_context()`: the project phase looks for a call of it (or a write of
                # the attribute from outside) before the branch counts as running.
                effect = f"{effect}@{','.join(enablers)}"
            message = f"{where} {what}"
            self._add(cls, write.node, message, reached_by + help, write.attr, effect)

    def _record_hook(self, cls: str, hook: HookWrite, enablers: Optional[List[str]]) -> None:
        # One finding per attribute: ZoeDepth registers the same store on six layers.
        # A hook registered only behind a switch nothing turns on (`if self.gradcam:` with
        # `gradcam=False` by default) waits for the project phase to find who turns it on.
        effect = "shared" if enablers is None else f"shared@{','.join(enablers)}"
        seen = self.hooked.setdefault(cls, set())
        for write in hook.writes:
            if write.attr in seen:
                continue
            seen.add(write.attr)
            node = write.node if hook.inside else hook.hook
            # A hook keeps the `self` it closed over: the original module, which every
            # replica's thread then writes, attribute or container alike.
            what, help = _what(write, shared=True)
            self._add(cls, node, f"a forward hook of `{cls}` {what}", help, write.attr, effect)

    def _add(
        self, cls: str, node: cst.CSTNode, message: str, help: str, attr: str, effect: str
    ) -> None:
        # The key carries what the project phase needs: class, attribute, and the effect:
        # "shared" (a container or a hook's write: races), "lost" (set on the replica: matters
        # only if read after the call), "carried" (advanced from its previous value).
        number = self.recorded.get(cls, 0)
        self.recorded[cls] = number + 1
        self.candidate(f"{cls}:{number}:{attr}:{effect}", node, message, help=help)

    def _assigned_through_calls(self, cls, methods) -> Dict[str, List[str]]:
        assigned = {
            name: {w.attr for w in self.writes.in_method(node) if w.kind == "assign"}
            for name, node in methods.items()
        }
        out: Dict[str, List[str]] = {}
        for name in methods:
            seen, todo, attrs = {name}, [name], set()
            while todo:
                current = todo.pop()
                attrs |= assigned.get(current, set())
                info = cls.methods.get(current)
                for callee in (info.calls | info.branch_calls) if info is not None else ():
                    if callee in methods and callee not in seen:
                        seen.add(callee)
                        todo.append(callee)
            if attrs:
                out[name] = sorted(attrs)
        return out

    def facts(self) -> Optional[Dict[str, object]]:
        facts = file_facts(self.ctx)
        facts["call_reach"] = self.reach
        facts["sets_afresh"] = self.sets_afresh
        facts.update(self.ctx.analysis(Mentions).facts())
        facts.update(self.ctx.analysis(WrappedModels).facts())
        # Where each wrap of facts["wraps"] is, to name it in messages.
        sites = self.ctx.analysis(Wraps).sites
        facts["wrap_rows"] = [self.ctx.span(site.call)[0] for site in sites]
        return facts

    # -- the project phase ----------------------------------------------------------------------

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        hierarchy = Hierarchy(project, cls.code)
        # Each candidate's file, read first so that its parents are among the known files.
        files = {
            display: (hierarchy.absolute(display), keys)
            for display, keys in project.candidates(cls.code).items()
            if hierarchy.facts_at(hierarchy.absolute(display)) is not None
        }
        if not files:
            return
        # The files that use each candidate's classes (its importers, and what they import),
        # read before the project's wraps are listed: a run given only the model file (as
        # pre-commit does) finds the trainer that wraps it.
        evidence = {display: hierarchy.evidence(path) for display, (path, _) in files.items()}
        everywhere = data_parallel_wraps(hierarchy, list(hierarchy.known_files()))
        if not everywhere:
            return  # no DataParallel: one model per process, the writes are harmless
        wrapped = classes_run_by(hierarchy, everywhere)
        construction = Construction(hierarchy)
        wrapping = {Path(os.path.abspath(wrap[1])) for wrap in everywhere}
        # A model built through a registry or a dynamic import (`build_model(config)`) is a
        # DataParallel wrap of a class nobody can name: it may be any model of the project.
        unknown = [wrap for wrap in everywhere if not wrap[2]]
        slices = wrap_slices(hierarchy, list(hierarchy.known_files()))
        for display, (path, keys) in sorted(files.items()):
            # In a repository of many examples, one example's DataParallel of a known class
            # says nothing of another's models; a wrap whose model is named and does not run
            # this class says nothing of it either (yolov3's DetectionModel is wrapped, the
            # inference-only DetectMultiBackend is not).
            near = [w for w in data_parallel_wraps(hierarchy, evidence[display]) if not w[2]]
            near = near or unknown
            # ...and only one whose file can build objects of this file's classes (it, or what
            # it imports, statically or by `import_module`, reaches this file): RCAN's SR network,
            # loaded by `import_module("model." + name)`, is no loss of its `loss` package.
            near = [w for w in near if hierarchy.may_build_from(w[1], path)]
            for key in sorted(keys):
                name, _, attr, effect = key.split(":", 3)
                effect, _, woken_by = effect.partition("@")
                ref = ClassRef(path, name)
                if woken_by and not any(
                    hierarchy.read_outside(path, enabler)
                    if enabler.isidentifier()
                    else hierarchy.mentioned_outside(path, enabler_pattern(enabler))
                    for enabler in woken_by.split(",")
                ):
                    continue  # the guarded branch never runs in this project
                if not hierarchy.may_be_a_module(ref):
                    continue  # not an nn.Module (a base of a library with a forward may be)
                if effect == "carried" and not (
                    _read_by(hierarchy.family(ref), attr)
                    or hierarchy.read_outside(path, attr, by_parents=False)
                    or _read_by_a_holder_after_the_call(hierarchy, attr)
                ):
                    continue
                relatives = hierarchy.family(ref)
                if effect == "lost" and not (
                    _read_after_the_call(hierarchy, relatives, attr)
                    or hierarchy.read_past_a_wrapper(
                        path,
                        attr,
                        wrapping,
                        [member.name for member, _ in relatives.members],
                        by_parents=False,
                    )
                    or _read_by_a_holder_after_the_call(hierarchy, attr)
                ):
                    # Set on a replica and read nowhere, or only by code of the same call
                    # (tacotron2's decoder states, set in forward and read by decode() during
                    # that forward) or by methods that set it afresh first: the replica's value
                    # is the one they see, so losing it with the replica changes nothing. Read
                    # as `model.list_att` in a demo that neither wraps a model nor builds the
                    # class (it gets an unwrapped one from a factory), it is read on a model no
                    # replica stands in for.
                    continue
                base = str(keys[key]["message"])
                details = str(keys[key].get("help") or "")
                if ref in wrapped:
                    message = base
                    where = f"nn.DataParallel runs `{name}` at {wrapped[ref]}."
                    severity = Severity.ERROR
                elif LOSS_CALLEE.search(name):
                    # A loss class (`ComboLoss`) is not taken for the model nobody can name:
                    # a script builds its criterion beside the model, and the wrap is the
                    # model's (a loss a named model holds is judged above)
                    continue
                elif any(construction.may_build(w[1], ref, slices.get(w[0])) for w in near):
                    # The wrapped model is not one the analysis can name, but the code that
                    # builds it may build this class: say what is assumed.
                    wrap = next(
                        w for w in near if construction.may_build(w[1], ref, slices.get(w[0]))
                    )
                    message = f"{base} (if under DataParallel)"
                    where = (
                        f"nn.DataParallel is used at {wrap[0]} around a model the analysis "
                        f"cannot name; this assumes that model runs `{name}`."
                    )
                    severity = Severity.WARNING
                else:
                    # DataParallel only around other, known classes, or around models built
                    # by code that names nothing on the way to this class.
                    continue
                diagnostic = project.candidate(
                    display,
                    cls.code,
                    key,
                    message=message,
                    severity=severity,
                    help=f"{where} {details}".strip(),
                )
                if diagnostic is not None:
                    yield diagnostic


def data_parallel_wraps(
    hierarchy: Hierarchy, evidence: List[Tuple[Path, dict]]
) -> List[Tuple[str, Path, List[str]]]:
    """("train.py:57", file, wrapped class names) for every nn.DataParallel wrap of the
    evidence files that may replicate its module (not one given a single device)."""
    found = []
    for path, facts in evidence:
        rows = facts.get("wrap_rows", [])
        for index, wrap in enumerate(facts.get("wraps", ())):
            if wrap.get("kind") == DP_KIND and not wrap.get("one_device"):
                row = rows[index] if index < len(rows) else "?"
                where = f"{hierarchy.display(path)}:{row}"
                found.append((where, path, list(wrap.get("classes", ()))))
    return sorted(found, key=lambda item: item[0])


def wrap_slices(
    hierarchy: Hierarchy, evidence: List[Tuple[Path, dict]]
) -> Dict[str, Optional[dict]]:
    """"train.py:57" -> the slice wrapped_model.py recorded for that DataParallel wrap (None:
    the whole file and its importers count)."""
    found: Dict[str, Optional[dict]] = {}
    for path, facts in evidence:
        rows = facts.get("wrap_rows", [])
        slices = facts.get("wrap_slices", [])
        for index, wrap in enumerate(facts.get("wraps", ())):
            if wrap.get("kind") == DP_KIND and index < len(rows) and index < len(slices):
                found[f"{hierarchy.display(path)}:{rows[index]}"] = slices[index]
    return found


def _read_after_the_call(hierarchy: Hierarchy, family: Family, attr: str) -> bool:
    """Does a method of the family read `self.<attr>` outside what a call of the module runs,
    without setting it afresh itself (or through what it calls)? A member whose file holds no
    facts of this rule is judged by its reads alone."""
    for ref, facts in family.members:
        file_facts_ = hierarchy.facts_at(ref.path) or {}
        reach = set(file_facts_.get("call_reach", {}).get(ref.name, ()))
        afresh = file_facts_.get("sets_afresh", {}).get(ref.name, {})
        for name, method in facts.get("methods", {}).items():
            if name in reach or attr in afresh.get(name, ()):
                continue
            if attr in method.get("reads", ()) or attr in method.get("branch_reads", ()):
                if _run_only_inside_holders(hierarchy, name):
                    continue
                return True
    return False


def _run_only_inside_holders(hierarchy: Hierarchy, method: str) -> bool:
    """Is the method (a getter, `get_layers()` returning `self.layers`) called only by modules
    that hold this one, from their `__init__` (before any forward) or from what a call of them
    runs (`self.backbone(x)`, then `self.backbone.get_layers()`)? There a replica reads its own
    submodule's copy, set in the same call. Every call in the project's texts must be one of
    those the facts record; one more (a script calling it after the forward) reads the original."""
    suffix = f".{method}"
    sites = 0
    for _, facts in hierarchy.known_files():
        reach = facts.get("call_reach", {})
        for name, cls in (facts.get("classes") or {}).items():
            reached = set(reach.get(name, ()))
            for method_name, info in (cls.get("methods") or {}).items():
                calls = [c for c in info.get("sub_calls", ()) if c.endswith(suffix)]
                if not calls:
                    continue
                if method_name != "__init__" and method_name not in reached:
                    return False
                sites += len(calls)
    if not sites:
        return False
    in_texts = hierarchy.project.count_matching(re.compile(rf"\.{re.escape(method)}\s*\("))
    return in_texts == sites


def _read_by_a_holder_after_the_call(hierarchy: Hierarchy, attr: str) -> bool:
    """Does a module read `self.<sub>.<attr>` (what a submodule's forward left on it) in a
    method outside what a call of the module runs? Inside it (`self.generator(x)`, then
    `self.generator.keep_out`), a replica reads its own submodule's copy, set in the same call;
    after the call it reads the original's, which no replica ever set."""
    suffix = f".{attr}"
    for _, facts in hierarchy.known_files():
        reach = facts.get("call_reach", {})
        for name, cls in (facts.get("classes") or {}).items():
            reached = set(reach.get(name, ()))
            for method_name, method in (cls.get("methods") or {}).items():
                if method_name in reached:
                    continue
                if any(read.endswith(suffix) for read in method.get("sub_reads", ())):
                    return True
    return False


def _read_by(family: Family, attr: str) -> bool:
    """Does a method of the family read `self.<attr>`? (Family.reads also counts walks over
    every submodule, `self.parameters()`, which never read a plain attribute.)"""
    return any(
        attr in method.get("reads", ()) or attr in method.get("branch_reads", ())
        for _, facts in family.members
        for method in facts.get("methods", {}).values()
    )


def _what(write: StateWrite, shared: bool = False) -> Tuple[str, str]:
    """What the write does under DataParallel: the headline's part and the help."""
    if write.kind == "assign" and not shared:
        return (
            f"sets `self.{write.attr}`, lost with the replica",
            "Under nn.DataParallel forward runs on per-GPU replicas that are discarded "
            "afterwards, so the model never sees the value. Return it from forward instead.",
        )
    target = f"writes into `self.{write.attr}`" if write.kind == "item" else (
        f"sets `self.{write.attr}` on the original module"
    )
    return (
        f"{target}, shared by the replicas",
        "The replicas' threads write it at once, each with a value from its own part of the "
        "batch: tensors end up from different GPUs, and one that carries a graph can fail the "
        "backward (\"Trying to backward through the graph a second time\"). Keep such values "
        "local to forward and return them.",
    )
