""".gitignore matching, as git does it (gitignore(5)), for walking directories.

- Each `.gitignore` applies to its own folder and below; a deeper file's patterns come after
  (and so win over) a shallower one's; `.git/info/exclude` applies to the whole repository.
- Blank lines and `#` comments are skipped (`\\#` is a literal `#`); trailing spaces are dropped
  unless escaped; `!` re-includes (`\\!` is a literal `!`); the last matching pattern wins.
- A pattern with a slash at its start or middle is anchored to the `.gitignore`'s folder; one
  without matches a name at any depth; a trailing slash matches directories only.
- `*` and `?` do not match `/`; `[a-z]`, `[!a-z]` are classes; `**/` (leading), `/**`
  (trailing) and `/**/` span folders; other `**` are plain `*`.
- A file inside an ignored folder cannot be re-included (git does not look inside): the walker
  prunes ignored folders, which gives exactly that.

The user's global excludes file (core.excludesFile) is not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Pattern, Tuple


@dataclass(frozen=True)
class _Rule:
    regex: Pattern[str]
    negated: bool
    dir_only: bool


def _translate(glob: str) -> str:
    """Regex source for a wildmatch glob (no leading/trailing slash handling)."""
    out: List[str] = []
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        if ch == "*":
            j = i
            while j < n and glob[j] == "*":
                j += 1
            stars = j - i
            at_start = i == 0 or glob[i - 1] == "/"
            at_end = j == n or glob[j] == "/"
            if stars >= 2 and at_start and at_end:
                if j == n:
                    out.append(".*")  # trailing `**`: everything inside
                    i = j
                else:
                    out.append("(?:.*/)?")  # `**/`: zero or more folders
                    i = j + 1
                continue
            out.append("[^/]*")
            i = j
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            j = i + 1
            if j < n and glob[j] in "!^":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(ch))  # no closing bracket: a literal [
                i += 1
                continue
            body = glob[i + 1 : j]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            body = body.replace("\\", "\\\\")
            out.append(f"[^/{body}]" if negate else f"[{body}]")
            i = j + 1
        elif ch == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def parse(text: str) -> List[_Rule]:
    rules: List[_Rule] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        # Trailing spaces are ignored unless escaped with a backslash.
        stripped = line.rstrip(" ")
        if stripped.endswith("\\") and len(stripped) < len(line):
            stripped += " "
        line = stripped
        if not line:
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        if dir_only:
            line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        if line.startswith("/"):
            line = line[1:]
        body = _translate(line)
        source = f"^{body}$" if anchored else f"^(?:.*/)?{body}$"
        try:
            rules.append(_Rule(re.compile(source, re.DOTALL), negated, dir_only))
        except re.error:
            continue  # a pattern git would not understand either
    return rules


class GitIgnore:
    """Answers "is this path ignored?" for paths under one or more roots, reading `.gitignore`
    files lazily (each folder's at most once)."""

    def __init__(self) -> None:
        self._cache: Dict[Path, List[_Rule]] = {}
        self._repo: Dict[Path, Optional[Path]] = {}

    def _rules(self, folder: Path) -> List[_Rule]:
        found = self._cache.get(folder)
        if found is None:
            found = []
            for name in (".gitignore",):
                try:
                    found = parse((folder / name).read_text(encoding="utf-8", errors="replace"))
                except OSError:
                    found = []
            self._cache[folder] = found
        return found

    def _exclude_file(self, repo: Path) -> List[_Rule]:
        key = repo / ".git" / "info"
        found = self._cache.get(key)
        if found is None:
            try:
                found = parse((key / "exclude").read_text(encoding="utf-8", errors="replace"))
            except OSError:
                found = []
            self._cache[key] = found
        return found

    def repository(self, folder: Path) -> Optional[Path]:
        """The nearest folder at or above `folder` that holds `.git`."""
        if folder in self._repo:
            return self._repo[folder]
        found = None
        for candidate in [folder, *folder.parents]:
            if (candidate / ".git").exists():
                found = candidate
                break
        self._repo[folder] = found
        return found

    def ignored(self, path: Path, is_dir: bool, top: Path) -> bool:
        """Whether git would ignore `path` (absolute). `.gitignore` files are read from the
        folders between the repository root (or `top`, the walk's start, outside a repository)
        and the path's folder."""
        repo = self.repository(top)
        base = repo if repo is not None else top
        try:
            rel_parts = path.relative_to(base).parts
        except ValueError:
            return False
        if not rel_parts:
            return False
        decision: Optional[bool] = None
        if repo is not None:
            decision = _decide(self._exclude_file(repo), "/".join(rel_parts), is_dir, decision)
        folder = base
        for depth in range(len(rel_parts)):
            rel = "/".join(rel_parts[depth:])
            decision = _decide(self._rules(folder), rel, is_dir, decision)
            folder = folder / rel_parts[depth]
        return bool(decision)


def _decide(rules: List[_Rule], rel: str, is_dir: bool, decision: Optional[bool]):
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.regex.match(rel):
            decision = not rule.negated
    return decision


def matches(patterns: str, rel: str, is_dir: bool = False) -> bool:
    """Whether `rel` (a posix path relative to the .gitignore's folder) is ignored by the
    patterns (for tests and one-off checks)."""
    return bool(_decide(parse(patterns), rel, is_dir, None))


__all__: Tuple[str, ...] = ("GitIgnore", "matches", "parse")
