"""TRL203 forward-mutates-module-state."""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from ...analysis.parallel import Parallel
from ...analysis.state_writes import HookWrite, StateWrite, StateWrites
from ...diagnostics import Severity
from ..base import Rule

_MODULE_BASES = ("torch.nn.Module", "torch.nn.modules.module.Module")


class ForwardMutatesModuleState(Rule):
    """## What it does
    Reports an `nn.Module` whose `forward` (or a method `forward` calls) or whose forward hook
    (`register_forward_hook(fn)` / `register_forward_pre_hook(fn)`, with `fn` a bound method,
    a closure, a lambda or a factory returning one) writes state of the module:
    `self.x = ...`, `self.cache[k] = ...`, `self.feats.append(...)`, `bank[name] = output` in a
    hook made by `get_activation(name, self.core_out)`.

    It is an error when the project wraps the class (or a subclass) in `nn.DataParallel`, and a
    warning when the project uses DataParallel for a model whose class is not known (a
    `parallelize(model)` helper). In a project that never uses DataParallel the rule is quiet:
    DistributedDataParallel runs one model per process, where these writes are harmless.

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
    `self.num_batches_tracked += 1` on a registered buffer, `self.queue[:, i] = k`), which
    DataParallel keeps for the replica on `device_ids[0]` (BatchNorm relies on it); writes under
    `torch.no_grad()` / `torch.inference_mode()`; writes on the eval-only branch of
    `self.training` (inference caches); local variables and local containers.

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
    ```
    or return the values from `forward`, or train with DistributedDataParallel.

    ## Fix safety
    No fix: where the values should go instead is a design decision.
    """

    code = "TRL203"
    name = "forward-mutates-module-state"
    severity = Severity.WARNING
    severity_note = "error when the class is wrapped in DataParallel in the project"
    project = True

    def finish(self) -> None:
        self.writes: StateWrites = self.ctx.analysis(StateWrites)
        self.recorded: Dict[str, int] = {}
        for cls in self._module_classes():
            name = cls.name.value
            for method in self._forward_reach(cls):
                self._record_method(name, method)
            for hook in self.writes.hooks_in(cls):
                self._record_hook(name, hook)

    # -- what forward runs ----------------------------------------------------------------------

    def _module_classes(self) -> Iterator[cst.ClassDef]:
        for cls in self.ctx.nodes(cst.ClassDef):
            if any(self.ctx.names.is_(base.value, *_MODULE_BASES) for base in cls.bases):
                yield cls

    def _forward_reach(self, cls: cst.ClassDef) -> List[cst.FunctionDef]:
        body = cls.body
        if not isinstance(body, cst.IndentedBlock):
            return []
        return [s for s in body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"]

    # -- candidates ---------------------------------------------------------------------------

    def _record_method(self, cls: str, method: cst.FunctionDef) -> None:
        seen: Set[str] = set()
        where = "`forward`" if method.name.value == "forward" else (
            f"`{method.name.value}` (called from `forward`)"
        )
        for write in self.writes.in_method(method):
            if write.attr in seen:
                continue
            seen.add(write.attr)
            self._add(cls, write.node, f"{where} of `{cls}` {_what(write)}")

    def _record_hook(self, cls: str, hook: HookWrite) -> None:
        seen: Set[str] = set()
        for write in hook.writes:
            if write.attr in seen:
                continue
            seen.add(write.attr)
            node = write.node if hook.inside else hook.hook
            # A hook keeps the `self` it closed over: the original module, which every
            # replica's thread then writes, attribute or container alike.
            self._add(cls, node, f"a forward hook of `{cls}` {_what(write, shared=True)}")

    def _add(self, cls: str, node: cst.CSTNode, message: str) -> None:
        number = self.recorded.get(cls, 0)
        self.recorded[cls] = number + 1
        self.candidate(f"{cls}:{number}", node, message)

    def facts(self) -> Optional[Dict[str, object]]:
        parallel: Parallel = self.ctx.analysis(Parallel)
        wraps = []
        for call, kind in parallel.wrap_calls():
            if kind == "DataParallel":
                wraps.append({"row": self.ctx.span(call)[0], "wrapped": None})
        return {"dataparallel": wraps}

    # -- the project phase ----------------------------------------------------------------------

    @classmethod
    def check_project(cls, project):
        wraps = []
        for path, facts in sorted(project.facts(cls.code).items()):
            for wrap in facts.get("dataparallel", []):  # type: ignore[union-attr]
                wraps.append((path, wrap))
        if not wraps:
            return
        wrapped: Dict[str, str] = {}
        for path, wrap in wraps:
            if wrap.get("wrapped"):
                wrapped.setdefault(wrap["wrapped"], f"{path}:{wrap['row']}")
        first = f"{wraps[0][0]}:{wraps[0][1]['row']}"
        for path, found in sorted(project.candidates(cls.code).items()):
            for key, candidate in sorted(found.items()):
                name = key.split(":")[0]
                base = str(candidate["message"])
                if name in wrapped:
                    diagnostic = project.candidate(
                        path,
                        cls.code,
                        key,
                        message=f"{base} (`{name}` is wrapped in nn.DataParallel at "
                        f"{wrapped[name]})",
                        severity=Severity.ERROR,
                    )
                else:
                    diagnostic = project.candidate(
                        path,
                        cls.code,
                        key,
                        message=f"{base} (the project wraps a model in nn.DataParallel at "
                        f"{first})",
                    )
                if diagnostic is not None:
                    yield diagnostic


def _what(write: StateWrite, shared: bool = False) -> str:
    """What the write does under DataParallel, for the message."""
    if write.kind == "assign" and not shared:
        return (
            f"sets `self.{write.attr}`: under nn.DataParallel this happens on a per-GPU replica "
            "that is discarded after forward, so the model never sees it; return the value "
            "from forward instead"
        )
    target = f"writes into `self.{write.attr}`" if write.kind == "item" else (
        f"sets `self.{write.attr}` on the original module"
    )
    return (
        f"{target}, which nn.DataParallel replicas share: their threads "
        "race on it and mix tensors from different GPUs (\"Trying to backward through the "
        "graph a second time\"); keep such values local to forward and return them"
    )
