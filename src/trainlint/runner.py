"""Many files: read, check, join across files, fix to a fixpoint, write.

`run` is those stages in order: `_read` (bytes, sources, the cache's results), `_check` (the
files the cache does not know), the project phase (`_ProjectPhase`), `_fix_rounds`, and
`_report_changes` (what changed, written unless only a diff was asked for); then `# noqa` and
TRL002 over what remains (`_group`).

The per-file phase is `check_source` (pure: Source + Selection -> FileResult); everything that
touches the disk happens here. Output order never depends on how files were processed: findings
are sorted by (path, cell, row, column, code).

The first check of each file goes through the cache (cache.py) when one is given, and the files
the cache does not know are spread over worker processes (workers.py). The project phase always
runs afresh over every file's result, cached or not. Fix rounds re-check changed texts here, in
this process and without the cache: what is written is always computed from the text on disk.
"""

from __future__ import annotations

import difflib
import os
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Callable,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    runtime_checkable,
)

# Neither libcst nor the engine and its rules are imported here: a run whose files all come from
# the cache never needs them (they cost more than the rest of such a run).
from . import noqa
from .cache import Cache, content_digest
from .diagnostics import Diagnostic, FileResult, RuleCrash
from .fixes import WriteError, apply_fixes, broken_by_fixes, edits_of, fixable, write_atomic
from .library import Library
from .project import (
    Project,
    file_text,
    GUESSED_ROOT_LIMIT,
    read_launch_configs,
    read_project_texts,
    unmarked_root_too_big,
    run_project_phase,
    texts_digest,
)
from .selection import Selection
from .source import Source, SourceError, read_regular_file

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
    warnings: List[str] = field(default_factory=list)  # what the run left out, and why
    fixed: int = 0
    changed: List[Tuple[str, str, str]] = field(default_factory=list)  # (display, old, new)
    files: int = 0
    states: Dict[str, FileState] = field(default_factory=dict)

    def diff(self) -> str:
        chunks: List[str] = []
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
    counter = _Counter(progress, len(files))
    out.states, unchecked = _read(files, selection, contents or {}, cache, out, counter)
    _check(unchecked, selection, jobs, cache, contents or {}, counter)
    phase = _ProjectPhase(out.states, selection, cache, whole_project)
    if phase.limited:
        out.warnings.append(phase.limited)
    # The phase's findings are kept in the cache (keyed by every file of the run, checked against
    # what it read outside the run); only for this first phase, before a fix changed a result.
    joined = phase.run(reuse=not contents)
    if fix or diff:
        joined = _fix_rounds(out, selection, unsafe, joined, phase)
    if _report_changes(out, selection, write=not diff):
        joined = phase.run()  # a refused write put a file's findings back
    for state in out.states.values():
        out.crashes.extend(state.result.crashes)
    out.crashes.extend(joined.crashes)
    by_file = _group(out.states, joined.diagnostics, selection)
    out.diagnostics = sorted(
        (d for diagnostics in by_file.values() for d in diagnostics), key=Diagnostic.sort_key
    )
    return out


class _Counter:
    """Counts the files the per-file phase is done with, for the progress callback."""

    def __init__(self, progress: Optional[Callable[[int, int, str], None]], total: int) -> None:
        self.progress = progress
        self.total = total
        self.done = 0

    def finished(self, display: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, display)


# A readable file the cache does not know: its state, its source, the bytes it was made from.
Unchecked = Tuple[FileState, Source, bytes]


def _read(
    files: Sequence[Tuple[Path, str]],
    selection: Selection,
    contents: Mapping[str, bytes],
    cache: Optional[Cache],
    out: RunResult,
    counter: _Counter,
) -> Tuple[Dict[str, FileState], List[Unchecked]]:
    """Read every file; take the results the cache has. (states, files left to check)."""
    states: Dict[str, FileState] = {}
    unchecked: List[Unchecked] = []
    for path, display in files:
        state = FileState(path=path, display=display)
        given = contents.get(display)
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
        elif source is not None and data is not None:
            cached = cache.get(display, path, data) if cache is not None and given is None else None
            if cached is None:
                unchecked.append((state, source, data))
                continue
            state.result = cached
        counter.finished(display)
    return states, unchecked


def _check(
    unchecked: List[Unchecked],
    selection: Selection,
    jobs: int,
    cache: Optional[Cache],
    contents: Mapping[str, bytes],
    counter: _Counter,
) -> None:
    """Check the files the cache did not know (in worker processes when worth it), and store
    their results in the cache (not standard input's)."""
    from .workers import check_all

    checked = check_all(
        [source for _, source, _ in unchecked],
        [data for _, _, data in unchecked],
        selection,
        jobs,
        lambda source: check_source(source, selection),
    )
    with closing(checked):  # an interrupted run stops its workers at once
        for index, result in checked:
            state, _, data = unchecked[index]
            state.result = result
            if cache is not None and state.display not in contents:
                cache.put(state.display, state.path, data, result)
            counter.finished(state.display)


