"""Jupyter notebooks (.ipynb): reading one into the Python text trainlint analyses.

A notebook is JSON (nbformat 4). Its code cells are joined into one Python text, in order, with
an empty separator line between two cells; each cell's text ends with a newline (one is added
when the cell has none, and taken off again when the cell is written back). IPython syntax that
is not Python is masked line by line so the text parses, keeping the number of lines:

- line magics and shell escapes at the start of a statement (`%matplotlib inline`,
  `!pip install x`, `!!ls`, `files = !ls`, `?obj`, `obj??`, `pip install x`) become `...`
  (an assignment keeps its target: `files = ...`); their continuation lines become comments;
- a cell magic whose body is Python (`%%time`, `%%timeit`, `%%capture`, ...) masks its first
  line only; any other cell magic (`%%bash`, `%%writefile`, `%%html`, ...) leaves the whole
  cell out, like a markdown cell, also under magics of the first kind (`%%time` over `%%bash`);
- a code cell whose metadata gives it another language (VS Code stores the language a cell
  was switched to in `metadata.vscode.languageId`: `"bat"`, `"shellscript"`, `"markdown"`) is
  left out the same way;
- a cell that still does not parse on its own is left out too and reported as TRL001 in that
  cell (Jupyter runs each cell separately, so the others are still checked).

Cells are numbered as they appear in the notebook, markdown cells included (cell N is
`cells[N-1]` in the file, and "Cell N" in VS Code); rows are counted inside the cell.

Writing a fixed notebook back (`render_notebook`) replaces only the `source` values of the
cells whose code changed: indentation, key order, escaping, outputs, metadata and the final
newline stay byte for byte; a cell keeps its `source` shape (a list of lines or one string) and
every unchanged line keeps its exact JSON spelling. This module also provides the small JSON
parser that finds where each value sits in the file (`parse_spans`), which both the writer and
the position of nbformat errors need.
"""

from __future__ import annotations

import codecs
import difflib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import pep701
from .lines import split_lines

# The json module's own string scanner: (string value, index after the closing quote) for the
# string whose opening quote is just before `index` (typeshed does not declare it).
scanstring: Callable[[str, int, bool], Tuple[str, int]] = getattr(json.decoder, "scanstring")

if TYPE_CHECKING:  # pragma: no cover
    from .source import Source

# -- a JSON parser that remembers where values are -------------------------------------------

Path_ = Tuple[Any, ...]
Span = Tuple[int, int]

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
# The words json.loads accepts as values (the last three are Python's extension of JSON).
_CONSTANTS = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}


def json_int(digits: str) -> Any:
    """A JSON integer: an int, or its digits as a string when Python refuses to convert that
    many (sys.set_int_max_str_digits: 4,300 by default). Nothing trainlint reads in a notebook
    is a number that large; an output or metadata value may be, and must not stop the run."""
    try:
        return int(digits)
    except ValueError:
        return digits


class JsonSpanError(ValueError):
    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.pos = pos


