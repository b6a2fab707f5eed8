"""Many files: read, check, join across files, fix to a fixpoint, write.

The per-file phase is `check_source` (pure: Source + Settings -> FileResult); everything that
touches the disk happens here. Output order never depends on how files were processed: findings
are sorted by (path, cell, row, column, code).

The first check of each file goes through the cache (cache.py) when one is given, and the files
the cache does not know are spread over worker processes (workers.py). The project phase always
runs afresh over every file's result, cached or not. Fix rounds re-check changed texts here, in
this process and without the cache: what is written is always computed from the text on disk.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# Neither libcst nor the engine and its rules are imported here: a run whose files all come from
# the cache never needs them (they cost more than the rest of such a run).
from . import noqa
from .cache import Cache, content_digest
from .diagnostics import Diagnostic, FileResult, RuleCrash
from .fixes import WriteError, apply_fixes, edits_of, fixable, write_atomic
from .project import (
    Project,
    project_text,
    read_project_texts,
    run_project_phase,
    texts_digest,
)
from .selection import Selection
from .source import Source, SourceError

MAX_FIX_ROUNDS = 10
# The rule that reports `# noqa` codes that suppress nothing: it runs here, after `# noqa`
# filtering, over every finding of a file (the project phase's too).
UNUSED_NOQA = "TRL002"


@dataclass
class FileState:
    path: Path
    display: str
    original: Optional[bytes] = None  # bytes as read (None when unreadable)
    source: Optional[Source] = None  # current text (changes while fixing)
    result: FileResult = field(default_factory=lambda: FileResult(path=""))
    fixed: int = 0
    applied: List[Diagnostic] = field(default_factory=list)  # the findings fixed (--show-fixes)
    frozen: bool = False  # a fix round broke this file: no more fixing


@dataclass
class RunResult:
    diagnostics: List[Diagnostic] = field(default_factory=list)  # remaining, noqa applied, sorted
    crashes: List[RuleCrash] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # unreadable files, refused writes, rollbacks
    fixed: int = 0
    changed: List[Tuple[str, str, str]] = field(default_factory=list)  # (display, old, new)
    files: int = 0
    states: Dict[str, FileState] = field(default_factory=dict)

    def diff(self) -> str:
        chunks = []
        for display, old, new in self.changed:
            chunks.extend(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"a/{display}",
                    tofile=f"b/{display}",
                )
            )
            if chunks and not chunks[-1].endswith(("\n", "\r")):
                chunks.append("\n\\ No newline at end of file\n")
        return "".join(chunks)


def read_source(
    path: Path, display: str, data: Optional[bytes] = None
) -> Tuple[Optional[bytes], Optional[Source], Optional[Diagnostic], Optional[str]]:
    """(bytes, source, TRL001 diagnostic, io error) for one file (`data`: its bytes, already
    read, e.g. from standard input)."""
    if data is None:
        try:
            data = read_regular_file(path)
        except OSError as exc:
            return None, None, None, f"{display}: cannot read: {exc.strerror or exc}"
    try:
        source = Source.from_bytes(display, data)
    except SourceError as exc:
        return (
            data,
            None,
            _engine().syntax_error_diagnostic(display, exc.message, exc.row, exc.col),
            None,
        )
    return data, source, None, None


def read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file. Anything else named *.py (a FIFO, a socket, a symlink to
    /dev/zero) raises OSError instead of blocking forever or reading without end."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def check_source(source: Source, selection: Selection) -> FileResult:
    return _engine().check(source, selection)


def _engine():
    from . import engine

    return engine


def run(
    files: Sequence[Tuple[Path, str]],
    selection: Selection,
    *,
    fix: bool = False,
    unsafe: bool = False,
    diff: bool = False,
    contents: Optional[Mapping[str, bytes]] = None,
    progress: Optional[Callable[[int, int, str], None]] = None,
    cache: Optional[Cache] = None,
    jobs: int = 1,
    whole_project: bool = False,
) -> RunResult:
    """Check `files` ((path, display path) pairs). `contents`: display path -> bytes to use
    instead of reading the file (standard input; never cached). `progress(done, total, display)`
    is called after each file of the per-file phase. `cache`: where per-file results are looked
    up and stored (None: nowhere). `jobs`: how many processes may check files at once.
    `whole_project`: `files` are what discovery finds under the project root (the project phase
    then reads their texts from this run instead of walking the tree again)."""
    out = RunResult(files=len(files))
    states: Dict[str, FileState] = {}
    to_check: List[FileState] = []  # readable files the cache does not know
    done = 0

    def finished(display: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(files), display)

    for path, display in files:
        state = FileState(path=path, display=display)
        given = contents.get(display) if contents else None
        data, source, broken, error = read_source(path, display, given)
        state.original, state.source = data, source
        state.result = FileResult(path=display)
        states[display] = state
        if error is not None:
            out.errors.append(error)
            state.frozen = True
        elif broken is not None:
            if "TRL001" in selection.codes_for(display):
                state.result.diagnostics.append(broken)
            state.frozen = True
        else:
            cached = None
            if cache is not None and given is None:
                cached = cache.get(display, path, data)  # type: ignore[arg-type]
            if cached is None:
                to_check.append(state)
                continue
            state.result = cached
        finished(display)
    from .workers import check_all

    checked = check_all(
        [state.source for state in to_check],  # type: ignore[misc]
        [state.original for state in to_check],  # type: ignore[misc]
        selection,
        jobs,
        lambda source: check_source(source, selection),
    )
    with closing(checked):  # an interrupted run stops its workers at once
        for index, result in checked:
            state = to_check[index]
            state.result = result
            if cache is not None and state.display not in (contents or {}):
                original: bytes = state.original  # type: ignore[assignment]  # readable
                cache.put(state.display, state.path, original, result)
            finished(state.display)
    out.states = states

    # The phase's findings are kept in the cache (keyed by every file of the run, checked against
    # what it read outside the run); only for this first phase, before a fix changed a result.
    project_diags, project_crashes = _project_phase(
        states, selection, cache, whole_project, reuse=not contents
    )
    if fix or diff:
        for _ in range(MAX_FIX_ROUNDS):
            changed_any = False
            by_file = _group(states, project_diags, selection)
            for display, state in states.items():
                if state.frozen or state.source is None:
                    continue
                candidates = [d for d in by_file.get(display, []) if fixable(d, unsafe)]
                if not candidates:
                    continue
                new_text, applied = apply_fixes(state.source.text, candidates, unsafe)
                if not applied or new_text == state.source.text:
                    continue
                try:
                    import libcst as cst

                    cst.parse_module(new_text)
                except Exception:
                    codes = ", ".join(sorted({d.code for d in applied}))
                    out.errors.append(
                        f"{display}: the fix for {codes} produced code that does not parse; "
                        "it was rolled back (please report this as a trainlint bug)"
                    )
                    state.frozen = True
                    continue
                new_source = state.source.with_text(new_text, edits_of(applied))
                state.source = new_source
                state.fixed += len(applied)
                state.applied.extend(applied)
                state.result = check_source(new_source, selection)
                changed_any = True
            if not changed_any:
                break
            project_diags, project_crashes = _project_phase(states, selection, cache, whole_project)

    # Report what changed; write it unless only a diff was asked for.
    reverted = False
    for display, state in states.items():
        if state.source is None or state.original is None:
            continue
        new_bytes = state.source.to_bytes()
        if new_bytes == state.original:
            continue
        old_text = state.original.decode(state.source.encoding)
        new_text = new_bytes.decode(state.source.encoding)  # a notebook's JSON, not its cells
        if diff:
            out.changed.append((display, old_text, new_text))
            out.fixed += state.fixed
            continue
        try:
            write_atomic(state.path, new_bytes, state.original)
        except WriteError as exc:
            out.errors.append(str(exc))
            # Nothing was written: what the user has on disk still has every finding.
            state.source = Source.from_bytes(display, state.original)
            state.result = check_source(state.source, selection)
            state.fixed = 0
            state.applied = []
            reverted = True
            continue
        out.changed.append((display, old_text, new_text))
        out.fixed += state.fixed
    if reverted:
        project_diags, project_crashes = _project_phase(states, selection, cache, whole_project)
    for state in states.values():
        out.crashes.extend(state.result.crashes)
    out.crashes.extend(project_crashes)
    by_file = _group(states, project_diags, selection)
    remaining: List[Diagnostic] = [d for diagnostics in by_file.values() for d in diagnostics]
    remaining.sort(key=Diagnostic.sort_key)
    out.diagnostics = remaining
    return out


def _suppressed(diagnostic: Diagnostic, noqa_map) -> bool:
    row = diagnostic.text_row or diagnostic.row
    if row not in noqa_map:
        return False
    return noqa.suppresses(noqa_map[row], diagnostic.code)


def _group(
    states: Dict[str, FileState], project_diags: List[Diagnostic], selection: Selection
) -> Dict[str, List[Diagnostic]]:
    """display path -> the findings `# noqa` leaves, plus TRL002 for noqa codes left unused."""
    unused_noqa = selection.rule(UNUSED_NOQA) if UNUSED_NOQA in selection.enabled else None
    by_file: Dict[str, List[Diagnostic]] = {}
    for display, state in states.items():
        by_file[display] = list(state.result.diagnostics)
    for diagnostic in project_diags:
        by_file.setdefault(diagnostic.path, []).append(diagnostic)
    for display, diagnostics in by_file.items():
        state = states.get(display)
        noqa_map = state.result.noqa if state is not None else {}
        kept = [d for d in diagnostics if not _suppressed(d, noqa_map)]
        if unused_noqa is not None and noqa_map and state is not None and state.source is not None:
            kept.extend(unused_noqa.check_noqa(state.source, noqa_map, diagnostics, selection))
        by_file[display] = kept
    return by_file


def _project_texts(states: Dict[str, FileState]) -> List[Tuple[Path, str]]:
    """(absolute path, text) of the run's readable Python files, as the project phase reads
    project files from disk: the bytes read before any fix (a fix is written after the run)."""
    return [
        (Path(os.path.abspath(state.path)), project_text(state.original))
        for state in states.values()
        if state.original is not None and state.path.suffix == ".py"
    ]


def _project_phase(
    states: Dict[str, FileState],
    selection: Selection,
    cache: Optional[Cache],
    whole_project: bool = False,
    reuse: bool = False,
):
    if not selection.project_codes:
        return [], []
    settings = selection.settings
    key = None
    if reuse and cache is not None:
        key = cache.project_key(
            [(display, state.path, state.original) for display, state in states.items()],
            whole=whole_project,
        )
        kept = cache.get_project(
            key, lambda: texts_digest(read_project_texts(settings.root, settings))
        )
        if kept is not None:
            return kept, []
    # Over the whole project its texts are the run's: decoded here, only when the phase runs.
    texts = _project_texts(states) if whole_project else None
    reads: Dict[str, Optional[str]] = {}
    project = Project(
        root=settings.root,
        settings=settings,
        results={display: state.result for display, state in states.items()},
        paths={display: state.path for display, state in states.items()},
        loader=lambda path: _load_outside_run(path, selection, cache, reads),
        texts=texts,
    )
    found, crashes = run_project_phase(selection.project_rules(), project, selection)
    crashed = any(state.result.crashes for state in states.values())
    if key is not None and not crashes and not crashed:  # crashes are never kept (cache.py)
        walked = texts_digest(project.texts or []) if project.read_texts else None
        cache.put_project(key, found, project.probes, reads, walked)  # type: ignore[union-attr]
    return found, crashes


def _load_outside_run(
    path: Path,
    selection: Selection,
    cache: Optional[Cache] = None,
    reads: Optional[Dict[str, Optional[str]]] = None,
) -> Optional[FileResult]:
    """Check a project file that is not part of the run, for its facts only (`reads`: where
    to note the digest of the bytes read, None when unreadable)."""
    if path.suffix != ".py":
        return None
    display = os.path.relpath(path)
    data, source, _broken, error = read_source(path, display)
    if reads is not None:
        reads[os.path.abspath(path)] = content_digest(data)
    if source is None or error is not None or data is None:
        return None
    result = cache.get(display, path, data) if cache is not None else None
    if result is None:
        result = check_source(source, selection)
        if cache is not None:
            cache.put(display, path, data, result)
    return result
