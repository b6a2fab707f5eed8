"""Human-readable output: `path:row:col: CODE [*] severity: message`, with a code frame.

Columns are 1-based here (as in ruff, flake8 and compilers). `[*]` marks a finding that `--fix`
(or `--fix --unsafe-fixes` when that flag is given) would fix.
"""

from __future__ import annotations

from typing import List, Sequence, TextIO

from ..diagnostics import Applicability, Diagnostic, Severity
from . import ReportContext


def location(d: Diagnostic) -> str:
    if d.cell is not None:
        return f"{d.path}:cell {d.cell}:{d.row}:{d.col + 1}"
    return f"{d.path}:{d.row}:{d.col + 1}"


def _fix_marker(d: Diagnostic, ctx: ReportContext) -> str:
    if d.fix is None:
        return ""
    if d.fix.applicability is Applicability.SAFE or ctx.unsafe_fixes:
        return " [*]"
    return ""


def headline(d: Diagnostic, ctx: ReportContext) -> str:
    return f"{location(d)}: {d.code}{_fix_marker(d, ctx)} {d.severity.value}: {d.message}"


def report_concise(diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO) -> None:
    for d in diagnostics:
        out.write(headline(d, ctx) + "\n")
    out.write(summary(diagnostics, ctx) + "\n")


def report_full(diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO) -> None:
    for d in diagnostics:
        out.write(headline(d, ctx) + "\n")
        line = ctx.line_of(d) if ctx.show_source else None
        if line is not None and line.strip():
            gutter = str(d.row)
            pad = " " * len(gutter)
            expanded = line.expandtabs(4)
            # Columns count characters; tabs were expanded for display, so recount.
            start = len(line[: d.col].expandtabs(4))
            if d.end_row == d.row and d.end_col > d.col:
                width = len(line[: d.end_col].expandtabs(4)) - start
            else:
                width = max(len(expanded.rstrip()) - start, 1)
            out.write(f" {pad} |\n")
            out.write(f" {gutter} | {expanded.rstrip()}\n")
            out.write(f" {pad} | {' ' * start}{'^' * max(width, 1)}\n")
        for path, row, col, note in d.related:
            out.write(f"   = note: {path}:{row}:{col + 1}: {note}\n")
        if d.fix is not None:
            label = "fix" if (d.fix.applicability is Applicability.SAFE) else "unsafe fix"
            out.write(f"   = {label}: {d.fix.message}\n")
        out.write("\n")
    out.write(summary(diagnostics, ctx) + "\n")


def summary(diagnostics: Sequence[Diagnostic], ctx: ReportContext) -> str:
    parts: List[str] = []
    if ctx.fix_mode or ctx.fixed:
        parts.append(
            f"Fixed {ctx.fixed} finding{'s' if ctx.fixed != 1 else ''}, "
            f"{len(diagnostics)} remaining."
        )
    if not diagnostics:
        if not parts:
            parts.append("All checks passed!")
        return " ".join(parts)
    errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
    warnings = sum(1 for d in diagnostics if d.severity is Severity.WARNING)
    infos = len(diagnostics) - errors - warnings
    counts = [
        f"{errors} error{'s' if errors != 1 else ''}",
        f"{warnings} warning{'s' if warnings != 1 else ''}",
    ]
    if infos:
        counts.append(f"{infos} info")
    if not (ctx.fix_mode or ctx.fixed):
        parts.append(
            f"Found {len(diagnostics)} finding{'s' if len(diagnostics) != 1 else ''} "
            f"({', '.join(counts)})."
        )
    safe = sum(1 for d in diagnostics if d.fix and d.fix.applicability is Applicability.SAFE)
    unsafe = sum(1 for d in diagnostics if d.fix and d.fix.applicability is Applicability.UNSAFE)
    if ctx.unsafe_fixes:
        if safe + unsafe:
            parts.append(f"[*] {safe + unsafe} fixable with `trainlint --fix --unsafe-fixes`.")
    else:
        if safe:
            parts.append(f"[*] {safe} fixable with `trainlint --fix`.")
        if unsafe:
            parts.append(f"{unsafe} more with `--unsafe-fixes`.")
    return " ".join(parts)