def parse_spans(text: str, keep=None) -> Tuple[Any, Dict[Path_, Span]]:
    """(value, spans): the decoded JSON and, for every path `keep(path)` accepts, the (start, end)
    offsets of that value in `text`. Paths are tuples of keys and list indexes."""
    spans: Dict[Path_, Span] = {}
    keep = keep or (lambda path: True)

    def skip(pos: int) -> int:
        match = _WS.match(text, pos)
        assert match is not None  # `*`: it matches, if only the empty string
        return match.end()

    def value(pos: int, path: Path_) -> Tuple[Any, int]:
        pos = skip(pos)
        start = pos
        if pos >= len(text):
            raise JsonSpanError("unexpected end of the file", pos)
        ch = text[pos]
        result: Any  # the JSON value: str, dict, list, number, bool or None
        if ch == '"':
            result, pos = scanstring(text, pos + 1, True)
        elif ch == "{":
            result = {}
            pos = skip(pos + 1)
            if text.startswith("}", pos):
                pos += 1
            else:
                while True:
                    pos = skip(pos)
                    if not text.startswith('"', pos):
                        raise JsonSpanError("expected a key", pos)
                    key, pos = scanstring(text, pos + 1, True)
                    pos = skip(pos)
                    if not text.startswith(":", pos):
                        raise JsonSpanError("expected ':'", pos)
                    result[key], pos = value(pos + 1, path + (key,))
                    pos = skip(pos)
                    if text.startswith(",", pos):
                        pos += 1
                        continue
                    if text.startswith("}", pos):
                        pos += 1
                        break
                    raise JsonSpanError("expected ',' or '}'", pos)
        elif ch == "[":
            result = []
            pos = skip(pos + 1)
            if text.startswith("]", pos):
                pos += 1
            else:
                while True:
                    item, pos = value(pos, path + (len(result),))
                    result.append(item)
                    pos = skip(pos)
                    if text.startswith(",", pos):
                        pos += 1
                        continue
                    if text.startswith("]", pos):
                        pos += 1
                        break
                    raise JsonSpanError("expected ',' or ']'", pos)
        else:
            match = _NUMBER.match(text, pos)
            if match:
                number = match.group()
                result = float(number) if any(c in number for c in ".eE") else json_int(number)
                pos = match.end()
            else:
                for word, constant in _CONSTANTS.items():
                    if text.startswith(word, pos):
                        result, pos = constant, pos + len(word)
                        break
                else:
                    raise JsonSpanError("expected a value", pos)
        if keep(path):
            spans[path] = (start, pos)
        return result, pos

    try:
        result, end = value(0, ())
    except RecursionError:
        raise JsonSpanError("nested too deeply", 0)
    end = skip(end)
    if end != len(text):
        raise JsonSpanError("extra data after the notebook", end)
    return result, spans


def line_col(text: str, pos: int) -> Tuple[int, int]:
    """1-based row and 0-based column of an offset."""
    row = text.count("\n", 0, pos) + 1
    return row, pos - (text.rfind("\n", 0, pos) + 1)


# -- IPython masking --------------------------------------------------------------------------

# Cell magics whose body is Python: only their first line is masked.
PYTHON_CELL_MAGICS = frozenset(
    {"time", "timeit", "capture", "prun", "debug", "memit", "mprun", "px", "autopx", "scalene"}
)
_MASK = "..."
# `obj?`, `obj??`, `?obj`, and IPython's wildcard search `torch.*Tensor?` (`%psearch`).
_HELP_RE = re.compile(r"^\s*(?:\?{1,2}\s*[\w.*]+|[\w.*\[\]()]+\s*\?{1,2})\s*$")
# `files = !ls`, `a, b = %sx ls`, and the one-element unpacking `path, = !echo $PYTHONPATH`.
_ASSIGN_MAGIC_RE = re.compile(
    r"^(?P<target>\s*[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*,?\s*=)\s*(?:%|!)"
)
# IPython's automagic runs `cd data` or `pip install x` without the `%`. Such a line is masked
# only when it does not parse as Python on its own (`pwd` alone is just a name).
AUTOMAGICS = frozenset(
    "alias autoreload bookmark cat cd conda config cp dhist env history load_ext ls mamba "
    "matplotlib mkdir mv pdb pip popd precision pushd pwd reload_ext rm rmdir run store sx "
    "system time timeit who whos xmode".split()
)
# A name, whitespace, then arguments that do not start an assignment or a call (`config = {`
# continues on the next line and is Python, not the `%config` magic).
_AUTOMAGIC_RE = re.compile(
    r"^\s*(?P<name>[a-z_]+)(?:\s+(?![=(\[{,:;]|(?:[-+*/%&|^@<>]|\*\*|//|<<|>>)=)\S.*)?\s*$"
)
_STRING_START = re.compile(r"(?i)(?:rb|br|fr|rf|b|r|u|f)?('''|\"\"\"|'|\")")


def _line_body(line: str) -> str:
    return line.rstrip("\r\n")


def _newline_of(line: str) -> str:
    return line[len(_line_body(line)) :]


