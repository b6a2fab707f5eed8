"""Small questions about libcst nodes that analyses of every domain ask: the nodes under a node,
the names an assignment target binds, `self.<attr>`, code no run reaches."""

from __future__ import annotations

from typing import Callable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from ...walk import children
from .names import dotted_name


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under `node` (not `node` itself), in document order."""
    stack = list(reversed(children(node)))
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node`, then every node under it, in document order."""
    yield node
    yield from descendants(node)


def self_and_descendants(ctx, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`subtree(node)` through the file's node index (cheaper for nodes of the file's tree)."""
    yield node
    yield from ctx.tree.descendants(node)


def names_in(node: cst.CSTNode) -> Set[str]:
    """The identifiers written anywhere under `node`, `node` included."""
    return {n.value for n in subtree(node) if type(n) is cst.Name}


def mentions(value: cst.CSTNode, text: str) -> bool:
    """Is `text` (a name or dotted attribute chain) written somewhere in `value`, `value`
    included? `self.sums.get(k, 0) + v` mentions "self.sums"; `reduce(p.grad)` mentions
    "p.grad"."""
    stack = [value]
    while stack:
        node = stack.pop()
        if dotted_name(node) == text:
            return True
        stack.extend(children(node))
    return False


def target_names(target: cst.CSTNode) -> Set[str]:
    """The names an assignment or loop target binds: `x`, `x, (y, *z)`, `[a, b]`."""
    if type(target) is cst.Name:
        return {target.value}
    if type(target) is cst.Tuple or type(target) is cst.List:
        out: Set[str] = set()
        for element in target.elements:
            out |= target_names(element.value)
        return out
    if type(target) is cst.StarredElement:
        return target_names(target.value)
    return set()


def own_method(cls: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    """The method `name` a class defines in its own body (not inherited), if any."""
    for statement in getattr(cls.body, "body", ()):
        if type(statement) is cst.FunctionDef and statement.name.value == name:
            return statement
    return None


def enclosing_class(ctx, node: cst.CSTNode) -> Optional[cst.ClassDef]:
    """The nearest class whose body holds `node` (through nested functions), if any."""
    for ancestor in ctx.ancestors(node):
        if type(ancestor) is cst.ClassDef:
            return ancestor
    return None


def positional_params(function: cst.FunctionDef) -> List[cst.Param]:
    """A function's parameters that a call can fill by position, in order (`self` included)."""
    return list(function.params.posonly_params) + list(function.params.params)


def call_param_index(function: cst.FunctionDef, call: cst.Call, arg_index: int, offset: int) -> int:
    """The index among `function`'s positional parameters that argument `arg_index` of `call`
    fills: by keyword, or by position shifted by `offset` (1 for a method called on an object,
    whose `self` the call does not pass); -1 for a keyword no such parameter has."""
    arg = call.args[arg_index]
    if arg.keyword is not None:
        for i, param in enumerate(positional_params(function)):
            if param.name.value == arg.keyword.value:
                return i
        return -1
    return arg_index + offset


def loops_over_range(loop: cst.CSTNode) -> bool:
    """Is `loop` a `for` (or a comprehension's `for`) over `range(...)`, which counts in ints?"""
    if not isinstance(loop, (cst.For, cst.CompFor)) or type(loop.iter) is not cst.Call:
        return False
    func = loop.iter.func
    return type(func) is cst.Name and func.value == "range"


