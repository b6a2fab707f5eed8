"""Worker processes for the per-file phase (`-j/--jobs`).

The per-file phase is pure (bytes + settings -> FileResult), so files can be checked anywhere:
chunks of files go to a pool of processes and their results come back as plain data. The runner
puts each result in its place, so the output never depends on which process checked what or in
which order they finished. A handful of files (pre-commit) is checked in this process: starting
workers would cost more than it saves.

A rule that raises is reported exactly as in a serial run (the engine records the crash in the
file's result). A worker spends at most `budget.hard_limit` on one file: faulthandler's watchdog
ends the process past it, even inside libcst's native parser, which the engine's own timer cannot
interrupt. A worker process that dies (that watchdog, the OOM killer, a crash of native code)
costs time, not the run. Each worker notes in a shared array when it starts and when it finishes
each file, so after a pool breaks:
- each file that a worker had started but not finished (the one that killed it may be among
  them) is checked again alone, in a pool of one worker; if that worker dies too, the file is
  one TRL001 saying so, and it is never checked in this process, where it could take the run
  down or hang it;
- the files no worker had started (or whose results were lost with their worker) go to a new
  pool; only when a pool checked nothing at all are they checked in this process, as a serial
  run would.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import sys
import threading
from contextlib import closing, contextmanager
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    Callable,
    Generator,
    Iterator,
    List,
    MutableSequence,
    Optional,
    Sequence,
    Tuple,
)

from . import budget
from .diagnostics import FileResult
from .selection import Selection
from .source import Source

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import Executor

# multiprocessing and concurrent.futures are imported when a pool is started: a pre-commit run
# on a few files never starts one, and importing them costs it about 0.1 s.

# Below either threshold the pool's start-up costs more than checking the files here (about 25 ms
# a file, 5 us a byte, against tens of milliseconds to start and feed workers).
MIN_FILES_FOR_POOL = 8
MIN_BYTES_FOR_POOL = 64 * 1024
# Several chunks per worker keep them all busy to the end; small chunks keep results flowing.
CHUNKS_PER_WORKER = 4
MAX_CHUNK = 16

Check = Callable[[Source], FileResult]
# Where each file of a pool run is, one byte per file in memory the workers share (`_progress`).
NOT_STARTED, STARTED, FINISHED = 0, 1, 2
Progress = MutableSequence[int]

# What `_start_worker` hands each worker process.
_worker_selection: Optional[Selection] = None
_worker_progress: Optional[Progress] = None
# (seconds a file may take, where faulthandler writes before it ends the process), or None.
_worker_watchdog: Optional[Tuple[float, IO[Any]]] = None


def default_jobs() -> int:
    """The CPUs this process may run on (the CPU count where that cannot be asked)."""
    try:
        # Linux only: mypy checking for macOS or Windows does not know it, for Linux it does.
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worth_a_pool(sizes: Sequence[int], jobs: int) -> bool:
    return jobs > 1 and len(sizes) >= MIN_FILES_FOR_POOL and sum(sizes) >= MIN_BYTES_FOR_POOL


def check_all(
    sources: Sequence[Source],
    data: Sequence[bytes],
    selection: Selection,
    jobs: int,
    check: Check,
) -> Generator[Tuple[int, FileResult], None, None]:
    """(index, result) for every source, in the order they finish. `data[i]` is the bytes
    `sources[i]` was made from (what a worker receives); `check` checks one source here. Close
    the generator (contextlib.closing) to stop early."""
    if not worth_a_pool([len(d) for d in data], jobs):
        for index, source in enumerate(sources):
            yield index, check(source)
        return
    progress = _progress(len(sources))
    todo = list(range(len(sources)))
    while todo:
        received = set()
        # closing(): when the caller stops early (Ctrl-C while it handles a result) the pool
        # stops now, not when the garbage collector gets to this generator.
        with closing(_in_pool(sources, data, selection, jobs, todo, progress)) as results:
            for index, result in results:
                received.add(index)
                yield index, result
        left = [index for index in todo if index not in received]
        # Sorted out before any is checked again (which changes their state).
        suspects = [index for index in left if progress[index] == STARTED]
        rest = [index for index in left if progress[index] != STARTED]
        for index in suspects:
            yield index, _alone(sources, data, selection, index, progress)
        if len(rest) == len(todo):
            # The pool checked nothing (its workers could not start or died at once): check
            # here, as a serial run would.
            for index in rest:
                yield index, check(sources[index])
            return
        for index in rest:
            progress[index] = NOT_STARTED
        todo = rest


def _alone(
    sources: Sequence[Source],
    data: Sequence[bytes],
    selection: Selection,
    index: int,
    progress: Progress,
) -> FileResult:
    """The result of a file that was being checked when its worker died, checked again in a
    worker of its own: if that one dies too, the file is what kills it, and it is reported as
    such instead of being checked in this process."""
    progress[index] = NOT_STARTED
    with closing(_in_pool(sources, data, selection, 1, [index], progress)) as results:
        for _, result in results:
            return result
    from .engine import not_analysed

    source = sources[index]
    return not_analysed(source, selection.rules_for(source.path), budget.DIED_MESSAGE)


def _progress(size: int) -> Progress:
    """One byte per file, NOT_STARTED, in memory that the pool's workers share."""
    return _context().RawArray("b", size)


