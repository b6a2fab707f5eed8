"""One cheap pass over a libcst tree: parents, document order, and nodes by type.

libcst's own `visit()` rebuilds every node it passes (`_visit_and_replace_children`), which costs
about as much as the parse. Reading the dataclass fields directly costs a fifth of that. Fields
that hold only whitespace, punctuation and comments are skipped: no rule reports on them (noqa
comments are read from the text, positions come from `positions.py`).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from typing import Callable, Dict, Iterator, List, Optional, Tuple, Type, Union

import libcst as cst

# Fields that never hold a node a rule cares about.
_SKIPPED_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "lbracket",
        "rbracket",
        "lbrace",
        "rbrace",
        "leading_lines",
        "trailing_whitespace",
        "lines_after_decorators",
        "header",
        "footer",
        "comma",
        "equal",
        "semicolon",
        "colon",
        "dot",
        "first_colon",
        "second_colon",
        "whitespace_before",
        "whitespace_after",
        "indent",
        "encoding",
        "default_indent",
        "default_newline",
        "has_trailing_newline",
        "asynchronous",
        "start",
        "end",
        "prefix",
        "relative",
        "conversion",
        "lines",
        "newline",
        "star",
        "operator",
    }
)

# Field orders where libcst's declaration order is not the order of the source text.
_ORDER_OVERRIDES: Dict[str, Tuple[str, ...]] = {
    "FunctionDef": ("decorators", "name", "type_parameters", "params", "returns", "body"),
    "ClassDef": ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    "IfExp": ("body", "test", "orelse"),
    "ExceptHandler": ("type", "name", "body"),
    "ExceptStarHandler": ("type", "name", "body"),
    "MatchCase": ("pattern", "guard", "body"),
}

_FIELDS: Dict[type, Tuple[str, ...]] = {}

# type -> is it a libcst node. `isinstance(value, cst.CSTNode)` goes through ABCMeta's
# `__instancecheck__` (a Python call) for every field value; a dict keyed by the exact type is
# several times cheaper on the walk's hottest line.
_IS_NODE: Dict[type, bool] = {}

# The children lists of the most recent Tree, by node id: analyses call `children()` on the same
# nodes again and again. The Tree is kept with them, so every id in it stays its node's id.
_KNOWN: Tuple[Optional["Tree"], Dict[int, List[cst.CSTNode]]] = (None, {})


def _is_node_type(value_type: type) -> bool:
    known = _IS_NODE.get(value_type)
    if known is None:
        known = _IS_NODE[value_type] = issubclass(value_type, cst.CSTNode)
    return known


def _fields_of(node_type: type) -> Tuple[str, ...]:
    fields = _FIELDS.get(node_type)
    if fields is None:
        names = [
            f.name
            for f in dataclasses.fields(node_type)
            if f.name not in _SKIPPED_FIELDS and not f.name.startswith("whitespace")
        ]
        override = _ORDER_OVERRIDES.get(node_type.__name__)
        if override:
            names = [n for n in override if n in names] + [n for n in names if n not in override]
        fields = _FIELDS[node_type] = tuple(names)
    return fields


def _generic_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """Every field's nodes, each value's type checked: the reference the generated readers
    below must agree with (tests/test_walk.py)."""
    node_type = type(node)
    fields = _FIELDS.get(node_type) or _fields_of(node_type)
    return [child for name in fields for child in _checked_value(getattr(node, name))]


# type -> a function reading that type's children. Generated once per node type from the field
# annotations: a field that always holds a node is read without checks, one that holds a node or
# None is tested against None, a sequence of nodes is copied whole, a string is not read at all.
# Anything else (a union with MaybeSentinel, with a string...) keeps the checked generic read.
_READERS: Dict[type, Callable[[cst.CSTNode], List[cst.CSTNode]]] = {}


def _field_kind(annotation: object) -> str:
    """"node", "optional", "sequence", "optional_sequence", "never" or "checked"."""
    if annotation is str:
        return "never"
    if isinstance(annotation, type):
        return "node" if issubclass(annotation, cst.CSTNode) else "checked"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Union:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == len(args):
            return "checked"
        if all(isinstance(a, type) and issubclass(a, cst.CSTNode) for a in rest):
            return "optional"
        if all(a is str for a in rest):
            return "never"
        if len(rest) == 1 and _field_kind(rest[0]) == "sequence":
            return "optional_sequence"
        return "checked"
    if origin is collections.abc.Sequence and len(args) == 1:
        item = args[0]
        items = typing.get_args(item) if typing.get_origin(item) is Union else (item,)
        if all(isinstance(a, type) and issubclass(a, cst.CSTNode) for a in items):
            return "sequence"
    return "checked"


def _make_reader(node_type: type) -> Callable[[cst.CSTNode], List[cst.CSTNode]]:
    fields = _fields_of(node_type)
    try:
        hints = typing.get_type_hints(node_type)
        kinds = [_field_kind(hints[name]) for name in fields]
    except Exception:  # annotations libcst may change: read every field checked
        kinds = ["checked"] * len(fields)
    lines = ["def read(node):", "    out = []"]
    for name, kind in zip(fields, kinds):
        if kind == "never":
            continue
        if kind == "node":
            lines.append(f"    out.append(node.{name})")
        elif kind == "optional":
            lines += [f"    value = node.{name}", "    if value is not None:"]
            lines.append("        out.append(value)")
        elif kind == "sequence":
            lines.append(f"    out += node.{name}")
        elif kind == "optional_sequence":
            lines += [f"    value = node.{name}", "    if value is not None:"]
            lines.append("        out += value")
        else:
            lines.append(f"    out += checked(node.{name})")
    lines.append("    return out")
    namespace: Dict[str, object] = {"checked": _checked_value}
    exec("\n".join(lines), namespace)  # noqa: S102 - code built above from field names only
    reader = namespace["read"]
    _READERS[node_type] = reader  # type: ignore[assignment]
    return reader  # type: ignore[return-value]


def _checked_value(value: object) -> List[cst.CSTNode]:
    """The nodes in one field's value (a node, a sequence of nodes, or anything else), each
    value's type checked."""
    is_node = _IS_NODE
    value_type = type(value)
    if value_type is tuple or value_type is list:
        out = []
        for item in value:  # type: ignore[attr-defined]
            item_type = type(item)
            known = is_node.get(item_type)
            if known is None:
                known = _is_node_type(item_type)
            if known:
                out.append(item)
        return out
    known = is_node.get(value_type)
    if known is None:
        known = _is_node_type(value_type)
    return [value] if known else []  # type: ignore[list-item]


