"""Reporters: turn the remaining findings of a run into text, JSON, ... Nothing else formats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, TextIO

from ..diagnostics import Diagnostic
from ..source import Source


@dataclass
class ReportContext:
    """What a reporter may need besides the findings."""

    sources: Dict[str, Source]  # display path -> current text (for code frames, edit positions)
    unsafe_fixes: bool = False
    show_source: bool = True
    color: bool = False
    fixed: int = 0  # findings fixed in this run (for the summary line)
    fix_mode: bool = False

    def line_of(self, diagnostic: Diagnostic) -> Optional[str]:
        source = self.sources.get(diagnostic.path)
        if source is None:
            return None
        return source.line(diagnostic.text_row or diagnostic.row)


def get_reporter(name: str) -> Callable[..., None]:
    from . import json as json_report
    from . import text

    reporters = {
        "text": text.report_full,
        "full": text.report_full,
        "concise": text.report_concise,
        "json": json_report.report,
    }
    return reporters[name]


FORMATS = ("text", "full", "concise", "json")

Writer = TextIO
