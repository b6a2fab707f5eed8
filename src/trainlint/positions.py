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
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

import libcst as cst

from .source import Source
from .walk import children as _children

if TYPE_CHECKING:  # pragma: no cover
    from libcst.metadata import CodeRange

Span = Tuple[int, int, int, int]  # row, col, end_row, end_col (rows 1-based, cols 0-based)

_COMPOUND: Tuple[type, ...] = (
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


_Anchor = Tuple[int, int, bool, ast.AST]  # row, col in characters, is_compound, Python's node


class _Stop(Exception):
    pass


# Nodes that own no text of their own before their first part: their span is built from parts.
_COMPOSITE = (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.Decorator)


def _parts(node: cst.CSTNode) -> List[cst.CSTNode]:
    if type(node) is cst.Decorator:
        return [node.decorator]
    return list(node.body)  # type: ignore[attr-defined]


def _make_tracking_state():  # pragma: no cover - trivial, but isolated for the fallback
    from libcst.metadata.position_provider import PositionProvidingCodegenState

    class TrackingState(PositionProvidingCodegenState):
        """libcst's own position bookkeeping, stopped once the wanted nodes are done."""

        def after_codegen(self, node: cst.CSTNode) -> None:  # noqa: D401
            super().after_codegen(node)
            remaining = self.provider.remaining  # type: ignore[attr-defined]  # a _Provider
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
        self._computed: Dict[cst.CSTNode, "CodeRange"] = {}
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
        self._anchors: Optional[Dict[cst.CSTNode, _Anchor]] = None
        # Python's tree of the same text, when the engine already has it (parse_guard.py).
        self.ast_tree: Optional[ast.Module] = None
        self._full: Optional[Dict[cst.CSTNode, Span]] = None
        # anchor -> {id(libcst node): (libcst node, its span from Python's node)} for the
        # anchor's own nodes
        self._paired: Dict[cst.CSTNode, Dict[int, Tuple[cst.CSTNode, Span]]] = {}
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
            where = anchors[anchor]  # type: ignore[index]
            targets = self._from_python(anchor, where, targets)
            if targets and not self._from_anchor(anchor, where, targets):
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
        if type(node) is cst.Decorator:
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

    def _anchor_table(self) -> Optional[Dict[cst.CSTNode, _Anchor]]:
        """libcst anchor -> (row, col in characters, is_compound, Python's node); None if ast
        disagrees."""
        if self._anchors is not None:
            return self._anchors or None
        self._anchors = {}
        if _TrackingState is None:
            return None
        try:
            tree = self.ast_tree or ast.parse(self.source.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        ast_anchors = _ast_anchors(tree)
        ast_anchors.sort(key=_ANCHOR_ORDER)
        cst_anchors = list(_cst_anchors(self.module))
        if len(ast_anchors) != len(cst_anchors):
            return None
        table: Dict[cst.CSTNode, _Anchor] = {}
        for (row, byte_col, kind, ast_node), (node, cst_kind) in zip(ast_anchors, cst_anchors):
            if kind != cst_kind:
                return None
            line = self.source.line(row)
            col = byte_col if line.isascii() else _chars_in_bytes(line, byte_col)
            table[node] = (row, col, kind not in ("small", "decorator"), ast_node)
        self._anchors = table
        return table

    def _from_python(self, anchor, where, targets) -> List[cst.CSTNode]:
        """Spans taken from Python's node paired with each target; returns the targets left."""
        pairs = self._paired.get(anchor)
        if pairs is None:
            pairs = self._pair(anchor, where[3])
            self._paired[anchor] = pairs
            own = self._statement_span(where)
            if own is not None:
                pairs[id(anchor)] = (anchor, own)
        if not pairs:
            return targets
        remaining = []
        spans = self._spans
        for target in targets:
            pair = pairs.get(id(target))
            if pair is None or pair[0] is not target:
                remaining.append(target)
            else:
                spans[target] = pair[1]
        return remaining

    def _statement_span(self, where) -> Optional[Span]:
        """A statement's or except-handler's own span: its start is the anchor's; its end is
        the end of its last small statement (libcst ends a compound statement there, before a
        trailing `;`, which Python counts), or of itself."""
        row, col, compound, python = where
        if not isinstance(python, (ast.stmt, ast.excepthandler)):
            return None  # decorators: paired as expressions
        last = python
        while not isinstance(last, ast.stmt) or type(last).__name__ in _AST_COMPOUND:
            block = _last_block(last)
            if not block:
                return None
            last = block[-1]
        end_row, end_col = last.end_lineno, last.end_col_offset
        if end_row is None or end_col is None:
            return None
        end_line = self.source.line(end_row)
        if not end_line.isascii():
            end_col = _chars_in_bytes(end_line, end_col)
        # What follows a small statement on its line: nothing, `;`, a comment, a continuation.
        rest = end_line[end_col:].lstrip(" \t\f")
        if rest and rest[0] not in ";#\\":
            return None
        return (row, col, end_row, end_col)

    def _pair(self, anchor, ast_root) -> Dict[int, Tuple[cst.CSTNode, Span]]:
        """The anchor's own expressions of the kinds in `_GROUP_OF`, paired one to one with
        Python's nodes of the same kind by document order, with Python's positions. A kind
        whose counts differ, or whose text at Python's position does not fit the node, is left
        to the regeneration."""
        if type(anchor) in _UNPAIRED or getattr(anchor, "type_parameters", None):
            return {}
        ours = _cst_groups(anchor)
        if not ours:
            return {}
        theirs = _ast_groups(ast_root)
        out: Dict[int, Tuple[cst.CSTNode, Span]] = {}
        line_of = self.source.line
        for group, nodes in ours.items():
            found = theirs.get(group)
            if found is None or len(found) != len(nodes):
                continue
            found.sort(key=_DOCUMENT_ORDER)
            fits = _FITS[group]
            paired: List[Tuple[cst.CSTNode, Span]] = []
            for node, python in zip(nodes, found):
                row, end_row = python.lineno, python.end_lineno
                col, end_col = python.col_offset, python.end_col_offset
                if end_row is None or end_col is None:
                    break  # only nodes made by hand lack an end; ast.parse's never do
                line = line_of(row)
                end_line = line if end_row == row else line_of(end_row)
                if not line.isascii():
                    col = _chars_in_bytes(line, col)
                if not end_line.isascii():
                    end_col = _chars_in_bytes(end_line, end_col)
                if not fits(node, line, col, end_line, end_col, row == end_row):
                    break
                paired.append((node, (row, col, end_row, end_col)))
            else:
                for node, span in paired:
                    out[id(node)] = (node, span)
                if group == _ATTRIBUTE:
                    # The attribute's name is the last token of the attribute (checked above).
                    for node, (_, _, end_row, end_col) in paired:
                        attr = node.attr  # type: ignore[attr-defined]
                        start = end_col - len(attr.value)
                        out[id(attr)] = (attr, (end_row, start, end_row, end_col))
        return out

    def _from_anchor(self, anchor, where, targets) -> bool:
        row, col, compound, _ = where
        to_generate = anchor
        if compound:
            # Regenerate from the keyword: the anchor's own comment lines and decorators are not
            # part of the ast position.
            changes = {"leading_lines": ()}
            if type(anchor) in (cst.FunctionDef, cst.ClassDef):
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
        if type(anchor) is cst.If:
            parent = self.parent_of(anchor)
            if type(parent) is cst.If and parent.orelse is anchor:
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


# -- pairing libcst's expressions with Python's -------------------------------------------------
#
# libcst's syntactic range of an expression is Python's range of the same expression: both leave
# out the expression's own parentheses, both start at the first token and end after the last.
# Within one anchor, the nodes of one kind (calls, say) are in the same document order in both
# trees, so the k-th call of libcst's tree is the k-th call of Python's. Kinds where the two trees
# differ (`True` is a Name in libcst and a Constant in Python; a keyword argument's name is a Name
# in libcst and a string in Python) are filtered out on the libcst side; anything left unequal
# shows up as unequal counts, and each pairing is checked against the text.

_NAME, _CALL, _ATTRIBUTE, _SUBSCRIPT, _LITERAL = range(5)

_GROUP_OF = {
    cst.Name: _NAME,
    cst.Call: _CALL,
    cst.Attribute: _ATTRIBUTE,
    cst.Subscript: _SUBSCRIPT,
    cst.Integer: _LITERAL,
    cst.Float: _LITERAL,
    cst.Imaginary: _LITERAL,
    cst.SimpleString: _LITERAL,
    cst.ConcatenatedString: _LITERAL,  # unless it has an f-string part (see _cst_groups)
}
_AST_GROUP_OF = {
    ast.Name: _NAME,
    ast.Call: _CALL,
    ast.Attribute: _ATTRIBUTE,
    ast.Subscript: _SUBSCRIPT,
    ast.Constant: _LITERAL,  # only numbers, strings and bytes (see _ast_groups)
}
_LITERAL_VALUES = (int, float, complex, str, bytes)
_NOT_EXPRESSION_NAMES = frozenset({"True", "False", "None"})

# Anchors not paired at all: their names are not expressions in Python's tree (imports, global),
# or their parts are patterns (match).
_UNPAIRED = {cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal}
if _MATCH is not None:
    _UNPAIRED.add(_MATCH)
for _name in ("TypeAlias",):
    if hasattr(cst, _name):
        _UNPAIRED.add(getattr(cst, _name))

# Where the anchor's own nodes end: nested statements and suites are other anchors; f-strings'
# inner expressions are positioned differently by Python before 3.12.
_CST_STOP = {
    cst.IndentedBlock,
    cst.SimpleStatementSuite,
    cst.Decorator,
    cst.Else,
    cst.Finally,
    cst.If,
    cst.FormattedString,
    cst.ConcatenatedString,
} | set(_HANDLERS)
if _MATCH is not None:
    _CST_STOP.add(cst.MatchCase)
_AST_STMT_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases", "decorator_list"})
# Fields of Python's nodes that never hold an expression.
_AST_NOT_CHILD = frozenset(
    {"ctx", "op", "ops", "id", "attr", "arg", "kind", "type_comment", "is_async", "conversion",
     "level", "module", "name", "names", "lineno", "col_offset", "end_lineno", "end_col_offset"}
)
_AST_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _cst_groups(anchor: cst.CSTNode) -> Dict[int, List[cst.CSTNode]]:
    """The anchor's own nodes of each kind, in document order."""
    groups: Dict[int, List[cst.CSTNode]] = {}
    group_of = _GROUP_OF
    stop = _CST_STOP
    stack: List[Tuple[cst.CSTNode, Optional[cst.CSTNode]]] = [(anchor, None)]
    while stack:
        node, parent = stack.pop()
        node_type = type(node)
        group = group_of.get(node_type)
        if group is not None:
            if group == _NAME:
                name = node.value  # type: ignore[attr-defined]  # a Name
                if name in _NOT_EXPRESSION_NAMES or _names_no_expression(node, parent):
                    group = None
            elif node_type is cst.ConcatenatedString and _has_fstring(node):
                group = None
            if group is not None:
                found = groups.get(group)
                if found is None:
                    groups[group] = [node]
                else:
                    found.append(node)
        if node is not anchor and node_type in stop:
            continue
        if node_type is cst.AsName and type(parent) is not cst.WithItem:
            continue  # `except E as name`: a string in Python's tree
        kids = _children(node)
        if node_type is cst.Parameters and node.posonly_params:  # type: ignore[attr-defined]
            kids = _document_ordered_parameters(node)  # type: ignore[arg-type]
        for child in reversed(kids):
            stack.append((child, node))
    return groups


def _names_no_expression(node: cst.CSTNode, parent: Optional[cst.CSTNode]) -> bool:
    """A Name that Python's tree holds as a plain string (an attribute's name, a keyword
    argument's name, a parameter, a def's or class's name)."""
    parent_type = type(parent)
    if parent_type is cst.Attribute:
        return node is parent.attr  # type: ignore[union-attr]
    if parent_type is cst.Arg:
        return node is parent.keyword  # type: ignore[union-attr]
    if parent_type in (cst.Param, cst.FunctionDef, cst.ClassDef):
        return node is parent.name  # type: ignore[union-attr]
    return False


def _has_fstring(node: cst.CSTNode) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if type(current) is cst.ConcatenatedString:
            stack.append(current.left)
            stack.append(current.right)
        elif type(current) is not cst.SimpleString:
            return True
    return False


def _document_ordered_parameters(params: cst.Parameters) -> List[cst.CSTNode]:
    head = [p for p in params.posonly_params]
    return head + [k for k in _children(params) if k not in head]


def _ast_groups(root: ast.AST) -> Dict[int, List[ast.expr]]:
    """Python's nodes of each kind under the anchor's own node, not in nested statements."""
    groups: Dict[int, List[ast.expr]] = {}
    group_of = _AST_GROUP_OF
    fields_of = _AST_FIELDS
    AST = ast.AST
    joined = ast.JoinedStr
    literal_values = _LITERAL_VALUES
    stack: List[ast.AST] = []
    if isinstance(root, (ast.stmt, ast.excepthandler)):
        for name in root._fields:
            if name in _AST_STMT_FIELDS or name in _AST_NOT_CHILD:
                continue
            value = getattr(root, name, None)
            if type(value) is list:
                stack.extend(v for v in value if isinstance(v, AST))
            elif isinstance(value, AST):
                stack.append(value)
    else:
        stack.append(root)
    while stack:
        node = stack.pop()
        node_type = type(node)
        if node_type is joined:
            continue
        group = group_of.get(node_type)
        if group is not None and (
            group != _LITERAL or type(node.value) in literal_values  # type: ignore[attr-defined]
        ):
            # Every kind in _AST_GROUP_OF is an expression.
            found = groups.get(group)
            if found is None:
                groups[group] = [node]  # type: ignore[list-item]
            else:
                found.append(node)  # type: ignore[arg-type]
        fields = fields_of.get(node_type)
        if fields is None:
            fields = fields_of[node_type] = tuple(
                f for f in node_type._fields if f not in _AST_NOT_CHILD
            )
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        stack.append(item)
            elif isinstance(value, AST):
                stack.append(value)
    return groups


def _DOCUMENT_ORDER(node: ast.AST):
    # Pre-order: by start, an enclosing node (it ends later) before the node it encloses.
    return (node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset)  # type: ignore


def _fits_name(node, line, col, end_line, end_col, one_line) -> bool:
    return one_line and line[col:end_col] == node.value


def _fits_attribute(node, line, col, end_line, end_col, one_line) -> bool:
    attr = node.attr.value
    return end_col >= len(attr) and end_line[end_col - len(attr) : end_col] == attr


def _fits_call(node, line, col, end_line, end_col, one_line) -> bool:
    return end_line[end_col - 1 : end_col] == ")"


def _fits_subscript(node, line, col, end_line, end_col, one_line) -> bool:
    return end_line[end_col - 1 : end_col] == "]"


def _fits_literal(node, line, col, end_line, end_col, one_line) -> bool:
    while type(node) is cst.ConcatenatedString:
        node = node.left
    value = node.value
    if type(node) is not cst.SimpleString:
        return one_line and line[col:end_col] == value
    first = value.split("\n", 1)[0].split("\r", 1)[0]
    return line[col : col + len(first)] == first


_FITS = {
    _NAME: _fits_name,
    _CALL: _fits_call,
    _ATTRIBUTE: _fits_attribute,
    _SUBSCRIPT: _fits_subscript,
    _LITERAL: _fits_literal,
}


def _last_block(node: ast.AST) -> list:
    """The statements of a compound statement's (or handler's) last block in the text."""
    for name in ("finalbody", "orelse"):
        block = getattr(node, name, None)
        if block:
            return block
    handlers = getattr(node, "handlers", None)
    if handlers:
        return handlers[-1].body
    cases = getattr(node, "cases", None)
    if cases:
        return cases[-1].body
    return getattr(node, "body", None) or []


def _ANCHOR_ORDER(entry):
    return entry[:3]


def _ast_anchors(tree: ast.Module) -> list:
    """(row, byte col, kind, ast node) of every statement, except-handler and decorator: the
    statements are followed through their bodies only, never into expressions."""
    out: List[Tuple[int, int, str, ast.AST]] = []
    append = out.append
    compound = _AST_COMPOUND
    stmt_lists = ("body", "orelse", "finalbody")
    stack = [tree.body]
    while stack:
        for node in stack.pop():
            kind = compound.get(type(node).__name__)
            if kind is None:
                append((node.lineno, node.col_offset, "small", node))
                continue
            append((node.lineno, node.col_offset, kind, node))
            for deco in getattr(node, "decorator_list", ()):
                append((deco.lineno, deco.col_offset, "decorator", deco))
            for name in stmt_lists:
                block = getattr(node, name, None)
                if block:
                    stack.append(block)
            for handler in getattr(node, "handlers", ()):
                append((handler.lineno, handler.col_offset, "handler", handler))
                stack.append(handler.body)
            for case in getattr(node, "cases", ()):
                stack.append(case.body)
    return out


def _chars_in_bytes(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _cst_anchors(module: cst.Module):
    """(node, kind) for every anchor, in the order ast positions sort them."""

    def suite(body):
        if type(body) is cst.SimpleStatementSuite:
            for small in body.body:
                yield small, "small"
        else:
            for stmt in body.body:
                yield from statement(stmt)

    def statement(stmt):
        if type(stmt) is cst.SimpleStatementLine:
            for small in stmt.body:
                yield small, "small"
            return
        if type(stmt) in (cst.FunctionDef, cst.ClassDef):
            for deco in stmt.decorators:
                yield deco.decorator, "decorator"
        yield stmt, type(stmt).__name__
        if _MATCH is not None and isinstance(stmt, _MATCH):
            for case in stmt.cases:
                yield from suite(case.body)
            return
        yield from suite(stmt.body)
        if type(stmt) is cst.If:
            if type(stmt.orelse) is cst.If:
                yield from statement(stmt.orelse)
            elif stmt.orelse is not None:
                yield from suite(stmt.orelse.body)
        elif type(stmt) in (cst.For, cst.While):
            if stmt.orelse is not None:
                yield from suite(stmt.orelse.body)
        elif type(stmt) is cst.Try or (_TRY_STAR is not None and isinstance(stmt, _TRY_STAR)):
            for handler in stmt.handlers:
                yield handler, "handler"
                yield from suite(handler.body)
            if stmt.orelse is not None:
                yield from suite(stmt.orelse.body)
            if stmt.finalbody is not None:
                yield from suite(stmt.finalbody.body)

    for stmt in module.body:
        yield from statement(stmt)
