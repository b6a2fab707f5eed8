"""TRL305 ddp-without-set-device."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ...analysis.base.calls import argument, keyword
from ...analysis.base.frameworks import Frameworks
from ...analysis.parallel.parallel import INIT_PROCESS_GROUP, Parallel
from ...diagnostics import Severity
from ..base import PendingFix, Rule

_CUDA = re.compile(r"\bcuda\b|nccl|device_ids", re.I)
# Launchers that choose the device for each process themselves.
_LAUNCHERS = ("lightning", "accelerate", "mmengine", "deepspeed")


class DdpWithoutSetDevice(Rule):
    """## What it does
    Reports `torch.distributed.init_process_group(...)` with the NCCL backend (or no backend, or
    one chosen at run time) in a script that uses CUDA, when nothing in the file sets the
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
    MMEngine or DeepSpeed launchers are not reported: those set the device.

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
    process, to the one the process was launched for.
    """

    code = "TRL305"
    name = "ddp-without-set-device"
    severity = Severity.WARNING
    fix = "safe"
    markers = ("init_process_group",)

    def finish(self) -> None:
        ctx = self.ctx
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
            backend = argument(call, 0, "backend")
            if not self._may_be_nccl(backend):
                continue
            self.report(
                call,
                "`init_process_group` with NCCL but the current CUDA device is never set: "
                "every process keeps cuda:0 as its default, so NCCL, `barrier()` and anything "
                'created with "cuda" land on GPU 0 (extra memory there, hangs, "Duplicate GPU '
                'detected"); call `torch.cuda.set_device(local_rank)` first',
                fix=self._fix(call, parallel),
            )

    def _may_be_nccl(self, backend: Optional[cst.BaseExpression]) -> bool:
        if backend is None:
            return True  # the default picks NCCL for CUDA
        value = _literal(backend)
        if value is None and type(backend) is cst.Name:
            bindings = self.ctx.scopes.lookup(backend.value, backend)
            values = [_literal(b.value) if b.value is not None else None for b in bindings]
            if values and all(v is not None for v in values):
                return any("nccl" in v.lower() for v in values)  # type: ignore[union-attr]
            return True
        if value is None:
            return True  # args.dist_backend, a config value: NCCL on GPUs by convention
        return "nccl" in value.lower()

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


def _literal(node: Optional[cst.CSTNode]) -> Optional[str]:
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None
