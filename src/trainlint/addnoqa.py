"""`--add-noqa`: baseline an existing codebase by suppressing every finding that remains.

Each line with findings gets `# noqa: CODES` at its end; a line that already has a
`# noqa: ...` comment gets the missing codes added to it (other tools' codes stay, in their
order). A line that ends inside a multi-line string, or with a backslash continuation, cannot
carry a comment without changing the code: it is left alone and reported. TRL001 (a file that
does not parse) is never suppressed this way. Notebooks are edited cell by cell and written back
like fixes are.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field
from typing import Dict, List, Set

from . import noqa
from .diagnostics import Diagnostic, Edit
from .fixes import WriteError, apply_edits, write_atomic

NOT_SUPPRESSIBLE = ("TRL001",)


@dataclass
class NoqaResult:
    added: int = 0  # noqa directives added or extended
    files: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)  # "path:row: why"
    errors: List[str] = field(default_factory=list)


def add_noqa(run_result) -> NoqaResult:
    """Add noqa comments for `run_result.diagnostics` (a runner.RunResult) and write the files."""
    out = NoqaResult()
    by_file: Dict[str, List[Diagnostic]] = {}
    for d in run_result.diagnostics:
        if d.code in NOT_SUPPRESSIBLE or (d.text_row is not None and d.text_row < 1):
            continue
        by_file.setdefault(d.path, []).append(d)
    for display, diagnostics in sorted(by_file.items()):
        state = run_result.states.get(display)
        if state is None or state.source is None or state.original is None:
            continue
        source = state.source
        rows: Dict[int, Set[str]] = {}
        for d in diagnostics:
            rows.setdefault(d.text_row or d.row, set()).add(d.code)
        blocked = _rows_without_room(source.text)
        if blocked is None:
            out.skipped.append(f"{display}: cannot tokenize the file; no noqa comments added")
            continue
        edits: List[Edit] = []
        for row, codes in sorted(rows.items()):
            if row in blocked:
                where = next(d for d in diagnostics if (d.text_row or d.row) == row)
                loc = f"cell {where.cell}:{where.row}" if where.cell else str(where.row)
                out.skipped.append(
                    f"{display}:{loc}: the line ends inside a string or with a backslash; "
                    "add the noqa comment by hand"
                )
                continue
            edit = _edit_for(source, row, codes)
            if edit is not None:
                edits.append(edit)
        if not edits:
            continue
        new_source = source.with_text(apply_edits(source.text, edits), edits)
        try:
            write_atomic(state.path, new_source.to_bytes(), state.original)
        except WriteError as exc:
            out.errors.append(str(exc))
            continue
        out.added += len(edits)
        out.files.append(display)
    return out


def _edit_for(source, row: int, codes: Set[str]):
    line = source.line(row)
    start = source.offset(row, 0)
    match = noqa.NOQA_RE.search(line)
    if match is not None and match.group("codes"):
        group = match.group("codes")
        written = noqa._CODE_RE.findall(group)
        missing = sorted(c for c in codes if not noqa.suppresses(tuple(written), c))
        if not missing:
            return None
        trailing = group[len(group.rstrip()) :]
        a, b = match.span("codes")
        return Edit(start + a, start + b, ", ".join(written + missing) + trailing)
    if match is not None:
        return None  # a bare `# noqa` already suppresses everything
    end = len(line.rstrip())
    return Edit(start + end, start + len(line), f"  # noqa: {', '.join(sorted(codes))}")


def _rows_without_room(text: str):
    """Rows whose end is inside a multi-line string or continued with a backslash (a comment
    there would change the code); None when the text does not tokenize."""
    from .lines import split_lines

    blocked: Set[int] = set()
    commented: Set[int] = set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    for token in tokens:
        (srow, _), (erow, _) = token.start, token.end
        if token.type == tokenize.COMMENT:
            commented.add(srow)
        elif erow > srow and token.type not in (tokenize.NL, tokenize.NEWLINE):
            blocked.update(range(srow, erow))  # a string (or f-string part) spanning lines
    for row, line in enumerate(split_lines(text), start=1):
        if row not in commented and line.rstrip().endswith("\\"):
            blocked.add(row)  # a backslash continuation
    return blocked
