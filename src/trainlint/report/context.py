"""What every reporter reads besides the findings: the run's sources, the fix mode, colour, and
where paths start; and how a finding's position reads in the file on disk (a notebook's cell)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..diagnostics import Diagnostic
from ..source import Source, read_regular_file


@dataclass
class ReportContext:
    """What a reporter may need besides the findings."""

    sources: Dict[str, Source]  # display path -> current text (for code frames, edit positions)
    unsafe_fixes: bool = False
    show_source: bool = True
    color: bool = False
    fixed: int = 0  # findings fixed in this run (for the summary line)
    fix_mode: bool = False
    show_fixes: bool = False  # --show-fixes: the change each fix makes / what --fix fixed
    quiet: bool = False  # -q: the findings in the chosen format, without the summary line
    # display path -> the findings --fix fixed in that file (for --show-fixes)
    applied: Dict[str, List[Diagnostic]] = field(default_factory=dict)
    # The repository (or project) root: SARIF and GitHub annotations name files relative to it.
    root: Optional[Path] = None
    _positions: Dict[str, object] = field(default_factory=dict, repr=False)

    def line_of(self, diagnostic: Diagnostic) -> Optional[str]:
        source = self.sources.get(diagnostic.path)
        if source is None:
            return None
        return source.line(diagnostic.text_row or diagnostic.row)

    def relative(self, path: str) -> str:
        """`path` relative to the root, posix style; absolute when outside it."""
        absolute = Path(os.path.abspath(path))
        root = self.root or Path.cwd()
        try:
            return absolute.relative_to(root.resolve()).as_posix()
        except ValueError:
            return absolute.as_posix()

    def file_position(self, d: Diagnostic, row: int, col: int, cell: Optional[int]):
        """(1-based line, 0-based column) in the file on disk: for a notebook cell, the line of
        the notebook's JSON that holds that line of the cell."""
        if cell is None:
            return row, col
        source = self.sources.get(d.path)
        positions = self._positions.get(d.path)
        if positions is None:
            from ..notebook import FilePositions

            if source is not None and source.notebook is not None:
                raw = source.to_bytes().decode("utf-8-sig")
            else:
                try:
                    raw = read_regular_file(d.path).decode("utf-8-sig")
                except (OSError, UnicodeDecodeError):
                    raw = ""
            positions = self._positions[d.path] = FilePositions(raw)
        return positions.locate(cell, row, col)  # type: ignore[attr-defined]

    def related_location(self, path: str, row: int, col: int) -> Tuple[Optional[int], int, int]:
        """(cell, row, col) for a related site: rows of a notebook's joined text are mapped to
        the cell."""
        source = self.sources.get(path)
        if source is not None and source.notebook is not None:
            located = source.cell_of(row)
            if located is not None:
                return located[0], located[1], col
        return None, row, col
