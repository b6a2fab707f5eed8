"""Branch conditions: can two pieces of code both run in one execution?

Rules that pair two sites ("SyncBatchNorm here, DataParallel there") must not pair sites that
sit on branches no run takes together. Two sites are exclusive when

- they are in different branches of the same `if` / conditional expression, or
- the conditions that guard them contradict each other: the same variable compared with `==`
  and `!=` against the same constant (`RANK == -1` / `RANK != -1`), with `==` against two
  different constants (`mode == "train"` / `mode == "eval"`), or tested and negated
  (`if args.ddp:` / `if not args.ddp:`), also inside `and` chains (`cuda and RANK == -1`).

A guard only counts when the variable is not reassigned between the two sites in their
function: `rank = -1` between them would make both tests about different values. Calls are
never compared (`f() == 1` may change between two calls).
"""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .nodes import descendants
from .. import Analysis

# (expression text, relation, constant text); relation "==", "!=", "true", "false"
Atom = Tuple[str, str, str]
_CONSTANTS = (cst.Integer, cst.Float, cst.SimpleString)


class Conditions(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._guards: Dict[cst.CSTNode, List[Tuple[cst.CSTNode, Set[Atom]]]] = {}

    def exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Can `a` and `b` never both run in one execution?"""
        if self._sibling_branches(a, b):
            return True
        for branch_a, atoms_a in self.guards(a):
            for branch_b, atoms_b in self.guards(b):
                if branch_a is branch_b:
                    continue
                for atom in atoms_a:
                    for other in atoms_b:
                        if _contradict(atom, other) and not self._reassigned(atom[0], a, b):
                            return True
        return False

    def guards(self, node: cst.CSTNode) -> List[Tuple[cst.CSTNode, Set[Atom]]]:
        """The `if`s around `node` (innermost first) with what holds inside the branch taken."""
        found = self._guards.get(node)
        if found is not None:
            return found
        found = []
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                break
            if type(ancestor) in (cst.If, cst.IfExp):
                if child is ancestor.body:
                    found.append((ancestor, self.atoms(ancestor.test, True)))
                elif child is ancestor.orelse:
                    found.append((ancestor, self.atoms(ancestor.test, False)))
            child = ancestor
        self._guards[node] = found
        return found

    def atoms(self, test: cst.BaseExpression, holds: bool) -> Set[Atom]:
        """What is sure when `test` evaluates to `holds`: every conjunct of a true `and`
        chain, the negation of a false single comparison."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            return self.atoms(test.expression, not holds)
        if type(test) is cst.BooleanOperation:
            conjunction = type(test.operator) is cst.And
            if conjunction == holds:  # a true `and`, or a false `or`: both sides are sure
                return self.atoms(test.left, holds) | self.atoms(test.right, holds)
            return set()
        atom = self._atom(test)
        if atom is None:
            return set()
        if holds:
            return {atom}
        return {_negate(atom)}

    def _atom(self, test: cst.BaseExpression) -> Optional[Atom]:
        if type(test) in (cst.Name, cst.Attribute):
            text = self._subject(test)
            return (text, "true", "") if text is not None else None
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            target = test.comparisons[0]
            subject = self._subject(test.left)
            constant = _constant(self.ctx, target.comparator)
            if subject is None or constant is None:
                return None
            if type(target.operator) in (cst.Equal, cst.Is):
                return (subject, "==", constant)
            if type(target.operator) in (cst.NotEqual, cst.IsNot):
                return (subject, "!=", constant)
        return None

    def _subject(self, expr: cst.CSTNode) -> Optional[str]:
        """A name or attribute chain (no calls, no subscripts)."""
        node = expr
        while type(node) is cst.Attribute:
            node = node.value
        if type(node) is not cst.Name:
            return None
        return self.ctx.code(expr)

    def _sibling_branches(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        a_path = {}
        child = a
        for ancestor in self.ctx.ancestors(a):
            a_path[ancestor] = child
            child = ancestor
        child = b
        for ancestor in self.ctx.ancestors(b):
            if ancestor in a_path:
                if type(ancestor) in (cst.If, cst.IfExp):
                    side_a, side_b = a_path[ancestor], child
                    branches = (ancestor.body, ancestor.orelse)
                    return side_a is not side_b and side_a in branches and side_b in branches
                return False
            child = ancestor
        return False

    def _reassigned(self, subject: str, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Is `subject` assigned between `a` and `b` in their function (or module)?"""
        index = self.ctx.tree.index
        low, high = sorted((index.get(a, 0), index.get(b, 0)))
        scope = self._scope(a)
        if scope is not self._scope(b):
            return False  # module constants read in two functions: assignments are elsewhere
        for node in descendants(scope):
            if type(node) not in (cst.Assign, cst.AugAssign, cst.AnnAssign):
                continue
            if not low < index.get(node, low) < high:
                continue
            if type(node) is cst.Assign:
                targets = [t.target for t in node.targets]
            else:
                targets = [node.target]  # type: ignore[attr-defined]
            if any(self.ctx.code(t) == subject for t in targets):
                return True
        return False

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda):
                return ancestor
        return self.ctx.module


def _constant(ctx, node: cst.CSTNode) -> Optional[str]:
    """The constant's value, spelled one way (`'a'` and `"a"`, `-1` and `- 1` compare equal)."""
    literal = type(node) in _CONSTANTS or (
        type(node) is cst.UnaryOperation
        and type(node.operator) is cst.Minus
        and type(node.expression) in (cst.Integer, cst.Float)
    ) or (type(node) is cst.Name and node.value in ("None", "True", "False"))
    if not literal:
        return None
    try:
        value = ast.literal_eval(ctx.code(node).strip())
    except (ValueError, SyntaxError):
        return None
    if type(value) in (int, float):
        value = float(value)  # `n == 1` and `n == 1.0` test the same value
    return repr(value)


def _negate(atom: Atom) -> Atom:
    subject, relation, constant = atom
    opposite = {"==": "!=", "!=": "==", "true": "false", "false": "true"}[relation]
    return (subject, opposite, constant)


def _contradict(x: Atom, y: Atom) -> bool:
    if x[0] != y[0]:
        return False
    relations = {x[1], y[1]}
    if relations == {"true", "false"}:
        return True
    if relations == {"==", "!="}:
        return x[2] == y[2]
    if relations == {"=="}:
        return x[2] != y[2]
    return False
