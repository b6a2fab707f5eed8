"""Where a libcst node is in the file, computed only for the nodes that are reported.

libcst's `PositionProvider` regenerates the whole module with position bookkeeping on every node;
on real training code that costs about twice the parse itself, for every file, although most files
have no finding at all. trainlint needs positions only for reported nodes and fix spans, so it
computes them on demand:

1. Anchors. `ast.parse` (about a sixth of libcst's parse) gives the exact start of every statement,
   except-handler and decorator. The same anchors, enumerated from the libcst tree in document
   order, pair up one to one with them.
2. For a node, its nearest enclosing anchor is regenerated alone with libcst's own position
   bookkeeping, starting from the anchor's known position, and stopped as soon as the node's range
   is known. A statement is a few dozen tokens.
3. Every regeneration is checked against the file's text; if anything disagrees (ast and libcst
   see the file differently, a libcst internal changed), the node falls back to libcst's public
   whole-module `PositionProvider`. Correctness never depends on the fast path.
"""

from __future__ import annotations

import ast
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import libcst as cst

from .source import Source

Span = Tuple[int, int, int, int]  # row, col, end_row, end_col (rows 1-based, cols 0-based)

_COMPOUND = (
    cst.If,
    cst.For,
    cst.While,
    cst.With,
    cst.Try,
    cst.FunctionDef,
    cst.ClassDef,
)
_TRY_STAR = getattr(cst, "TryStar", None)
_MATCH = getattr(cst, "Match", None)
if _TRY_STAR is not None:
    _COMPOUND = _COMPOUND + (_TRY_STAR,)
if _MATCH is not None:
    _COMPOUND = _COMPOUND + (_MATCH,)
_HANDLERS = tuple(
    t for t in (cst.ExceptHandler, getattr(cst, "ExceptStarHandler", None)) if t is not None
)
_AST_COMPOUND = {
    "If": "If",
    "For": "For",
    "AsyncFor": "For",
    "While": "While",
    "With": "With",
    "AsyncWith": "With",
    "Try": "Try",
    "TryStar": "TryStar",
    "FunctionDef": "FunctionDef",
    "AsyncFunctionDef": "FunctionDef",
    "ClassDef": "ClassDef",
    "Match": "Match",
}


class _Stop(Exception):
    pass


# Nodes that own no text of their own before their first part: their span is built from parts.
_COMPOSITE = (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.Decorator)


def _parts(node: cst.CSTNode) -> List[cst.CSTNode]:
    if isinstance(node, cst.Decorator):
        return [node.decorator]
    return list(node.body)  # type: ignore[attr-defined]


def _make_tracking_state():  # pragma: no cover - trivial, but isolated for the fallback
    from libcst.metadata.position_provider import PositionProvidingCodegenState

    class TrackingState(PositionProvidingCodegenState):  # type: ignore[misc,valid-type]
        """libcst's own position bookkeeping, stopped once the wanted nodes are done."""

        def after_codegen(self, node: cst.CSTNode) -> None:  # noqa: D401
            super().after_codegen(node)
            remaining = self.provider.remaining
            if node in remaining:
                remaining.discard(node)
                if not remaining:
                    raise _Stop

    return TrackingState


try:
    _TrackingState = _make_tracking_state()
except Exception:  # pragma: no cover - libcst moved its internals: always use the fallback
    _TrackingState = None


class _Provider:
    """Stands in for a metadata provider: the state writes ranges into `_computed`."""

    def __init__(self, remaining: Iterable[cst.CSTNode]) -> None:
        self._computed: Dict[cst.CSTNode, object] = {}
        self.remaining = set(remaining)


