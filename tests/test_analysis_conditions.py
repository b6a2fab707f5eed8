"""Branch conditions (analysis/base/conditions.py): which two sites can never run together."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from trainlint.analysis.base.conditions import Conditions, never_empty, switched_off
from trainlint.analysis.base.scopes import Scopes
from trainlint.config import Settings
from trainlint.context import FileContext
from trainlint.source import Source
from trainlint.walk import Tree


def _conditions_and_calls(code: str):
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    calls = {
        call.func.value: call
        for call in ctx.nodes(cst.Call)
        if type(call.func) is cst.Name and call.func.value in ("a", "b")
    }
    return ctx.analysis(Conditions), calls["a"], calls["b"]


def exclusive(code: str) -> bool:
    """Are the calls `a()` and `b()` of `code` exclusive?"""
    conditions, a, b = _conditions_and_calls(code)
    return conditions.exclusive(a, b)


def runs_whenever(code: str) -> bool:
    """Does `b()` run whenever `a()` has run?"""
    conditions, a, b = _conditions_and_calls(code)
    return conditions.runs_whenever(a, b)


@pytest.mark.parametrize(
    "code",
    [
        "def f():\n    a()\n    x = 1\n    b()\n",
        "def f(d):\n    if d is not None:\n        a()\n    go()\n    if d is not None:\n"
        "        b()\n",
        "def f(self):\n    if self.m:\n        a()\n    with ctx():\n        go()\n"
        "    if self.m:\n        b()\n",
        "def f(x):\n    if x:\n        a()\n        b()\n",
        "def f(x, y):\n    if x:\n        if y:\n            a()\n    if x:\n        b()\n",
    ],
)
def test_runs_whenever(code):
    assert runs_whenever(code)


@pytest.mark.parametrize(
    "code",
    [
        "def f(x, y):\n    if x:\n        a()\n    if y:\n        b()\n",
        "def f(d):\n    if d is not None:\n        a()\n    d = None\n    if d is not None:\n"
        "        b()\n",
        "def f(x):\n    if x:\n        a()\n    if not x:\n        b()\n",
        "def f(x):\n    if x:\n        a()\n    if x:\n        pass\n    else:\n"
        "        b()\n",
        "def f(x):\n    a()\n    if x:\n        return\n    b()\n",
        "def f(xs):\n    a()\n    for x in xs:\n        b()\n",
        "def f(d):\n    if d.ready():\n        a()\n    if d.ready():\n        b()\n",
        "def f():\n    b()\n    a()\n",
        "def f():\n    a()\n\ndef g():\n    b()\n",
    ],
)
def test_does_not_run_whenever(code):
    assert not runs_whenever(code)


def runs_again_before(code: str) -> bool:
    """Does `b()`, written above `a()` in the first loop's body, run on the next iteration
    whenever `a()` has run?"""
    conditions, a, b = _conditions_and_calls(code)
    loop = next(n for n in conditions.ctx.nodes(cst.For))
    return conditions.runs_again_before(a, b, loop)


@pytest.mark.parametrize(
    "code, expected",
    [
        ("for e in r:\n    b()\n    step()\n    a()\n", True),
        ("for e in r:\n    if args.ft:\n        b()\n    step()\n    if args.ft:\n"
         "        a()\n", True),
        ("for e in r:\n    b()\n    if x:\n        a()\n", True),  # fewer tests around b
        # a test b has that a has not, or on the other side
        ("for e in r:\n    if args.warm:\n        b()\n    if args.ft:\n        a()\n", False),
        ("for e in r:\n    if not x:\n        b()\n    if x:\n        a()\n", False),
        # what the test reads changes inside the loop
        ("for e in r:\n    if x:\n        b()\n    x = e > 2\n    if x:\n        a()\n", False),
        # a `continue` above b skips it; b in a loop of its own may run no time
        ("for e in r:\n    if e:\n        continue\n    b()\n    a()\n", False),
        ("for e in r:\n    for m in ms:\n        b()\n    a()\n", False),
        # a in a loop of its own: that loop's next round comes before b
        ("for e in r:\n    b()\n    for x in xs:\n        step()\n        a()\n", False),
        # b written after a, or outside the loop
        ("for e in r:\n    a()\n    b()\n", False),
        ("b()\nfor e in r:\n    a()\n", False),
    ],
)
def test_runs_again_before(code, expected):
    assert runs_again_before(code) is expected


def test_runs_whenever_past_a_raise_only_when_asked():
    code = "def f(x):\n    a()\n    if x:\n        raise ValueError\n    b()\n"
    conditions, a, b = _conditions_and_calls(code)
    assert not conditions.runs_whenever(a, b)
    assert conditions.runs_whenever(a, b, past_raise=True)
    code = "def f(x):\n    a()\n    if x:\n        return\n    b()\n"
    conditions, a, b = _conditions_and_calls(code)
    assert not conditions.runs_whenever(a, b, past_raise=True)  # a return still skips b


@pytest.mark.parametrize(
    "code",
    [
        "if x:\n    a()\nelse:\n    b()\n",
        "if RANK == -1:\n    a()\nif RANK != -1:\n    b()\n",
        "if cuda and RANK == -1 and n > 1:\n    a()\n"
        "if sync and cuda and RANK != -1:\n    b()\n",
        "if args.mode == 'dp':\n    a()\nif args.mode == \"ddp\":\n    b()\n",
        "if args.ddp:\n    a()\nif not args.ddp:\n    b()\n",
        "if not (rank != 0):\n    a()\nif rank != 0:\n    b()\n",
        "if rank == 0:\n    a()\nif rank == 0 or other:\n    pass\nelse:\n    b()\n",
        # an arm that always leaves the function: what follows the `if` runs only without it
        "def f(m, d):\n    if d:\n        a()\n        return m\n    return b()\n",
        "def f(m, d):\n    if d:\n        a()\n        raise SystemExit\n    b()\n",
        "def f(m, d, e):\n    if d:\n        a()\n        if e:\n            return 1\n"
        "        else:\n            return 2\n    b()\n",
        "def f(m, d):\n    for x in m:\n        if d:\n            a()\n            return x\n"
        "    b()\n",
        "def f(m, d):\n    if d:\n        a()\n        with lock:\n            return m\n    b()\n",
    ],
)
def test_exclusive(code):
    assert exclusive(code)


@pytest.mark.parametrize(
    "code",
    [
        "a()\nb()\n",
        "if x:\n    a()\nif y:\n    b()\n",
        "if RANK == -1:\n    a()\nRANK = 0\nif RANK != -1:\n    b()\n",  # reassigned
        "if rank == 0 or debug:\n    a()\nif rank != 0:\n    b()\n",  # `or`: nothing sure
        "if f() == 1:\n    a()\nif f() != 1:\n    b()\n",  # calls may change
        "if n == 1:\n    a()\nif n == 1.0:\n    b()\n",  # the same value
        "if x:\n    a()\n    if y:\n        b()\n",
        # the arm may fall through, leaves only a loop, or a `finally` still runs `b`
        "def f(m, d, e):\n    if d:\n        a()\n        if e:\n            return 1\n"
        "    b()\n",
        "def f(m, d):\n    for x in m:\n        if d:\n            a()\n            break\n"
        "    b()\n",
        "def f(m, d):\n    try:\n        if d:\n            a()\n            return 1\n"
        "    finally:\n        b()\n",
        "def f(m, d):\n    b()\n    if d:\n        a()\n        return 1\n",
    ],
)
def test_not_exclusive(code):
    assert not exclusive(code)


def settled(code: str):
    """What the first `if` whose body calls `a()` evaluates to, where it runs."""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    for node in ctx.nodes(cst.If):
        if "a()" in ctx.code(node.body):
            return ctx.analysis(Conditions).settled(node.test, node)
    raise AssertionError("no `if` around a()")


@pytest.mark.parametrize(
    "code, value",
    [
        # a flag set before the loop and left alone in it
        ("def f(xs):\n    testing = False\n    for x in xs:\n        if testing:\n"
         "            a()\n", False),
        ("def f(xs):\n    testing = False\n    for x in xs:\n        if not testing:\n"
         "            a()\n", True),
        ("class T:\n    def train(self, xs):\n        self.is_test = False\n"
         "        for x in xs:\n            if self.is_test:\n                a()\n", False),
        ("mode = 'train'\nfor x in xs:\n    if mode == 'eval':\n        a()\n", False),
        ("mode = 'train'\nfor x in xs:\n    if mode != 'eval':\n        a()\n", True),
        ("k = 0\nfor x in xs:\n    if k:\n        a()\n", False),
    ],
)
def test_settled(code, value):
    assert settled(code) is value


@pytest.mark.parametrize(
    "code",
    [
        # changed inside the loop
        "testing = False\nfor i in xs:\n    testing = i % 5 == 0\n    if testing:\n        a()\n",
        # changed by a same-file helper the loop calls
        "flag = False\ndef g():\n    global flag\n    flag = True\nfor x in xs:\n    g()\n"
        "    if flag:\n        a()\n",
        # assigned in a branch before: not sure
        "if c:\n    testing = True\nelse:\n    testing = False\nfor x in xs:\n"
        "    if testing:\n        a()\n",
        # an attribute of an object handed to an unknown call
        "class T:\n    def train(self, xs):\n        self.is_test = False\n"
        "        for x in xs:\n            hooks.run(self)\n            if self.is_test:\n"
        "                a()\n",
        # a method the file does not define may set it
        "class T(Base):\n    def train(self, xs):\n        self.is_test = False\n"
        "        for x in xs:\n            self.maybe_test()\n            if self.is_test:\n"
        "                a()\n",
        # not a constant
        "testing = args.test\nfor x in xs:\n    if testing:\n        a()\n",
    ],
)
def test_not_settled(code):
    assert settled(code) is None


def test_a_flag_passed_as_a_literal_settles_the_helpers_branch():
    code = "def run(cross_valid=False):\n    if not cross_valid:\n        a()\n"
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    test = ctx.nodes(cst.If)[0].test
    conditions = ctx.analysis(Conditions)
    at = ctx.nodes(cst.If)[0]
    assert conditions.settled(test, at, lambda text: "True") is False
    assert conditions.settled(test, at, lambda text: "False") is True
    assert conditions.settled(test, at, lambda text: "None") is True
    assert conditions.settled(test, at, lambda text: "args.cv") is None


@pytest.mark.parametrize(
    "test, passed, value",
    [
        # `run_epoch(..., mode="eval")`: neither training mode
        ('mode == "train" or mode == "train+log"', '"eval"', False),
        ('mode == "train" or mode == "train+log"', "'train+log'", True),
        ('mode != "eval" and mode != "test"', '"test"', False),
        ('not (mode == "train" or mode == "train+log")', '"eval"', True),
        ("mode == 'train' or verbose", '"train"', True),  # one true side decides an `or`
        ("n == 1", "1", True),
        ("n == 1", "2.0", False),
        # an unknown side leaves an `or` open, a false `and` side closes it
        ("mode == 'train' or verbose", '"eval"', None),
        ("mode == 'train' and verbose", '"eval"', False),
        ('mode == "train"', "args.mode", None),
        ('mode == "train"', "[1]", None),
    ],
)
def test_a_literal_argument_settles_comparisons_and_boolean_chains(test, passed, value):
    code = f"def run(mode, n=0, verbose=None):\n    if {test}:\n        a()\n"
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    branch = ctx.nodes(cst.If)[0]
    rename = {"mode": passed, "n": passed, "verbose": "opts.verbose"}.get
    assert ctx.analysis(Conditions).settled(branch.test, branch, rename) is value


def instance_tests_at_a(code: str):
    """`Conditions.instance_tests` at the call `a()` of `code`, as (subject, class, holds)."""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    call = next(
        c for c in ctx.nodes(cst.Call) if type(c.func) is cst.Name and c.func.value == "a"
    )
    return [
        (subject, ctx.code(cls), holds)
        for subject, cls, holds in ctx.analysis(Conditions).instance_tests(call)
    ]


@pytest.mark.parametrize(
    "code, expected",
    [
        ("if isinstance(net, nn.Module):\n    a()\n", [("net", "nn.Module", True)]),
        (
            "if isinstance(net, nn.Module):\n    pass\nelse:\n    a()\n",
            [("net", "nn.Module", False)],
        ),
        ("if not isinstance(self.net, (A, B)):\n    a()\n", [("self.net", "(A, B)", False)]),
        (
            "if isinstance(x, T):\n    pass\nelif flag:\n    a()\n",
            [("x", "T", False)],
        ),
        (
            "if isinstance(net, nn.Module):\n    if isinstance(state, tuple):\n        a()\n",
            [("state", "tuple", True), ("net", "nn.Module", True)],
        ),
        ("if net is not None:\n    a()\n", []),
        ("if isinstance(make(), T):\n    a()\n", []),
        ("def f():\n    if isinstance(net, T):\n        def g():\n            a()\n", []),
    ],
)
def test_instance_tests_say_what_isinstance_established_at_a_site(code, expected):
    assert instance_tests_at_a(code) == expected


def _last_of(code: str, kind):
    """The file context of `code` and its last node of type `kind`."""
    code = textwrap.dedent(code)
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    return ctx, list(ctx.nodes(kind))[-1]


def last_iteration(code: str) -> bool:
    """Is the last `if` of `code` a branch taken only on its loop's last iteration?"""
    ctx, branch = _last_of(code, cst.If)
    return ctx.analysis(Conditions).last_iteration(branch)


