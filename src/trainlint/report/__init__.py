"""Reporters: turn the remaining findings of a run into text, JSON, SARIF, GitHub annotations.
Nothing else formats.

Every format writes valid UTF-8. A file name that is not (Python keeps its bytes as surrogate
escapes) is written with those bytes as `\\xNN` (`printable`), and SARIF URIs percent-encode
them (`%FF`), which is exact.
"""

from __future__ import annotations

import re
from typing import Callable, TextIO

from .context import ReportContext

_SURROGATES = re.compile("[\ud800-\udfff]")


def printable(text: str, backslash: str = "\\") -> str:
    """`text` with each byte of a file name that is not UTF-8 (kept by Python as a surrogate
    escape, U+DC80..U+DCFF) written as `\\xNN`, and any other lone surrogate as `\\uNNNN`:
    what is left encodes as UTF-8. `backslash` is how a backslash is written (`\\\\` inside JSON
    text)."""
    if _SURROGATES.search(text) is None:
        return text

    def escaped(match: "re.Match[str]") -> str:
        code = ord(match.group())
        if 0xDC80 <= code <= 0xDCFF:
            return f"{backslash}x{code - 0xDC00:02x}"
        return f"{backslash}u{code:04x}"

    return _SURROGATES.sub(escaped, text)


def printable_json(text: str) -> str:
    """JSON text (written with ensure_ascii=False) whose strings are `printable`."""
    return printable(text, "\\\\")


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
