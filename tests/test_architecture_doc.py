"""docs/architecture.md is where code, tests and the README point for the design: every pointer
to it (its path, a comma, then a section title in double quotes) names a section that exists,
and the document's table of contents links to its sections."""

from __future__ import annotations

import re

from fixture_support import REPO

DOC = REPO / "docs" / "architecture.md"
# The title may wrap onto the next line of a comment or docstring.
POINTER = re.compile(r'docs/architecture\.md,\s+"([^"]+)"')
SEARCHED = ("README.md", "src", "tests", "benchmarks", "fixtures", "docs")


def headings():
    return {m.group(1) for m in re.finditer(r"^##+ (.+)$", DOC.read_text(), re.M)}


def anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def pointers():
    for top in SEARCHED:
        root = REPO / top
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if path.suffix not in (".py", ".md", ".ipynb", ".toml") or not path.is_file():
                continue
            for match in POINTER.finditer(path.read_text(encoding="utf-8", errors="replace")):
                title = re.sub(r"\s+", " ", match.group(1))
                yield path.relative_to(REPO), title


def test_pointers_name_existing_sections():
    found = list(pointers())
    assert found, "no pointer to docs/architecture.md found: the search itself is broken"
    sections = headings()
    stale = [f"{path}: {title!r}" for path, title in found if title not in sections]
    missing = "\n".join(stale)
    assert not stale, f"pointers to sections docs/architecture.md does not have:\n{missing}"


def test_contents_link_to_sections():
    text = DOC.read_text()
    links = re.findall(r"^\d+\. \[([^\]]+)\]\(#([^)]+)\)$", text, re.M)
    top_level = re.findall(r"^## (.+)$", text, re.M)
    assert [title for title, _ in links] == top_level
    assert all(target == anchor(title) for title, target in links)