def _fix_rounds(
    out: RunResult,
    selection: Selection,
    unsafe: bool,
    joined: ProjectFindings,
    phase: _ProjectPhase,
) -> ProjectFindings:
    """Apply the fixes, re-check, and repeat until no fix applies (at most MAX_FIX_ROUNDS
    rounds); the project phase's findings after the last round."""
    for _ in range(MAX_FIX_ROUNDS):
        by_file = _group(out.states, joined.diagnostics, selection)
        changed = [
            _fix_file(state, by_file.get(display, []), selection, unsafe, out)
            for display, state in out.states.items()
        ]
        if not any(changed):
            break
        joined = phase.run()
    return joined


def _fix_file(
    state: FileState,
    findings: List[Diagnostic],
    selection: Selection,
    unsafe: bool,
    out: RunResult,
) -> bool:
    """One round of fixes in one file: apply, make sure the result parses, re-check. Whether
    the text changed."""
    if state.frozen or state.source is None:
        return False
    candidates = [d for d in findings if fixable(d, unsafe)]
    if not candidates:
        return False
    new_text, applied = apply_fixes(state.source.text, candidates, unsafe)
    if not applied or new_text == state.source.text:
        return False
    broken = broken_by_fixes(state.source.text, new_text)
    if broken is not None:
        codes = ", ".join(sorted({d.code for d in applied}))
        out.errors.append(
            f"{state.display}: the fix for {codes} {broken}; "
            "it was rolled back (please report this as a trainlint bug)"
        )
        state.frozen = True
        return False
    new_source = state.source.with_text(new_text, edits_of(applied))
    state.source = new_source
    state.fixed += len(applied)
    state.applied.extend(applied)
    state.result = check_source(new_source, selection)
    return True


def _report_changes(out: RunResult, selection: Selection, write: bool) -> bool:
    """Note what the fixes changed in each file, and write it (unless only a diff was asked
    for). True when a write was refused: that file is back to what is on disk, re-checked."""
    reverted = False
    for display, state in out.states.items():
        if state.source is None or state.original is None:
            continue
        new_bytes = state.source.to_bytes()
        if new_bytes == state.original:
            continue
        old_text = state.original.decode(state.source.encoding)
        new_text = new_bytes.decode(state.source.encoding)  # a notebook's JSON, not its cells
        if write:
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
    return reverted


NoqaMap = Dict[int, Optional[Tuple[str, ...]]]  # row -> the codes of its `# noqa` (None: bare)


@runtime_checkable
class NoqaChecker(Protocol):
    """What the runner asks of TRL002: findings for the `# noqa` codes of a file that suppress
    nothing, given every finding of the file before `# noqa` filtering."""

    def check_noqa(
        self,
        source: Source,
        noqa_map: NoqaMap,
        diagnostics: Sequence[Diagnostic],
        selection: Selection,
    ) -> List[Diagnostic]:
        """TRL002's findings for one file."""


def _unused_noqa(selection: Selection) -> Optional[NoqaChecker]:
    if UNUSED_NOQA not in selection.enabled:
        return None
    rule = selection.rule(UNUSED_NOQA)
    if not isinstance(rule, NoqaChecker):
        raise TypeError(f"{UNUSED_NOQA} has no check_noqa()")
    return rule


def _suppressed(diagnostic: Diagnostic, noqa_map: NoqaMap) -> bool:
    row = diagnostic.text_row or diagnostic.row
    if row not in noqa_map:
        return False
    codes = noqa_map[row]
    if codes is None and diagnostic.code == noqa.NOT_ANALYSED:
        # A bare `# noqa` was written for the line's findings; it must not hide that the whole
        # file (or cell) went unchecked. `# noqa: TRL001` still does.
        return False
    return noqa.suppresses(codes, diagnostic.code)


def _group(
    states: Dict[str, FileState], project_diags: List[Diagnostic], selection: Selection
) -> Dict[str, List[Diagnostic]]:
    """display path -> the findings `# noqa` leaves, plus TRL002 for noqa codes left unused."""
    unused_noqa = _unused_noqa(selection)
    by_file: Dict[str, List[Diagnostic]] = {}
    for display, state in states.items():
        by_file[display] = list(state.result.diagnostics)
    for diagnostic in project_diags:
        by_file.setdefault(diagnostic.path, []).append(diagnostic)
    for display, diagnostics in by_file.items():
        found = states.get(display)
        noqa_map = found.result.noqa if found is not None else {}
        kept = [d for d in diagnostics if not _suppressed(d, noqa_map)]
        if unused_noqa is not None and noqa_map and found is not None and found.source is not None:
            kept.extend(unused_noqa.check_noqa(found.source, noqa_map, diagnostics, selection))
        by_file[display] = kept
    return by_file


