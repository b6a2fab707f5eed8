"""JSON output in ruff's `--output-format json` schema, plus `severity`, `name`, `cell`, `help`.

Tools that read ruff's JSON read ours: a list of objects with code, message, filename (absolute),
location/end_location {row, column} (1-based columns), fix {applicability, message, edits
[{content, location, end_location}]} or null, noqa_row and url.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Sequence, TextIO

from .. import rule_url
from ..diagnostics import Diagnostic
from .escapes import printable_json
from .context import ReportContext


def to_json(d: Diagnostic) -> Dict[str, Any]:
    fix = None
    if d.fix is not None:
        fix = {
            "applicability": d.fix.applicability.value,
            "message": d.fix.message,
            "edits": [
                {
                    "content": e.content,
                    "location": {"row": e.row, "column": e.col + 1},
                    "end_location": {"row": e.end_row, "column": e.end_col + 1},
                }
                for e in d.fix.edits
            ],
        }
    return {
        "cell": d.cell,
        "code": d.code,
        "end_location": {"row": d.end_row, "column": d.end_col + 1},
        "filename": os.path.abspath(d.path),
        "fix": fix,
        "help": d.help or None,
        "location": {"row": d.row, "column": d.col + 1},
        "message": d.message,
        "name": d.name,
        "noqa_row": d.noqa_row,
        "severity": d.severity.value,
        "url": rule_url(d.code),
    }


def report(diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO) -> None:
    # One write of the whole text: json.dump's many small writes cost several times the encoding.
    text = json.dumps([to_json(d) for d in diagnostics], indent=2, ensure_ascii=False)
    out.write(printable_json(text) + "\n")
