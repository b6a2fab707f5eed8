"""The same-file call graph: which function of this file a call runs, which calls run a
function, and every call a block makes, through the functions of this file it calls.

A plain call (`helper(...)`) is resolved through the scopes: the function its name is bound to
where it is called (an imported or reassigned name is not this file's function). A method call
on `self` or `cls` (`self.helper(...)`) runs the method of that name of the class it is written
in, or else the only function of the file with that name (a mixin's method); with several and
none in the class, it is not resolved. Functions passed around as values are not followed.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from ...walk import own_nodes
from .scopes import Scopes
from .. import Analysis


Chain = Tuple[cst.FunctionDef, ...]


class CallGraph(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.scopes: Scopes = ctx.analysis(Scopes)
        self._functions: Optional[Dict[str, List[cst.FunctionDef]]] = None
        self._callers: Optional[Dict[cst.FunctionDef, List[cst.Call]]] = None

    def functions_named(self, name: str) -> List[cst.FunctionDef]:
        """Every function of this file (at any depth, methods too) with this name."""
        if self._functions is None:
            table: Dict[str, List[cst.FunctionDef]] = {}
            for function in self.ctx.nodes(cst.FunctionDef):
                table.setdefault(function.name.value, []).append(function)
            self._functions = table
        return self._functions.get(name, [])

    def function_for(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The function of this file a callee expression names (`helper`, `self.helper`)."""
        if type(func) is cst.Name:
            for binding in self.scopes.lookup(func.value, func):
                if type(binding.node) is cst.FunctionDef:
                    return binding.node
            return None
        if (
            type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value in ("self", "cls")
        ):
            name = func.attr.value
            own = self._method_of_class_around(func, name)
            if own is not None:
                return own
            candidates = self.functions_named(name)
            if len(candidates) == 1:
                return candidates[0]
        return None

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function of this file `call` runs, if it can be told."""
        return self.function_for(call.func)

    def callers(self, function: cst.FunctionDef) -> List[cst.Call]:
        """The calls of this file that run `function`."""
        if self._callers is None:
            table: Dict[cst.FunctionDef, List[cst.Call]] = {}
            for call in self.ctx.nodes(cst.Call):
                target = self.function_for(call.func)
                if target is not None:
                    table.setdefault(target, []).append(call)
            self._callers = table
        return self._callers.get(function, [])

    def calls_in(self, node: cst.CSTNode, follow: int = 2) -> List[Tuple[cst.Call, Chain]]:
        """Every call under `node`, plus those in same-file functions it calls (`follow` levels).

        Each call comes with the chain of functions it was reached through (empty when it is
        directly under `node`). Nested function and class definitions under `node` are not
        entered (their code does not run here)."""
        out: List[Tuple[cst.Call, Chain]] = []
        self._collect_calls(node, (), follow, out, set())
        return out

    def _collect_calls(
        self,
        node: cst.CSTNode,
        via: Chain,
        follow: int,
        out: List[Tuple[cst.Call, Chain]],
        seen: Set[cst.FunctionDef],
    ) -> None:
        for child in own_nodes(node):
            if child is node or type(child) is not cst.Call:
                continue
            out.append((child, via))
            if follow > 0:
                target = self.function_for(child.func)
                if target is not None and target not in seen and target not in via:
                    seen.add(target)
                    self._collect_calls(target.body, via + (target,), follow - 1, out, seen)

    def _method_of_class_around(
        self, node: cst.CSTNode, name: str
    ) -> Optional[cst.FunctionDef]:
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.ClassDef:
                body = ancestor.body
                if type(body) is cst.IndentedBlock:
                    for statement in body.body:
                        if type(statement) is cst.FunctionDef and statement.name.value == name:
                            return statement
                return None
        return None
