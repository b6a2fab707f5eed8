"""Nested `match` patterns: libcst's parser takes time exponential in their nesting (a class
pattern 30 deep: more than ten minutes) where Python's takes microseconds. The parse guard weighs
each case pattern with Python's tree first: such a file is one TRL001 that says why, the run goes
on, and patterns of real code are analysed as before."""

from __future__ import annotations

import pytest
from robustness_support import run_main, time_limit

from test_cli import DP_BUG
from trainlint.parse_guard import MAX_PATTERN_WEIGHT, pattern_weight, precheck

SHAPES = {
    "class": lambda inner: f"Point({inner})",
    "keyword": lambda inner: f"Node(child={inner})",
    "mapping": lambda inner: "{'child': " + inner + "}",
    "tuple": lambda inner: f"({inner}, 0)",
    "list": lambda inner: f"[{inner}]",
    "or": lambda inner: f"(0 | {inner})",
    "group": lambda inner: f"({inner})",
    "mixed": lambda inner: "{'next': Node(" + inner + ")}",
}


def nested(shape: str, depth: int) -> str:
    pattern = "leaf"
    for _ in range(depth):
        pattern = SHAPES[shape](pattern)
    return pattern


def program(pattern: str) -> str:
    walk = f"def walk(tree):\n    match tree:\n        case {pattern}:\n            return leaf\n"
    return DP_BUG + "\n\n" + walk


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_deep_patterns_are_one_trl001_and_the_run_goes_on(tmp_path, shape):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "deep.py").write_text(program(nested(shape, 30)))
    (tmp_path / "train.py").write_text(DP_BUG)
    code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], tmp_path, 30)
    assert "Traceback" not in err and err == ""
    assert code == 1
    deep = [line for line in out.splitlines() if line.startswith("deep.py")]
    assert len(deep) == 1, out
    assert ": TRL001 error: skipped: this case pattern nests" in deep[0]
    assert "trainlint's parser cannot handle in time" in deep[0]
    assert "train.py:6:9: TRL201" in out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_depth_is_answered_quickly(shape):
    """From depth 1 to 40, precheck answers at once, and what it lets through weighs at most
    MAX_PATTERN_WEIGHT (the weight the libcst parse-time measurements allow)."""
    with time_limit(20, "precheck"):
        for depth in range(1, 41):
            text = program(nested(shape, depth))
            verdict = precheck(text)
            weight, _ = pattern_weight(nested(shape, depth))
            assert (verdict.problem is None) == (weight <= MAX_PATTERN_WEIGHT), (depth, weight)


def test_real_patterns_are_analysed(tmp_path):
    """Patterns as real code writes them (a few levels, strings and comments holding brackets)
    are parsed and checked: the finding in the case body is reported."""
    text = DP_BUG.replace(
        "model = nn.DataParallel(model).to(device)",
        "match config:\n"
        "    case {'model': {'kind': 'resnet', 'layers': [int(depth), *_]}, 'opt': Adam(lr=lr)}:\n"
        "        model = nn.DataParallel(model).to(device)\n"
        "    case Config(model=Model(name='((([[{{'), head=(Linear() | Conv())):  # (((\n"
        "        pass",
    )
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(text)
    code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], tmp_path, 30)
    assert code == 1 and err == ""
    assert "TRL201" in out and "TRL001" not in out


@pytest.mark.parametrize(
    "pattern, weight",
    [
        ("Point(x, y)", 1),
        ("Node(child=Node(child=leaf))", 2),
        ("{'a': {'b': leaf}}", 4),
        ("(a, b)", 2),  # a tuple
        ("((leaf))", 2),  # parentheses only
        ("[[leaf]]", 2),
        ("{'key((': leaf}  # [[[[", 2),  # brackets in strings and comments do not count
        ("Point(x=0) | {'k': [0, (1, 2)]}", 5),
    ],
)
def test_pattern_weight(pattern, weight):
    assert pattern_weight(pattern)[0] == weight