def _is_magic(line: str) -> bool:
    stripped = line.lstrip(" \t")
    if not stripped or stripped[0] == "#":
        return False
    if stripped[0] in "%!" and not stripped.startswith("!="):
        return True
    if stripped[0] == "?" or _HELP_RE.match(_line_body(line)):
        return True
    if _ASSIGN_MAGIC_RE.match(line):
        return True
    automagic = _AUTOMAGIC_RE.match(_line_body(line))
    if automagic and automagic.group("name") in AUTOMAGICS:
        return _parses(stripped) is not None
    return False


class _Scanner:
    """Just enough of Python's tokenizer to know whether a line starts a new statement: open
    brackets, open (triple-quoted) strings and backslash continuations."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None  # the open string's delimiter
        self.raw = False
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        body = _line_body(line)
        i, n = 0, len(body)
        self.continued = False
        while i < n:
            if self.quote is not None:
                if body[i] == "\\" and not self.raw:
                    i += 2
                    continue
                if body.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                    continue
                if body[i] == "\\" and self.raw:
                    i += 2  # a raw string still cannot end with an odd backslash before a quote
                    continue
                i += 1
                continue
            ch = body[i]
            if ch == "#":
                break
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            elif ch in "'\"" or ch.isalpha():
                match = _STRING_START.match(body, i)
                if match and (ch in "'\"" or match.start(1) > i):
                    prefix = body[i : match.start(1)]
                    self.quote = match.group(1)
                    self.raw = "r" in prefix.lower()
                    i = match.end()
                    continue
                if ch.isalpha():
                    while i < n and (body[i].isalnum() or body[i] == "_"):
                        i += 1
                    continue
            elif ch == "\\" and i == n - 1:
                self.continued = True
            i += 1
        if self.quote is not None and len(self.quote) == 1:
            # A one-quote string ends at the end of its line, unless continued with a backslash.
            if not body.endswith("\\"):
                self.quote = None
        if self.quote is not None and len(self.quote) == 1 and body.endswith("\\"):
            self.continued = False


def mask_cell(code: str) -> Optional[str]:
    """The cell's text with IPython syntax masked (same number of lines), or None when the cell
    is not Python (a cell magic such as `%%bash`)."""
    lines = split_lines(code)
    out: List[str] = []
    # Cell magics stack: `%%time` over `%%bash` times a shell script, so the body of a magic
    # whose body is Python is read again for a magic of its own.
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    while first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(None, 1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            return None
        first = next((i for i in range(first + 1, len(lines)) if lines[i].strip()), None)
    scanner = _Scanner()
    in_magic = False  # inside a magic's backslash-continued lines
    for line in lines:
        body = _line_body(line)
        if in_magic:
            out.append("#" + _newline_of(line) if not body else "#" + body + _newline_of(line))
            in_magic = body.endswith("\\")
            continue
        if scanner.at_statement_start() and _is_magic(line):
            indent = body[: len(body) - len(body.lstrip(" \t"))]
            assign = _ASSIGN_MAGIC_RE.match(line)
            if assign:
                masked = assign.group("target").rstrip() + " " + _MASK
            else:
                masked = indent + _MASK
            out.append(masked + _newline_of(line))
            in_magic = body.endswith("\\")
            continue
        scanner.feed(line)
        out.append(line)
    return "".join(out)


# -- the notebook ------------------------------------------------------------------------------


@dataclass
class CodeCell:
    """One code cell that takes part in the analysis."""

    number: int  # 1-based position in the notebook's cells (markdown cells counted)
    start: int  # offsets of the cell's text in the joined text (changes as fixes apply)
    end: int
    original: str  # the cell's code as in the file, plus the newline added for joining
    masked: str  # what the analysis saw: `original` with IPython syntax masked
    added_newline: bool
    # The masked lines: (start, end) of the masked text in the joined text (moved as fixes
    # apply; None once an edit touched it), the masked text, and the line as in the file.
    masks: List[Tuple[Optional[Tuple[int, int]], str, str]] = field(default_factory=list)


@dataclass
class Notebook:
    """What a notebook Source needs to map positions back and to write the file again."""

    raw: str  # the file's JSON text (decoded; without a BOM)
    bom: bool = False
    cells: List[CodeCell] = field(default_factory=list)
    # Code cells left out because they do not parse: (cell number, message, row, col).
    broken: List[Tuple[int, str, int, int]] = field(default_factory=list)
    language: str = "python"

    def cell(self, number: int) -> Optional[CodeCell]:
        for cell in self.cells:
            if cell.number == number:
                return cell
        return None

    def remap(self, edits: Sequence[Any]) -> "Notebook":
        """The same notebook after `edits` (offsets into the old joined text) were applied.

        An insertion exactly at a cell's end belongs to that cell (a line added after its last
        statement); one exactly at its start also belongs to it (a line added before its first
        statement). The empty separator line between cells keeps the two apart."""

        def moved(pos: int, at_end: bool) -> int:
            delta = 0
            for edit in edits:
                start, end, content = edit.start, edit.end, edit.content
                if end < pos or (end == pos and (start < end or at_end)):
                    delta += len(content) - (end - start)
            return pos + delta

        def moved_span(span: Optional[Tuple[int, int]]) -> Optional[Tuple[int, int]]:
            if span is None:
                return None
            a, b = span
            for edit in edits:
                if (edit.start < b and edit.end > a) or a < edit.start < b:
                    return None  # an edit changed the masked line itself
            return moved(a, True), moved(b, False)

        cells = [
            CodeCell(
                c.number,
                moved(c.start, False),
                moved(c.end, True),
                c.original,
                c.masked,
                c.added_newline,
                [(moved_span(span), masked, line) for span, masked, line in c.masks],
            )
            for c in self.cells
        ]
        return Notebook(self.raw, self.bom, cells, list(self.broken), self.language)

    def unmasked(self, cell: CodeCell, text: str) -> str:
        """The cell's current code (from the joined `text`) with its masked lines put back."""
        out = text[cell.start : cell.end]
        spans = [(span, masked, line) for span, masked, line in cell.masks if span is not None]
        for span, masked, line in sorted(spans, key=lambda m: m[0], reverse=True):
            a, b = span[0] - cell.start, span[1] - cell.start
            if 0 <= a <= b <= len(out) and out[a:b] == masked:
                out = out[:a] + line + out[b:]
        return out


