"""GitHub Actions workflow commands (`--output-format github`): one annotation per finding.

    ::warning title=trainlint TRL201 (dataparallel-wrap-then-move),file=train.py,line=6,col=9,
    endLine=6,endColumn=42::train.py:6:9: TRL201 ...   (one line)

Errors are `::error`, warnings `::warning`, info-level findings `::notice`. Files are named
relative to the repository root (GitHub resolves them against the checkout); a notebook
finding points at the line of the notebook's JSON that holds the cell's line, and its message
starts with `path:cell N:row:col`. Values are escaped as the runner expects: `%`, CR and LF in
the message; additionally `:` and `,` in properties.
"""

from __future__ import annotations

from typing import Sequence, TextIO

from ..diagnostics import Diagnostic, Severity
from .escapes import printable
from .context import ReportContext
from .text import location

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def annotation(d: Diagnostic, ctx: ReportContext) -> str:
    line, col = ctx.file_position(d, d.row, d.col, d.cell)
    if d.cell is not None:
        end_line, end_col = ctx.file_position(d, d.end_row, d.end_col, d.cell)
    else:
        end_line, end_col = d.end_row, d.end_col
    if (end_line, end_col) < (line, col):
        end_line, end_col = line, col
    properties = [
        ("title", f"trainlint {d.code} ({d.name})" if d.name else f"trainlint {d.code}"),
        ("file", ctx.relative(d.path)),
        ("line", str(max(line, 1))),
        ("col", str(col + 1)),
        ("endLine", str(max(end_line, 1))),
        ("endColumn", str(end_col + 1)),
    ]
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    message = f"{location(d)}: {d.code} {d.message}"
    if d.help:
        message += f"\n{d.help}"
    return printable(f"::{COMMANDS[d.severity]} {props}::{escape_data(message)}")


def report(diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO) -> None:
    for d in diagnostics:
        out.write(annotation(d, ctx) + "\n")
