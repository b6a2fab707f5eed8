"""Applying fixes: edits -> new text, and writing files back without ever losing a line.

- Edits of one round never overlap: a fix whose edits touch text another fix already claimed
  waits for the next round (the runner re-checks and repeats until nothing applies).
- The runner refuses a round whose result does not parse (that file's fixes are rolled back and
  reported).
- Writes are atomic (temporary file in the same folder, then rename), keep the file's mode and
  encoding (the text keeps its newline style because edits are inserted with it), go through
  symlinks to their target, refuse read-only files, and refuse to overwrite a file that changed on
  disk since it was read.
- A notebook is written back as the JSON it was read from with only the `source` values of the
  cells whose code changed replaced (`render_notebook`): indentation, key order, escaping,
  outputs, metadata and the final newline stay byte for byte; a cell keeps its `source` shape (a
  list of lines or one string) and every unchanged line keeps its exact JSON spelling.
"""

from __future__ import annotations

import codecs
import difflib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Sequence, Tuple

from .diagnostics import Applicability, Diagnostic, Edit

if TYPE_CHECKING:  # pragma: no cover
    from .source import Source


def fixable(diagnostic: Diagnostic, unsafe: bool) -> bool:
    fix = diagnostic.fix
    if fix is None or not fix.edits:
        return False
    return fix.applicability is Applicability.SAFE or unsafe


def apply_fixes(
    text: str, diagnostics: Sequence[Diagnostic], unsafe: bool
) -> Tuple[str, List[Diagnostic]]:
    """Apply every non-overlapping fix; returns (new text, diagnostics whose fix was applied)."""
    chosen: List[Diagnostic] = []
    claimed: List[Tuple[int, int]] = []
    candidates = [d for d in diagnostics if fixable(d, unsafe)]
    candidates.sort(key=lambda d: (min(e.start for e in d.fix.edits), d.code))  # type: ignore
    seen_edit_sets = set()
    for diagnostic in candidates:
        edits = diagnostic.fix.edits  # type: ignore[union-attr]
        key = tuple((e.start, e.end, e.content) for e in edits)
        if key in seen_edit_sets:
            # Two findings with the same fix (one line, two reasons): apply it once.
            chosen.append(diagnostic)
            continue
        if any(_overlaps(e, claimed) for e in edits):
            continue
        if any(e.start > e.end or e.end > len(text) for e in edits):
            continue
        seen_edit_sets.add(key)
        chosen.append(diagnostic)
        claimed.extend((e.start, e.end) for e in edits)
    all_edits: List[Edit] = []
    applied_keys = set()
    for diagnostic in chosen:
        for e in diagnostic.fix.edits:  # type: ignore[union-attr]
            key = (e.start, e.end, e.content)
            if key not in applied_keys:
                applied_keys.add(key)
                all_edits.append(e)
    return apply_edits(text, all_edits), chosen


def edits_of(diagnostics: Iterable[Diagnostic]) -> List[Edit]:
    """The distinct edits of these diagnostics' fixes (what `apply_fixes` applied)."""
    seen = set()
    out: List[Edit] = []
    for diagnostic in diagnostics:
        if diagnostic.fix is None:
            continue
        for e in diagnostic.fix.edits:
            key = (e.start, e.end, e.content)
            if key not in seen:
                seen.add(key)
                out.append(e)
    return out


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    # Insertions at the same offset keep the order they were given in.
    ordered = sorted(enumerate(edits), key=lambda item: (item[1].start, item[1].end, item[0]))
    out: List[str] = []
    cursor = 0
    for _, edit in ordered:
        out.append(text[cursor : edit.start])
        out.append(edit.content)
        cursor = max(cursor, edit.end)
    out.append(text[cursor:])
    return "".join(out)


def _overlaps(edit: Edit, claimed: Sequence[Tuple[int, int]]) -> bool:
    for start, end in claimed:
        if edit.start < end and start < edit.end:
            return True
        # Two insertions at the same point, or an insertion at the edge of a replacement, would
        # make the order of the results depend on the order of the fixes: next round.
        if edit.start == edit.end and start <= edit.start <= end:
            return True
        if start == end and edit.start <= start <= edit.end:
            return True
    return False


@dataclass
class WriteError(Exception):
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: not written: {self.reason}"


def write_atomic(path: Path, data: bytes, expected_original: bytes) -> None:
    """Replace the file's contents with `data`, atomically; raises WriteError with a reason."""
    target = Path(os.path.realpath(path))  # write through symlinks to their target
    try:
        current = target.read_bytes()
    except OSError as exc:
        raise WriteError(str(path), f"cannot read it back ({exc.strerror or exc})")
    if current != expected_original:
        raise WriteError(str(path), "the file changed on disk during the run; run trainlint again")
    try:
        st = target.stat()
    except OSError as exc:
        raise WriteError(str(path), exc.strerror or str(exc))
    # No write bit at all means "do not touch", even for root (who could write anyway).
    if not os.access(target, os.W_OK) or not st.st_mode & 0o222:
        raise WriteError(str(path), "the file is read-only")
    directory = target.parent
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".trainlint", dir=directory
        )
    except OSError as exc:
        raise WriteError(str(path), f"cannot create a temporary file next to it ({exc.strerror})")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, stat.S_IMODE(st.st_mode))
        try:
            os.chown(tmp_name, st.st_uid, st.st_gid)
        except (OSError, AttributeError):
            pass  # not ours to change; the mode is what matters
        os.replace(tmp_name, target)
    except OSError as exc:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise WriteError(str(path), exc.strerror or str(exc))


# -- notebooks ----------------------------------------------------------------------------------

# A \uXXXX escape of a non-ASCII character (not preceded by an escaped backslash).
_NON_ASCII_ESCAPE = re.compile(r"(?:^|[^\\])(?:\\\\)*\\u(?!00[0-7])[0-9a-fA-F]{4}")


def render_notebook(source: "Source") -> bytes:
    """The notebook file for `source`: its original bytes with the changed cells' code."""
    from .notebook import parse_spans

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
