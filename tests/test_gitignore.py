"""`.gitignore` matching (gitignore.py): git's semantics, in time linear in the path.

The table pins the rules case by case; `test_agrees_with_git` asks git itself
(`git check-ignore`) about generated patterns and paths, classes and escapes included; the
wildcard-heavy patterns must not take exponential time (a regular expression of
`*a*a*a*a*a*a*a*a*a*a` backtracked for minutes on one 60-character name).
"""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from robustness_support import time_limit

from trainlint.gitignore import matches


@pytest.mark.parametrize(
    "patterns, rel, is_dir, expected",
    [
        ("*.py", "a/b/x.py", False, True),  # no slash: a name at any depth
        ("*.py", "a/b/x.pyc", False, False),
        ("/build", "build", True, True),  # a leading slash anchors
        ("/build", "src/build", True, False),
        ("docs/build", "docs/build", True, True),  # so does a middle one
        ("docs/build", "x/docs/build", True, False),
        ("out/", "out", True, True),  # a trailing slash: folders only
        ("out/", "out", False, False),
        ("out/", "a/out", True, True),
        ("a//", "a", True, False),  # only one trailing slash is taken off
        ("a/*", "a/x", False, True),  # `*` does not cross `/`
        ("a/*", "a/x/y", False, False),
        ("a/?", "a/x", False, True),
        ("a/?", "a/xy", False, False),
        ("**/gen", "gen", True, True),  # leading `**/`: zero or more folders
        ("**/gen", "a/b/gen", True, True),
        ("a/**", "a/b/c.py", False, True),  # trailing `/**`: everything inside
        ("a/**", "a", True, False),
        ("a/**/b", "a/b", False, True),  # `/**/`: zero or more folders
        ("a/**/b", "a/x/y/b", False, True),
        ("a/**/b", "a/x/y/c", False, False),
        ("a**b", "axb", False, True),  # any other `**` is a plain `*`
        ("a**b", "ax/b", False, False),
        ("**", "any/thing", False, True),
        ("[a-c]x", "bx", False, True),
        ("[!a-c]x", "bx", False, False),
        ("[^a-c]x", "dx", False, True),
        ("[]]x", "]x", False, True),  # a `]` first in a class is a member
        ("[[:digit:]]x", "7x", False, True),  # named classes
        ("[[:digit:]]x", "ax", False, False),
        ("[[:nonsense:]]x", "ax", False, False),  # an unknown class matches nothing
        ("[ax", "[ax", False, False),  # so does an unclosed `[`
        ("[\\]]x", "]x", False, True),  # `\` escapes inside a class
        ("\\*x", "*x", False, True),
        ("\\*x", "ax", False, False),
        ("\\#x", "#x", False, True),
        ("\\!x", "!x", False, True),
        ("x\\ ", "x ", False, True),  # an escaped trailing space is kept
        ("x  ", "x", False, True),  # an unescaped one is dropped
        ("x\\\\ ", "x\\", False, True),  # ... even after an escaped backslash
        ("x\\", "x\\", False, False),  # a trailing backslash matches nothing
        ("*.log\n!keep.log", "keep.log", False, False),  # the last match wins
        ("*.log\n!keep.log", "other.log", False, True),
        ("# comment\n\n*.tmp", "a.tmp", False, True),
        ("*a" * 10, "a" * 59 + "b", False, False),
        ("*a" * 10, "a" * 60, False, True),
        ("*a*b*c", "xxaxxbxxcxx", False, False),
        ("*a*b*c", "xxaxxbxxc", False, True),
        ("a*a*a", "aa", False, False),  # the pieces may not overlap
        ("a*a*a", "aaa", False, True),
    ],
)
def test_patterns(patterns, rel, is_dir, expected):
    assert matches(patterns, rel, is_dir) is expected


def test_many_wildcards_take_linear_time():
    """Patterns of up to 12 `*`s and `**`s against long names and deep paths: each of these took
    from seconds to minutes when patterns were regular expressions."""
    name = "a" * 59 + "b"
    deep = "/".join(["a"] * 40) + "/b"
    with time_limit(20, "gitignore matching"):
        for stars in range(1, 13):
            assert not matches("*a" * stars, name)
            assert not matches("*a" * stars + "*c", name * 20)
            assert not matches("/" + "**/a/" * stars + "c", deep, True)
            assert matches("/" + "**/a/" * stars + "b", deep)


def _path(rnd: random.Random) -> str:
    names = ["".join(rnd.choice("ab-]![\\^") for _ in range(rnd.randint(1, 3)))]
    names += ["".join(rnd.choice("ab-]") for _ in range(rnd.randint(1, 3)))]
    return "/".join(rnd.sample(names, 2)[: rnd.randint(1, 2)] + ["ab"][: rnd.randint(0, 1)])


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_agrees_with_git(tmp_path):
    """git check-ignore and `matches` (applied to the path's folders as the walker prunes them)
    agree on generated patterns and paths."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    rnd = random.Random(21)
    disagreements = []
    for _ in range(150):
        pattern = "".join(rnd.choice("ab*?/[]!-^:\\ ") for _ in range(rnd.randint(1, 8)))
        if not pattern.strip():
            continue
        (tmp_path / ".gitignore").write_text(pattern + "\n")
        paths = sorted({_path(rnd) for _ in range(30)})
        asked = [(path, False) for path in paths] + [(path, True) for path in paths]
        query = b"".join(
            path.encode() + (b"/" if is_dir else b"") + b"\0" for path, is_dir in asked
        )
        out = subprocess.run(
            ["git", "check-ignore", "--stdin", "--no-index", "-v", "-n", "-z"],
            cwd=tmp_path,
            input=query,
            capture_output=True,
            check=False,
        ).stdout.split(b"\0")
        for (path, is_dir), index in zip(asked, range(0, len(out) - 1, 4)):
            source, pattern_matched = out[index], out[index + 2]
            git = source != b"" and not pattern_matched.startswith(b"!")
            names = path.split("/")
            ours = any(
                matches(pattern, "/".join(names[:k]), True) for k in range(1, len(names))
            ) or matches(pattern, path, is_dir)
            # git is asked about folders as `path/`, where a pattern's last `/*` may match the
            # empty name after the slash: not a path a walk ever asks about.
            if ours != git and not (is_dir and pattern.endswith("*")):
                disagreements.append((pattern, path, is_dir, git))
    assert disagreements == []
