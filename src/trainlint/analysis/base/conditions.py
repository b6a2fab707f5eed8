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

`settled(test, at)` decides a branch from what the code establishes before it runs: a flag a
helper receives as a literal (`self.run_epoch(cross_valid=True)`, `run_epoch(..., mode="eval")`,
or a literal default nothing overrides), or a constant
assigned at the top level of the function (or module) that holds `at`, before the statement
that holds it (`self.is_test = False` at the start of `train()`), and assigned nowhere in that
statement or in the same-file functions it calls (`self.is_test = True` only in `test()`, which
the loop never calls). An attribute fact also needs every call in that statement that could
reach the object (a method of it, a call handed it) to be one the call graph resolves.

`last_iteration(branch)` recognises the `if` that ends a loop's body and runs only on its last
iteration (`if i == len(loader) - 1:` in `for i, batch in enumerate(loader)`): the step flows
treat it as ending with `break`. `ends_outer_loop(brk)` recognises a `break` that ends the
`while` around its loop too: the flag that `while` needs true is set to False just before it
(`keep_training = False; break`), and nothing else in that `while` sets it again.

`switched_off(ctx, node)` recognises code that no run executes: the body of an `if` whose
test is a falsy literal (`if False:`, `if 0:`) or compares `__name__` with a string that is not
`"__main__"` (`if __name__ == 'x__main__':`, a demo block the author turned off), or a `while
False:` loop. Nothing reported there can happen, and a move written there moves nothing. A
name bound to `False` (`distributed = False`, `use_gpu = False` at the top of a script) is a
setting its users flip, not dead code: the code it guards counts.
"""

from __future__ import annotations

import ast
from typing import Callable, Dict, List, Optional, Set, Tuple

import libcst as cst

from ...walk import own_nodes
from .calls import int_literal
from .callgraph import CallGraph
from .names import dotted_name
from .nodes import always_leaves_function, descendants, is_name
from .. import Analysis

# (expression text, relation, constant text); relation "==", "!=", "true", "false"
Atom = Tuple[str, str, str]
_CONSTANTS = (cst.Integer, cst.Float, cst.SimpleString)
_LITERAL_NAMES = frozenset({"True", "False", "None"})


class Conditions(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._guards: Dict[cst.CSTNode, List[Tuple[cst.CSTNode, Set[Atom]]]] = {}
        self._facts: Dict[cst.CSTNode, Dict[str, str]] = {}

    # -- what the code before a statement establishes -------------------------------------------

    def settled(
        self,
        test: cst.BaseExpression,
        at: cst.CSTNode,
        rename: Optional[Callable[[str], Optional[str]]] = None,
    ) -> Optional[bool]:
        """The value `test` must have when it is evaluated on behalf of `at` (a statement, or
        the call in the analysed code that leads to a helper holding `test`; `rename` turns the
        helper's names into the caller's), or None when the code before does not settle it."""
        facts = self.facts_at(at)

        def value_of(subject: str) -> Optional[str]:
            name = rename(subject) if rename is not None else subject
            if name is None:
                return None
            # a helper's flag the call passes as a literal: `run_epoch(cross_valid=True)`,
            # `run_epoch(..., mode="eval")`
            return _literal_value(name) or facts.get(name)

        return self._evaluate(test, value_of)

    def _evaluate(
        self, test: cst.BaseExpression, value_of: Callable[[str], Optional[str]]
    ) -> Optional[bool]:
        """`test`'s value from its subjects' known constants: `not`, `and` and `or` combine
        what their parts settle (`mode == "train" or mode == "train+log"` is False for
        `mode="eval"`; one unknown side leaves an `or` open unless the other is True)."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._evaluate(test.expression, value_of)
            return None if inner is None else not inner
        if type(test) is cst.BooleanOperation:
            left = self._evaluate(test.left, value_of)
            right = self._evaluate(test.right, value_of)
            decisive = type(test.operator) is cst.Or  # True decides an `or`, False an `and`
            if left is decisive or right is decisive:
                return decisive
            if left is not None and right is not None:
                return not decisive
            return None
        atom = self._atom(test)
        if atom is None:
            return None
        value = value_of(atom[0])
        return None if value is None else _holds(atom, value)

    def facts_at(self, at: cst.CSTNode) -> Dict[str, str]:
        """Subject -> constant, for the constants assigned before the top-level statement that
        holds `at` and left alone inside it (see the module docstring)."""
        top, scope_body = self._top_statement(at)
        if top is None:
            return {}
        found = self._facts.get(top)
        if found is not None:
            return found
        facts: Dict[str, str] = {}
        for statement in scope_body:
            if statement is top:
                break
            for subject in self._assigned(statement):
                facts.pop(subject, None)
            fact = self._constant_assignment(statement)
            if fact is not None:
                facts[fact[0]] = fact[1]
        if facts:
            changed, opaque_roots = self._changed_within(top)
            facts = {
                subject: value
                for subject, value in facts.items()
                if "*" not in opaque_roots
                and subject not in changed
                and subject.split(".")[0] not in opaque_roots
            }
        self._facts[top] = facts
        return facts

    def _top_statement(self, at: cst.CSTNode):
        """The statement of the function's (or module's) own body that holds `at`, and that
        body."""
        child = at
        for ancestor in self.ctx.ancestors(at):
            if type(ancestor) is cst.Module:
                return child, ancestor.body
            if type(ancestor) is cst.IndentedBlock and type(self.ctx.parent(ancestor)) is (
                cst.FunctionDef
            ):
                return child, ancestor.body
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return None, ()  # a one-line def, or a class body: nothing settled
            child = ancestor
        return None, ()

    def _constant_assignment(self, statement: cst.CSTNode) -> Optional[Tuple[str, str]]:
        if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
            return None
        small = statement.body[0]
        if type(small) is cst.Assign and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
        elif type(small) is cst.AnnAssign and small.value is not None:
            target, value = small.target, small.value
        else:
            return None
        subject = self._subject(target)
        constant = _constant(self.ctx, value)
        if subject is None or constant is None:
            return None
        return subject, constant

    def _assigned(self, node: cst.CSTNode) -> Set[str]:
        """The names and attribute chains `node` may assign (any form of binding)."""
        out: Set[str] = set()
        for child in own_nodes(node):
            targets: List[cst.CSTNode] = []
            if type(child) is cst.Assign:
                targets = [t.target for t in child.targets]
            elif type(child) in (cst.AnnAssign, cst.AugAssign):
                targets = [child.target]  # type: ignore[attr-defined]
            elif type(child) in (cst.For, cst.CompFor):
                targets = [child.target]  # type: ignore[attr-defined]
            elif type(child) is cst.NamedExpr:
                targets = [child.target]
            elif type(child) is cst.AsName:
                targets = [child.name]
            elif type(child) in (cst.Global, cst.Nonlocal, cst.Del):
                out.add("*")  # rebinding through declarations: give up on names
            while targets:
                target = targets.pop()
                if type(target) in (cst.Tuple, cst.List):
                    targets.extend(e.value for e in target.elements)  # type: ignore[attr-defined]
                elif type(target) is cst.StarredElement:
                    targets.append(target.value)
                elif type(target) in (cst.Name, cst.Attribute):
                    text = self._subject(target)
                    if text is not None:
                        out.add(text)
        return out

    def _changed_within(self, top: cst.CSTNode) -> Tuple[Set[str], Set[str]]:
        """What `top` and the same-file functions it calls (at any depth) may assign, and the
        roots of objects it hands to, or calls methods of, without the call graph knowing
        the callee (anything of theirs may change); "*" among the roots: anything may."""
        callgraph: CallGraph = self.ctx.analysis(CallGraph)
        changed: Set[str] = set()
        opaque: Set[str] = set()
        todo: List[cst.CSTNode] = [top]
        seen: Set[cst.CSTNode] = set()
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            changed |= self._assigned(node)
            for child in own_nodes(node):
                if type(child) is not cst.Call:
                    continue
                target = callgraph.callee(child)
                if target is not None:
                    todo.append(target.body)
                    continue
                func = child.func
                if type(func) is cst.Name and func.value in ("setattr", "delattr", "vars"):
                    opaque.add("*")
                if type(func) is cst.Attribute and type(func.value) is cst.Name:
                    # `self.dqn(x)` runs a submodule held in an attribute, not a method of
                    # `self`: it cannot reassign `self`'s flags
                    if callgraph.member_kind(func) != "attribute":
                        opaque.add(func.value.value)
                for arg in child.args:
                    if type(arg.value) is cst.Name:
                        opaque.add(arg.value.value)
        if "*" in changed:
            opaque.add("*")  # a declaration may rebind any name: nothing is settled
        return changed, opaque

    # -- the last iteration of a loop --------------------------------------------------------

    def last_iteration(self, branch: cst.If) -> bool:
        """Is `branch` the last statement of a `for` loop's body, taken only on the loop's last
        iteration? `for i, (x, y) in enumerate(loader): ... if i == len(loader) - 1:` (also
        `i + 1 == len(loader)`, and the loop over `tqdm(steps)` with `steps =
        list(enumerate(loader))`). After such a branch the loop ends, exactly as if it ended
        with `break`: what it switches (`model.eval()` before a validation) never meets the
        loop's next iteration. A loop with an `else` is left alone (a `break` would skip it)."""
        block = self.ctx.parent(branch)
        loop = self.ctx.parent(block) if block is not None else None
        if type(loop) is not cst.For or loop.orelse is not None or loop.body is not block:
            return False
        if type(block) is not cst.IndentedBlock or block.body[-1] is not branch:
            return False
        target = loop.target
        if type(target) not in (cst.Tuple, cst.List) or len(target.elements) < 2:  # type: ignore
            return False
        index = target.elements[0].value  # type: ignore[attr-defined]
        if type(index) is not cst.Name:
            return False
        sequences = self._counted_sequences(loop.iter)
        if not sequences or self._rebound_in(index.value, loop.body):
            return False
        test = branch.test
        if type(test) is not cst.Comparison or len(test.comparisons) != 1:
            return False
        if type(test.comparisons[0].operator) is not cst.Equal:
            return False
        sides = (test.left, test.comparisons[0].comparator)
        for mine, other in (sides, sides[::-1]):
            if is_name(mine, index.value) and _minus_one(other):
                length = other.left  # type: ignore[attr-defined]
            elif _plus_one(mine, index.value):
                length = other
            else:
                continue
            if _length_of(length) in sequences:
                return True
        return False

    def ends_outer_loop(self, brk: cst.Break) -> bool:
        """Does `brk` end the `while` around its loop as well? `se_continua = False` right
        before it, with `while n < limit and se_continua:` around the loop it leaves, and
        nothing in that `while` setting the flag again outside the inner loop: the early stop
        of a step-counted training loop, which ends training, not just the epoch."""
        line = self.ctx.parent(brk)
        if type(line) is not cst.SimpleStatementLine:
            return False
        flag = self._cleared_before(brk, line)
        if flag is None:
            return False
        inner: Optional[cst.CSTNode] = None
        outer: Optional[cst.CSTNode] = None
        for ancestor in self.ctx.ancestors(line):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
            if type(ancestor) in (cst.For, cst.While):
                if inner is None:
                    inner = ancestor
                else:
                    outer = ancestor
                    break
        if type(outer) is not cst.While or outer.orelse is not None or inner is None:
            return False
        if flag not in self._required_by(outer.test):
            return False
        inside = {id(node) for node in descendants(inner)}
        for node in descendants(outer.body):
            if id(node) in inside:
                continue  # after the break nothing in the inner loop runs again
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
                if self.ctx.code(node.target) != flag:
                    continue
                statement = self.ctx.parent(node) if type(node) is cst.AssignTarget else node
                value = getattr(statement, "value", None)
                if value is None or not is_name(value, "False"):
                    return False  # set again before the test: training may go on
        return True

    def _cleared_before(self, brk: cst.Break, line: cst.SimpleStatementLine) -> Optional[str]:
        """The flag (`name` or `self.name` text) set to False by the statement just before
        `brk`, on its line (`stop = False; break`) or the line above in its block."""
        smalls = list(line.body)
        position = next(i for i, s in enumerate(smalls) if s is brk)
        if position > 0:
            before: Optional[cst.CSTNode] = smalls[position - 1]
        else:
            block = self.ctx.parent(line)
            statements = list(getattr(block, "body", ()))
            index = next((i for i, s in enumerate(statements) if s is line), 0)
            previous = statements[index - 1] if index > 0 else None
            if type(previous) is not cst.SimpleStatementLine:
                return None
            before = previous.body[-1]
        if type(before) is not cst.Assign or len(before.targets) != 1:
            return None
        target = before.targets[0].target
        if type(target) not in (cst.Name, cst.Attribute) or not is_name(before.value, "False"):
            return None
        return self.ctx.code(target)

    def _required_by(self, test: cst.BaseExpression) -> Set[str]:
        """The flags a loop test needs true: the test itself, or the operands of its `and`."""
        if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
            return self._required_by(test.left) | self._required_by(test.right)
        if type(test) in (cst.Name, cst.Attribute):
            return {self.ctx.code(test)}
        return set()

    def _counted_sequences(self, iterable: cst.BaseExpression) -> Set[str]:
        """The texts whose `len()` is the number of iterations of a loop over `iterable`, when
        an `enumerate(...)` (counting from 0) gives the loop its index; else empty."""
        texts: Set[str] = set()
        counted = False
        expr: cst.CSTNode = iterable
        for _ in range(8):
            text = dotted_name(expr)
            if text:
                texts.add(text)
            if type(expr) is cst.Call:
                leaf = (dotted_name(expr.func) or "").split(".")[-1]
                if leaf not in _LENGTH_KEEPING or len(expr.args) != 1 or expr.args[0].keyword:
                    break  # (`enumerate(x, 1)` counts from 1)
                counted = counted or leaf == "enumerate"
                expr = expr.args[0].value
                continue
            if type(expr) is cst.Name:
                bindings = self.ctx.scopes.lookup(expr.value, expr)
                if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].value is None:
                    break
                expr = bindings[0].value
                continue
            break
        return texts if counted else set()

    def _rebound_in(self, name: str, body: cst.CSTNode) -> bool:
        for node in descendants(body):
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
                if is_name(node.target, name):
                    return True
        return False

    def exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Can `a` and `b` never both run in one execution?"""
        if self._sibling_branches(a, b) or self._left_before(a, b) or self._left_before(b, a):
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

    def runs_whenever(self, a: cst.CSTNode, b: cst.CSTNode, past_raise: bool = False) -> bool:
        """Does `b` run whenever `a` has run? `b` comes after `a` in the same function, every
        `if` around `b` that is not around `a` too tests the same text (no call in it) on the
        same side as an `if` around `a`, with nothing it reads assigned in between, and nothing
        between them can leave (return, raise, break, continue) or skip `b` (a loop or `try`
        around `b` only): `if self.decoder is not None: self.decoder.eval()` ... `if
        self.decoder is not None: self.decoder.train()`. With `past_raise`, a `raise` between
        them does not count: the question is then what runs after both, which a raise skips
        too (`raise ValueError("loss is nan")` in a validation that restores the mode)."""
        index = self.ctx.tree.index
        at_a, at_b = index.get(a, -1), index.get(b, -1)
        scope = self._scope(a)
        if not 0 <= at_a < at_b or scope is not self._scope(b):
            return False
        around_a = {id(n) for n in self.ctx.ancestors(a)}
        sides_a = self._sides(a)
        for ancestor in self.ctx.ancestors(b):
            if ancestor is scope or id(ancestor) in around_a:
                break
            if type(ancestor) in (cst.For, cst.While, cst.Try, cst.TryStar, cst.Match):
                return False  # a loop may run no time, a handler may not run
        for branch, test, holds in self.branch_tests(b):
            if id(branch) in around_a:
                continue
            if not self._tested_alike(test, holds, sides_a, a, b):
                return False
        for node in descendants(scope):
            if type(node) in (cst.Return, cst.Raise, cst.Break, cst.Continue):
                if past_raise and type(node) is cst.Raise:
                    continue
                if at_a < index.get(node, -1) < at_b:
                    return False
        return True

    def runs_again_before(self, a: cst.CSTNode, b: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """Does `b`, written before `a` in `loop`'s body, run on the loop's next iteration
        whenever `a` has run? Every `if` around `b` inside the loop tests the same text (no call
        in it) on the same side as an `if` around `a`, nothing it reads is assigned anywhere in
        the loop, `b` sits in no loop, `try` or `match` of its own there, `a` in no loop of its
        own (whose next round would come first), and nothing from the top of the body up to `b`
        can leave or skip it: `if args.train_backbone:
        backbone.train()` at the top of each epoch, `if args.train_backbone: backbone.eval()`
        before its validation."""
        body = getattr(loop, "body", None)
        if body is None:
            return False
        index = self.ctx.tree.index
        start, at_a, at_b = index.get(body, -1), index.get(a, -1), index.get(b, -1)
        if not 0 <= start < at_b < at_a or self._scope(a) is not self._scope(b):
            return False
        for ancestor in self.ctx.ancestors(a):
            if ancestor is body:
                break
            if type(ancestor) in (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False  # a nested loop runs `a` again before the next iteration of this one
        else:
            return False
        for ancestor in self.ctx.ancestors(b):
            if ancestor is body:
                break
            if type(ancestor) in (cst.For, cst.While, cst.Try, cst.TryStar, cst.Match,
                                  cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
        else:
            return False
        inside = list(descendants(loop))
        last = inside[-1] if inside else loop
        sides_a = self._sides(a)
        for branch, test, holds in self.branch_tests(b):
            if not any(ancestor is body for ancestor in self.ctx.ancestors(branch)):
                break  # outside the loop: the same on every iteration
            if not self._tested_alike(test, holds, sides_a, loop, last):
                return False
        return not any(
            type(node) in (cst.Return, cst.Raise, cst.Break, cst.Continue)
            and start < index.get(node, -1) < at_b
            for node in inside
        )

    def _sides(self, node: cst.CSTNode) -> Set[Tuple[str, bool]]:
        """The tests of the `if`s around `node` (as text) with the side it sits on."""
        return {
            (" ".join(self.ctx.code(test).split()), holds)
            for _, test, holds in self.branch_tests(node)
        }

    def _tested_alike(
        self,
        test: cst.BaseExpression,
        holds: bool,
        sides: Set[Tuple[str, bool]],
        start: cst.CSTNode,
        end: cst.CSTNode,
    ) -> bool:
        """Is this test of an `if` around one site also around the other on the same side
        (`sides`), with no call in it and nothing it reads assigned between `start` and `end`?"""
        if any(type(n) is cst.Call for n in descendants(test)) or type(test) is cst.Call:
            return False
        if (" ".join(self.ctx.code(test).split()), holds) not in sides:
            return False
        return not any(
            type(node) in (cst.Name, cst.Attribute)
            and self._reassigned(self.ctx.code(node), start, end)
            for node in [test, *descendants(test)]
        )

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

    def branch_tests(
        self, node: cst.CSTNode
    ) -> List[Tuple[cst.CSTNode, cst.BaseExpression, bool]]:
        """The `if`s around `node` (innermost first), each with its test, `not` taken off, and
        whether that holds where `node` runs: `args.cuda` is False in the `else` of `if
        args.cuda:` and in the body of `if not args.cuda:`."""
        found: List[Tuple[cst.CSTNode, cst.BaseExpression, bool]] = []
        for branch, _ in self.guards(node):
            assert isinstance(branch, (cst.If, cst.IfExp))
            test, holds = branch.test, True
            orelse = branch.orelse
            if orelse is not None and any(a is orelse for a in self.ctx.ancestors(node)):
                holds = False
            while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                test, holds = test.expression, not holds
            found.append((branch, test, holds))
        return found

    def instance_tests(self, node: cst.CSTNode) -> List[Tuple[str, cst.BaseExpression, bool]]:
        """`isinstance(subject, cls)` tests of the `if`s around `node` (innermost first), as
        (subject text, cls, whether it holds where `node` runs): in the `else` of
        `if isinstance(net, nn.Module):` the net is no module."""
        found = []
        for _, test, holds in self.branch_tests(node):
            if (
                type(test) is cst.Call
                and type(test.func) is cst.Name
                and test.func.value == "isinstance"
                and len(test.args) == 2
            ):
                subject = self._subject(test.args[0].value)
                if subject is not None:
                    found.append((subject, test.args[1].value, holds))
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

    def _left_before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Is `a` in an `if` arm that always returns or raises, and `b` after that `if` in the
        same function? `if args.distributed: torch.cuda.set_device(gpu); return DDP(model)`
        ... `return nn.DataParallel(model).cuda()`: the second return runs only where the
        first arm did not."""
        index = self.ctx.tree.index
        if not 0 <= index.get(a, -1) < index.get(b, -1) or self._scope(a) is not self._scope(b):
            return False
        if any(type(node) in (cst.Try, cst.TryStar) for node in self.ctx.ancestors(a)):
            return False  # a `finally` may still run `b` after the return
        around_b = {id(node) for node in self.ctx.ancestors(b)}
        child = a
        for ancestor in self.ctx.ancestors(a):
            if id(ancestor) in around_b:
                return False  # reached a block around both without leaving
            if type(ancestor) is cst.If and child is ancestor.body:
                if always_leaves_function(ancestor.body):
                    return True
            child = ancestor
        return False

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

    def still_holds(self, subject: str, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Does what `a` did to `subject` (`model.requires_grad_(False)`) still hold at `b`?
        `a` comes first in the same function (or module, or notebook), and nothing assigns
        `subject` between them (`model = Net()` would be another object). A path that skips
        `a` is not ruled out: callers use this where `a` runs unconditionally or says only
        "may"."""
        index = self.ctx.tree.index
        if not 0 <= index.get(a, -1) < index.get(b, -1) or self._scope(a) is not self._scope(b):
            return False
        return not self._reassigned(subject, a, b)

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


def is_constant(node: cst.CSTNode) -> bool:
    """A constant a flag can hold: `True`/`False`/`None`, a string, a (negative) number."""
    return type(node) in _CONSTANTS or (
        type(node) is cst.UnaryOperation
        and type(node.operator) is cst.Minus
        and type(node.expression) in (cst.Integer, cst.Float)
    ) or (type(node) is cst.Name and node.value in _LITERAL_NAMES)


def _constant(ctx, node: cst.CSTNode) -> Optional[str]:
    """The constant's value, spelled one way (`'a'` and `"a"`, `-1` and `- 1` compare equal)."""
    if not is_constant(node):
        return None
    try:
        value = ast.literal_eval(ctx.code(node).strip())
    except (ValueError, SyntaxError):
        return None
    if type(value) in (int, float):
        value = float(value)  # `n == 1` and `n == 1.0` test the same value
    return repr(value)


def _literal_value(text: str) -> Optional[str]:
    """`True`, `None`, `"eval"`, `-1`: the constant the text spells, as `_constant` spells it
    (None when the text is not a constant)."""
    if text in _LITERAL_NAMES:
        return text
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if type(value) not in (str, int, float):
        return None
    return repr(float(value) if type(value) is int else value)


def _holds(atom: Atom, fact: str) -> Optional[bool]:
    """Is `atom` true when its subject holds the constant `fact` (None: cannot tell)?"""
    try:
        value = ast.literal_eval(fact)
    except (ValueError, SyntaxError):
        return None
    _, relation, constant = atom
    if relation == "true":
        return bool(value)
    if relation == "false":
        return not value
    try:
        other = ast.literal_eval(constant)
    except (ValueError, SyntaxError):
        return None
    if relation == "==":
        return other == value
    return other != value


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


# Calls whose result has as many items as their one argument.
_LENGTH_KEEPING = frozenset({"enumerate", "tqdm", "list", "tuple", "iter", "progress_bar"})


def _is_one(expr: cst.CSTNode) -> bool:
    return type(expr) is cst.Integer and expr.value == "1"


def _minus_one(expr: cst.CSTNode) -> bool:
    """`<something> - 1`."""
    return (
        type(expr) is cst.BinaryOperation
        and type(expr.operator) is cst.Subtract
        and _is_one(expr.right)
    )


def _plus_one(expr: cst.CSTNode, name: str) -> bool:
    """`name + 1` or `1 + name`."""
    return (
        type(expr) is cst.BinaryOperation
        and type(expr.operator) is cst.Add
        and (
            (is_name(expr.left, name) and _is_one(expr.right))
            or (_is_one(expr.left) and is_name(expr.right, name))
        )
    )


def _length_of(expr: cst.CSTNode) -> Optional[str]:
    """`len(x)`: the text of `x`."""
    if (
        type(expr) is cst.Call
        and is_name(expr.func, "len")
        and len(expr.args) == 1
        and not expr.args[0].keyword
    ):
        return dotted_name(expr.args[0].value)
    return None


def switched_off(ctx, node: cst.CSTNode) -> bool:
    """Is `node` in code that no run executes (see the module docstring)?"""
    child = node
    for ancestor in ctx.ancestors(node):
        if type(ancestor) in (cst.If, cst.While) and child is ancestor.body:
            if _never_true(ancestor.test):
                return True
        child = ancestor
    return False


def _never_true(test: cst.BaseExpression) -> bool:
    if type(test) is cst.Name:
        return test.value in ("False", "None")
    if type(test) is cst.Integer:
        return test.value == "0"
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if type(target.operator) is not cst.Equal:
            return False
        sides = (test.left, target.comparator)
        names = [side for side in sides if type(side) is cst.Name and side.value == "__name__"]
        strings = [side for side in sides if type(side) is cst.SimpleString]
        if len(names) == 1 and len(strings) == 1:
            return strings[0].evaluated_value != "__main__"
    return False


# Builtins whose result is empty exactly when their first argument is.
_SAME_LENGTH_BUILTINS = frozenset({"enumerate", "reversed", "sorted", "list", "tuple"})
_MAX_NEVER_EMPTY_DEPTH = 4


def never_empty(scopes, iterable: cst.BaseExpression, depth: int = 0) -> bool:
    """Can the analysis show that a `for` over `iterable` runs its body at least once? A
    literal list or tuple with an element that is not starred, `range` of integer literals
    that is not empty, `zip`/`enumerate`/`sorted`/... of such, a comprehension without `if`
    over such, or a name every binding of which is one (`optimizers = [opt_g, opt_d]`).
    Anything else may be empty: no."""
    if depth > _MAX_NEVER_EMPTY_DEPTH:
        return False
    if isinstance(iterable, (cst.List, cst.Tuple, cst.Set)):
        return any(type(e) is not cst.StarredElement for e in iterable.elements)
    if isinstance(iterable, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        clause = iterable.for_in
        return (
            clause.inner_for_in is None
            and not clause.ifs
            and never_empty(scopes, clause.iter, depth + 1)
        )
    if isinstance(iterable, cst.Name):
        bindings = scopes.lookup(iterable.value, iterable)
        return bool(bindings) and all(
            b.kind == "assign"
            and b.value is not None
            and never_empty(scopes, b.value, depth + 1)
            for b in bindings
        )
    if not isinstance(iterable, cst.Call) or not isinstance(iterable.func, cst.Name):
        return False
    name = iterable.func.value
    if scopes.lookup(name, iterable) or any(arg.star or arg.keyword for arg in iterable.args):
        return False  # a function of the file's own, or arguments it cannot see
    values = [arg.value for arg in iterable.args]
    if name == "range":
        numbers = [n for n in (int_literal(v) for v in values) if n is not None]
        if not numbers or len(numbers) != len(values) or len(numbers) > 3:
            return False
        bounds = [0, numbers[0], 1] if len(numbers) == 1 else (numbers + [1])[:3]
        return bounds[2] != 0 and len(range(*bounds)) > 0
    if name == "zip":
        return bool(values) and all(never_empty(scopes, v, depth + 1) for v in values)
    if name in _SAME_LENGTH_BUILTINS:
        return bool(values) and never_empty(scopes, values[0], depth + 1)
    return False
