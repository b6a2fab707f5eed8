"""The tree index: children read by the per-type readers generated from libcst's field
annotations (walk.py) are exactly what a checked read of every field finds."""

from __future__ import annotations

import libcst as cst

from fixture_support import CLEAN, REPO, RULE_FIXTURES
from trainlint import walk


def test_generated_readers_agree_with_the_checked_read():
    files = sorted(RULE_FIXTURES.rglob("*.py")) + sorted(CLEAN.rglob("*.py"))
    files += sorted((REPO / "src" / "trainlint").rglob("*.py"))
    nodes = types = 0
    seen_types = set()
    for path in files:
        try:
            module = cst.parse_module(path.read_text(encoding="utf-8"))
        except Exception:
            continue  # the fixtures of TRL001 do not parse
        stack = [module]
        while stack:
            node = stack.pop()
            expected = walk._generic_children(node)
            assert walk._compute_children(node) == expected, (path, type(node).__name__)
            nodes += 1
            seen_types.add(type(node))
            stack.extend(expected)
    types = len(seen_types)
    assert nodes > 100_000 and types > 60  # the comparison covered a real variety of code
