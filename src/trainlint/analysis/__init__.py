"""Facts several rules share, computed once per file and only when a rule asks.

Each analysis is a class taking the `FileContext`; `ctx.analysis(Cls)` builds it on first use and
caches it for the rest of the file. Rules never re-derive what an analysis already knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..context import FileContext


class Analysis:
    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