class PositionIndex:
    def __init__(
        self,
        module: cst.Module,
        source: Source,
        parent_of: Callable[[cst.CSTNode], Optional[cst.CSTNode]],
    ) -> None:
        self.module = module
        self.source = source
        self.parent_of = parent_of
        self._spans: Dict[cst.CSTNode, Span] = {}
        self._anchors: Optional[Dict[cst.CSTNode, Tuple[int, int, bool]]] = None
        # Python's tree of the same text, when the engine already has it (parse_guard.py).
        self.ast_tree: Optional[ast.Module] = None
        self._full: Optional[Dict[cst.CSTNode, Span]] = None
        self.fallbacks = 0  # how many nodes needed the whole-module provider (tests read this)

    # -- public -------------------------------------------------------------------------------

    def span(self, node: cst.CSTNode) -> Span:
        found = self._spans.get(node)
        if found is None:
            self.prepare([node])
            found = self._spans[node]
        return found

    def prepare(self, nodes: Iterable[cst.CSTNode]) -> None:
        """Compute spans for many nodes at once (one regeneration per anchor)."""
        wanted = [n for n in dict.fromkeys(nodes) if n not in self._spans]
        if not wanted:
            return
        by_anchor: Dict[cst.CSTNode, List[cst.CSTNode]] = {}
        leftovers: List[cst.CSTNode] = []
        anchors = self._anchor_table()
        composite = [n for n in wanted if isinstance(n, _COMPOSITE)]
        if composite:
            wanted = [n for n in wanted if not isinstance(n, _COMPOSITE)]
            parts = [p for n in composite for p in _parts(n)]
            wanted.extend(p for p in parts if p not in self._spans)
        for node in wanted:
            anchor = self._anchor_of(node, anchors) if anchors is not None else None
            if anchor is None:
                leftovers.append(node)
            else:
                by_anchor.setdefault(anchor, []).append(node)
        for anchor, targets in by_anchor.items():
            if not self._from_anchor(anchor, anchors[anchor], targets):  # type: ignore[index]
                leftovers.extend(targets)
        for node in leftovers:
            self._spans[node] = self._full_span(node)
        for node in composite:
            self._spans[node] = self._composite_span(node)

    def _composite_span(self, node: cst.CSTNode) -> Span:
        """Lines of small statements and decorators: spans built from their parts' spans."""
        parts = _parts(node)
        if not parts:
            return self._full_span(node)
        first = self._spans[parts[0]]
        last = self._spans[parts[-1]]
        if isinstance(node, cst.Decorator):
            # "@" + whitespace_after_at + the expression, all on one line.
            col = first[1] - len(node.whitespace_after_at.value) - 1
            if col < 0 or self.source.line(first[0])[col : col + 1] != "@":
                return self._full_span(node)
            return (first[0], col, last[2], last[3])
        return (first[0], first[1], last[2], last[3])

    # -- anchors ------------------------------------------------------------------------------

    def _anchor_of(self, node, anchors) -> Optional[cst.CSTNode]:
        current: Optional[cst.CSTNode] = node
        while current is not None:
            if current in anchors:
                return current
            current = self.parent_of(current)
        return None

    def _anchor_table(self) -> Optional[Dict[cst.CSTNode, Tuple[int, int, bool]]]:
        """libcst anchor -> (row, col in characters, is_compound); None if ast disagrees."""
        if self._anchors is not None:
            return self._anchors or None
        self._anchors = {}
        if _TrackingState is None:
            return None
        try:
            tree = self.ast_tree or ast.parse(self.source.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        ast_anchors = []
        for node in ast.walk(tree):
            if isinstance(node, ast.stmt):
                kind = _AST_COMPOUND.get(type(node).__name__, "small")
                ast_anchors.append((node.lineno, node.col_offset, kind))
                for deco in getattr(node, "decorator_list", ()):
                    ast_anchors.append((deco.lineno, deco.col_offset, "decorator"))
            elif isinstance(node, ast.excepthandler):
                ast_anchors.append((node.lineno, node.col_offset, "handler"))
        ast_anchors.sort()
        cst_anchors = list(_cst_anchors(self.module))
        if len(ast_anchors) != len(cst_anchors):
            return None
        table: Dict[cst.CSTNode, Tuple[int, int, bool]] = {}
        for (row, byte_col, kind), (node, cst_kind) in zip(ast_anchors, cst_anchors):
            if kind != cst_kind:
                return None
            line = self.source.line(row)
            col = byte_col if line.isascii() else _chars_in_bytes(line, byte_col)
            table[node] = (row, col, kind not in ("small", "decorator"))
        self._anchors = table
        return table

    def _from_anchor(self, anchor, where, targets) -> bool:
        row, col, compound = where
        to_generate = anchor
        if compound:
            # Regenerate from the keyword: the anchor's own comment lines and decorators are not
            # part of the ast position.
            changes = {"leading_lines": ()}
            if isinstance(anchor, (cst.FunctionDef, cst.ClassDef)):
                changes.update(decorators=(), lines_after_decorators=())
            to_generate = anchor.with_changes(**changes)
        tracked = [to_generate if t is anchor else t for t in targets]
        provider = _Provider(tracked)
        state = _TrackingState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            provider=provider,
        )
        # The block's indentation: statements and bracketed continuation lines repeat it.
        line = self.source.line(row)
        indent = line[: len(line) - len(line.lstrip(" \t\f"))]
        state.indent_tokens = [indent] if indent else []
        if compound:
            state.line, state.column = row, 0
        else:
            state.line, state.column = row, col
        kwargs = {}
        if isinstance(anchor, cst.If):
            parent = self.parent_of(anchor)
            if isinstance(parent, cst.If) and parent.orelse is anchor:
                kwargs["is_elif"] = True
        try:
            to_generate._codegen(state, **kwargs)
        except _Stop:
            pass
        except Exception:
            # Stopping inside a node whose range ends at a later node (an `if` header's test
            # ends the `if`'s syntactic range at its body) makes libcst's bookkeeping fail on
            # the way out, after every target was recorded; the text check below still decides.
            if provider.remaining:
                return False
        # The regenerated text must be the file's text at that place, or the anchor was wrong.
        generated = "".join(state.tokens)
        start = self.source.offset(row, 0 if compound else col)
        if self.source.text[start : start + len(generated)] != generated:
            return False
        computed = provider._computed
        for target, track in zip(targets, tracked):
            code_range = computed.get(track)
            if code_range is None:
                return False
            self._spans[target] = (
                code_range.start.line,
                code_range.start.column,
                code_range.end.line,
                code_range.end.column,
            )
        return True

    # -- fallback -----------------------------------------------------------------------------

    def _full_span(self, node: cst.CSTNode) -> Span:
        self.fallbacks += 1
        if self._full is None:
            from libcst.metadata import MetadataWrapper, PositionProvider

            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            ranges = wrapper.resolve(PositionProvider)
            self._full = {
                n: (r.start.line, r.start.column, r.end.line, r.end.column)
                for n, r in ranges.items()
            }
        found = self._full.get(node)
        if found is None:
            # Not a node of this module (a rule built it): point at the top of the file.
            return (1, 0, 1, 0)
        return found


