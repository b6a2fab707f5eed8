"""Small questions about libcst nodes that analyses of every domain ask: the nodes under a node,
the names an assignment target binds, `self.<attr>`, code no run reaches."""

from __future__ import annotations

from typing import Iterator, Set

import libcst as cst

from ...walk import children


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
    child = node
    for ancestor in ctx.ancestors(node):
        if type(ancestor) in (cst.IndentedBlock, cst.Module):
            for statement in ancestor.body:
                if statement is child:
                    break
                if type(statement) is cst.SimpleStatementLine and any(
                    type(small) in _EXITS for small in statement.body
                ):
                    return True
        elif type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        child = ancestor
    return False