def counts_in_ints(loop: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Does `loop` bind its target `target` to ints: any target of a loop over `range(...)`,
    or the counter of `for i, item in enumerate(...)` (the first name of its target tuple)?"""
    if loops_over_range(loop):
        return True
    if not isinstance(loop, (cst.For, cst.CompFor)) or type(loop.iter) is not cst.Call:
        return False
    func = loop.iter.func
    if type(func) is not cst.Name or func.value != "enumerate":
        return False
    pair = loop.target
    if not isinstance(pair, (cst.Tuple, cst.List)) or not pair.elements:
        return False
    return pair.elements[0].value is target


def is_name(node: cst.CSTNode, name: str) -> bool:
    """The bare name `name`."""
    return type(node) is cst.Name and node.value == name


def is_self_attr(node: cst.CSTNode, attr: str) -> bool:
    """`self.<attr>`."""
    return (
        type(node) is cst.Attribute
        and type(node.value) is cst.Name
        and node.value.value == "self"
        and node.attr.value == attr
    )


_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)


def follows_exit(ctx, node: cst.CSTNode) -> bool:
    """Does `node` come after a bare `return`/`raise`/`continue`/`break` of a block around it,
    within its function (`def test(): return` above a loop nobody reaches)?"""
    for ancestor, before in _statements_before(ctx, node):
        if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        if any(
            type(statement) is cst.SimpleStatementLine
            and any(type(small) in _EXITS for small in statement.body)
            for statement in before
        ):
            return True
    return False


def _statements_before(
    ctx, node: cst.CSTNode
) -> Iterator[Tuple[cst.CSTNode, List[cst.CSTNode]]]:
    """Each ancestor of `node`, innermost first, with the statements of its body that come before
    the one holding `node` (a block's statements, a line's small statements; none for others)."""
    child = node
    for ancestor in ctx.ancestors(node):
        before: List[cst.CSTNode] = []
        if type(ancestor) in (cst.IndentedBlock, cst.Module, cst.SimpleStatementLine):
            for statement in ancestor.body:
                if statement is child:
                    break
                before.append(statement)
        yield ancestor, before
        child = ancestor


def bound_on_every_path(
    ctx, node: cst.CSTNode, within: cst.CSTNode, binds: Callable[[cst.CSTNode], bool]
) -> bool:
    """Does every path from the start of `within` (a loop, a function) to `node` run a small
    statement for which `binds` holds? A statement before `node` in a block around it counts
    when it always binds: an assignment, an `if` whose every arm binds or leaves (`if kind ==
    "l1": loss = ... elif ...: loss = ... else: raise ValueError(kind)`), a `with` or `try`
    block that binds. A loop body may run zero times, so it never counts."""
    for ancestor, before in _statements_before(ctx, node):
        line = type(ancestor) is cst.SimpleStatementLine
        if any(binds(s) if line else _always_binds(s, binds) for s in before):
            return True
        if ancestor is within:
            return False
    return False


def always_leaves_function(block: cst.BaseSuite) -> bool:
    """Does every path through `block` end in `return` or `raise`, leaving the function (a
    `continue` or `break` leaves only a loop)? `if args.distributed: ...; return DDP(m)`."""
    return _binds_or_leaves(block, _binds_nothing, exits=_LEAVES_FUNCTION)


_LEAVES_FUNCTION = (cst.Return, cst.Raise)


def _binds_nothing(small: cst.CSTNode) -> bool:
    return False


def _always_binds(
    statement: cst.CSTNode, binds: Callable[[cst.CSTNode], bool], exits: Tuple[type, ...] = _EXITS
) -> bool:
    if type(statement) is cst.SimpleStatementLine:
        return any(binds(small) for small in statement.body)
    if type(statement) is cst.If:
        orelse = statement.orelse
        if orelse is None or not _binds_or_leaves(statement.body, binds, exits=exits):
            return False
        if type(orelse) is cst.If:
            return _always_binds(orelse, binds, exits)
        return _binds_or_leaves(orelse.body, binds, exits=exits)
    if type(statement) is cst.With:
        return _binds_or_leaves(statement.body, binds, exits=exits)
    if type(statement) is cst.Try:
        return _binds_or_leaves(statement.body, binds, leaving=False, exits=exits) and all(
            _binds_or_leaves(handler.body, binds, exits=exits) for handler in statement.handlers
        )
    return False


def _binds_or_leaves(
    block: cst.BaseSuite,
    binds: Callable[[cst.CSTNode], bool],
    leaving: bool = True,
    exits: Tuple[type, ...] = _EXITS,
) -> bool:
    """Does every path through `block` bind (or, when `leaving`, leave the enclosing code with
    one of `exits` first: `raise`/`return`/`continue`/`break` unless told otherwise)? (A
    `raise` in a `try` body may be caught.)"""
    if type(block) is cst.SimpleStatementSuite:  # `if fast: loss = l1(x, y)`
        return any(binds(small) or (leaving and type(small) in exits) for small in block.body)
    for statement in block.body:
        if _always_binds(statement, binds, exits):
            return True
        if leaving and type(statement) is cst.SimpleStatementLine and any(
            type(small) in exits for small in statement.body
        ):
            return True
    return False