def _chars_in_bytes(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _cst_anchors(module: cst.Module):
    """(node, kind) for every anchor, in the order ast positions sort them."""

    def suite(body):
        if isinstance(body, cst.SimpleStatementSuite):
            for small in body.body:
                yield small, "small"
        else:
            for stmt in body.body:
                yield from statement(stmt)

    def statement(stmt):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                yield small, "small"
            return
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            for deco in stmt.decorators:
                yield deco.decorator, "decorator"
        yield stmt, type(stmt).__name__
        if _MATCH is not None and isinstance(stmt, _MATCH):
            for case in stmt.cases:
                yield from suite(case.body)
            return
        yield from suite(stmt.body)
        if isinstance(stmt, cst.If):
            if isinstance(stmt.orelse, cst.If):
                yield from statement(stmt.orelse)
            elif stmt.orelse is not None:
                yield from suite(stmt.orelse.body)
        elif isinstance(stmt, (cst.For, cst.While)):
            if stmt.orelse is not None:
                yield from suite(stmt.orelse.body)
        elif isinstance(stmt, cst.Try) or (_TRY_STAR is not None and isinstance(stmt, _TRY_STAR)):
            for handler in stmt.handlers:
                yield handler, "handler"
                yield from suite(handler.body)
            if stmt.orelse is not None:
                yield from suite(stmt.orelse.body)
            if stmt.finalbody is not None:
                yield from suite(stmt.finalbody.body)

    for stmt in module.body:
        yield from statement(stmt)
