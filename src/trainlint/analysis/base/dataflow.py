"""The dataflow kernel the loop rules share: a block of code as a small tree of events, and a
fixpoint run of abstract states through it.

A flow is `Ev` (one `Event`: a backward, an optimizer step, a gradient reset, a mode switch, a
call that may run a module forward),
`Seq`, `Alt` (if/else, try/except, match), `Repeat` (a nested loop: zero or more times, or one
or more when what it iterates cannot be empty, `for opt in [g_opt, d_opt]:`), `Exit`
(continue/break/return/raise; `break_outer`: a break that ends the loop around its loop too)
or `Helper` (the body of a same-file function it calls, where `return` only leaves the
helper). `run()` pushes a set of abstract states through a flow with a
rule's transfer function, so "a `zero_grad()` between `backward()` and `step()` on some path" or
"an `eval()` reaching the next `backward()`" is decided on the loop as a whole (statements inside
if/with/try, helpers, the wrap-around to the next iteration). `loop/steps.py` builds the flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Optional, Set, Tuple

import libcst as cst


@dataclass(frozen=True, eq=False)
class Event:
    """Something a call or assignment does to the training state."""

    kind: str  # backward, step, zero, eval, train, restore, forward, fresh (a new object bound)
    node: cst.CSTNode  # the call or assignment
    receiver: Optional[str]  # optimizer / module text in the analysed block's terms
    site: cst.CSTNode  # the node in the analysed block that leads here (a helper call or node)
    via: Tuple[cst.FunctionDef, ...] = ()
    full: bool = True  # zero: the whole model or optimizer, not one parameter
    closure: bool = False  # step(closure): the closure runs its own forward and backward
    # forward: the modules the call may run with autograd on (`model(x)`, `model.forward(x)`,
    # a module handed to a call that is not followed, like `data_parallel(model, x)`).
    runs: Tuple[str, ...] = ()


# -- flows ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Ev:
    event: Event


@dataclass(frozen=True, eq=False)
class Seq:
    items: Tuple[object, ...]


@dataclass(frozen=True, eq=False)
class Alt:
    branches: Tuple[object, ...]


@dataclass(frozen=True, eq=False)
class Repeat:
    body: object
    node: cst.CSTNode
    # The loop runs its body at least once (`for optimizer in [g_opt, d_opt]:`): no path
    # leaves it with the state it came in with.
    at_least_once: bool = False


@dataclass(frozen=True, eq=False)
class Exit:
    kind: str  # continue, break, break_outer, return, raise


@dataclass(frozen=True, eq=False)
class Helper:
    body: object
    call: cst.Call


@dataclass
class Outcome:
    normal: Set = field(default_factory=set)
    cont: Set = field(default_factory=set)
    brk: Set = field(default_factory=set)
    ret: Set = field(default_factory=set)
    brk_outer: Set = field(default_factory=set)  # leaving the loop around the loop as well


Transfer = Callable[[Event, object], Iterable[object]]


def run(flow, states: Iterable[object], transfer: Transfer) -> Outcome:
    """Push abstract states through a flow; `transfer(event, state)` gives the next states."""
    current = set(states)
    if isinstance(flow, Ev):
        out: Set[object] = set()
        for state in current:
            out.update(transfer(flow.event, state))
        return Outcome(normal=out)
    if isinstance(flow, Seq):
        result = Outcome()
        for item in flow.items:
            if not current:
                break
            step = run(item, current, transfer)
            result.cont |= step.cont
            result.brk |= step.brk
            result.ret |= step.ret
            result.brk_outer |= step.brk_outer
            current = step.normal
        result.normal = current
        return result
    if isinstance(flow, Alt):
        result = Outcome()
        for branch in flow.branches:
            step = run(branch, current, transfer)
            result.normal |= step.normal
            result.cont |= step.cont
            result.brk |= step.brk
            result.ret |= step.ret
            result.brk_outer |= step.brk_outer
        return result
    if isinstance(flow, Repeat):
        entry = set(current)
        after: Set = set()  # the states after one or more rounds
        brk: Set = set()
        ret: Set = set()
        outer: Set = set()
        for _ in range(8):  # states are small finite sets: a few rounds reach the fixpoint
            step = run(flow.body, entry, transfer)
            brk |= step.brk
            ret |= step.ret
            outer |= step.brk_outer
            after |= step.normal | step.cont
            grown = entry | step.normal | step.cont
            if grown == entry:
                break
            entry = grown
        leaving = after if flow.at_least_once else entry
        # a `break_outer` leaves this loop and breaks the one around it
        return Outcome(normal=leaving | brk, ret=ret, brk=outer)
    if isinstance(flow, Exit):
        if flow.kind == "continue":
            return Outcome(cont=current)
        if flow.kind == "break":
            return Outcome(brk=current)
        if flow.kind == "break_outer":
            return Outcome(brk_outer=current)
        if flow.kind == "return":
            return Outcome(ret=current)
        return Outcome()  # raise: this path ends
    if isinstance(flow, Helper):
        step = run(flow.body, current, transfer)
        return Outcome(normal=step.normal | step.ret)
    return Outcome(normal=current)


def events_of(flow) -> Iterator[Event]:
    """The flow's events in document order."""
    if isinstance(flow, Ev):
        yield flow.event
    elif isinstance(flow, Seq):
        for item in flow.items:
            yield from events_of(item)
    elif isinstance(flow, Alt):
        for branch in flow.branches:
            yield from events_of(branch)
    elif isinstance(flow, (Repeat, Helper)):
        yield from events_of(flow.body)


def own_events(flow) -> Iterator[Event]:
    """Events of one iteration that do not run inside a nested loop (including helpers' loops)."""
    if isinstance(flow, Ev):
        yield flow.event
    elif isinstance(flow, Seq):
        for item in flow.items:
            yield from own_events(item)
    elif isinstance(flow, Alt):
        for branch in flow.branches:
            yield from own_events(branch)
    elif isinstance(flow, Helper):
        yield from own_events(flow.body)
