"""Pending reports resolved into diagnostics: positions, fixes' edits and related sites.

A rule's `report()` records nodes (`PendingReport`); positions are computed only now, for the
reported nodes alone, in one batch per file. The engine resolves each rule's reports after the
walk; a rule whose reports wait for the project phase (TRL101's deferred helper findings)
resolves them itself, which is why this lives beside the context and not in the engine.
"""

from __future__ import annotations

from typing import List, Sequence

import libcst as cst

from .context import EditSpec, FileContext
from .diagnostics import Diagnostic, Edit, Fix, Severity, make_diagnostic
from .rules.base import PendingReport


def resolve_reports(ctx: FileContext, pending: Sequence[PendingReport]) -> List[Diagnostic]:
    if not pending:
        return []
    nodes: List[cst.CSTNode] = []
    for report in pending:
        nodes.append(report.node)
        if report.end_node is not None:
            nodes.append(report.end_node)
        for node, _ in report.related:
            nodes.append(node)
        if report.fix is not None:
            for spec in report.fix.edits:
                nodes.append(spec.anchor_node())
    for report in pending:
        _check_report(report)
    ctx.positions.prepare(nodes)
    out = []
    for report in pending:
        row, col, end_row, end_col = ctx.span(report.node)
        if report.end_node is not None:
            _, _, end_row, end_col = ctx.span(report.end_node)
        fix = None
        if report.fix is not None:
            edits = tuple(_resolve_edit(ctx, spec) for spec in report.fix.edits)
            fix = Fix(report.fix.applicability, report.fix.message, edits)
        related = tuple((ctx.path, *ctx.span(node)[:2], note) for node, note in report.related)
        out.append(
            make_diagnostic(
                ctx.source,
                report.rule.code,
                report.rule.name,
                report.message,
                report.severity,
                (row, col, end_row, end_col),
                fix,
                related,
                report.help,
            )
        )
    return out


def _check_report(report: PendingReport) -> None:
    """A report's parts must be what the reporters can print; say which part is wrong."""
    if not isinstance(report.message, str):
        raise TypeError(f"report() message must be a str, not {type(report.message).__name__}")
    if not isinstance(report.help, str):
        raise TypeError(f"report() help must be a str, not {type(report.help).__name__}")
    if not isinstance(report.severity, Severity):
        raise TypeError(f"report() severity must be a Severity, not {report.severity!r}")
    for node in (report.node, report.end_node):
        if node is not None and not isinstance(node, cst.CSTNode):
            raise TypeError(f"report() needs a libcst node, not {type(node).__name__}")


def _resolve_edit(ctx: FileContext, spec: EditSpec) -> Edit:
    source = ctx.source
    if spec.kind in ("replace", "insert_before", "insert_after"):
        row, col, end_row, end_col = ctx.span(spec.node)
        start = source.offset(row, col)
        end = source.offset(end_row, end_col)
        if spec.kind == "replace":
            return Edit(start, end, spec.content)
        at = start if spec.kind == "insert_before" else end
        return Edit(at, at, spec.content)
    newline = source.newline
    anchor = spec.anchor_node()
    row, _, end_row, _ = ctx.span(anchor)
    line = source.line(row)
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    text = "".join(indent + part + newline for part in spec.content.split("\n"))
    if spec.kind in ("line_before", "body_start"):
        at = source.offset(row, 0)
        return Edit(at, at, text)
    # line_after: after the physical line that ends the statement.
    starts = source.line_starts
    if end_row < len(starts) - 1:
        at = starts[end_row]
        return Edit(at, at, text)
    at = len(source.text)
    if source.text and not source.text.endswith(("\n", "\r")):
        text = newline + text
    return Edit(at, at, text)
