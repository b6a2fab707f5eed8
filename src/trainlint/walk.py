"""One cheap pass over a libcst tree: parents, document order, and nodes by type.

libcst's own `visit()` rebuilds every node it passes (`_visit_and_replace_children`), which costs
about as much as the parse. Reading the dataclass fields directly costs a fifth of that. Fields
that hold only whitespace, punctuation and comments are skipped: no rule reports on them (noqa
comments are read from the text, positions come from `positions.py`).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple, Type

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


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """A node's children that can matter to a rule, in document order."""
    out: List[cst.CSTNode] = []
    node_base = cst.CSTNode
    for name in _fields_of(type(node)):
        value = getattr(node, name)
        if isinstance(value, node_base):
            out.append(value)
        elif type(value) in (tuple, list):
            out.extend(item for item in value if isinstance(item, node_base))
    return out


class Tree:
    """The module's nodes: parent links, document order, index by type."""

    __slots__ = ("module", "parents", "order", "by_type", "_index")

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parents: Dict[cst.CSTNode, Optional[cst.CSTNode]] = {module: None}
        self.order: List[cst.CSTNode] = []  # pre-order, document order
        self.by_type: Dict[Type[cst.CSTNode], List[cst.CSTNode]] = {}
        self._index: Optional[Dict[cst.CSTNode, int]] = None
        self._build()

    @property
    def index(self) -> Dict[cst.CSTNode, int]:
        """node -> its place in document order (built on first use)."""
        if self._index is None:
            self._index = {node: i for i, node in enumerate(self.order)}
        return self._index

    def _build(self) -> None:
        parents = self.parents
        order = self.order
        by_type = self.by_type
        node_base = cst.CSTNode
        stack: List[cst.CSTNode] = [self.module]
        while stack:
            node = stack.pop()
            order.append(node)
            node_type = type(node)
            bucket = by_type.get(node_type)
            if bucket is None:
                bucket = by_type[node_type] = []
            bucket.append(node)
            children: List[cst.CSTNode] = []
            for name in _fields_of(node_type):
                value = getattr(node, name)
                if isinstance(value, node_base):
                    children.append(value)
                elif type(value) in (tuple, list):
                    for item in value:
                        if isinstance(item, node_base):
                            children.append(item)
            for child in children:
                parents[child] = node
            children.reverse()
            stack.extend(children)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode):
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def nodes(self, node_type: Type[cst.CSTNode]) -> List[cst.CSTNode]:
        return self.by_type.get(node_type, [])

    def descendants(self, node: cst.CSTNode):
        """Nodes under `node` (itself excluded) in document order."""
        stack: List[cst.CSTNode] = list(reversed(children(node)))
        while stack:
            current = stack.pop()
            yield current
            stack.extend(reversed(children(current)))

    def is_before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        return self.index.get(a, -1) < self.index.get(b, -1)
