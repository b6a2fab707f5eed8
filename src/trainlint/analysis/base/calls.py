"""Small, exact readers of call sites: arguments by position or keyword, method calls, literals."""

from __future__ import annotations

from ast import literal_eval
from functools import lru_cache
from typing import List, Optional, Tuple, Union

import libcst as cst


def positional(call: cst.Call, index: int) -> Optional[cst.BaseExpression]:
    """The index-th positional argument (None if absent or hidden behind *args)."""
    seen = 0
    for arg in call.args:
        if arg.keyword is not None or arg.star == "**":
            continue
        if arg.star == "*":
            return None
        if seen == index:
            return arg.value
        seen += 1
    return None


def string_value(node: Union[cst.SimpleString, cst.ConcatenatedString]) -> object:
    """`node.evaluated_value`, remembered by the literal's text for plain strings (libcst runs
    `ast.literal_eval`, a compile, on every call; analyses read the same strings again and
    again)."""
    if type(node) is cst.SimpleString:
        return _literal(node.value)
    return node.evaluated_value


@lru_cache(maxsize=4096)
def string_literal(node: Optional[cst.CSTNode]) -> Optional[str]:
    """The text of a string literal (`"cuda:0"`, `"a" "b"`); None for anything else, bytes too."""
    if type(node) is cst.SimpleString or type(node) is cst.ConcatenatedString:
        value = string_value(node)
        return value if isinstance(value, str) else None
    return None


def _literal(text: str) -> Union[str, bytes]:
    return literal_eval(text)


def keyword(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def argument(call: cst.Call, index: int, name: str) -> Optional[cst.BaseExpression]:
    """An argument that may be given by position or keyword."""
    found = keyword(call, name)
    return found if found is not None else positional(call, index)


def arg_node(call: cst.Call, index: int, name: str) -> Optional[cst.Arg]:
    """The `Arg` node (not just its value) of an argument given by position or keyword."""
    seen = 0
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value == name:
                return arg
            continue
        if arg.star:
            return None
        if seen == index:
            return arg
        seen += 1
    return None


def has_star_args(call: cst.Call) -> bool:
    return any(arg.star for arg in call.args)


def method_call(node: cst.CSTNode, *names: str) -> Optional[Tuple[cst.BaseExpression, str]]:
    """For `x.name(...)` with name in `names`: (x, name); else None."""
    if type(node) is cst.Call and type(node.func) is cst.Attribute:
        attr = node.func.attr.value
        if not names or attr in names:
            return node.func.value, attr
    return None


def is_true(node: Optional[cst.CSTNode]) -> bool:
    return type(node) is cst.Name and node.value == "True"


def is_false(node: Optional[cst.CSTNode]) -> bool:
    return type(node) is cst.Name and node.value == "False"


def is_none(node: Optional[cst.CSTNode]) -> bool:
    return type(node) is cst.Name and node.value == "None"


def literal_truth(node: Optional[cst.CSTNode]) -> Optional[bool]:
    """The truth of a literal flag (`True`, `False`, `None`, `0`, `1`); None for anything else."""
    if type(node) is cst.Name and node.value in ("True", "False", "None"):
        return node.value == "True"
    if type(node) is cst.Integer:
        return node.evaluated_value != 0
    return None


def int_literal(node: Optional[cst.CSTNode]) -> Optional[int]:
    """The value of an integer literal, negative ones included (`3`, `-1`, `0x10`); None for
    anything else."""
    if type(node) is cst.Integer:
        return int(node.evaluated_value)
    if (
        type(node) is cst.UnaryOperation
        and type(node.operator) is cst.Minus
        and type(node.expression) is cst.Integer
    ):
        return -int(node.expression.evaluated_value)
    return None


def int_list(node: Optional[cst.CSTNode]) -> Optional[List[int]]:
    """[1, 2] / (1, 2) of integer literals -> [1, 2]; anything else -> None."""
    if not isinstance(node, (cst.List, cst.Tuple)):
        return None
    out = []
    for element in node.elements:
        if type(element.value) is not cst.Integer:
            return None
        out.append(int(element.value.value, 0))
    return out


def needs_parentheses(expr: cst.BaseExpression) -> bool:
    """Would `expr.attr` bind wrongly without parentheses around `expr`?"""
    if expr.lpar:
        return False
    if type(expr) is cst.Tuple:
        return True  # `a, b` without parentheses
    return type(expr) not in (
        cst.Name,
        cst.Attribute,
        cst.Call,
        cst.Subscript,
        cst.List,
        cst.Dict,
        cst.Set,
        cst.ListComp,
        cst.SetComp,
        cst.DictComp,
        cst.GeneratorExp,
        cst.SimpleString,
        cst.FormattedString,
    )
