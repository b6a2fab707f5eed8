"""The per-file time budget (`per-file-timeout`): checking one file may take this long, no longer.

Two limits, because Python cannot interrupt native code:

- `within` (the soft limit) runs the check of one file under a one-shot `SIGALRM` timer whose
  handler raises a private exception; the check is abandoned and the caller reports the file as
  not analysed. The handler runs only between Python bytecodes: while libcst's native parser
  holds the interpreter it waits until the parser returns. It needs POSIX timers and the main
  thread; elsewhere (Windows, the language server's or a host's worker threads), or when a timer
  is already running (another tool's, or an enclosing budget), the check runs without a limit.
- `hard_limit` (in worker processes, workers.py) arms faulthandler's watchdog, a C thread that
  ends the process even inside native code; the parent then reports the file (workers.py).

Arming and disarming costs a few system calls (microseconds), so every file of a serial run is
checked under the budget too.
"""

from __future__ import annotations

import signal
import threading
from typing import Callable, Optional, TypeVar

T = TypeVar("T")


class _OverBudget(BaseException):
    """Raised by the timer's handler. A BaseException, so that the `except Exception` around
    each rule (the engine keeps one rule's crash from costing the others) does not catch it."""


# Whether a timer of `within` is running: the handler raises only then, so a signal delivered
# late (after the check returned) is dropped instead of raised in the caller's code.
_armed = False


def _expire(signum: int, frame: object) -> None:
    if _armed:
        raise _OverBudget()


def can_interrupt() -> bool:
    """Can `within` stop a check here (POSIX timers, the main thread, no timer running)?"""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )


def within(seconds: float, work: Callable[[], T]) -> Optional[T]:
    """`work()`, or None when it was stopped after `seconds` (0: no limit). Where the timer
    cannot be used (`can_interrupt`), `work()` runs to its end."""
    global _armed
    if not seconds or not can_interrupt():
        return work()
    previous = signal.signal(signal.SIGALRM, _expire)
    try:
        _armed = True
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return work()
        finally:
            _armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _OverBudget:
        return None
    finally:
        _armed = False
        signal.signal(signal.SIGALRM, previous)


def hard_limit(seconds: float) -> Optional[float]:
    """How long a worker process may spend on one file before it is ended (None: no limit):
    longer than the soft budget, so that a check the timer can stop is stopped by the timer
    and reported as such, not as a process that died."""
    if not seconds:
        return None
    return max(seconds * 1.5, seconds + 10.0)


def overtime_message(seconds: float) -> str:
    return (
        f"skipped: checking this file was stopped after {seconds:g} s "
        "(the `per-file-timeout` setting); not analysed"
    )


DIED_MESSAGE = (
    "skipped: the process checking this file died (killed, out of memory, or over the "
    "`per-file-timeout` budget); not analysed"
)