class NotebookError(ValueError):
    """Not a notebook trainlint can read: message and a 1-based row / 0-based col in the file."""

    def __init__(self, message: str, row: int = 1, col: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.row = row
        self.col = col


def _source_text(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


def _where(raw: str, path: Path_) -> Tuple[int, int]:
    """Position of the value at `path` (or of its nearest ancestor) in the file."""
    try:
        _, spans = parse_spans(raw, keep=lambda p: p == path[: len(p)])
    except JsonSpanError:
        return 1, 0
    for n in range(len(path), -1, -1):
        if path[:n] in spans:
            return line_col(raw, spans[path[:n]][0])
    return 1, 0


def _language(data: Dict[str, Any]) -> str:
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return "python"
    for key, name_key in (("kernelspec", "language"), ("language_info", "name")):
        info = metadata.get(key)
        if isinstance(info, dict) and isinstance(info.get(name_key), str):
            return info[name_key].lower()
    return "python"


def load(raw: str) -> Tuple[Dict[str, Any], List[Tuple[int, str]]]:
    """Validate the nbformat structure trainlint relies on; (notebook, [(number, code)] for
    every Python code cell). Raises NotebookError with the position of the problem."""
    try:
        data = json.loads(raw, parse_int=json_int)
    except json.JSONDecodeError as exc:
        raise NotebookError(
            f"not a valid notebook: invalid JSON: {exc.msg}", exc.lineno, exc.colno - 1
        )
    except RecursionError:
        raise NotebookError(
            "cannot read the notebook: its JSON nests deeper than Python's JSON reader goes "
            "(RecursionError); not analysed"
        )

    def fail(message: str, path: Path_) -> NotebookError:
        row, col = _where(raw, path)
        return NotebookError(f"not a valid notebook: {message}", row, col)

    if not isinstance(data, dict):
        raise fail(f"the top-level JSON value is {_kind(data)}, not an object", ())
    version = data.get("nbformat")
    if not isinstance(version, int) or isinstance(version, bool):
        raise fail("no integer `nbformat` key (is this a Jupyter notebook?)", ("nbformat",))
    if version != 4:
        raise fail(
            f"nbformat {version} is not supported (convert it: "
            "`jupyter nbconvert --to notebook --nbformat 4`)",
            ("nbformat",),
        )
    if not isinstance(data.get("metadata"), dict):
        raise fail("`metadata` must be an object", ("metadata",))
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise fail("`cells` must be a list", ("cells",))
    code: List[Tuple[int, str]] = []
    for index, cell in enumerate(cells):
        number = index + 1
        where = ("cells", index)
        if not isinstance(cell, dict):
            raise fail(f"cell {number} is {_kind(cell)}, not an object", where)
        kind = cell.get("cell_type")
        if not isinstance(kind, str):
            raise fail(f"cell {number} has no `cell_type`", where)
        text = _source_text(cell.get("source"))
        if text is None:
            raise fail(
                f"cell {number}: `source` must be a string or a list of strings",
                where + ("source",),
            )
        if not isinstance(cell.get("metadata", {}), dict):
            raise fail(f"cell {number}: `metadata` must be an object", where + ("metadata",))
        if kind == "code":
            if not isinstance(cell.get("outputs", []), list):
                raise fail(f"cell {number}: `outputs` must be a list", where + ("outputs",))
            if _python_cell(cell):
                code.append((number, text))
    return data, code


def _python_cell(cell: Dict[str, Any]) -> bool:
    """Is a code cell Python? VS Code records the language a cell was switched to
    (`"vscode": {"languageId": "bat"}`): a book's `accelerate launch ...` command shown as a
    shell cell is not meant for the Python kernel."""
    editor = cell.get("metadata", {}).get("vscode")
    language = editor.get("languageId") if isinstance(editor, dict) else None
    return not isinstance(language, str) or language.lower() in ("python", "ipython")


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number"
    )


def _parses(code: str, python: Optional[Tuple[int, int]] = None) -> Optional[Tuple[str, int, int]]:
    """None when `code` parses as Python, else (message, row, col). `python`: the version the
    notebook records (its kernel's), when known; f-strings only Python 3.12 reads (pep701.py)
    are a syntax error of a notebook that records an older one, on any Python trainlint runs
    on, and valid code otherwise."""
    try:
        pep701.parse(code)
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg}", exc.lineno or 1, max((exc.offset or 1) - 1, 0)
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"cannot parse: {exc}", 1, 0
    if python is not None and python < (3, 12):
        feature = pep701.first_feature(code)
        if feature is not None:
            row, col = line_col(code, feature.offset)
            version = ".".join(map(str, python))
            return (
                f"SyntaxError before Python 3.12: {feature.what}; this notebook records "
                f"Python {version}",
                row,
                col,
            )
    return None


