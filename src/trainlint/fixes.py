"""Applying fixes: edits -> new text, and writing files back without ever losing a line.

- Edits of one round never overlap: a fix whose edits touch text another fix already claimed
  waits for the next round (the runner re-checks and repeats until nothing applies).
- The runner refuses a round whose result does not parse with libcst or does not compile with
  Python's own compiler (`broken_by_fixes`; that file's fixes are rolled back and reported).
- Writes are atomic (temporary file in the same folder, then rename), keep the file's mode and
  encoding (the text keeps its newline style because edits are inserted with it), go through
  symlinks to their target, refuse read-only files, and refuse to overwrite a file that changed on
  disk since it was read. The temporary file (`.NAME.XXXXXXXX.trainlint`) is locked while it is
  written; one that a killed run left behind is recognised by its name and the free lock, and the
  next run removes it (`stale_temporary`).
- A notebook's bytes are written back by notebook.render_notebook.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Set, Tuple

from . import pep701
from .diagnostics import Applicability, Diagnostic, Edit, Fix
from .source import read_regular_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: stale temporary files are told by their age
    fcntl = None  # type: ignore[assignment]

# write_atomic's temporary file: `.` + the target's name + `.` + mkstemp's 8 characters + this.
TEMPORARY_SUFFIX = ".trainlint"
_TEMPORARY_NAME = re.compile(r"\.(?P<target>.+)\.[a-z0-9_]{8}\.trainlint")
# A temporary file younger than this may belong to a run that is writing it right now.
_STALE_AFTER = 10.0  # seconds, where the lock tells whether its writer is alive
_STALE_AFTER_WITHOUT_LOCKS = 3600.0


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
    chosen_fixes: List[Fix] = []
    claimed: List[Tuple[int, int]] = []
    candidates = [(d, d.fix) for d in diagnostics if d.fix is not None and fixable(d, unsafe)]
    candidates.sort(key=lambda pair: (min(e.start for e in pair[1].edits), pair[0].code))
    seen_edit_sets: Set[Tuple[Tuple[int, int, str], ...]] = set()
    for diagnostic, fix in candidates:
        edits = fix.edits
        key = tuple((e.start, e.end, e.content) for e in edits)
        if key in seen_edit_sets:
            # Two findings with the same fix (one line, two reasons): apply it once.
            chosen.append(diagnostic)
            chosen_fixes.append(fix)
            continue
        if any(_overlaps(e, claimed) for e in edits):
            continue
        if any(e.start > e.end or e.end > len(text) for e in edits):
            continue
        seen_edit_sets.add(key)
        chosen.append(diagnostic)
        chosen_fixes.append(fix)
        claimed.extend((e.start, e.end) for e in edits)
    all_edits: List[Edit] = []
    applied_keys: Set[Tuple[int, int, str]] = set()
    for fix in chosen_fixes:
        for e in fix.edits:
            edit_key = (e.start, e.end, e.content)
            if edit_key not in applied_keys:
                applied_keys.add(edit_key)
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
        current = read_regular_file(target)
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
            prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX, dir=directory
        )
    except OSError as exc:
        raise WriteError(str(path), f"cannot create a temporary file next to it ({exc.strerror})")
    try:
        if fcntl is not None:  # held until the file is closed: a live run's file is not stale
            fcntl.flock(fd, fcntl.LOCK_EX)
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


def is_temporary_name(name: str) -> bool:
    """Whether a file name is one write_atomic gives its temporary files."""
    return name.endswith(TEMPORARY_SUFFIX) and _TEMPORARY_NAME.fullmatch(name) is not None


def stale_temporary(path: Path) -> bool:
    """Whether `path`, named like write_atomic's temporary files, was left by a run that was
    killed: a regular file that no live run holds locked (without locks: an hour old)."""
    try:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        age = time.time() - info.st_mtime
        if fcntl is None:
            return age > _STALE_AFTER_WITHOUT_LOCKS
        if age <= _STALE_AFTER:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a running --fix is writing it
        return True
    finally:
        os.close(fd)


def broken_by_fixes(old: str, new: str) -> Optional[str]:
    """Why the text after a round of fixes must not be kept (None: it may): libcst cannot
    parse it, or Python's compiler rejects it although it accepted the text before. libcst
    accepts some code Python does not (`f() = 1`); the compiler also checks what the parser
    leaves to it (`return` outside a function)."""
    import libcst as cst

    try:
        cst.parse_module(new)
    except Exception:
        return "produced code that does not parse"
    problem = _compile_problem(new)
    if problem is not None and _compile_problem(old) is None:
        return f"produced code that Python does not compile ({problem})"
    return None


def _compile_problem(text: str, newer_fstrings: bool = True) -> Optional[str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's own invalid escapes and the like
            # Top-level `await` is allowed: a notebook's cells run in an event loop.
            compile(text, "<fixed>", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    except SyntaxError as exc:
        # On a Python older than 3.12, f-strings only 3.12 reads are judged by libcst; the
        # rest of the text still goes through this compiler (pep701.py).
        plain = pep701.masked(text) if newer_fstrings and sys.version_info < (3, 12) else None
        if plain is not None and plain != text:
            return _compile_problem(plain, newer_fstrings=False)
        return exc.msg
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# -- notebooks ----------------------------------------------------------------------------------
