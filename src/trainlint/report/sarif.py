"""SARIF 2.1.0 output (`--output-format sarif`), as GitHub code scanning reads it.

- One run; `tool.driver.rules` lists every trainlint rule with its short description (the first
  sentence), full description (the "What it does" section), help (the whole explanation, text
  and markdown), `helpUri` (docs/rules.md#trlNNN) and default level.
- Each result names its rule (`ruleId`, `ruleIndex`), its level (error / warning / note), and one
  location: the file relative to the repository root (`uriBaseId` %SRCROOT%, which
  `originalUriBaseIds` defines) and a region with 1-based lines and columns (`columnKind`
  unicodeCodePoints: trainlint counts characters). A notebook finding points at the line of
  the notebook's JSON that holds the cell's line, and carries `properties.cell` /
  `properties.cellRow` / `properties.cellColumn`.
- `partialFingerprints["trainlint/v1"]` is stable across runs and across edits elsewhere in the
  file: a hash of the code, the file, the text of the flagged line and its occurrence number.
- Fixes of .py files are included as SARIF `fixes` (replacements in the same coordinates).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple
from urllib.parse import quote

from .. import DOCS_URL, __version__, rule_url
from ..diagnostics import Diagnostic, Severity
from .escapes import printable_json
from .context import ReportContext

SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
# GitHub's `problem.severity` property: error, warning or recommendation.
PROBLEM_SEVERITY = {
    Severity.ERROR: "error",
    Severity.WARNING: "warning",
    Severity.INFO: "recommendation",
}
FINGERPRINT_KEY = "trainlint/v1"


def _section(explanation: str, title: str) -> str:
    match = re.search(rf"^## {title}\s*\n(.*?)(?=^## |\Z)", explanation, re.M | re.S)
    return " ".join(match.group(1).split()) if match else ""


SHORT_TITLE_MAX = 80  # GitHub shows shortDescription as the alert's title


def short_title(summary: str, name: str) -> str:
    """The summary's first sentence when it fits in SHORT_TITLE_MAX characters, else the rule's
    name made readable ("dataparallel-wrap-then-move" -> "Dataparallel wrap then move")."""
    first = re.match(r"(.+?[.!?])(?=\s|$)", " ".join(summary.split()))
    if first is not None and len(first.group(1)) <= SHORT_TITLE_MAX:
        return first.group(1)
    return name.replace("-", " ").capitalize()


def rule_descriptors() -> Tuple[List[Dict[str, Any]], Dict[str, int]]:
    from ..rules import all_rules

    descriptors: List[Dict[str, Any]] = []
    index: Dict[str, int] = {}
    for code, rule in all_rules().items():
        explanation = rule.explanation()
        full = _section(explanation, "What it does") or rule.summary()
        # rules/<family>/trlNNN_name.py; a rule defined elsewhere (a plugin, a test) has none.
        parts = rule.__module__.split(".")
        family = parts[-2] if len(parts) > 1 else "other"
        index[code] = len(descriptors)
        descriptors.append(
            {
                "id": code,
                "name": rule.name,
                "shortDescription": {"text": short_title(rule.summary(), rule.name)},
                "fullDescription": {"text": full},
                "help": {"text": explanation, "markdown": explanation},
                "helpUri": rule_url(code),
                "defaultConfiguration": {
                    "level": LEVELS[rule.severity],
                    "enabled": bool(rule.default_enabled() and not rule.preview),
                },
                "properties": {
                    "tags": ["pytorch", family],
                    "precision": "high",
                    "problem.severity": PROBLEM_SEVERITY[rule.severity],
                },
            }
        )
    return descriptors, index


def _artifact(path: str, ctx: ReportContext) -> Dict[str, Any]:
    rel = ctx.relative(path)
    if rel.startswith("/"):
        return {"uri": Path(rel).as_uri()}
    # The file name's bytes, percent-encoded: exact even where they are not UTF-8.
    return {"uri": quote(os.fsencode(rel)), "uriBaseId": "%SRCROOT%"}


def _region(
    d: Diagnostic, ctx: ReportContext, row: int, col: int, end_row: int, end_col: int
) -> Dict[str, Any]:
    line, column = ctx.file_position(d, row, col, d.cell)
    if d.cell is not None:
        end_line, end_column = ctx.file_position(d, end_row, end_col, d.cell)
    else:
        end_line, end_column = end_row, end_col
    if (end_line, end_column) < (line, column):
        end_line, end_column = line, column
    region = {"startLine": max(line, 1), "startColumn": max(column, 0) + 1}
    region["endLine"] = max(end_line, 1)
    region["endColumn"] = max(end_column, 0) + 1
    return region


def _fingerprint(d: Diagnostic, ctx: ReportContext, seen: Dict[Tuple[str, str, str], int]) -> str:
    line = (ctx.line_of(d) or "").strip()
    key = (d.code, ctx.relative(d.path), line)
    occurrence = seen.get(key, 0)
    seen[key] = occurrence + 1
    data = "\0".join([*key, str(occurrence)])
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _result(
    d: Diagnostic,
    ctx: ReportContext,
    index: Dict[str, int],
    seen: Dict[Tuple[str, str, str], int],
) -> Dict[str, Any]:
    result: Dict[str, Any] = {
        "ruleId": d.code,
        "level": LEVELS[d.severity],
        "message": {"text": f"{d.message}\n\n{d.help}" if d.help else d.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact(d.path, ctx),
                    "region": _region(d, ctx, d.row, d.col, d.end_row, d.end_col),
                }
            }
        ],
        "partialFingerprints": {FINGERPRINT_KEY: _fingerprint(d, ctx, seen)},
    }
    if d.code in index:
        result["ruleIndex"] = index[d.code]
    properties: Dict[str, Any] = {"severity": d.severity.value}
    if d.cell is not None:
        properties.update({"cell": d.cell, "cellRow": d.row, "cellColumn": d.col + 1})
    result["properties"] = properties
    related = []
    for i, (path, row, col, note) in enumerate(d.related):
        cell, row, col = ctx.related_location(path, row, col)
        probe = Diagnostic(d.code, note, path, row, col, row, col, d.severity, cell=cell)
        related.append(
            {
                "id": i,
                "message": {"text": note},
                "physicalLocation": {
                    "artifactLocation": _artifact(path, ctx),
                    "region": _region(probe, ctx, row, col, row, col),
                },
            }
        )
    if related:
        result["relatedLocations"] = related
    fix = _fix(d, ctx)
    if fix is not None:
        result["fixes"] = [fix]
    return result


def _fix(d: Diagnostic, ctx: ReportContext) -> Optional[Dict[str, Any]]:
    if d.fix is None or d.cell is not None or not d.fix.edits:
        return None
    if any(e.row < 1 or e.end_row < 1 for e in d.fix.edits):
        return None
    return {
        "description": {"text": f"{d.fix.message} ({d.fix.applicability.value} fix)"},
        "artifactChanges": [
            {
                "artifactLocation": _artifact(d.path, ctx),
                "replacements": [
                    {
                        "deletedRegion": {
                            "startLine": e.row,
                            "startColumn": e.col + 1,
                            "endLine": e.end_row,
                            "endColumn": e.end_col + 1,
                        },
                        "insertedContent": {"text": e.content},
                    }
                    for e in d.fix.edits
                ],
            }
        ],
    }


def to_sarif(diagnostics: Sequence[Diagnostic], ctx: ReportContext) -> Dict[str, Any]:
    descriptors, index = rule_descriptors()
    seen: Dict[Tuple[str, str, str], int] = {}
    root = (ctx.root or Path.cwd()).resolve()
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "trainlint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": DOCS_URL,
                        "rules": descriptors,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root.as_uri().rstrip("/") + "/"}},
                "columnKind": "unicodeCodePoints",
                "results": [_result(d, ctx, index, seen) for d in diagnostics],
            }
        ],
    }


def report(diagnostics: Sequence[Diagnostic], ctx: ReportContext, out: TextIO) -> None:
    # One write (json.dump's many small writes cost several times the encoding).
    text = json.dumps(to_sarif(diagnostics, ctx), indent=2, ensure_ascii=False)
    out.write(printable_json(text) + "\n")
