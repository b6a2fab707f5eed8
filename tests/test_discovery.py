"""File discovery: exclude globs, and the fast walk agreeing with `Settings.is_excluded`.

`discover` builds each walked entry's path relative to the project root from strings instead of
resolving it (resolving every path of a large tree cost more than the rest of a warm run). These
tests pin the glob semantics and check the walk against the slow, resolving `is_excluded` on a
tree with the awkward cases: symlinks that resolve elsewhere, a run below the root, a folder
outside the root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainlint.config import Settings, path_matches
from trainlint.files import SOURCE_SUFFIXES, discover


@pytest.mark.parametrize(
    "rel, pattern, expected",
    [
        ("build/x.py", "build", True),  # a pattern without "/" matches any component
        ("src/build/x.py", "build", True),
        ("src/builder/x.py", "build", False),
        ("src/x_test.py", "*_test.py", True),  # ... or the file name
        ("a/.venv", ".venv", True),
        ("data/raw/x.py", "data/raw", True),  # with "/": from the root, and what is below it
        ("src/data/raw/x.py", "data/raw", False),
        ("data/raw", "data/raw/", True),
        ("./data/raw/x.py", "./data/raw", False),  # relative paths never start with "./"
        ("data/raw/x.py", "./data/raw", True),
        ("a/b/gen/x.py", "**/gen/*.py", True),
        ("gen/x.py", "**/gen/*.py", True),  # "**/" also spans no folder
        ("a/gen/sub/x.py", "**/gen/*.py", True),  # fnmatch's "*" crosses "/"
        ("x.py", "", False),
        ("x.py", "  ", False),
        ("/abs/path/build/x.py", "build", True),
        ("/abs/path/x.py", "abs", True),
        ("/abs/x.py", "/abs", True),
        ("Build/x.py", "build", False),  # case matters, as in fnmatchcase
    ],
)
def test_path_matches(rel, pattern, expected):
    assert path_matches(rel, pattern) is expected


def _tree(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.trainlint]\n")
    for rel in (
        "train.py",
        "models/head.py",
        "models/build/gen.py",
        "data/raw/dump.py",
        "data/loader.py",
        "tools/gen/a.py",
        "tools/other/b.py",
        "notebooks/explore.ipynb",
        "weird name/x y.py",
    ):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import torch\n")
    return root


def _slow_discover(top: Path, settings: Settings):
    """What discovery finds, asking the resolving `is_excluded` about every entry."""
    found = []
    for folder, dirs, names in os.walk(top, followlinks=False):
        dirs[:] = [
            d for d in sorted(dirs)
            if not settings.is_excluded(Path(folder) / d)
            and not (Path(folder) / d / "pyvenv.cfg").is_file()
        ]
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES) and not settings.is_excluded(Path(folder) / name):
                found.append(os.path.realpath(Path(folder) / name))
    return sorted(set(found))  # discovery names a file once, however many links lead to it


@pytest.mark.parametrize(
    "excludes",
    [
        [],
        ["build", "data/raw"],
        ["**/gen/*.py", "weird name"],
        ["*.ipynb", "tools/other/", "head.py"],
        ["linked.py"],  # the name of a symlink, whose target is elsewhere
        ["outside"],  # the name of the symlink's target folder, outside the root
    ],
)
def test_walk_agrees_with_is_excluded(tmp_path, monkeypatch, excludes):
    root = _tree(tmp_path / "project")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shared.py").write_text("import torch\n")
    os.symlink(outside / "shared.py", root / "models" / "linked.py")
    # resolves into an excluded folder: excluded as `data/raw/dump.py`, not `models/alias.py`
    os.symlink(root / "data" / "raw" / "dump.py", root / "models" / "alias.py")
    settings = Settings(root=root, respect_gitignore=False, extend_exclude=excludes)
    for cwd, target in ((root, Path(".")), (root / "models", Path(".")), (tmp_path, root)):
        monkeypatch.chdir(cwd)
        fast = sorted(os.path.realpath(path) for path, _ in discover([target], settings).files)
        assert fast == _slow_discover(target, settings), (cwd, target, excludes)


def test_walk_outside_the_root_uses_paths_as_given(tmp_path, monkeypatch):
    """A folder outside the project root is matched by its path as given."""
    root = _tree(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "build").mkdir(parents=True)
    (elsewhere / "build" / "x.py").write_text("import torch\n")
    (elsewhere / "y.py").write_text("import torch\n")
    settings = Settings(root=root, respect_gitignore=False)
    monkeypatch.chdir(tmp_path)
    files = [display for _, display in discover([Path("elsewhere")], settings).files]
    assert files == ["elsewhere/y.py"]


def test_joined_patterns_answer_like_each_pattern():
    """`excludes_relative` joins the patterns into one expression: same answer as asking each."""
    patterns = ["build", "*_test.py", ".venv", "data/raw/", "./gen", "**/gen/*.py", "", "a?c"]
    rels = [
        "build/x.py", "src/x_test.py", "a/.venv", "data/raw/x.py", "gen/x.py", "a/b/gen/y.py",
        "abc/x.py", "a/bc", "/abs/build", "src/ok.py", "gen", "x_test.pyc",
    ]
    for count in range(len(patterns) + 1):
        settings = Settings(exclude=patterns[:count], extend_exclude=patterns[count:][:2])
        chosen = patterns[:count] + patterns[count:][:2]
        for rel in rels:
            expected = any(path_matches(rel, pattern) for pattern in chosen)
            assert settings.excludes_relative(rel) is expected, (chosen, rel)


# An AppleDouble header: magic, version 2, filler, then entries (a Finder-info entry here).
APPLEDOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00" + b"Mac OS X        " + b"\x00\x02" + b"\x00" * 24


def test_macos_metadata_beside_a_script_is_not_python(tmp_path, monkeypatch):
    """`._train.py` from an archive made on a Mac is binary metadata: a walk skips it (it used
    to be a TRL001 "source contains a NUL byte" per file). A file that only has such a name is
    checked, and so is metadata named on the command line, unless `--force-exclude` asks for the
    walk's skipping."""
    (tmp_path / "train.py").write_text("import torch\n")
    (tmp_path / "._train.py").write_bytes(APPLEDOUBLE)
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "._lesson.ipynb").write_bytes(APPLEDOUBLE)
    (tmp_path / "._helpers.py").write_text("import torch\n")  # Python, whatever its name
    settings = Settings(root=tmp_path, respect_gitignore=False)
    monkeypatch.chdir(tmp_path)
    found = sorted(display for _, display in discover([Path(".")], settings).files)
    assert found == ["._helpers.py", "train.py"]
    given = [display for _, display in discover([Path("._train.py")], settings).files]
    assert given == ["._train.py"]
    # pre-commit names every staged file and asks for what a walk would skip to be skipped
    forced = Settings(root=tmp_path, respect_gitignore=False, force_exclude=True)
    named = [Path("._train.py"), Path("._helpers.py"), Path("train.py")]
    assert [display for _, display in discover(named, forced).files] == [
        "._helpers.py",
        "train.py",
    ]


def test_macos_metadata_is_no_finding_of_a_run(tmp_path, monkeypatch, capsys):
    from trainlint import cli

    (tmp_path / "train.py").write_text("import torch\n")
    (tmp_path / "._train.py").write_bytes(APPLEDOUBLE)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["check", "--no-cache", "--isolated", "--output-format", "concise", "."])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert "._train.py" not in out
