"""Python's own parser looks at a file before libcst does: is it Python, and is it safe to analyse?

libcst's native parser recurses on the machine stack. On deeply nested input (5,000 nested
brackets, 8,000 `and`s in one expression, 20,000 `elif`s) it overflows that stack and the whole
process dies with a segmentation fault: no finding, no message, every other file lost. On long
chains that Python accepts (3,000 `[0]` subscripts) it takes minutes. And libcst's trees, and every
analysis that follows them, are walked by recursive Python code, which raises RecursionError a few
hundred levels down.

CPython's parser has hard limits and raises instead of crashing: 200 nested brackets, 100
indentation levels, a bounded parser stack (MemoryError), a bounded AST depth (RecursionError).
So `precheck` parses with `ast` first (about a ninth of libcst's parse; `positions.py` reuses
the tree), then estimates how deep the libcst tree would nest. A file that Python rejects, or
that nests deeper than `MAX_DEPTH`, is reported as TRL001 with a message that says why, and
libcst never sees it. Real code stays far below the bound: over the 7,000 files of the corpus
the deepest estimate is 54.

libcst's parser also backtracks through nested `match` patterns: its time doubles with each level
of class pattern or list and roughly quadruples with each mapping, tuple or parenthesised level
(a class pattern nested 18 deep: 1.4 s; a mapping 12 deep: 49 s; Python: microseconds). It
cannot be interrupted, so `precheck` weighs every case pattern first (`pattern_weight`) and a
file with one heavier than `MAX_PATTERN_WEIGHT` is a TRL001 too; real patterns weigh a few units.

A file larger than `MAX_FILE_SIZE` (256 KiB by default) is not parsed at all: libcst's tree and
the analyses hold about 700 bytes per byte of source (a 1 MB file peaks at 700 MB and takes over
20 s), so a 10 MB generated file would need 7 GB, and under a memory limit the native parser
aborts the whole process.

Python is also the authority on syntax: code that libcst accepts but Python rejects (`f() = 1`)
does not run, so it is a TRL001 too.

Because Python has accepted the text by then, `parse_checked` skips the validation libcst runs
on every node its parser builds (`CSTNode.__post_init__` -> `_validate`, about an eighth of the
parse): it checks invariants of hand-built trees (balanced parentheses, a Name is an identifier),
which a tree parsed from valid Python already holds.
"""

from __future__ import annotations

import ast
import re
import threading
import warnings
from typing import List, NamedTuple, Optional, Sequence, Tuple, Type

import libcst as cst

from . import pep701
from .config import MAX_FILE_SIZE

# How deep the tree may nest (libcst-like levels, see `nesting_depth`) for trainlint to analyse it.
MAX_DEPTH = 200
# The heaviest case pattern handed to libcst (`pattern_weight`): about 2**16 steps of its parser's
# backtracking, 0.2-0.4 s (measured with libcst 1.8 on the shapes in tests/test_parse_guard.py).
MAX_PATTERN_WEIGHT = 16


class Problem(NamedTuple):
    """Why a file is not analysed: a TRL001 message and its position (row 1-based, col 0-based)."""

    message: str
    row: int
    col: int


class Verdict(NamedTuple):
    tree: Optional[ast.Module]  # Python's tree when the file may be analysed
    problem: Optional[Problem]  # else why not
    # The tree is of the text with its f-strings masked: this Python is older than 3.12 and
    # reads the file only that way (pep701.py). Its nodes are not the file's own.
    masked: bool = False


