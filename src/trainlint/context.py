"""What a rule reads about the file under analysis (`FileContext`), and the edits its fixes make
(`EditSpec`), which still point at nodes until the engine resolves them to text offsets.

Its own module so that rules and analyses can name the context without importing the engine
that runs them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type, TypeVar

import libcst as cst

from .config import Settings
from .positions import PositionIndex, Span
from .source import Source
from .walk import Tree

A = TypeVar("A")


class EditSpec:
    """An edit that still points at nodes; resolved to offsets once positions are known.

    kinds: replace (node -> content), insert_before / insert_after (at the node's start / end),
    line_after / line_before (a new line, indented like the statement's first line, after the
    statement's last line or before its first), body_start (a new line before the first
    statement of a compound statement's indented body).
    """

    __slots__ = ("kind", "node", "content")

    def __init__(self, kind: str, node: cst.CSTNode, content: str) -> None:
        self.kind = kind
        self.node = node
        self.content = content

    def anchor_node(self) -> cst.CSTNode:
        if self.kind == "body_start":
            body = getattr(self.node, "body", None)
            # FileContext.body_start makes these only for a compound with an indented body.
            assert type(body) is cst.IndentedBlock and body.body
            return body.body[0]
        return self.node


class FileContext:
    """What a rule may read about the file under analysis."""

    def __init__(self, source: Source, module: cst.Module, tree: Tree, settings: Settings):
        self.source = source
        self.module = module
        self.tree = tree
        self.settings = settings
        self.path = source.path
        self._analyses: Dict[type, Any] = {}
        self._names: Any = None
        self._scopes: Any = None
        self._code: Dict[int, str] = {}  # id(node) -> its text, for nodes of this tree
        self.positions = PositionIndex(module, source, tree.parent)

    # -- analyses -----------------------------------------------------------------------------

    def analysis(self, cls: Type[A]) -> A:
        found = self._analyses.get(cls)
        if found is None:
            found = self._analyses[cls] = cls(self)  # type: ignore[call-arg]
        return found

    # Rules ask for these two on almost every node: kept in attributes, past the import and the
    # analysis lookup.
    @property
    def names(self):
        found = self._names
        if found is None:
            from .analysis.base.names import Names

            found = self._names = self.analysis(Names)
        return found

    @property
    def scopes(self):
        found = self._scopes
        if found is None:
            from .analysis.base.scopes import Scopes

            found = self._scopes = self.analysis(Scopes)
        return found

    # -- tree ---------------------------------------------------------------------------------

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.tree.parent(node)

    def ancestors(self, node: cst.CSTNode):
        return self.tree.ancestors(node)

    def nodes(self, node_type):
        return self.tree.nodes(node_type)

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The innermost statement containing `node` (small statement or compound)."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            if isinstance(current, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return current
            current = self.tree.parent(current)
        return None

    def code(self, node: cst.CSTNode) -> str:
        """The node's source text (libcst round-trips it exactly)."""
        # Regenerating text is libcst's codegen over the whole subtree; analyses ask for the same
        # nodes' text repeatedly. Remembered only for nodes of this tree (their ids stay theirs).
        key = id(node)
        found = self._code.get(key)
        if found is None:
            found = self.module.code_for_node(node)
            if self.tree.parent(node) is not None:
                self._code[key] = found
        return found

    def span(self, node: cst.CSTNode) -> Span:
        return self.positions.span(node)

    # -- edits --------------------------------------------------------------------------------

    def replace(self, node: cst.CSTNode, content: str) -> EditSpec:
        return EditSpec("replace", node, content)

    def insert_before(self, node: cst.CSTNode, content: str) -> EditSpec:
        return EditSpec("insert_before", node, content)

    def insert_after(self, node: cst.CSTNode, content: str) -> EditSpec:
        return EditSpec("insert_after", node, content)

    def append_argument(self, call: cst.Call, code: str) -> EditSpec:
        """`code` (`name=value`) as a new last argument of a call that has arguments. It goes
        after the last argument as written, its parentheses included: a value's own span stops
        inside them, and `torch.ones((n, 4))` must become `torch.ones((n, 4), device=d)`, not
        the tuple `(n, 4, device=d)`, which does not parse."""
        assert call.args, "append_argument needs a call with arguments"
        return EditSpec("insert_after", call.args[-1], f", {code}")

    def line_after(self, statement: cst.CSTNode, code: str) -> EditSpec:
        return EditSpec("line_after", statement, code)

    def line_before(self, statement: cst.CSTNode, code: str) -> EditSpec:
        return EditSpec("line_before", statement, code)

    def body_start(self, compound: cst.CSTNode, code: str) -> Optional[EditSpec]:
        """A line at the start of a compound statement's body; None for one-line bodies."""
        body = getattr(compound, "body", None)
        if type(body) is not cst.IndentedBlock or not body.body:
            return None
        return EditSpec("body_start", compound, code)
