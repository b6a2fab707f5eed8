"""Human-readable output: `path:row:col: CODE [*] severity: message`, with a code frame.

Columns are 1-based here (as in ruff, flake8 and compilers); a notebook finding reads
`path:cell N:row:col`. `[*]` marks a finding that `--fix` (or `--fix --unsafe-fixes` when that
flag is given) would fix. Colour (ANSI) only when the context asks for it (cli/output.py decides:
a terminal, unless NO_COLOR; FORCE_COLOR forces it).
"""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Sequence, TextIO

from ..diagnostics import Applicability, Diagnostic, Severity
from ..fixes import apply_edits
from .escapes import printable
from .context import ReportContext

_RESET = "\x1b[0m"
_STYLES = {
    "bold": "\x1b[1m",
    "dim": "\x1b[2m",
    "red": "\x1b[1;31m",
    "yellow": "\x1b[1;33m",
    "blue": "\x1b[1;34m",
    "cyan": "\x1b[36m",
    "green": "\x1b[32m",
}
_SEVERITY_STYLE = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "blue"}


def paint(text: str, style: str, ctx: ReportContext) -> str:
    if not ctx.color or not text:
        return text
    return f"{_STYLES[style]}{text}{_RESET}"


def location(d: Diagnostic) -> str:
    if d.cell is not None:
        return f"{d.path}:cell {d.cell}:{d.row}:{d.col + 1}"
    return f"{d.path}:{d.row}:{d.col + 1}"


def _fix_marker(d: Diagnostic, ctx: ReportContext) -> str:
    if d.fix is None:
        return ""
    if d.fix.applicability is Applicability.SAFE or ctx.unsafe_fixes:
        return " " + paint("[*]", "cyan", ctx)
    return ""


def headline(d: Diagnostic, ctx: ReportContext) -> str:
    style = _SEVERITY_STYLE[d.severity]
    return printable(
        f"{paint(location(d), 'bold', ctx)}: {paint(d.code, style, ctx)}{_fix_marker(d, ctx)} "
        f"{paint(d.severity.value, style, ctx)}: {d.message}"
    )


def report_concise(diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO) -> None:
    for d in diagnostics:
        out.write(headline(d, ctx) + "\n")
    if not ctx.quiet:
        out.write(paint(summary(diagnostics, ctx), "bold", ctx) + "\n")
    if ctx.show_fixes:
        out.write(fixed_summary(ctx))


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
            bar = paint("|", "blue", ctx)
            carets = paint("^" * max(width, 1), _SEVERITY_STYLE[d.severity], ctx)
            out.write(f" {pad} {bar}\n")
            out.write(f" {paint(gutter, 'blue', ctx)} {bar} {expanded.rstrip()}\n")
            out.write(f" {pad} {bar} {' ' * start}{carets}\n")
        for path, row, col, note in d.related:
            cell, row, col = ctx.related_location(path, row, col)
            where = f"{path}:cell {cell}:{row}:{col + 1}" if cell else f"{path}:{row}:{col + 1}"
            out.write(printable(f"   = {paint('note', 'bold', ctx)}: {where}: {note}\n"))
        if d.help:
            out.write(printable(f"   = {paint('help', 'bold', ctx)}: {d.help}\n"))
        if d.fix is not None:
            label = "fix" if (d.fix.applicability is Applicability.SAFE) else "unsafe fix"
            out.write(printable(f"   = {paint(label, 'cyan', ctx)}: {d.fix.message}\n"))
            if ctx.show_fixes:
                for change in fix_preview(d, ctx):
                    style = "red" if change.startswith("-") else "green"
                    out.write(f"     {paint(change, style, ctx)}\n")
        out.write("\n")
    if not ctx.quiet:
        out.write(paint(summary(diagnostics, ctx), "bold", ctx) + "\n")
    if ctx.show_fixes:
        out.write(fixed_summary(ctx))


def fix_preview(d: Diagnostic, ctx: ReportContext) -> List[str]:
    """`- old line` / `+ new line` for the lines the finding's fix changes."""
    source = ctx.sources.get(d.path)
    if source is None or d.fix is None or not d.fix.edits:
        return []
    text = source.text
    start = min(e.start for e in d.fix.edits)
    end = max(e.end for e in d.fix.edits)
    if end > len(text):
        return []
    first_row, _ = source.position(start)
    last_row, _ = source.position(end)
    lo = source.offset(first_row, 0)
    hi = source.offset(last_row + 1, 0) if last_row < len(source.lines) else len(text)
    old = text[lo:hi]
    new = apply_edits(old, [type(e)(e.start - lo, e.end - lo, e.content) for e in d.fix.edits])
    out = [f"- {line}" for line in old.splitlines()]
    out += [f"+ {line}" for line in new.splitlines()]
    return out


def fixed_summary(ctx: ReportContext) -> str:
    """What --fix fixed, per file and code (--show-fixes)."""
    if not ctx.fix_mode:
        return ""
    fixed = {path: found for path, found in sorted(ctx.applied.items()) if found}
    if not fixed:
        return "No findings were fixed.\n"
    total = sum(len(found) for found in fixed.values())
    lines = [f"Fixed {total} finding{'s' if total != 1 else ''}:"]
    for path, found in fixed.items():
        lines.append(f"- {paint(printable(path), 'bold', ctx)}:")
        names: Dict[str, str] = {d.code: d.name for d in found}
        for code, count in sorted(Counter(d.code for d in found).items()):
            lines.append(f"    {count} \u00d7 {code} ({names[code]})")
    return "\n".join(lines) + "\n"


def summary(diagnostics: Sequence[Diagnostic], ctx: ReportContext) -> str:
    parts: List[str] = []
    if ctx.fixed:  # a re-run that fixed nothing does not say "Fixed 0 findings"
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
    if not ctx.fixed:
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
            fixes = "fix" if unsafe == 1 else "fixes"
            parts.append(f"{unsafe} more {fixes} available with `--unsafe-fixes`.")
    return " ".join(parts)


def statistics_rows(diagnostics: Sequence[Diagnostic], ctx: ReportContext) -> List[Dict]:
    """One row per code: count, fixable count (with the run's --unsafe-fixes), name."""
    rows: Dict[str, Dict] = {}
    for d in diagnostics:
        row = rows.setdefault(
            d.code, {"code": d.code, "name": d.name, "count": 0, "fixable_count": 0}
        )
        row["count"] += 1
        if d.fix is not None and (d.fix.applicability is Applicability.SAFE or ctx.unsafe_fixes):
            row["fixable_count"] += 1
    ordered = sorted(rows.values(), key=lambda r: (-r["count"], r["code"]))
    for row in ordered:
        row["fixable"] = row["fixable_count"] > 0
    return ordered


def report_statistics(
    diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO, as_json: bool = False
) -> None:
    rows = statistics_rows(diagnostics, ctx)
    if as_json:
        import json

        json.dump(rows, out, indent=2)
        out.write("\n")
        return
    if not rows:
        if not ctx.quiet:
            out.write(paint(summary(diagnostics, ctx), "bold", ctx) + "\n")
        return
    table = [("count", "code", "fixable", "name")] + [
        (str(r["count"]), r["code"], str(r["fixable_count"]), r["name"]) for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for i, row in enumerate(table):
        cells = [
            row[0].rjust(widths[0]),
            row[1].ljust(widths[1]),
            row[2].rjust(widths[2]),
            row[3],
        ]
        line = "  ".join(cells).rstrip()
        out.write((paint(line, "bold", ctx) if i == 0 else line) + "\n")
    if not ctx.quiet:
        out.write(paint(summary(diagnostics, ctx), "bold", ctx) + "\n")