@pytest.mark.parametrize(
    "code, expected",
    [
        pytest.param(
            """
            for i, (x, y) in enumerate(loader):
                step(x, y)
                if i == len(loader) - 1:
                    validate()
            """,
            True,
            id="enumerate-index-equals-len-minus-one",
        ),
        pytest.param(
            """
            steps = list(enumerate(train_loader))
            pbar = tqdm(steps)
            for i, (x, y) in pbar:
                step(x, y)
                if len(steps) - 1 == i:
                    validate()
            """,
            True,
            id="tqdm-over-a-list-of-enumerated-batches",
        ),
        pytest.param(
            """
            for i, batch in enumerate(self.loader):
                step(batch)
                if i + 1 == len(self.loader):
                    validate()
            """,
            True,
            id="index-plus-one-equals-len",
        ),
        pytest.param(
            """
            for i, (x, y) in enumerate(loader, 1):
                step(x, y)
                if i == len(loader) - 1:
                    validate()
            """,
            False,
            id="enumerate-from-one-is-the-second-to-last",
        ),
        pytest.param(
            """
            for i, (x, y) in enumerate(loader):
                if i == len(loader) - 1:
                    validate()
                step(x, y)
            """,
            False,
            id="not-the-last-statement-of-the-body",
        ),
        pytest.param(
            """
            for i, (x, y) in enumerate(loader):
                step(x, y)
                if i == len(val_loader) - 1:
                    validate()
            """,
            False,
            id="the-length-of-another-sequence",
        ),
        pytest.param(
            """
            for i, (x, y) in enumerate(loader):
                i = i * 2
                if i == len(loader) - 1:
                    validate()
            """,
            False,
            id="index-rebound-in-the-body",
        ),
        pytest.param(
            """
            for i, (x, y) in enumerate(loader):
                step(x, y)
                if i == len(loader) - 1:
                    validate()
            else:
                report()
            """,
            False,
            id="a-loop-with-an-else",
        ),
    ],
)
def test_last_iteration_branch(code, expected):
    assert last_iteration(code) is expected


