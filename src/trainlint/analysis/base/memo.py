"""Memoised summaries whose Python recursion is bounded, however deep the input chains them.

Summaries are naturally recursive: a function moves its argument if the helper it calls does, a
name denotes what the name it was assigned from denotes. Written as plain recursion, the depth of
the Python stack is the length of the chain in the analysed file, and 250 functions each calling
the next (or 500 chained aliases) end in RecursionError. A `Summaries` table keeps the recursive
code as it is written and bounds the stack instead:

- every value is computed once and remembered (`get`);
- a key asked for while it is being computed is a cycle (`a = b; b = a`, mutual recursion) and
  gets the table's `cycle` value, as the hand-written guards did;
- every table shares one count of summaries under computation. When a `get` would go deeper than
  `LIMIT`, it raises `_Deeper` naming the key; the frames above it unwind (their partial work is
  dropped, nothing half-computed is remembered) up to the outermost `get`, which computes that
  deeper key first, from the bottom of the stack, and then retries. The chain is summarised from
  its far end, `LIMIT` links at a time, so the answer is the one unbounded recursion would give,
  in time linear in the chain (each retry redoes at most `LIMIT` links).

A key that is asked for again while the outermost `get` is still waiting for it (a cycle longer
than `LIMIT`) is treated as a cycle there, so the retries always end.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Generic, Hashable, List, Set, Tuple, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Summaries under computation at once, across every table. Each level costs a handful of Python
# frames (the summary, the expression walk that reaches the next call), so 40 levels stay far
# below the interpreter's limit of 1,000 frames.
LIMIT = 40


class _Deeper(BaseException):
    """Raised past LIMIT: `table` must summarise `key` from the bottom of the stack first.
    A BaseException, so that no `except Exception` in an analysis swallows it."""

    def __init__(self, table: "Summaries", key: Hashable) -> None:
        super().__init__()
        self.table = table
        self.key = key


class _Depth(threading.local):
    level = 0


_depth = _Depth()


class Summaries(Generic[K, V]):
    """key -> compute(key), remembered; recursion through `get` is bounded (module docstring)."""

    def __init__(self, compute: Callable[[K], V], cycle: V) -> None:
        self._compute = compute
        self._cycle = cycle
        self._done: Dict[K, V] = {}
        self._active: Set[K] = set()
        # Keys the outermost get waits for that came back around: cycles longer than LIMIT.
        self._assumed: Set[K] = set()

    def known(self, key: K) -> bool:
        return key in self._done

    def get(self, key: K) -> V:
        done = self._done
        if key in done:
            return done[key]
        if key in self._active or key in self._assumed:
            return self._cycle
        level = _depth.level
        if level == 0:
            return self._drive(key)
        if level >= LIMIT:
            raise _Deeper(self, key)
        return self._run(key)

    def _run(self, key: K) -> V:
        self._active.add(key)
        _depth.level += 1
        try:
            value = self._compute(key)
        finally:
            _depth.level -= 1
            self._active.discard(key)
        self._done[key] = value
        return value

    def _drive(self, key: K) -> V:
        """The outermost get: compute `key`, first computing whatever lay too deep."""
        pending: List[Tuple[Summaries, Hashable]] = [(self, key)]
        waiting: Set[Tuple[int, Hashable]] = {(id(self), key)}
        tables: Dict[int, Summaries] = {id(self): self}
        try:
            while pending:
                table, wanted = pending[-1]
                if wanted in table._done:
                    pending.pop()
                    continue
                try:
                    table._run(wanted)
                except _Deeper as deeper:
                    tables[id(deeper.table)] = deeper.table
                    mark = (id(deeper.table), deeper.key)
                    if mark in waiting:
                        deeper.table._assumed.add(deeper.key)
                    else:
                        waiting.add(mark)
                        pending.append((deeper.table, deeper.key))
        finally:
            for table in tables.values():
                table._assumed.clear()
        return self._done[key]
