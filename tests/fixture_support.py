"""Helpers for fixture-driven tests: discovering fixtures and reading their `# expect:` marks.

Conventions (docs/architecture.md, "Adding a rule"):
- fixtures/rules/<CODE>/<name>.py is an input; every line that must be flagged ends with
  `# expect: <CODE>` (several codes comma-separated; `<CODE>[error]` also pins the severity).
- <name>.fixed.py is the expected result of `--fix` with only that rule selected, and
  <name>.unsafe.py the result of `--fix --unsafe-fixes`.
- A folder inside fixtures/rules/<CODE>/ is a small project: its files are checked together in
  one run (the project phase sees all of them).
- Notebooks work the same way: fixtures/rules/<CODE>/<name>.ipynb with `# expect: <CODE>` at the
  end of a line of a code cell (rows counted inside the cell), and <name>.fixed.ipynb /
  <name>.unsafe.ipynb as goldens (compared byte for byte: the notebook's JSON layout must survive).
- fixtures/clean/ must give zero findings with every rule selected.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

from trainlint.config import Settings
from trainlint.files import discover
from trainlint.runner import RunResult, run
from trainlint.selection import Selection

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
RULE_FIXTURES = FIXTURES / "rules"
CLEAN = FIXTURES / "clean"
ORACLE = FIXTURES / "oracle"

EXPECT_RE = re.compile(
    r"#\s*expect:\s*(?P<codes>TRL\d{3}(?:\[\w+\])?(?:\s*,\s*TRL\d{3}(?:\[\w+\])?)*)"
)
CODE_RE = re.compile(r"(TRL\d{3})(?:\[(\w+)\])?")
GOLDEN_SUFFIXES = (".fixed.py", ".unsafe.py", ".fixed.ipynb", ".unsafe.ipynb")
INPUT_SUFFIXES = (".py", ".ipynb")


def is_input(path: Path) -> bool:
    name = path.name
    return name.endswith(INPUT_SUFFIXES) and not name.endswith(GOLDEN_SUFFIXES)


def rule_cases() -> Iterator[Tuple[str, Path]]:
    """(code, path) for every input file or project folder under fixtures/rules."""
    if not RULE_FIXTURES.is_dir():
        return
    for code_dir in sorted(RULE_FIXTURES.iterdir()):
        if not code_dir.is_dir():
            continue
        for entry in sorted(code_dir.iterdir()):
            if entry.is_dir() and not entry.name.startswith((".", "__")):
                yield code_dir.name, entry
            elif entry.is_file() and is_input(entry):
                yield code_dir.name, entry


def expectations(path: Path) -> Dict[Tuple[int, str], Optional[str]]:
    """(row, code) -> expected severity (None when not pinned) from `# expect:` comments."""
    found: Dict[Tuple[int, str], Optional[str]] = {}
    text = path.read_text(encoding="utf-8")
    for row, line in enumerate(text.splitlines(), start=1):
        match = EXPECT_RE.search(line)
        if not match:
            continue
        for code, severity in CODE_RE.findall(match.group("codes")):
            found[(row, code)] = severity or None
    return found


def notebook_expectations(path: Path) -> Dict[Tuple[int, int, str], Optional[str]]:
    """(cell, row, code) -> expected severity from `# expect:` comments in a notebook's code
    cells (cells numbered from 1 in file order, markdown included; rows inside the cell)."""
    found: Dict[Tuple[int, int, str], Optional[str]] = {}
    data = json.loads(path.read_text(encoding="utf-8"))
    for number, cell in enumerate(data["cells"], start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"]
        text = source if isinstance(source, str) else "".join(source)
        for row, line in enumerate(text.splitlines(), start=1):
            match = EXPECT_RE.search(line)
            if match:
                for code, severity in CODE_RE.findall(match.group("codes")):
                    found[(number, row, code)] = severity or None
    return found


def expected_findings(path: Path) -> Dict[Tuple[Optional[int], int, str], Optional[str]]:
    """(cell or None, row, code) -> expected severity, for a .py file or a notebook."""
    if path.suffix == ".ipynb":
        return dict(notebook_expectations(path))
    return {(None, row, code): sev for (row, code), sev in expectations(path).items()}


def golden_for(path: Path, unsafe: bool) -> Path:
    """<name>.fixed.py / <name>.unsafe.py (or .ipynb) beside an input."""
    suffix = path.suffix
    return path.with_name(path.name[: -len(suffix)] + (".unsafe" if unsafe else ".fixed") + suffix)


def settings_for(select: List[str], root: Path, unsafe: bool = False) -> Settings:
    settings = Settings(root=root)
    settings.select = select
    settings.unsafe_fixes = unsafe
    return settings


def lint(paths: List[Path], select: List[str], root: Optional[Path] = None, **kwargs) -> RunResult:
    root = root or (paths[0] if paths[0].is_dir() else paths[0].parent)
    settings = settings_for(select, root, unsafe=kwargs.get("unsafe", False))
    found = discover(paths, settings)
    assert not found.errors, found.errors
    return run(found.files, Selection.of(settings), **kwargs)


def codes_checked(code: str, expected: Dict[Tuple[int, str], Optional[str]]) -> Set[str]:
    return {code} | {c for _, c in expected}


def project_tree(tmp_path: Path, files: Dict[str, str]) -> Path:
    """A project of `files` (relative path -> text) in `tmp_path/proj`, marked as a repository
    root with an empty `.git` folder."""
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