def python_parse(text: str, newer_fstrings: bool = True) -> Verdict:
    """Python's verdict on the text: its tree, or a Problem with Python's own message. With
    `newer_fstrings`, f-strings only Python 3.12 reads are not held against the text on an
    older Python (`pep701.parse`); without, this interpreter's own verdict."""
    try:
        if newer_fstrings:
            tree, masked = pep701.parse(text)
            return Verdict(tree, None, masked)
        # Python warns about the analysed code itself ("invalid escape sequence '\\d'", a
        # SyntaxWarning shown by default since 3.12): that is the user's business, not output
        # of a linter that did not ask for it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Verdict(ast.parse(text), None)
    except SyntaxError as exc:
        row = exc.lineno or 1
        col = max((exc.offset or 1) - 1, 0)
        return Verdict(None, Problem(f"SyntaxError: {exc.msg}", row, col))
    except MemoryError:
        # CPython's parser bounds its own stack and reports running out of it as a MemoryError.
        return Verdict(
            None,
            Problem(
                "Python's parser gives up on this file: it is nested too deeply "
                "(MemoryError from the parser); not analysed",
                1,
                0,
            ),
        )
    except RecursionError as exc:
        return Verdict(
            None,
            Problem(
                f"Python's parser gives up on this file: it is nested too deeply ({exc}); "
                "not analysed",
                1,
                0,
            ),
        )
    except ValueError as exc:  # "source code string cannot contain null bytes" (Python < 3.12)
        return Verdict(None, Problem(f"cannot parse: {exc}", 1, 0))


def precheck(
    text: str, max_depth: int = MAX_DEPTH, max_size: Optional[int] = MAX_FILE_SIZE
) -> Verdict:
    """Python's tree, or the reason the file must not be handed to libcst (`max_size`: the
    largest text in UTF-8 bytes, None for no limit)."""
    too_large = size_problem(text, max_size)
    if too_large is not None:
        return Verdict(None, too_large)
    verdict = python_parse(text)
    if verdict.tree is None:
        return verdict
    if _deepest(verdict.tree, max_depth) > max_depth:
        depth, row, byte_col = nesting_depth(verdict.tree, max_depth)
        from .lines import split_lines

        lines = split_lines(text)
        line = lines[row - 1] if 0 < row <= len(lines) else ""
        col = len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))
        return Verdict(
            None,
            Problem(
                f"the code is nested more than {max_depth} levels deep here; trainlint does not "
                "analyse files this deep (its parser would run out of stack); not analysed",
                row,
                col,
            ),
        )
    if _MATCH_STATEMENT.search(text) is not None:
        heavy = _heaviest_pattern(text, verdict.tree)
        if heavy is not None:
            levels, row, col = heavy
            return Verdict(
                None,
                Problem(
                    f"skipped: this case pattern nests {levels} levels deep, a nesting that "
                    "trainlint's parser cannot handle in time (its time grows two- to fourfold "
                    "with each level); not analysed",
                    row,
                    col,
                ),
            )
    return verdict


# A line starting with `case`: the file may hold a match statement (cheap to ask of the text;
# the tree is walked for patterns only then).
_MATCH_STATEMENT = re.compile(r"^[ \t]*case\b", re.MULTILINE)
# What a pattern's text is scanned for: strings and comments (skipped), brackets (counted).
_PATTERN_TOKENS = re.compile(
    r"[rRbBuU]{0,2}(?:'''(?:\\.|[^\\])*?'''"
    r'|"""(?:\\.|[^\\])*?"""'
    r"|'(?:\\.|[^'\\\n])*'"
    r'|"(?:\\.|[^"\\\n])*")'
    r"|#[^\n]*|[(\[{,]|[)\]}]"
)


def pattern_weight(text: str) -> Tuple[int, int]:
    """(weight, levels) of a case pattern's text along its heaviest path: 1 for each class
    pattern's `(`, list's `[` and parenthesised pattern, 2 for each mapping's `{` and tuple's
    `(`: the log2 of how much each level multiplies libcst's parse time."""
    # One frame per open bracket: [weight if it holds no top-level comma, weight if it does,
    # saw a comma, heaviest (weight, levels) below it].
    frames: List[list] = [[0, 0, False, (0, 0)]]
    for match in _PATTERN_TOKENS.finditer(text):
        token = match.group()
        if token in "([{":
            before = match.start() - 1
            while before >= 0 and text[before] in " \t\r\n\\":
                before -= 1
            called = before >= 0 and (text[before].isalnum() or text[before] == "_")
            if token == "{":
                weights = (2, 2)
            elif token == "[" or called:
                weights = (1, 1)
            else:
                weights = (1, 2)  # a parenthesised pattern, or a tuple once it has a comma
            frames.append([weights[0], weights[1], False, (0, 0)])
        elif token == ",":
            frames[-1][2] = True
        elif token in ")]}" and len(frames) > 1:
            _close(frames)
    while len(frames) > 1:  # unbalanced text (not from a pattern Python accepted)
        _close(frames)
    return frames[0][3]


