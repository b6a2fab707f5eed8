"""TRL502 prefer-ddp."""

from __future__ import annotations

import libcst as cst

from ...analysis.base.vocabulary import is_test_file
from ...diagnostics import Severity
from ..base import Rule

_DATA_PARALLEL = ("torch.nn.DataParallel",)
_FUNCTIONAL = (
    "torch.nn.parallel.data_parallel",
    "torch.nn.parallel.data_parallel.data_parallel",
)


class PreferDDP(Rule):
    """## What it does
    Reports every use of `nn.DataParallel` (and the functional
    `torch.nn.parallel.data_parallel`). Info level: off by default, on with `--select TRL5` or
    `ALL`.

    ## Why is this bad
    DataParallel is one Python process driving every GPU from threads: the GIL serialises
    them, the model is replicated to every GPU on every forward, inputs are scattered from and
    outputs gathered on GPU 0 (which runs out of memory first and does more work than the
    others). PyTorch's documentation recommends `DistributedDataParallel` instead, "even if
    there is only a single node": one process per GPU, gradients all-reduced during backward.
    It is usually faster, scales past one machine, and works with SyncBatchNorm, mixed
    precision and `torch.compile` the way the documentation describes.

    ## Example
    ```python
    model = nn.DataParallel(model.to(device))
    ```

    ## Use instead
    ```python
    # torchrun --nproc_per_node=4 train.py
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    ```
    with a `DistributedSampler` for the training loader.

    Not reported in test files (`tests/`, `test_*.py`), which wrap models in DataParallel to
    test that the code supports it.

    ## Fix safety
    There is no fix: moving to DDP changes how the script is launched and how data is sharded.
    """

    code = "TRL502"
    name = "prefer-ddp"
    severity = Severity.INFO
    markers = ("DataParallel", "data_parallel")

    def visit_Call(self, node: cst.Call) -> None:
        if is_test_file(self.ctx):
            return  # tests exercise DataParallel support on purpose
        names = self.ctx.names
        if names.is_(node.func, *_DATA_PARALLEL):
            what = "nn.DataParallel"
        elif names.is_(node.func, *_FUNCTIONAL):
            what = "data_parallel()"
        else:
            return
        self.report(
            node.func,
            f"{what} drives every GPU from one process; DistributedDataParallel runs one per GPU",
            help=(
                "One process means the GIL, the model replicated on every forward and the outputs "
                "gathered on GPU 0. PyTorch recommends DistributedDataParallel even on one "
                "machine: launch with `torchrun --nproc_per_node=N`."
            ),
        )
