"""TRL002 unused-noqa."""

from __future__ import annotations

import io
import tokenize
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Set, Tuple

from ... import noqa
from ...diagnostics import Applicability, Diagnostic, Edit, Fix, Severity
from ..base import Rule

if TYPE_CHECKING:  # pragma: no cover
    from ...selection import Selection


class UnusedNoqa(Rule):
    """## What it does
    Reports a `# noqa: TRLxxx` comment that suppresses nothing: no finding of that code is
    reported on its line, or the code names no trainlint rule. Off by default; turn it on with
    `--extend-select TRL002` (or `extend-select = ["TRL002"]`).

    ## Why is this bad
    A suppression outlives the code it was written for. Once the line is fixed or rewritten, the
    stale `# noqa: TRL201` silently hides the next real finding of that code on that line, and
    readers take it as a warning that the line is still dangerous. A misspelt code
    (`# noqa: TRL21`) suppresses nothing at all.

    Only codes that trainlint can judge are reported: codes of other tools (`E501`, `F401`) and
    codes of rules that are not enabled for the file are left alone, and so is a bare `# noqa`
    (it may be there for another tool).

    ## Example
    ```python
    model = nn.DataParallel(model.to(device))  # noqa: TRL201
    ```

    ## Use instead
    ```python
    model = nn.DataParallel(model.to(device))
    ```

    ## Fix safety
    The fix is safe: it removes the unused codes from the comment, and the whole `# noqa`
    directive when no code is left; other tools' codes and other comments on the line stay.
    """

    code = "TRL002"
    name = "unused-noqa"
    severity = Severity.WARNING
    fix = "safe"
    # Works on the comments after the run (runner.py), not on the tree.
    markers = ("noqa", "NOQA")

    @classmethod
    def default_enabled(cls) -> bool:
        return False

    @classmethod
    def check_noqa(
        cls,
        source,
        noqa_map: Dict[int, Optional[Tuple[str, ...]]],
        diagnostics: Sequence[Diagnostic],
        selection: "Selection",
    ) -> List[Diagnostic]:
        """TRL002 findings for one file: `noqa_map` from the file's text, `diagnostics` every
        finding of the file before `# noqa` filtering, `selection` the run's rule selection
        (which codes exist, which are enabled for this file)."""
        enabled = selection.codes_for(source.path)
        if cls.code not in enabled:
            return []
        known = selection.known
        used: Dict[int, Set[str]] = {}
        for d in diagnostics:
            row = d.text_row or d.row
            listed = noqa_map.get(row)
            if listed:
                used.setdefault(row, set()).update(noqa.matching_codes(listed, d.code))
        out: List[Diagnostic] = []
        comments: Optional[Set[Tuple[int, int]]] = None
        for row, listed in sorted(noqa_map.items()):
            if not listed:
                continue  # a bare `# noqa` may be meant for another tool
            unknown, unused = [], []
            for code in listed:
                if not code.startswith("TRL") or code in used.get(row, ()):
                    continue
                matching = [k for k in known if k.startswith(code)]
                if not matching:
                    unknown.append(code)
                elif cls.code not in matching and all(k in enabled for k in matching):
                    unused.append(code)
            if not unknown and not unused:
                continue
            if comments is None:
                comments = _comment_starts(source.text)
            out.append(cls._finding(source, row, listed, unused, unknown, comments))
        return out

    @classmethod
    def _finding(cls, source, row, listed, unused, unknown, comments) -> Diagnostic:
        from ...diagnostics import make_diagnostic

        line = source.line(row)
        match = noqa.NOQA_RE.search(line)
        assert match is not None
        drop = set(unused) | set(unknown)
        parts = []
        if unused:
            parts.append(f"unused `noqa` code{'s' if len(unused) > 1 else ''} {', '.join(unused)}")
        if unknown:
            parts.append(
                f"unknown code{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in `noqa`"
            )
        message = "; ".join(parts) + ": it suppresses nothing on this line"
        fix = None
        in_comment = any(r == row and c <= match.start() for r, c in comments)
        if in_comment:
            start = source.offset(row, 0)
            ending = len(source.lines[row - 1]) - len(line)
            edit = _edit(line, ending, match, drop)
            if edit is not None:
                a, b, content = edit
                fix = Fix(
                    Applicability.SAFE,
                    "Remove the unused `noqa` code"
                    + ("s" if len(drop) > 1 else "")
                    + (" (and the comment)" if len(drop) == len(listed) else ""),
                    (Edit(start + a, start + b, content),),
                )
        end_col = match.start() + len(match.group().rstrip(", \t"))
        return make_diagnostic(
            source,
            cls.code,
            cls.name,
            message,
            cls.severity,
            (row, match.start(), row, end_col),
            fix,
        )


def _edit(line: str, ending: int, match, drop: Set[str]) -> Optional[Tuple[int, int, str]]:
    """(start, end, content) inside `line` (whose line ending is `ending` characters long) that
    removes the dropped codes."""
    group = match.group("codes") or ""
    written = noqa._CODE_RE.findall(group)
    keep = [c for c in written if c.upper() not in drop]
    g_start, g_end = match.span("codes")
    if keep:
        trailing = group[len(group.rstrip()) :]
        return g_start, g_end, ", ".join(keep) + trailing
    rest = line[match.end() :]
    if not line[: match.start()].strip() and not rest.strip():
        return 0, len(line) + ending, ""  # the line is just this comment: remove the line
    if not rest.strip():
        start = match.start()
        while start > 0 and line[start - 1] in " \t":
            start -= 1
        return start, len(line), ""
    if rest.lstrip().startswith("#"):
        return match.start(), match.end(), ""
    return match.start(), match.end(), "# "


def _comment_starts(text: str) -> Set[Tuple[int, int]]:
    """(row, col) of every comment token; empty when the text does not tokenize."""
    found: Set[Tuple[int, int]] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                found.add(token.start)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return set()
    return found