def _close(frames: List[list]) -> None:
    plain, with_comma, comma, (below, levels) = frames.pop()
    weight = (with_comma if comma else plain) + below
    if weight > frames[-1][3][0]:
        frames[-1][3] = (weight, levels + 1)


def _heaviest_pattern(text: str, tree: ast.Module) -> Optional[Tuple[int, int, int]]:
    """(levels, row, col) of the first case pattern heavier than MAX_PATTERN_WEIGHT."""
    from .source import split_lines

    lines = split_lines(text)
    for node in ast.walk(tree):
        if type(node) is not ast.Match:
            continue
        for case in node.cases:
            pattern = case.pattern
            start = _char_offset(lines, pattern.lineno, pattern.col_offset)
            end = _char_offset(lines, pattern.end_lineno, pattern.end_col_offset)
            # Parentheses around the whole pattern are outside its span: walk back over them.
            opener = start
            while opener > 0 and text[opener - 1] in " \t\r\n\\(":
                opener -= 1
            weight, levels = pattern_weight(text[opener:end])
            if weight > MAX_PATTERN_WEIGHT:
                row = pattern.lineno
                return levels, row, start - _char_offset(lines, row, 0)
    return None


def _char_offset(lines: List[str], row: int, byte_col: int) -> int:
    """The offset in the text of (1-based row, UTF-8 byte column), as Python's tree gives them."""
    offset = sum(len(line) for line in lines[: row - 1])
    line = lines[row - 1] if 0 < row <= len(lines) else ""
    if line.isascii():
        return offset + byte_col
    return offset + len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def size_problem(text: str, max_size: Optional[int] = MAX_FILE_SIZE) -> Optional[Problem]:
    """Why a text over `max_size` UTF-8 bytes is not analysed (None when it is not over)."""
    if max_size is None or len(text) * 4 <= max_size:  # no character is more than 4 bytes
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= max_size:
        return None
    return Problem(
        f"skipped: the code is {_size(size)}, over the {_size(max_size)} trainlint analyses "
        "in one file (the `max-file-size` setting); not analysed",
        1,
        0,
    )