def _compute_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    reader = _READERS.get(type(node))
    if reader is None:
        reader = _make_reader(type(node))
    return reader(node)


# Nodes that open a scope: their bodies run at another time (a call, class creation). Tested by
# exact type: the parser builds exactly these classes, and `isinstance` on a libcst class is a
# Python-level ABCMeta call.
SCOPE_NODE_TYPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def own_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and its descendants in document order, not entering nested def/class/lambda."""
    stack = [node]
    pop = stack.pop
    push = stack.extend
    scope_types = SCOPE_NODE_TYPES
    known = _KNOWN[1].get
    while stack:
        current = pop()
        yield current
        if current is not node and type(current) in scope_types:
            continue
        kids = known(id(current))
        if kids is None:
            kids = _compute_children(current)
        if kids:
            push(reversed(kids))


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """A node's children that can matter to a rule, in document order (do not modify the list)."""
    found = _KNOWN[1].get(id(node))
    if found is None:
        found = _compute_children(node)
    return found


class Tree:
    """The module's nodes: parent links, document order, index by type."""

    __slots__ = ("module", "_parent_of", "_children_of", "order", "by_type", "_index")

    def __init__(self, module: cst.Module) -> None:
        global _KNOWN
        self.module = module
        # Keyed by id(node): libcst nodes hash with a Python-level __hash__, id() is a C call.
        # The tree holds the module, so no id is reused while it lives.
        self._parent_of: Dict[int, Optional[cst.CSTNode]] = {id(module): None}
        self._children_of: Dict[int, List[cst.CSTNode]] = {}
        self.order: List[cst.CSTNode] = []  # pre-order, document order
        self.by_type: Dict[Type[cst.CSTNode], List[cst.CSTNode]] = {}
        self._index: Optional[Dict[cst.CSTNode, int]] = None
        self._build()
        _KNOWN = (self, self._children_of)

    @property
    def index(self) -> Dict[cst.CSTNode, int]:
        """node -> its place in document order (built on first use)."""
        if self._index is None:
            self._index = {node: i for i, node in enumerate(self.order)}
        return self._index

    def _build(self) -> None:
        parent_of = self._parent_of
        children_of = self._children_of
        order = self.order
        by_type = self.by_type
        readers = _READERS
        stack: List[cst.CSTNode] = [self.module]
        pop = stack.pop
        push = stack.extend
        append = order.append
        while stack:
            node = pop()
            append(node)
            node_type = type(node)
            bucket = by_type.get(node_type)
            if bucket is None:
                bucket = by_type[node_type] = []
            bucket.append(node)
            reader = readers.get(node_type)
            if reader is None:
                reader = _make_reader(node_type)
            kids = reader(node)
            children_of[id(node)] = kids
            if kids:
                for child in kids:
                    parent_of[id(child)] = node
                push(reversed(kids))

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self._parent_of.get(id(node))

    def ancestors(self, node: cst.CSTNode):
        parent_of = self._parent_of
        parent = parent_of.get(id(node))
        while parent is not None:
            yield parent
            parent = parent_of.get(id(parent))

    def children(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """`node`'s children (do not modify the list)."""
        found = self._children_of.get(id(node))
        if found is None:
            found = _compute_children(node)
        return found

    def nodes(self, node_type: Type[cst.CSTNode]) -> List[cst.CSTNode]:
        return self.by_type.get(node_type, [])

    def descendants(self, node: cst.CSTNode):
        """Nodes under `node` (itself excluded) in document order."""
        known = self._children_of.get
        kids = known(id(node))
        if kids is None:
            kids = _compute_children(node)
        stack: List[cst.CSTNode] = kids[::-1]
        pop = stack.pop
        push = stack.extend
        while stack:
            current = pop()
            yield current
            kids = known(id(current))
            if kids is None:
                kids = _compute_children(current)
            if kids:
                push(reversed(kids))

    def is_before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        return self.index.get(a, -1) < self.index.get(b, -1)
