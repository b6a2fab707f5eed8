"""TRL304 sampler-with-shuffle."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ...analysis.base.calls import arg_node, argument, has_star_args, is_none
from ...analysis.loop.loaders import is_torch_dataloader
from ...diagnostics import Severity
from ..base import PendingFix, Rule


class SamplerWithShuffle(Rule):
    """## What it does
    Reports `DataLoader(..., sampler=s, shuffle=True)` (and `batch_sampler=b, shuffle=True`)
    where the sampler is not the literal `None`.

    ## Why is this bad
    A sampler decides the order of the indices; `shuffle=True` asks the DataLoader to make its
    own `RandomSampler`. The DataLoader refuses both:

        ValueError: sampler option is mutually exclusive with shuffle

    (`batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and
    drop_last` for a batch sampler). The usual shape is a script that builds
    `sampler = DistributedSampler(ds) if distributed else None` and keeps `shuffle=True`: it
    works on one GPU and crashes as soon as it is launched with torchrun. A DistributedSampler
    already shuffles (its `shuffle=True` default); `shuffle=True` on the loader adds nothing.

    ## Example
    ```python
    train_sampler = DistributedSampler(train_set) if args.distributed else None
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler, shuffle=True)
    ```

    ## Use instead
    ```python
    train_sampler = DistributedSampler(train_set) if args.distributed else None
    train_loader = DataLoader(
        train_set, batch_size=64, sampler=train_sampler, shuffle=(train_sampler is None)
    )
    ```

    ## Fix safety
    The fix replaces `shuffle=True` by `shuffle=(sampler is None)` when the sampler is a name or
    an attribute, and by `shuffle=False` when it is built inline (a constructor never returns
    None). It is safe: where the sampler is None the loader still shuffles as before, and where
    it is not, the call raised before. Samplers given as other expressions get no fix.
    """

    code = "TRL304"
    name = "sampler-with-shuffle"
    severity = Severity.ERROR
    fix = "safe"
    markers = ("sampler",)

    def visit_Call(self, node: cst.Call) -> None:
        if not is_torch_dataloader(self.ctx.names, node) or has_star_args(node):
            return
        shuffle = arg_node(node, 2, "shuffle")
        if shuffle is None or not self._truthy(shuffle.value):
            return
        for keyword, index in (("sampler", 3), ("batch_sampler", 4)):
            value = argument(node, index, keyword)
            if value is None or is_none(value) or self._always_none(value):
                continue
            self._report(node, shuffle, keyword, value)
            return

    def _report(self, call: cst.Call, shuffle: cst.Arg, keyword: str, value) -> None:
        text = self.ctx.code(value)
        short = text if len(text) <= 40 and "\n" not in text else keyword
        if keyword == "sampler":
            error = '"sampler option is mutually exclusive with shuffle"'
        else:
            error = (
                '"batch_sampler option is mutually exclusive with batch_size, shuffle, '
                'sampler, and drop_last"'
            )
        where = when = ""
        if type(value) in (cst.Name, cst.Attribute):
            where = " whenever it is not None"
            when = f"`{short}` is often set only on the distributed path. "
        message = (
            f"`{keyword}={short}` with `shuffle=True`: DataLoader raises ValueError{where}"
        )
        self.report(
            shuffle,
            message,
            help=(
                f"{when}PyTorch's error: {error}. The sampler already decides the order: leave "
                f"`shuffle` off whenever `{keyword}` is given."
            ),
            fix=self._fix(call, shuffle, keyword, value),
        )

    def _fix(self, call: cst.Call, shuffle: cst.Arg, keyword: str, value) -> Optional[PendingFix]:
        if keyword == "batch_sampler":
            # The batch-sampler form also refuses batch_size / sampler / drop_last.
            others = [
                a
                for a in call.args
                if a is not shuffle
                and (
                    (a.keyword is not None and a.keyword.value in ("batch_size", "drop_last"))
                    or (a.keyword is not None and a.keyword.value == "sampler")
                )
            ]
            positional = [a for a in call.args if a.keyword is None]
            if others or len(positional) > 1:
                return None
        if type(value) in (cst.Name, cst.Attribute) and "\n" not in self.ctx.code(value):
            new = f"({self.ctx.code(value)} is None)"
            label = f"shuffle={new}"
        elif type(value) is cst.Call:
            new = "False"
            label = "shuffle=False"
        else:
            return None
        return self.safe_fix(
            f"Shuffle only without a {keyword.replace('_', ' ')}: `{label}`",
            self.ctx.replace(shuffle.value, new),
        )

    def _truthy(self, value: cst.BaseExpression) -> bool:
        if type(value) is cst.Name:
            if value.value == "True":
                return True
            bindings = self.ctx.scopes.lookup(value.value, value)
            return bool(bindings) and all(
                b.kind in ("assign", "annassign")
                and type(b.value) is cst.Name
                and b.value.value == "True"
                for b in bindings
            )
        return False

    def _always_none(self, value: cst.BaseExpression) -> bool:
        """A name every reaching binding of which is `None`."""
        if type(value) is not cst.Name:
            return False
        bindings = self.ctx.scopes.lookup(value.value, value)
        return bool(bindings) and all(
            b.kind in ("assign", "annassign") and is_none(b.value) for b in bindings
        )
