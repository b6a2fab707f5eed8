"""On-demand positions must equal libcst's PositionProvider for every node, and take the fast path
(ast anchors) on ordinary code."""

from __future__ import annotations


import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fixture_support import FIXTURES, REPO
from trainlint.positions import PositionIndex
from trainlint.source import Source
from trainlint.walk import Tree

TRICKY = {
    "decorators_elif_except": '''\
import torch


@torch.no_grad()
@ staticmethod
def f(x, *, y=torch.zeros(3)):
    if x:
        pass
    elif y is None:  # comment
        return 1
    else:
        return 2
    try:
        x = 1; y = 2
    except (ValueError, KeyError) as err:
        raise RuntimeError("no") from err
    finally:
        del x


class A(torch.nn.Module, metaclass=type):
    """Doc."""

    x: int = 3

    async def g(self):
        async with self.lock as l, open("f") as h:
            async for i in h:
                await l(i)
        return [j for j in range(3) if j]
''',
    "unicode_tabs_continuations": (
        "# -*- coding: utf-8 -*-\n"
        "nom = 'éèà'; dev = torch.device('cuda:1')  # ünïcode\n"
        "if True:\n"
        "\tmodel = nn.DataParallel(\n"
        "\t\tmodel\n"
        "\t).to(dev)\n"
        "total = 1 + \\\n"
        "    2\n"
        "s = '''multi\n"
        "line''' + f'{nom!r:>10}'\n"
        "lam = lambda a, b=2: (a, b)\n"
        "if x: y = 1; z = [\n"
        "    1, 2]\n"
    ),
    "match_and_walrus": (
        "def h(cmd):\n"
        "    match cmd:\n"
        "        case {'device': d} if (n := len(d)) > 0:\n"
        "            return torch.device(d)\n"
        "        case [a, *rest]:\n"
        "            return a\n"
        "        case _:\n"
        "            pass\n"
    ),
    # Where libcst's and Python's trees hold different nodes for the same text: the pairing of
    # calls, names, attributes, subscripts and literals must leave these to the regeneration.
    "pairing_differences": (
        "import os.path as osp, torch.nn\n"
        "from a.b import (c as d)\n"
        "def f(a: A, /, b: B = None, *c: C, d=True, **e: E) -> R:\n"
        "    global g\n"
        "    x = g.h(k=1, *args, key=v, **kw)[0][idx] if None else False\n"
        "    y = f'{x.y(1)!r:>{w}}' 'plain' f\"{z['k']}\" + 'a' 'b' + b'c' + 1_000 + 2.5j\n"
        "    try:\n"
        "        pass\n"
        "    except (E1, m.E2) as err:\n"
        "        raise err from None\n"
        "    with open(p) as (fh, gh), ctx:\n"
        "        del fh.attr, gh[0]\n"
        "    return lambda q, /, r=s.t: (q, r, ...)\n"
        "class K(Base, metaclass=Meta, **opts):\n"
        "    z: int = (yield)\n"
        "print((  torch.cuda  .device_count ( ) ), (x:=1))\n"
        "if a: b = 1; c = 2;  # trailing\n"
        "for i in y:\n"
        "    pass\n"
        "else:\n"
        "    z = 1 ;\n"
    ),
    "crlf": "import torch\r\nif a:\r\n    x = torch.zeros(1)\r\nelse:\r\n    x = 2\r\n",
    "no_trailing_newline": "import torch\nx = torch.ones(2)",
    "empty": "",
    "comments_only": "# just a comment\n\n# another\n",
}


