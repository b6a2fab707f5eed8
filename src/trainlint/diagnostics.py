"""What a rule reports: Diagnostic, Fix, Edit, Severity, Applicability.

Everything here is plain data (cacheable, picklable for worker processes). Positions follow the
engine's convention: rows 1-based, columns 0-based; reporters convert for output.
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from .source import Source


class Severity(str, enum.Enum):
    ERROR = "error"  # will crash later, or be silently wrong
    WARNING = "warning"  # likely a bug
    INFO = "info"  # performance or style; off by default

    def __str__(self) -> str:
        return self.value


class Applicability(str, enum.Enum):
    SAFE = "safe"  # only the bug changes; applied by --fix
    UNSAFE = "unsafe"  # may change behaviour; applied only with --unsafe-fixes

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] with `content` (offsets into Source.text).

    row/col/end_row/end_col say the same for reports (rows 1-based, inside the notebook cell
    for notebooks; columns 0-based); 0 when unknown.
    """

    start: int
    end: int
    content: str
    row: int = 0
    col: int = 0
    end_row: int = 0
    end_col: int = 0


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    message: str
    edits: Tuple[Edit, ...]


@dataclass
class Diagnostic:
    code: str
    message: str
    path: str
    row: int
    col: int
    end_row: int
    end_col: int
    severity: Severity
    name: str = ""  # the rule's name, e.g. "dataparallel-wrap-then-move"
    fix: Optional[Fix] = None
    cell: Optional[int] = None  # notebook cell (1-based) when the source is a notebook
    # For notebooks the rows above are inside the cell; `text_row` keeps the row in the joined
    # text that noqa handling and fixes work on.
    text_row: Optional[int] = None
    noqa_row: Optional[int] = None
    related: Tuple[Tuple[str, int, int, str], ...] = ()  # (path, row, col, note): other sites
    # The headline (`message`) says what is wrong in about 100 characters; `help` says what
    # happens at run time (PyTorch's own error text) and how to fix it. Empty: nothing to add.
    help: str = ""

    def sort_key(self) -> Tuple[Any, ...]:
        return (self.path, self.cell or 0, self.row, self.col, self.code, self.message)

    def to_dict(self) -> Dict[str, Any]:
        data = {
            "code": self.code,
            "message": self.message,
            "path": self.path,
            "row": self.row,
            "col": self.col,
            "end_row": self.end_row,
            "end_col": self.end_col,
            "severity": self.severity.value,
            "name": self.name,
            "cell": self.cell,
            "text_row": self.text_row,
            "noqa_row": self.noqa_row,
            "related": [list(item) for item in self.related],
            "help": self.help,
            "fix": None,
        }
        if self.fix is not None:
            data["fix"] = {
                "applicability": self.fix.applicability.value,
                "message": self.fix.message,
                "edits": [
                    [e.start, e.end, e.content, e.row, e.col, e.end_row, e.end_col]
                    for e in self.fix.edits
                ],
            }
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Diagnostic":
        fix = None
        if data.get("fix"):
            f = data["fix"]
            fix = Fix(
                Applicability(f["applicability"]),
                f["message"],
                tuple(Edit(*edit) for edit in f["edits"]),
            )
        return cls(
            code=data["code"],
            message=data["message"],
            path=data["path"],
            row=data["row"],
            col=data["col"],
            end_row=data["end_row"],
            end_col=data["end_col"],
            severity=Severity(data["severity"]),
            name=data.get("name", ""),
            fix=fix,
            cell=data.get("cell"),
            text_row=data.get("text_row"),
            noqa_row=data.get("noqa_row"),
            related=tuple(tuple(item) for item in data.get("related", ())),
            help=data.get("help", ""),
        )


@dataclass
class RuleCrash:
    """A rule raised while checking a file: reported on stderr, exit code 2."""

    path: str
    code: str
    error: str  # "ValueError: ..." plus the innermost frame

    @classmethod
    def of(cls, path: str, code: str, exc: BaseException) -> "RuleCrash":
        """The crash of rule `code` (or "engine") raising `exc` on `path`, named by the
        exception and the innermost frame of its traceback."""
        frames = traceback.extract_tb(exc.__traceback__)
        where = ""
        if frames:
            last = frames[-1]
            where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno})"
        return cls(path=path, code=code, error=f"{type(exc).__name__}: {exc}{where}")

    def describe(self) -> str:
        return f"{self.path}: internal error in rule {self.code}: {self.error}"


@dataclass
class FileResult:
    """Everything the per-file phase learned about one file (plain data, cacheable)."""

    path: str
    diagnostics: List[Diagnostic] = field(default_factory=list)
    crashes: List[RuleCrash] = field(default_factory=list)
    # Small per-file facts that project-phase rules join across files (JSON-compatible).
    facts: Dict[str, Any] = field(default_factory=dict)
    # code -> key -> a finding the project phase may confirm (Diagnostic.to_dict()).
    candidates: Dict[str, Dict[str, Dict[str, Any]]] = field(default_factory=dict)
    # row -> codes named by a `# noqa` comment on that row (None: a bare `# noqa`), so that
    # project-phase findings can be filtered without reading the file again.
    noqa: Dict[int, Optional[Tuple[str, ...]]] = field(default_factory=dict)
    # The check was stopped (the time budget) or its process died: the result says so, but it
    # depends on the machine's load, not only on the file, so it is never cached.
    unfinished: bool = False


# -- made from a file (the engine, and TRL002 in runs that need no engine) ---------------------


def make_diagnostic(
    source: "Source",
    code: str,
    name: str,
    message: str,
    severity: Severity,
    span: Tuple[int, int, int, int],
    fix: Optional[Fix] = None,
    related: Tuple[Tuple[str, int, int, str], ...] = (),
    help: str = "",
) -> Diagnostic:
    row, col, end_row, end_col = span
    diagnostic = Diagnostic(
        code=code,
        message=message,
        path=source.path,
        row=row,
        col=col,
        end_row=end_row,
        end_col=end_col,
        severity=severity,
        name=name,
        fix=fix,
        text_row=row,
        noqa_row=row,
        related=related,
        help=help,
    )
    located = source.cell_of(row)
    if located is not None:
        diagnostic.cell, diagnostic.row = located
        end = source.cell_of(end_row)
        diagnostic.end_row = end[1] if end is not None else diagnostic.row
        diagnostic.noqa_row = diagnostic.row
    if fix is not None:
        diagnostic.fix = Fix(
            fix.applicability, fix.message, tuple(locate_edit(source, e) for e in fix.edits)
        )
    return diagnostic


def locate_edit(source: "Source", edit: Edit) -> Edit:
    """The edit with report positions filled in (cell-relative rows for notebooks)."""
    row, col = source.position(edit.start)
    end_row, end_col = source.position(edit.end)
    located = source.cell_of(row)
    if located is not None:
        row = located[1]
        end = source.cell_of(end_row)
        end_row = end[1] if end is not None else row
    return Edit(edit.start, edit.end, edit.content, row, col, end_row, end_col)