def _recorded_python(data: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """(major, minor) of the Python the notebook was last run with (`language_info.version`,
    which Jupyter writes from the kernel), or None."""
    metadata = data.get("metadata")
    info = metadata.get("language_info") if isinstance(metadata, dict) else None
    version = info.get("version") if isinstance(info, dict) else None
    match = re.match(r"(\d+)\.(\d+)", version) if isinstance(version, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def _runs_dedented(code: str) -> bool:
    """Does a cell whose first line is indented parse once IPython has removed that indent?
    Its `leading_indent` input transformer (after dropping leading empty lines) strips the
    first line's leading whitespace from every line that starts with the same whitespace, and
    leaves the others alone: ` def f(a):` over `    return a` and an unindented `print(f(1))`
    runs."""
    lines = split_lines(code)
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines or not lines[0][:1].isspace():
        return False
    indent = lines[0][: len(lines[0]) - len(lines[0].lstrip(" \t"))]
    if not indent:
        return False
    stripped = [line[len(indent):] if line.startswith(indent) else line for line in lines]
    return _parses("".join(stripped)) is None


SEPARATOR = "\n"  # the empty line between two cells in the joined text


def build(raw: str, bom: bool = False) -> Tuple[str, List[Tuple[int, int]], Notebook]:
    """(joined text, [(cell number, first row)], Notebook) for a notebook's JSON text."""
    data, code_cells = load(raw)
    notebook = Notebook(raw=raw, bom=bom, language=_language(data))
    if notebook.language not in ("python", "python3", "ipython", "ipython3"):
        return "", [], notebook  # an R or Julia notebook: nothing for us to read
    parts: List[str] = []
    length = 0
    rows: List[Tuple[int, int]] = []
    row = 1
    python = _recorded_python(data)
    for number, original in code_cells:
        masked = mask_cell(original)
        if masked is None or not masked.strip():
            continue
        problem = _parses(masked, python)
        if problem is not None and _runs_dedented(masked):
            # IPython strips an indentation common to every line of a cell before running it;
            # Python would not. Such a cell runs, so it is no syntax error, but its positions
            # would not map back to the file: it is left out of the analysis (documented).
            continue
        if problem is not None:
            message, prow, pcol = problem
            notebook.broken.append((number, message + " (this cell is not analysed)", prow, pcol))
            continue
        added = not original.endswith(("\n", "\r"))
        if added:
            original += "\n"
            masked += "\n"
        if parts:
            parts.append(SEPARATOR)
            length += len(SEPARATOR)
            row += 1
        rows.append((number, row))
        masks: List[Tuple[Optional[Tuple[int, int]], str, str]] = []
        offset = length
        for masked_line, line in zip(split_lines(masked), split_lines(original)):
            if masked_line != line:
                body, original_body = _line_body(masked_line), _line_body(line)
                masks.append(((offset, offset + len(body)), body, original_body))
            offset += len(masked_line)
        notebook.cells.append(
            CodeCell(number, length, length + len(masked), original, masked, added, masks)
        )
        parts.append(masked)
        length += len(masked)
        row += _count_rows(masked)
    return "".join(parts), rows, notebook


def _count_rows(text: str) -> int:
    return len(split_lines(text))


# -- positions in the file ---------------------------------------------------------------------


class FilePositions:
    """Where a (cell, row, col) of a notebook sits in its JSON file: the line of the JSON string
    that holds that line of the cell (what GitHub annotations and SARIF regions point at)."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self._spans: Optional[Dict[Path_, Span]] = None
        self._data: Any = None

    def _load(self) -> bool:
        if self._spans is None:
            try:
                self._data, self._spans = parse_spans(self.raw, keep=_source_paths)
            except JsonSpanError:
                self._data, self._spans = None, {}
        return self._data is not None

    def locate(self, cell: int, row: int, col: int) -> Tuple[int, int]:
        """(1-based line, 0-based column) in the file; (1, 0) when the cell is not found."""
        if not self._load():
            return 1, 0
        assert self._spans is not None
        path: Path_ = ("cells", cell - 1, "source")
        try:
            value = self._data["cells"][cell - 1]["source"]
        except (KeyError, IndexError, TypeError):
            return 1, 0
        if path not in self._spans:
            return 1, 0
        text = value if isinstance(value, str) else "".join(value)
        lines = split_lines(text)
        offset = sum(len(line) for line in lines[: max(row - 1, 0)]) + max(col, 0)
        offset = min(offset, len(text))
        if isinstance(value, str):
            item, inner, span = value, offset, self._spans[path]
        else:
            start = 0
            item, inner, span = "", 0, self._spans[path]
            for j, part in enumerate(value):
                if offset < start + len(part) or j == len(value) - 1:
                    item, inner, span = (
                        part,
                        min(offset - start, len(part)),
                        self._spans[path + (j,)],
                    )
                    break
                start += len(part)
        line, column = line_col(self.raw, span[0])
        if item or isinstance(value, str):
            column += 1 + len(json.dumps(item[:inner], ensure_ascii=False)) - 2
        return line, column


def _source_paths(path: Path_) -> bool:
    return len(path) in (3, 4) and path[0] == "cells" and path[2] == "source"


# -- writing a fixed notebook back ----------------------------------------------------------

# A \uXXXX escape of a non-ASCII character (not preceded by an escaped backslash).
_NON_ASCII_ESCAPE = re.compile(r"(?:^|[^\\])(?:\\\\)*\\u(?!00[0-7])[0-9a-fA-F]{4}")


def render_notebook(source: "Source") -> bytes:
    """The notebook file for `source`: its original bytes with the changed cells' code."""
    notebook = source.notebook
    assert notebook is not None
    changed: Dict[int, str] = {}
    for cell in notebook.cells:
        region = source.text[cell.start : cell.end]
        if region == cell.masked:
            continue
        code = notebook.unmasked(cell, source.text)
        original = cell.original
        if cell.added_newline:
            original = original[:-1]
            if code.endswith("\n"):
                code = code[:-1]
        if code != original:
            changed[cell.number] = code
    raw = notebook.raw
    if changed:
        wanted = {("cells", number - 1, "source") for number in changed}
        data, spans = parse_spans(
            raw, keep=lambda path: path in wanted or path[:3] in wanted or path == ("cells",)
        )
        ascii_only = not any(ord(ch) > 127 for ch in raw) and bool(_NON_ASCII_ESCAPE.search(raw))
        replacements = []
        for number, code in changed.items():
            path = ("cells", number - 1, "source")
            old = data["cells"][number - 1]["source"]
            new = _encode_source(raw, spans, path, old, code, ascii_only)
            replacements.append((spans[path], new))
        for (start, end), new in sorted(replacements, reverse=True):
            raw = raw[:start] + new + raw[end:]
    return (codecs.BOM_UTF8 if notebook.bom else b"") + raw.encode("utf-8")


def _encode_source(
    raw: str, spans: Dict[Tuple[Any, ...], Tuple[int, int]], path, old: Any, code: str, ascii_only
) -> str:
    """New JSON for a cell's `source`, in the shape and layout of the old one."""

    def dump(value: str) -> str:
        return json.dumps(value, ensure_ascii=ascii_only)

    if isinstance(old, str):
        return dump(code)
    # nbformat splits a cell's source with str.splitlines(True); some tools split at "\n" only.
    # Split the new code the way this file's old lines were split.
    if "".join(old).splitlines(True) == old:
        lines = code.splitlines(True)
    else:
        lines = re.findall(r"[^\n]*\n|[^\n]+$", code)
    if not lines:
        return "[]"
    items = [spans[path + (j,)] for j in range(len(old))]
    tokens: List[str] = []
    matcher = difflib.SequenceMatcher(None, old, lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            tokens.extend(raw[s:e] for s, e in items[i1:i2])
        else:
            tokens.extend(dump(line) for line in lines[j1:j2])
    start, end = spans[path]
    if items:
        before = raw[start + 1 : items[0][0]]
        after = raw[items[-1][1] : end - 1]
        sep = raw[items[0][1] : items[1][0]] if len(items) > 1 else "," + before
        if len(items) == 1 and "\n" not in before:
            sep = ", "
    elif "\n" not in raw.strip():
        before, after, sep = "", "", ", "
    else:
        line_start = raw.rfind("\n", 0, start) + 1
        line = raw[line_start:start]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        unit = _indent_unit(raw)
        before, after = "\n" + indent + unit, "\n" + indent
        sep = "," + before
    return "[" + before + sep.join(tokens) + after + "]"


def _indent_unit(raw: str) -> str:
    """The notebook's indentation step (nbformat writes 1 space; some tools write 2 or 4)."""
    for line in raw.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped:
            return line[: len(line) - len(stripped)] or " "
    return " "
