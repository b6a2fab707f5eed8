"""The text trainlint analyses, and the way back from positions in it to the user's file.

A `Source` is what every later stage sees: one Python text. For a `.py` file it is the decoded
file, byte for byte (newline style, BOM and coding cookie are remembered so that a fix writes the
file back in the same shape). A notebook (`.ipynb`, see notebook.py) is its code cells joined
into one text, with a map back to (cell, row) and what is needed to write the file again.

Positions inside trainlint are (row, col): rows 1-based, columns 0-based counted in characters.
Offsets are indexes into `Source.text`.
"""

from __future__ import annotations

import bisect
import codecs
import errno
import os
import re
import stat
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

from .lines import split_lines

if TYPE_CHECKING:  # pragma: no cover
    from .notebook import Notebook

NOTEBOOK_SUFFIXES = (".ipynb",)


class SourceError(Exception):
    """The file cannot be turned into text: reported as TRL001 with this message and position."""

    def __init__(self, message: str, row: int = 1, col: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.row = row
        self.col = col


def read_regular_file(path: Union[str, "os.PathLike[str]"], limit: Optional[int] = None) -> bytes:
    """The bytes of a regular file (of at most `limit` bytes when given). Anything else (a FIFO,
    a socket, a symlink to /dev/zero) or a larger file raises OSError instead of blocking
    forever or reading without end. Every file trainlint reads goes through here: sources,
    notebooks, `.gitignore` files, cache entries."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket, device or folder)")
        if limit is not None and info.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes")
        chunks: List[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if limit is not None and size > limit:  # it grew while being read
                raise OSError(errno.EFBIG, f"larger than {limit} bytes")
            chunks.append(chunk)
    finally:
        os.close(fd)


def dominant_newline(text: str) -> str:
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    cr = text.count("\r") - crlf
    if crlf >= lf and crlf >= cr and crlf:
        return "\r\n"
    if cr > lf:
        return "\r"
    return "\n"


@dataclass
class Source:
    """One unit of analysis: a Python text and where it came from."""

    path: str  # as the user should see it (relative when the user gave a relative path)
    text: str
    encoding: str = "utf-8"  # codec used to decode the file; "utf-8-sig" when it had a BOM
    kind: str = "python"  # "python" or "notebook"
    # Notebook sources: for each cell that took part, (cell number, first row of the cell in
    # `text`). Empty for plain Python files.
    cells: List[Tuple[int, int]] = field(default_factory=list)
    # Notebook sources: the file's JSON and its code cells (None for .py files).
    notebook: Optional["Notebook"] = field(default=None, repr=False)
    _line_starts: Optional[List[int]] = field(default=None, repr=False)
    _lines: Optional[List[str]] = field(default=None, repr=False)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> "Source":
        """A notebook when `path` ends with .ipynb, else a Python file."""
        if path.lower().endswith(NOTEBOOK_SUFFIXES):
            return cls.from_notebook_bytes(path, data)
        return cls.from_python_bytes(path, data)

    @classmethod
    def from_python_bytes(cls, path: str, data: bytes) -> "Source":
        """Decode a Python file the way Python would (BOM, PEP 263 cookie, default UTF-8)."""
        nul = data.find(b"\0")
        if nul >= 0:
            row = data.count(b"\n", 0, nul) + 1
            col = nul - (data.rfind(b"\n", 0, nul) + 1)
            raise SourceError("source contains a NUL byte", row, col)
        try:
            encoding, _ = tokenize.detect_encoding(_python_lines(data))
        except SyntaxError as exc:  # unknown codec in the cookie, or BOM + non-utf8 cookie
            if not exc.msg.startswith("invalid or missing encoding declaration"):
                message = f"cannot detect the file's encoding: {exc.msg}"
                raise SourceError(message, exc.lineno or 1, 0)
            # No cookie, and one of the first two lines is not UTF-8 (a comment line 1 makes
            # tokenize read line 2): the file is UTF-8 by default, and the decode below names the
            # byte that is not, as it does for any later line.
            encoding = "utf-8"
        try:
            codecs.lookup(encoding)
            text = data.decode(encoding)
        except LookupError:
            raise SourceError(f"unknown encoding {encoding!r} in the coding cookie")
        except UnicodeDecodeError as exc:
            row = data.count(b"\n", 0, exc.start) + 1
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1)
            raise SourceError(
                f"cannot decode the file as {encoding}: byte 0x{data[exc.start]:02x} is invalid "
                f"(PEP 263: add a coding cookie, or save the file as UTF-8)",
                row,
                col,
            )
        return cls(path=path, text=text, encoding=encoding)

    @classmethod
    def from_path(cls, path: Path, display: Optional[str] = None) -> "Source":
        return cls.from_bytes(display or str(path), read_regular_file(path))

    @classmethod
    def from_notebook_bytes(cls, path: str, data: bytes) -> "Source":
        """A notebook's code cells joined into one text (notebook.py); a file that is not a
        valid nbformat 4 notebook raises SourceError with the position of the problem."""
        from .notebook import NotebookError, build

        bom = data.startswith(codecs.BOM_UTF8)
        try:
            raw = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            row = data.count(b"\n", 0, exc.start) + 1
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1)
            raise SourceError(
                f"not a valid notebook: byte 0x{data[exc.start]:02x} is not valid UTF-8", row, col
            )
        try:
            text, cells, notebook = build(raw, bom)
        except NotebookError as exc:
            raise SourceError(exc.message, exc.row, exc.col)
        return cls(
            path=path,
            text=text,
            encoding="utf-8-sig" if bom else "utf-8",
            kind="notebook",
            cells=cells,
            notebook=notebook,
        )

    def with_text(self, text: str, edits: Sequence[Any] = ()) -> "Source":
        """The same file with new text, after `edits` (offsets into this text) were applied; a
        notebook keeps track of where each cell now starts and ends."""
        if self.notebook is None:
            return Source(path=self.path, text=text, encoding=self.encoding, kind=self.kind)
        notebook = self.notebook.remap(edits)
        source = Source(
            path=self.path, text=text, encoding=self.encoding, kind=self.kind, notebook=notebook
        )
        source.cells = [(cell.number, source.position(cell.start)[0]) for cell in notebook.cells]
        return source

    def to_bytes(self, text: Optional[str] = None) -> bytes:
        """Encode (new) text the way the file was encoded (BOM included); a notebook is written
        back as JSON with only its changed cells' `source` replaced (notebook.render_notebook)."""
        if self.notebook is not None:
            from .notebook import render_notebook

            return render_notebook(self if text is None else self.with_text(text))
        return (self.text if text is None else text).encode(self.encoding)

    # -- positions ----------------------------------------------------------------------------

    @property
    def lines(self) -> List[str]:
        if self._lines is None:
            self._lines = split_lines(self.text)
        return self._lines

    @property
    def line_starts(self) -> List[int]:
        if self._line_starts is None:
            starts = [0]
            for line in self.lines:
                starts.append(starts[-1] + len(line))
            self._line_starts = starts
        return self._line_starts

    def line(self, row: int) -> str:
        """The text of a 1-based row, without its line ending ('' past the end)."""
        if 1 <= row <= len(self.lines):
            return self.lines[row - 1].rstrip("\r\n")
        return ""

    def offset(self, row: int, col: int) -> int:
        starts = self.line_starts
        if row < 1:
            return 0
        if row > len(starts) - 1:
            return len(self.text)
        return min(starts[row - 1] + col, starts[row])

    def position(self, offset: int) -> Tuple[int, int]:
        starts = self.line_starts
        offset = max(0, min(offset, len(self.text)))
        index = bisect.bisect_right(starts, offset) - 1
        if index == len(starts) - 1 and index > 0 and not self.text.endswith(("\n", "\r")):
            # The end of a text without a final newline is the end of its last row.
            index -= 1
        return index + 1, offset - starts[index]

    @property
    def newline(self) -> str:
        return dominant_newline(self.text)

    # -- notebooks ----------------------------------------------------------------------------

    def cell_of(self, row: int) -> Optional[Tuple[int, int]]:
        """(cell number, row inside the cell) for a row of the joined text; None for .py files."""
        if not self.cells:
            return None
        firsts = [first for _, first in self.cells]
        index = bisect.bisect_right(firsts, row) - 1
        if index < 0:
            index = 0
        cell, first = self.cells[index]
        return cell, row - first + 1


def _python_lines(data: bytes):
    """A readline over `data` that ends lines where Python's tokenizer does (`\\r\\n`, `\\r`
    or `\\n`). `tokenize.detect_encoding` must look at the first two lines only, and a file
    with old Mac line ends (`\\r` alone) is one long line to a plain readline: a later
    `positional_encoding=dict(` in it would read as a coding cookie Python never sees."""
    starts = [0]
    for end in _LINE_END.finditer(data):
        starts.append(end.end())
        if len(starts) == 3:
            break
    lines = iter([data[a:b] for a, b in zip(starts, starts[1:] + [len(data)]) if a < b][:2])
    return lambda: next(lines, b"")


_LINE_END = re.compile(rb"\r\n|\r|\n")