def _size(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    if size >= 1024:
        # One decimal, so that a file just over the limit does not read as the limit itself.
        return f"{size / 1024:.1f} KiB".replace(".0 KiB", " KiB")
    return f"{size} bytes"


# libcst's own node validation hook, replaced by a no-op while `parse_checked` parses.
_VALIDATING_POST_INIT = cst.CSTNode.__dict__.get("__post_init__")
_validation = threading.Lock()
_skipping = 0  # parses in this process running without node validation now


def _no_validation(self: cst.CSTNode) -> None:
    pass


def parse_checked(text: str) -> cst.Module:
    """`libcst.parse_module` of a text `precheck` accepted, without re-validating every node.
    Raises what `parse_module` raises."""
    global _skipping
    if _VALIDATING_POST_INIT is None:  # libcst validates some other way: parse as usual
        return cst.parse_module(text)
    with _validation:
        _skipping += 1
        cst.CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        return cst.parse_module(text)
    finally:
        with _validation:
            _skipping -= 1
            if _skipping == 0:
                cst.CSTNode.__post_init__ = _VALIDATING_POST_INIT  # type: ignore[method-assign]


# Edges of Python's tree that are more than one level in libcst's tree: a statement's body is an
# IndentedBlock holding statement lines, an argument is an Arg, a subscript holds a
# SubscriptElement holding an Index, a display's items are Elements.
_WRAPPED_FIELDS = {
    "body": 2,
    "orelse": 2,
    "finalbody": 2,
    "handlers": 2,
    "cases": 2,
    "args": 2,
    "keywords": 2,
    "slice": 3,
    "elts": 2,
    "keys": 2,
    "values": 2,
    "generators": 2,
}


def nesting_depth(tree: ast.AST, limit: int) -> Tuple[int, int, int]:
    """(depth, row, col): how deep libcst's tree for this code nests (an upper estimate), and
    where. Python's flat nodes are nested in libcst: `a and b and c` is a chain of
    BooleanOperations, a comprehension's `for` clauses are a chain of CompFors. Stops early once
    the depth passes `limit`."""
    best, where = 0, (1, 0)
    stack: List[Tuple[ast.AST, int]] = [(tree, 1)]
    pop, push = stack.pop, stack.append
    BoolOp = ast.BoolOp
    Comps = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
    AST = ast.AST
    wrapped = _WRAPPED_FIELDS
    while stack:
        node, depth = pop()
        if type(node) is BoolOp:
            depth += len(node.values)
        elif isinstance(node, Comps):
            depth += 2 * len(node.generators)
        if depth > best:
            best = depth
            where = (getattr(node, "lineno", where[0]), getattr(node, "col_offset", where[1]))
            if best > limit:
                break
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                step = depth + wrapped.get(name, 1)
                for item in value:
                    if isinstance(item, AST):
                        push((item, step))
            elif isinstance(value, AST):
                push((value, depth + wrapped.get(name, 1)))
    return best, where[0], where[1]


# Fields of Python's nodes that hold identifiers, numbers and flags, never a node.
_NEVER_NODES = frozenset(
    {"id", "attr", "arg", "name", "module", "level", "kind", "type_comment", "is_async",
     "conversion"}
)
# node type -> ((field, how many libcst levels it adds), ...), the fields that may hold nodes.
_PLANS: dict = {}
# node type -> has no fields (contexts and operators: `Load()`, `Add()`): a leaf of the depth.
_LEAVES: dict = {}


def _plan(node_type: Type[ast.AST]) -> tuple:
    plan = _PLANS[node_type] = tuple(
        (name, _WRAPPED_FIELDS.get(name, 1))
        for name in node_type._fields
        if name not in _NEVER_NODES and not (node_type is ast.Constant and name == "value")
    )
    return plan


def _is_leaf(node_type: Type[ast.AST]) -> bool:
    leaf = _LEAVES[node_type] = not node_type._fields
    return leaf


def _deepest(tree: ast.AST, limit: int) -> int:
    """`nesting_depth(tree, limit)[0]` without its position, computed with fewer steps: fields
    that never hold nodes are not read, and leaves without fields (a `Load()` context, an `Add()`
    operator) count without being pushed. `precheck` asks `nesting_depth` for the position only
    when this passes the limit."""
    best = 0
    stack: List[Tuple[ast.AST, int]] = [(tree, 1)]
    pop, push = stack.pop, stack.append
    BoolOp = ast.BoolOp
    Comps = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
    AST = ast.AST
    plans, leaves = _PLANS, _LEAVES
    while stack:
        node, depth = pop()
        node_type = type(node)
        if node_type is BoolOp:
            depth += len(node.values)  # type: ignore[attr-defined]
        elif node_type in Comps:
            depth += 2 * len(node.generators)  # type: ignore[attr-defined]
        if depth > best:
            best = depth
            if best > limit:
                break
        plan = plans.get(node_type)
        if plan is None:
            plan = _plan(node_type)
        for name, step in plan:
            value = getattr(node, name, None)
            items: Sequence[object]
            if type(value) is list:
                items = value
            elif isinstance(value, AST):
                items = (value,)
            else:
                continue
            step = depth + step
            for item in items:
                if isinstance(item, AST):
                    leaf = leaves.get(type(item))
                    if leaf is None:
                        leaf = _is_leaf(type(item))
                    if not leaf:
                        push((item, step))
                    elif step > best:
                        best = step
                        if best > limit:
                            return best
    return best