def ends_outer_loop(code: str) -> bool:
    """Does the last `break` of `code` end the `while` around its loop as well?"""
    ctx, brk = _last_of(code, cst.Break)
    return ctx.analysis(Conditions).ends_outer_loop(brk)


@pytest.mark.parametrize(
    "code, expected",
    [
        pytest.param(
            """
            while seen < limit and going:
                for x in loader:
                    if late:
                        going = False
                        break
            """,
            True,
            id="flag-cleared-on-the-line-above",
        ),
        pytest.param(
            """
            while self.running:
                for x in loader:
                    if late:
                        self.running = False; break
            """,
            True,
            id="attribute-flag-on-the-same-line",
        ),
        pytest.param(
            """
            while seen < limit and going:
                for x in loader:
                    if late:
                        break
            """,
            False,
            id="a-plain-break",
        ),
        pytest.param(
            """
            while going:
                for x in loader:
                    if late:
                        going = False
                        break
                going = True
            """,
            False,
            id="flag-set-again-after-the-inner-loop",
        ),
        pytest.param(
            """
            while seen < limit or going:
                for x in loader:
                    if late:
                        going = False
                        break
            """,
            False,
            id="the-test-does-not-need-the-flag",
        ),
        pytest.param(
            """
            for epoch in range(10):
                for x in loader:
                    if late:
                        going = False
                        break
            """,
            False,
            id="a-for-around-the-loop",
        ),
        pytest.param(
            """
            while going:
                for x in loader:
                    if late:
                        going = False
                        break
            else:
                finish()
            """,
            False,
            id="a-while-with-an-else",
        ),
    ],
)
def test_break_that_ends_the_outer_loop(code, expected):
    assert ends_outer_loop(code) is expected


