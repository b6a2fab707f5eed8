"""Worker processes for the per-file phase (`-j/--jobs`).

The per-file phase is pure (bytes + settings -> FileResult), so files can be checked anywhere:
chunks of files go to a pool of processes and their results come back as plain data. The runner
puts each result in its place, so the output never depends on which process checked what or in
which order they finished. A handful of files (pre-commit) is checked in this process: starting
workers would cost more than it saves.

A rule that raises is reported exactly as in a serial run (the engine records the crash in the
file's result). A worker process that dies (killed, out of memory) costs nothing but time: the
files it had not finished are checked in this process, as a serial run would.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import closing
from typing import TYPE_CHECKING, Callable, Generator, List, Optional, Sequence, Tuple

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

_worker_selection: Optional[Selection] = None


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
    finished = set()
    # closing(): when the caller stops early (Ctrl-C while it handles a result) the pool stops
    # now, not when the garbage collector gets to this generator.
    with closing(_in_pool(sources, data, selection, jobs)) as results:
        for index, result in results:
            finished.add(index)
            yield index, result
    for index, source in enumerate(sources):
        if index not in finished:
            yield index, check(source)


def _in_pool(
    sources: Sequence[Source], data: Sequence[bytes], selection: Selection, jobs: int
) -> Generator[Tuple[int, FileResult], None, None]:
    # Largest files first, so no worker is left with a big file at the end.
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from . import engine
    from .rules import all_rules

    # Imported before the workers start: forked workers then share them instead of each
    # importing libcst and the rules (0.3 s apiece), and the project phase needs them after.
    all_rules()
    del engine
    order = sorted(range(len(sources)), key=lambda i: -len(data[i]))
    size = max(1, min(MAX_CHUNK, len(order) // (jobs * CHUNKS_PER_WORKER)))
    chunks = [order[start : start + size] for start in range(0, len(order), size)]
    executor = ProcessPoolExecutor(
        max_workers=min(jobs, len(chunks)),
        mp_context=_context(),
        initializer=_start_worker,
        initargs=(selection,),
    )
    try:
        futures = {
            executor.submit(_check_chunk, [(sources[i].path, data[i]) for i in chunk]): chunk
            for chunk in chunks
        }
        for future in as_completed(futures):
            try:
                results = future.result()
            except Exception:  # the worker died: check_all checks these files here
                continue
            yield from zip(futures[future], results)
    except BaseException:  # Ctrl-C, or the caller stopped early: stop the workers now
        _stop(executor)
        raise
    executor.shutdown()


def _context():
    """fork where it is safe (Linux, one thread): workers start in milliseconds with trainlint
    already imported and the same rule registry as this process. Elsewhere the platform's
    default, whose workers import trainlint once each."""
    import multiprocessing

    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _start_worker(selection: Selection) -> None:
    global _worker_selection
    _worker_selection = selection
    # Ctrl-C reaches every process of the terminal's group: the parent stops the workers and
    # reports it once, instead of each worker printing a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _check_chunk(items: List[Tuple[str, bytes]]) -> List[FileResult]:
    from .engine import check

    assert _worker_selection is not None
    # The parent made a Source of the same bytes already, so this cannot fail here either.
    return [check(Source.from_bytes(display, data), _worker_selection) for display, data in items]


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