def _in_pool(
    sources: Sequence[Source],
    data: Sequence[bytes],
    selection: Selection,
    jobs: int,
    indices: Sequence[int],
    progress: Progress,
) -> Generator[Tuple[int, FileResult], None, None]:
    """(index, result) for the files of `indices` that a pool of `jobs` workers checks; a file
    whose worker died is left out (its state in `progress` tells check_all what happened)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from . import engine
    from .rules import all_rules

    # Imported before the workers start: forked workers then share them instead of each
    # importing libcst and the rules (0.3 s apiece), and the project phase needs them after.
    all_rules()
    del engine
    # Largest files first, so no worker is left with a big file at the end.
    order = sorted(indices, key=lambda i: -len(data[i]))
    size = max(1, min(MAX_CHUNK, len(order) // (jobs * CHUNKS_PER_WORKER)))
    chunks = [order[start : start + size] for start in range(0, len(order), size)]
    context = _context()
    executor = ProcessPoolExecutor(
        max_workers=min(jobs, len(chunks)),
        mp_context=context,
        initializer=_start_worker,
        initargs=(
            selection,
            progress,
            budget.hard_limit(selection.settings.per_file_timeout),
        ),
    )
    try:
        # The first submit starts the workers (all of them, when they are forked).
        with _frozen_heap(context.get_start_method() == "fork"):
            futures = {
                executor.submit(
                    _check_chunk, [(i, sources[i].path, data[i]) for i in chunk]
                ): chunk
                for chunk in chunks
            }
        for future in as_completed(futures):
            try:
                results = future.result()
            except Exception:  # the worker died: check_all sees to these files
                continue
            yield from zip(futures[future], results)
    except BaseException:  # Ctrl-C, or the caller stopped early: stop the workers now
        _stop(executor)
        raise
    executor.shutdown()


@contextmanager
def _frozen_heap(forking: bool) -> Iterator[None]:
    """While workers are forked: every object of this process out of the garbage collector's
    reach (gc.freeze). A forked worker's first full collection would otherwise walk every object
    it inherited, and write to each one: in a process with a large heap (a language server, a
    host application, a test run) that is seconds of work charged to the first files' budget,
    and a private copy of pages the worker only needed to read. The workers keep them frozen
    (what they inherit lives as long as they do); this process takes them back once they have
    started. A process that froze objects itself is left as it is."""
    if not forking or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _context():
    """fork where it is safe (Linux, one thread): workers start in milliseconds with trainlint
    already imported and the same rule registry as this process. Elsewhere the platform's
    default, whose workers import trainlint once each."""
    import multiprocessing

    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _start_worker(selection: Selection, progress: Progress, hard_limit: Optional[float]) -> None:
    global _worker_selection, _worker_progress, _worker_watchdog
    _worker_selection = selection
    _worker_progress = progress
    if hard_limit is not None:
        # faulthandler writes a traceback before it ends the process; nobody reads it (the
        # parent reports the file), so it goes nowhere.
        _worker_watchdog = (hard_limit, open(os.devnull, "w"))
    # Ctrl-C reaches every process of the terminal's group: the parent stops the workers and
    # reports it once, instead of each worker printing a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _check_chunk(items: List[Tuple[int, str, bytes]]) -> List[FileResult]:
    from .engine import check

    assert _worker_selection is not None and _worker_progress is not None
    results = []
    for index, display, data in items:
        _worker_progress[index] = STARTED
        if _worker_watchdog is not None:
            # A C thread that ends this process past the limit, even inside native code.
            seconds, devnull = _worker_watchdog
            faulthandler.dump_traceback_later(seconds, exit=True, file=devnull)
        try:
            # The parent made a Source of the same bytes already: this cannot fail here either.
            results.append(check(Source.from_bytes(display, data), _worker_selection))
        finally:
            if _worker_watchdog is not None:
                faulthandler.cancel_dump_traceback_later()
        _worker_progress[index] = FINISHED
    return results


def _stop(executor: "Executor") -> None:
    terminate = getattr(executor, "terminate_workers", None)  # Python 3.14+
    if terminate is not None:
        terminate()
        return
    # Before 3.14, shutdown() lets running chunks finish (an interrupted run should not wait) and
    # forgets the processes, so they are taken first and stopped here.
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()