@pytest.mark.parametrize(
    "guard, off",
    [
        ("if False:", True),
        ("if 0:", True),
        ("if None:", True),
        ("while False:", True),
        ("if __name__ == 'x__main__':", True),
        ("if 'main' == __name__:", True),
        ("if __name__ == '__main__':", False),
        ("if True:", False),
        ("if 1:", False),
        ("if debug:", False),
        ("if __name__ != 'x__main__':", False),
        # a flag bound to a falsy literal is a setting its users flip, not dead code
        ("use_gpu = False\nif use_gpu:", False),
        ("distributed = 0\nif distributed:", False),
    ],
)
def test_code_no_run_executes(guard, off):
    code = f"{guard}\n    a()\nb()\n"
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    calls = {c.func.value: c for c in ctx.nodes(cst.Call) if type(c.func) is cst.Name}
    assert switched_off(ctx, calls["a"]) is off
    assert switched_off(ctx, calls["b"]) is False


def test_the_else_of_a_switched_off_test_runs():
    code = "if False:\n    a()\nelse:\n    b()\n"
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    calls = {c.func.value: c for c in ctx.nodes(cst.Call) if type(c.func) is cst.Name}
    assert switched_off(ctx, calls["a"]) and not switched_off(ctx, calls["b"])


@pytest.mark.parametrize(
    "setup, iterable, once",
    [
        ("", "[opt_g, opt_d]", True),
        ("", "(head_opt,)", True),
        ("", "[]", False),
        ("", "[*optimizers]", False),
        ("", "range(3)", True),
        ("", "range(1, 5)", True),
        ("", "range(5, 1, -1)", True),
        ("", "range(0)", False),
        ("", "range(-2)", False),
        ("", "range(steps)", False),
        ("optimizers = [opt_g, opt_d]\n", "optimizers", True),
        ("optimizers = [opt_g, opt_d]\n", "zip(optimizers, [s_g, s_d])", True),
        ("optimizers = [opt_g]\n", "[LambdaLR(o, f) for o in optimizers]", True),
        ("optimizers = [opt_g]\n", "[o for o in optimizers if o.defaults]", False),
        ("optimizers = [opt_g]\nif x:\n    optimizers = []\n", "optimizers", False),
        ("def range(n):\n    return []\n", "range(3)", False),
        ("", "enumerate(loader)", False),
        ("", "sorted([b, a])", True),
    ],
)
def test_loops_sure_to_run_once(setup, iterable, once):
    code = f"{setup}for item in {iterable}:\n    a()\n"
    module = cst.parse_module(code)
    ctx = FileContext(Source(path="t.py", text=code), module, Tree(module), Settings())
    loop = next(iter(ctx.nodes(cst.For)))
    assert never_empty(ctx.analysis(Scopes), loop.iter) is once
