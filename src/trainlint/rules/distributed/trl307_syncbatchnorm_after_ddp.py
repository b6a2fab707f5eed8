"""TRL307 syncbatchnorm-after-ddp."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ...analysis.base.calls import argument
from ...analysis.base.conditions import Conditions
from ...analysis.base.identity import returned_module
from ...analysis.parallel.parallel import CONVERT_SYNC_BATCHNORM, Parallel, WrapState
from ...diagnostics import Severity
from ..base import Rule

SYNC_BATCHNORM = "torch.nn.SyncBatchNorm"
_NO_GROUP_HELP = (
    "Without a DDP process group, current releases silently fall back to per-device BatchNorm "
    "statistics (each GPU's slice of the batch); older releases raise \"Default process group "
    'has not been initialized".'
)


class SyncBatchNormAfterDdp(Rule):
    """## What it does
    Reports `nn.SyncBatchNorm.convert_sync_batchnorm(...)` applied to a model that is already
    wrapped in DistributedDataParallel (or to its `.module`), and SyncBatchNorm used where no
    DDP process group synchronizes it: a converted model that is then wrapped in
    `nn.DataParallel`, or a conversion (or `nn.SyncBatchNorm` layer) on the non-distributed
    branch of the script.

    ## Why is this bad
    SyncBatchNorm computes batch statistics across the processes of a DDP process group. PyTorch
    documents that the conversion must happen *before* wrapping: "Use
    `torch.nn.SyncBatchNorm.convert_sync_batchnorm()` to convert BatchNorm*D layer to
    SyncBatchNorm before wrapping Network with DDP." DDP inspects the module it is given when it
    is built (its SyncBatchNorm checks, the parameters and buffers it registers); layers
    swapped in afterwards are not what it set up, and older releases fail in forward with

        AttributeError: SyncBatchNorm is only supported within
        torch.nn.parallel.DistributedDataParallel

    Converting `ddp_model.module` and keeping the result drops the DDP wrapper altogether:
    gradients are no longer averaged.

    Without a DDP process group (DataParallel, or a single process), current releases silently
    fall back to ordinary per-device BatchNorm: the "synchronized" statistics are computed on
    each GPU's slice of the batch, which is exactly what the conversion was meant to avoid
    (older releases raise "Default process group has not been initialized").

    The wrapper is followed through rebindings that keep it (`model = model.to(device)`,
    `model = nn.SyncBatchNorm.convert_sync_batchnorm(model)`: analysis/base/identity.py), but
    not through `torch.compile`, which returns another object. An attribute of a class
    (`self.net`) may hold what any method assigns it, in any order, except an assignment later
    in the same method with no loop of that method around both: `self.net =
    convert_sync_batchnorm(self.net)` and then `self.net = DDP(self.net, ...)` in
    `initialize()` converts before it wraps (a conversion in another method, or in a loop that
    wraps on every pass, still meets the wrapper).

    A conversion and a DataParallel wrap on branches that never run together are not paired:
    DataParallel under `if RANK == -1:` and the conversion under `if RANK != -1:` (the same
    variable compared with `==` and `!=` against the same constant, or tested and negated, and
    not reassigned in between; analysis/base/conditions.py).

    ## Example
    ```python
    model = build_segmentor(cfg).cuda(local_rank)
    model = DDP(model, device_ids=[local_rank])
    if args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ```

    ## Use instead
    ```python
    model = build_segmentor(cfg).cuda(local_rank)
    if args.sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    No fix: moving the conversion means reordering model construction, which may involve code
    between the two statements.
    """

    code = "TRL307"
    name = "syncbatchnorm-after-ddp"
    severity = Severity.ERROR
    markers = ("SyncBatchNorm", "sync_batchnorm")

    def finish(self) -> None:
        ctx = self.ctx
        self.parallel: Parallel = ctx.analysis(Parallel)
        for call in ctx.nodes(cst.Call):
            if ctx.names.is_(call.func, CONVERT_SYNC_BATCHNORM):
                self._check_conversion(call)
        for node in list(ctx.nodes(cst.Attribute)) + list(ctx.nodes(cst.Name)):
            if self._is_sync_batchnorm_class(node):
                branch = self.parallel.non_distributed_branch(node)
                if branch is not None:
                    self.report(
                        node,
                        "SyncBatchNorm on the non-distributed branch: no DDP process group "
                        "synchronizes its statistics",
                        help=_NO_GROUP_HELP + " Use it only on the distributed path.",
                        related=[(branch, "the non-distributed branch")],
                    )

    def _check_conversion(self, call: cst.Call) -> None:
        parallel = self.parallel
        module = argument(call, 0, "module")
        if module is None:
            return
        target = module
        inner = False
        if type(module) is cst.Attribute and module.attr.value == "module":
            target = module.value
            inner = True
        direct = parallel.wrap_kind(target)
        if direct is not None:  # convert_sync_batchnorm(DataParallel(m)) / (DDP(m))
            assert type(target) is cst.Call  # wrap_kind names only wrap calls
            state = WrapState(every=True, some=True, kinds={direct}, sites=[target])
        else:
            state = self._reaching(parallel.wrapper_state(target, call), call)
        if "DistributedDataParallel" in state.kinds:
            what = f"`{self.ctx.code(module)}`"
            extra = (
                "; keeping the converted `.module` also drops the DDP wrapper (no gradient "
                "averaging)"
                if inner
                else ""
            )
            self.report(
                call,
                f"convert_sync_batchnorm on {what} after it was wrapped in "
                "DistributedDataParallel",
                help=(
                    "PyTorch requires converting before wrapping: DDP sets up the layers it is "
                    'given, and older releases raise "SyncBatchNorm is only supported within '
                    f'torch.nn.parallel.DistributedDataParallel"{extra}. Convert first, then '
                    "wrap."
                ),
                related=[
                    (site, "wrapped in DistributedDataParallel here") for site in state.sites[:1]
                ],
            )
            return
        if "DataParallel" in state.kinds:
            self._report_data_parallel(call, state.sites[0] if state.sites else None)
            return
        wrap = self._later_data_parallel(call)
        if wrap is not None:
            self._report_data_parallel(call, wrap)
            return
        branch = parallel.non_distributed_branch(call)
        if branch is not None:
            self.report(
                call,
                "convert_sync_batchnorm on the non-distributed branch: no DDP process group "
                "synchronizes the statistics",
                help=_NO_GROUP_HELP + " Convert only when training with DistributedDataParallel.",
                related=[(branch, "the non-distributed branch")],
            )

    def _reaching(self, state: WrapState, call: cst.Call) -> WrapState:
        """The wraps of `state` that can run together with `call` (not on an exclusive
        branch: DataParallel under `RANK == -1`, the conversion under `RANK != -1`)."""
        if not state.sites:
            return state
        conditions = self.ctx.analysis(Conditions)
        sites = [site for site in state.sites if not conditions.exclusive(site, call)]
        kinds = {kind for kind in map(self.parallel.wrap_kind, sites) if kind is not None}
        return WrapState(every=state.every and sites == state.sites, some=bool(sites),
                         kinds=kinds, sites=sites)

    def _report_data_parallel(self, call: cst.Call, wrap: Optional[cst.CSTNode]) -> None:
        related = [(wrap, "wrapped in DataParallel here")] if wrap is not None else []
        self.report(
            call,
            "SyncBatchNorm inside nn.DataParallel: one process, no process group to synchronize "
            "its statistics over",
            help=_NO_GROUP_HELP + " Use DistributedDataParallel, or keep BatchNorm.",
            related=related,
        )

    def _later_data_parallel(self, convert: cst.Call) -> Optional[cst.Call]:
        """A DataParallel wrap, after the conversion, of what the conversion returned."""
        index = self.ctx.tree.index
        start = index.get(convert, -1)
        for wrap, kind in self.parallel.wrap_calls():
            if kind != "DataParallel" or index.get(wrap, -1) <= start:
                continue
            if self.ctx.analysis(Conditions).exclusive(convert, wrap):
                continue  # `if rank == -1: DataParallel` / `if rank != -1: convert`
            module = argument(wrap, 0, "module")
            if module is not None and self._flows_from(module, convert, 0):
                return wrap
        return None

    def _flows_from(self, expr: cst.CSTNode, source: cst.Call, depth: int) -> bool:
        if depth > 5:
            return False
        if expr is source:
            return True
        if type(expr) is cst.Call:
            same = returned_module(expr, self.ctx.names)
            return same is not None and self._flows_from(same, source, depth + 1)
        if type(expr) is cst.Name:
            at = self.parallel.evaluation_point(expr)
            for binding in self.ctx.scopes.lookup(expr.value, at):
                if binding.value is not None and self._flows_from(binding.value, source, depth + 1):
                    return True
        return False

    def _is_sync_batchnorm_class(self, node: cst.CSTNode) -> bool:
        # The name first: it rules out nearly every Name and Attribute of the file cheaply.
        leaf = node.value if type(node) is cst.Name else node.attr.value  # type: ignore
        if leaf != "SyncBatchNorm":
            return False
        parent = self.ctx.parent(node)
        if type(parent) is cst.Attribute and parent.value is node:
            return False  # `nn.SyncBatchNorm.convert_sync_batchnorm`: handled above
        if type(node) is cst.Name and type(parent) is cst.Attribute:
            return False  # the `SyncBatchNorm` in `nn.SyncBatchNorm`
        if type(parent) in (cst.ImportAlias, cst.AssignTarget):
            return False
        return self.ctx.names.is_(node, SYNC_BATCHNORM)
