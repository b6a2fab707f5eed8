"""TRL306 local-rank-argparse-only."""

from __future__ import annotations

from typing import List, Optional

import libcst as cst

from ...analysis.base.calls import keyword, method_call
from ...analysis.base.frameworks import Frameworks
from ...analysis.parallel.parallel import Parallel
from ...diagnostics import Severity
from ..base import PendingFix, Rule

_FLAGS = ("--local_rank", "--local-rank")


class LocalRankArgparseOnly(Rule):
    """## What it does
    Reports `parser.add_argument("--local_rank", ...)` in a file that never reads the
    `LOCAL_RANK` environment variable.

    ## Why is this bad
    The flag comes from `python -m torch.distributed.launch`, and launchers changed:

    - `torchrun` (and `torch.distributed.launch --use-env`) passes no flag at all; it sets
      `LOCAL_RANK` in the environment. `args.local_rank` keeps its default on every rank, so
      every process picks the same GPU (usually `cuda:0`) or believes it is not distributed.
    - Since PyTorch 2.0, `torch.distributed.launch` passes `--local-rank` (with a hyphen); a
      parser that only knows `--local_rank` exits with
      `error: unrecognized arguments: --local-rank=0`.

    DeepSpeed scripts are not reported (the `deepspeed` launcher passes `--local_rank` and sets
    `LOCAL_RANK`), nor files that read `LOCAL_RANK` themselves.

    ## Example
    ```python
    parser.add_argument("--local_rank", type=int, default=-1)
    ```

    ## Use instead
    ```python
    parser.add_argument(
        "--local_rank", "--local-rank", type=int, default=os.environ.get("LOCAL_RANK", -1)
    )
    ```

    ## Fix safety
    The fix adds the missing spelling (`--local-rank` or `--local_rank`) and makes the default
    `os.environ.get("LOCAL_RANK", <old default>)`. argparse converts a string default with the
    argument's `type`, so `type=int` still yields an int. It is safe: an explicit flag still
    wins, and without `LOCAL_RANK` in the environment the default is unchanged. It needs `os`
    imported and is not offered for `action=` arguments.
    """

    code = "TRL306"
    name = "local-rank-argparse-only"
    severity = Severity.WARNING
    fix = "safe"
    markers = ("local_rank", "local-rank")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.parallel: Parallel = ctx.analysis(Parallel)
        self.frameworks: Frameworks = ctx.analysis(Frameworks)

    def visit_Call(self, node: cst.Call) -> None:
        if method_call(node, "add_argument") is None:
            return
        flags = self._flag_args(node)
        if not flags:
            return
        if self.parallel.reads_env("LOCAL_RANK") or self.frameworks.uses("deepspeed"):
            return
        spellings = {_string(a.value) for a in flags}
        default = keyword(node, "default")
        default_text = self.ctx.code(default) if default is not None else "None"
        parts = []
        if "--local-rank" not in spellings:
            parts.append(
                "`python -m torch.distributed.launch` (PyTorch >= 2.0) passes `--local-rank`, "
                'which this parser rejects ("unrecognized arguments: --local-rank=0")'
            )
        elif "--local_rank" not in spellings:
            parts.append("older launchers pass `--local_rank`, which this parser rejects")
        parts.append(
            "torchrun passes no flag at all, so `local_rank` stays "
            f"`{default_text}` on every rank"
        )
        self.report(
            node,
            "`--local_rank` is only read from the command line and nothing in this file reads "
            "the LOCAL_RANK environment variable: "
            + "; ".join(parts)
            + '; default it from `os.environ["LOCAL_RANK"]`',
            fix=self._fix(node, flags, spellings, default),
        )

    def _flag_args(self, call: cst.Call) -> List[cst.Arg]:
        out = []
        for arg in call.args:
            if arg.keyword is not None or arg.star:
                break
            if _string(arg.value) in _FLAGS:
                out.append(arg)
        return out

    def _fix(
        self,
        call: cst.Call,
        flags: List[cst.Arg],
        spellings: set[Optional[str]],
        default: Optional[cst.BaseExpression],
    ) -> Optional[PendingFix]:
        if keyword(call, "action") is not None:
            return None
        os_name = self.parallel.module_name("os", call)
        if os_name is None:
            return None
        flag = flags[-1].value
        assert type(flag) is cst.SimpleString  # _flag_args keeps only simple-string flags
        quote = flag.value[-1]
        edits = []
        missing = "--local-rank" if "--local-rank" not in spellings else "--local_rank"
        if len(spellings) < 2:
            edits.append(self.ctx.insert_after(flag, f", {quote}{missing}{quote}"))
        env = f"{os_name}.environ.get({quote}LOCAL_RANK{quote}"
        if default is not None:
            edits.append(self.ctx.replace(default, f"{env}, {self.ctx.code(default)})"))
        else:
            last = call.args[-1]
            edits.append(self.ctx.insert_after(last.value, f", default={env})"))
        return self.safe_fix(
            f'Accept `{missing}` too and default from `{os_name}.environ["LOCAL_RANK"]`', *edits
        )


def _string(node: cst.CSTNode) -> Optional[str]:
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None
