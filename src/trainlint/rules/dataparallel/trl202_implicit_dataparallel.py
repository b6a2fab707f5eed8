"""TRL202 implicit-dataparallel."""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from ...analysis.base.calls import argument, is_none
from ...analysis.parallel.parallel import DATA_PARALLEL, Parallel
from ...diagnostics import Severity
from ..base import Rule


class ImplicitDataParallel(Rule):
    """## What it does
    Reports `nn.DataParallel(model)` switched on by the number of visible GPUs
    (`if torch.cuda.device_count() > 1:`, `elif n_gpu > 1:` with
    `n_gpu = torch.cuda.device_count()`) or as the fallback of a non-distributed branch
    (`if args.distributed: DDP(...) else: DataParallel(...)`), without `device_ids`.

    ## Why is this bad
    The same command then trains differently depending on the machine: one visible GPU gives
    plain single-device training, several give DataParallel, which replicates the model into
    threads on every forward. Code that works on one GPU can break only on the bigger box:
    state written to `self` in `forward` or in forward hooks (feature caches, `self.out[name] =
    output`) is written by every replica thread at once, buffers updated in `forward` are lost,
    and training dies with errors such as

        RuntimeError: Trying to backward through the graph a second time

    which users then "fix" with `CUDA_VISIBLE_DEVICES=0`, turning DataParallel off. This is what
    happened to a depth-estimation project whose `parallelize()` fell back to DataParallel when
    `distributed` was false on a multi-GPU machine.

    Make the choice explicit (an opt-in flag such as `--data-parallel`, or `device_ids`), or
    use DistributedDataParallel, which PyTorch recommends even on one machine. Explicit opt-ins
    (`if args.data_parallel:`, `if args.multi_gpu and ...:`) and calls with `device_ids` are not
    reported.

    ## Example
    ```python
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

    ## Fix safety
    No fix: whether to keep DataParallel is the user's decision.
    """

    code = "TRL202"
    name = "implicit-dataparallel"
    severity = Severity.WARNING
    markers = ("DataParallel",)

    def finish(self) -> None:
        self.parallel: Parallel = self.ctx.analysis(Parallel)
        for call in self.ctx.nodes(cst.Call):
            if self.ctx.names.is_(call.func, DATA_PARALLEL):
                self._check(call)

    def _check(self, call: cst.Call) -> None:
        device_ids = argument(call, 1, "device_ids")
        if device_ids is not None and not is_none(device_ids):
            return
        found = self._reason(call)
        if found is None:
            return
        reason, branch, evidence = found
        wrapper = self.ctx.code(call.func)
        test = self.ctx.code(branch.test)  # type: ignore[attr-defined]
        if len(test) > 50 or "\n" in test:
            test = test.split("\n")[0][:47] + "..."
        if reason == "count":
            why = f"is switched on by the number of visible GPUs (`{test}`)"
        else:
            why = f"is the fallback when not running distributed (`if {test}:`)"
        self.report(
            call,
            f"`{wrapper}` {why}: the same command trains on one GPU on one machine and in "
            "DataParallel replica threads on another, where state written to `self` in forward "
            'or hooks races ("Trying to backward through the graph a second time"); make it an '
            "explicit option or use DistributedDataParallel",
            related=[(evidence, "decided here")],
        )

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