def _project_texts(states: Dict[str, FileState]) -> List[Tuple[Path, str]]:
    """(absolute path, text) of the run's readable Python files and notebooks, as the project
    phase reads project files from disk (`file_text`): the bytes read before any fix (a fix is
    written after the run)."""
    texts: List[Tuple[Path, str]] = []
    for state in states.values():
        if state.original is None or state.path.suffix not in (".py", ".ipynb"):
            continue
        text = file_text(state.path, state.original)
        if text is not None:
            texts.append((Path(os.path.abspath(state.path)), text))
    return texts


def _reached_texts(states: Dict[str, FileState], root: Path) -> List[Tuple[Path, str]]:
    """The project's texts when its root is only a large unmarked folder: the run's files and
    the project files they import, transitively (such a phase is never cached, so what it
    reads needs no record)."""
    from .analysis.project.hierarchy import import_closure

    def read(path: Path) -> Optional[str]:
        try:
            return file_text(path, read_regular_file(path))
        except OSError:
            return None

    return import_closure(_project_texts(states), root, read, GUESSED_ROOT_LIMIT)


class ProjectFindings(NamedTuple):
    diagnostics: List[Diagnostic]
    crashes: List[RuleCrash]


class _ProjectPhase:
    """The project phase over the run's current results; run again after each fix round."""

    def __init__(
        self,
        states: Dict[str, FileState],
        selection: Selection,
        cache: Optional[Cache],
        whole_project: bool,
    ) -> None:
        self.states = states
        self.selection = selection
        self.cache = cache
        self.whole_project = whole_project
        self.library: Optional[Library] = None
        # An unmarked root too big to be one project (why, as a warning line): the project is
        # then the run's files and the project files they import, not everything below it.
        self.limited: Optional[str] = None
        if selection.project_codes and not whole_project:
            self.limited = unmarked_root_too_big(selection.settings)

    def run(self, reuse: bool = False) -> ProjectFindings:
        """The phase's findings; `reuse`: look them up in the cache first, and keep them there
        (only while every result is the one read from disk, before any fix)."""
        if not self.selection.project_codes:
            return ProjectFindings([], [])
        # Not kept for an unmarked root: which files it reaches (and whether it is too big)
        # can change without any file the phase read changing.
        key = self._cache_key() if reuse and not self.limited else None
        if key is not None:
            kept = self._kept(key)
            if kept is not None:
                return ProjectFindings(kept, [])
        states, selection, cache = self.states, self.selection, self.cache
        settings = selection.settings
        # Over the whole project its texts are the run's: decoded here, only when the phase runs.
        texts = _project_texts(states) if self.whole_project else None
        reads: Dict[str, Optional[str]] = {}
        if self.limited:
            texts = _reached_texts(states, settings.root)
        library = self._library()
        project = Project(
            root=settings.root,
            settings=settings,
            results={display: state.result for display, state in states.items()},
            paths={display: state.path for display, state in states.items()},
            loader=lambda path: _load_outside_run(path, selection, cache, reads),
            texts=texts,
            library=library,
        )
        found, crashes = run_project_phase(selection.project_rules(), project, selection)
        reads.update(library.reads)
        crashed = any(state.result.crashes for state in states.values())
        if key is not None and cache is not None and not crashes and not crashed:
            # Crashes are never kept (cache.py).
            walked = texts_digest(project.texts or []) if project.read_texts else None
            launch = (
                texts_digest(project.launch_configs or [])
                if project.read_launch_configs
                else None
            )
            cache.put_project(key, found, project.probes, reads, walked, launch)
        return ProjectFindings(found, crashes)

    def _library(self) -> Library:
        """The installed packages the phase may read: one environment for every phase of
        the run (fix rounds run the phase again), summaries read once."""
        if self.library is None:
            self.library = Library(self.selection, self.cache)
        return self.library

    def _cache_key(self) -> Optional[str]:
        if self.cache is None:
            return None
        return self.cache.project_key(
            [(display, state.path, state.original) for display, state in self.states.items()],
            whole=self.whole_project,
            environment=self._library().fingerprint(),
        )

    def _kept(self, key: str) -> Optional[List[Diagnostic]]:
        assert self.cache is not None
        settings = self.selection.settings
        return self.cache.get_project(
            key,
            lambda: texts_digest(read_project_texts(settings.root, settings)),
            lambda: texts_digest(read_launch_configs(settings.root, settings)),
        )


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