def _all_python_files():
    for path in sorted(FIXTURES.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        try:
            cst.parse_module(text)
        except cst.ParserSyntaxError:  # TRL001's fixtures do not parse, by design
            continue
        yield path.relative_to(REPO).as_posix(), text
    for path in sorted((REPO / "src").rglob("*.py")):
        yield path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")
    for name, text in TRICKY.items():
        yield name, text


CASES = list(_all_python_files())


@pytest.mark.parametrize("name, text", CASES, ids=[c[0] for c in CASES])
def test_spans_equal_position_provider(name, text):
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    tree = Tree(module)
    index = PositionIndex(module, Source(path=name, text=text), tree.parent)
    nodes = [n for n in tree.order if n is not module]
    index.prepare(nodes)
    mismatches = []
    for node in nodes:
        want = expected[node]
        got = index.span(node)
        if got != (want.start.line, want.start.column, want.end.line, want.end.column):
            mismatches.append((type(node).__name__, got, want))
    assert not mismatches[:5]
    # Everything under a statement is found through its ast anchor, without the whole-module
    # fallback (module-level headers/footers have no statement and may use it).
    assert index.fallbacks == 0, f"{index.fallbacks} nodes needed the fallback"


def test_fallback_when_ast_disagrees(monkeypatch):
    text = "import torch\nx = torch.zeros(1)\n"
    module = cst.parse_module(text)
    tree = Tree(module)
    index = PositionIndex(module, Source(path="x.py", text=text), tree.parent)
    import trainlint.positions as positions

    monkeypatch.setattr(positions.ast, "parse", lambda _: (_ for _ in ()).throw(SyntaxError("x")))
    call = tree.nodes(cst.Call)[0]
    assert index.span(call) == (2, 4, 2, 18)
    assert index.fallbacks == 1


def test_positions_for_a_single_report_are_cheap():
    """One node in a large file regenerates one statement, not the module."""
    body = "".join(f"x{i} = torch.zeros({i})\n" for i in range(2000))
    text = "import torch\n" + body
    module = cst.parse_module(text)
    tree = Tree(module)
    index = PositionIndex(module, Source(path="big.py", text=text), tree.parent)
    last_call = tree.nodes(cst.Call)[-1]
    assert index.span(last_call) == (2001, 8, 2001, 25)
    assert index.fallbacks == 0


def test_common_expressions_take_pythons_positions_without_regeneration(monkeypatch):
    """Calls, names, attributes, subscripts, literals and statements of ordinary code are placed
    from Python's tree; no statement is regenerated."""
    import trainlint.positions as positions

    text = (
        "import torch\n"
        "model = torch.nn.DataParallel(model).to(devices[0])  # c\n"
        "for batch in loader:\n"
        "    out = model(batch['x'], scale=2.5, name='é')\n"
    )
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    tree = Tree(module)
    index = PositionIndex(module, Source(path="x.py", text=text), tree.parent)
    regenerated = []
    original = positions.PositionIndex._from_anchor

    def spy(self, anchor, where, targets):
        regenerated.extend(targets)
        return original(self, anchor, where, targets)

    monkeypatch.setattr(positions.PositionIndex, "_from_anchor", spy)
    kinds = (cst.Call, cst.Name, cst.Attribute, cst.Subscript, cst.SimpleString, cst.Float,
             cst.Integer, cst.Assign, cst.For)
    keywords = {id(arg.keyword) for arg in tree.nodes(cst.Arg)}
    nodes = [
        n
        for n in tree.order
        if isinstance(n, kinds)
        and id(n) not in keywords
        and not any(isinstance(a, cst.Import) for a in tree.ancestors(n))
    ]
    index.prepare(nodes)
    assert regenerated == []
    for node in nodes:
        want = expected[node]
        assert index.span(node) == (
            want.start.line, want.start.column, want.end.line, want.end.column
        ), type(node).__name__


def test_a_pairing_the_text_contradicts_is_not_used():
    """Python's node must fit the text where it says the libcst node is; when it does not (here:
    the pairing is forced onto the wrong Python call), the regeneration decides."""
    import ast

    text = "x = f(a) + g(b)\n"
    module = cst.parse_module(text)
    tree = Tree(module)
    index = PositionIndex(module, Source(path="x.py", text=text), tree.parent)
    python = ast.parse(text)
    calls = [n for n in ast.walk(python) if isinstance(n, ast.Call)]
    # Make Python's second call claim to end one column early: the ")" check fails.
    calls[1].end_col_offset -= 1
    index.ast_tree = python
    g_call = tree.nodes(cst.Call)[1]
    assert index.span(g_call) == (1, 11, 1, 15)
    assert all(id(g_call) not in pairs for pairs in index._paired.values())
