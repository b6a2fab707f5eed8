"""Reporters: turn the remaining findings of a run into text, JSON, SARIF, GitHub annotations.
Nothing else formats.

Every format writes valid UTF-8. A file name that is not (Python keeps its bytes as surrogate
escapes) is written with those bytes as `\\xNN` (escapes.py), and SARIF URIs percent-encode
them (`%FF`), which is exact.
"""

from __future__ import annotations

from typing import Callable, TextIO

from .context import ReportContext
from .escapes import printable, printable_json


def get_reporter(name: str) -> Callable[..., None]:
    from . import github, sarif
    from . import json as json_report
    from . import text

    reporters = {
        "text": text.report_full,
        "full": text.report_full,
        "concise": text.report_concise,
        "json": json_report.report,
        "sarif": sarif.report,
        "github": github.report,
    }
    return reporters[name]


FORMATS = ("text", "full", "concise", "json", "sarif", "github")
# Formats meant for people (colour, progress, summaries); the others are for programs.
HUMAN_FORMATS = ("text", "full", "concise")

Writer = TextIO

__all__ = [
    "FORMATS",
    "HUMAN_FORMATS",
    "ReportContext",
    "Writer",
    "get_reporter",
    "printable",
    "printable_json",
]
