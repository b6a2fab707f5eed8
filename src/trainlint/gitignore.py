""".gitignore matching, as git does it (gitignore(5)), for walking directories.

- Each `.gitignore` applies to its own folder and below; a deeper file's patterns come after
  (and so win over) a shallower one's; `.git/info/exclude` applies to the whole repository.
- Blank lines and `#` comments are skipped (`\\#` is a literal `#`); trailing spaces are dropped
  unless escaped; `!` re-includes (`\\!` is a literal `!`); the last matching pattern wins.
- A pattern with a slash at its start or middle is anchored to the `.gitignore`'s folder; one
  without matches a name at any depth; a trailing slash matches directories only.
- `*` and `?` do not match `/`; `[a-z]`, `[!a-z]`, `[[:digit:]]` are classes (as git's wildmatch
  reads them: `\\` escapes inside a class, a class never matches `/`, and a pattern with an
  unclosed `[` or an unknown `[:name:]` matches nothing); `**/` (leading), `/**` (trailing) and
  `/**/` span folders; other `**` are plain `*`.
- A file inside an ignored folder cannot be re-included (git does not look inside): the walker
  prunes ignored folders, which gives exactly that.

Matching never backtracks exponentially. A pattern with at most two wildcards (`*`, `**`, and the
implicit `**/` in front of a pattern without a slash: `*.pyc`, `runs/**/*.pt`) is one regular
expression, which backtracks over pairs of positions at worst. One with more is matched name by
name, the pieces of a name between two `*` found leftmost-first (and the groups of names between
two `**` likewise), in time proportional to the path times the pattern. A regular expression
of `*a*a*a*a*a*a*a*a` took a minute against one 60-character name.

A `.gitignore` that is not a regular file (a FIFO, a link to a device) or is larger than git
accepts is ignored with a warning; the user's global excludes file (core.excludesFile) is not
read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from .source import read_regular_file

# git refuses to read a .gitignore larger than this (dir.c, PATTERN_MAX_FILE_SIZE).
MAX_IGNORE_FILE_SIZE = 100 * 1024 * 1024

# The character classes git's wildmatch knows, as in the C locale.
_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


class _Unmatchable(ValueError):
    """The pattern can never match (git's wildmatch aborts on it)."""


class _NameGlob:
    """A glob for one name (no `/` in it): pieces of fixed length (lists of one-character
    regexes) separated by `*`. `source` is its regex; `match` finds the first piece at the
    start, the last at the end and those in between leftmost-first, which is exact because
    every piece has a fixed length."""

    def __init__(self, pieces: List[List[str]]) -> None:
        self.stars = len(pieces) - 1
        self.source = "[^/]*".join("".join(piece) for piece in pieces)
        self.pieces = [(re.compile("".join(piece), re.DOTALL), len(piece)) for piece in pieces]

    def match(self, name: str) -> bool:
        (first, first_width), (last, last_width) = self.pieces[0], self.pieces[-1]
        if not self.stars:
            return len(name) == first_width and first.match(name) is not None
        end = len(name) - last_width
        if end < first_width or first.match(name, 0, first_width) is None:
            return False
        if last.match(name, end) is None:
            return False
        pos = first_width
        for piece, width in self.pieces[1:-1]:
            found = piece.search(name, pos, end)
            if found is None:
                return False
            pos = found.end()
        return True


# A name glob that matches any name (the folder level a trailing `/**` needs at least).
_ANY_NAME = _NameGlob([[], []])


def _class(glob: str, i: int) -> Tuple[str, int]:
    """The regex of the class starting at `glob[i] == "["`, and the index after it (git's
    wildmatch: `!` or `^` negates, the first character is a member even when it is `]`, `\\`
    escapes, `a-z` is a range, `[:alpha:]` a named class)."""
    n = len(glob)
    i += 1
    negated = i < n and glob[i] in "!^"
    if negated:
        i += 1
    members: List[str] = []
    previous: Optional[str] = None  # the last member, which a `-` may extend to a range
    first = True
    while True:
        if i >= n:
            raise _Unmatchable("unclosed [")
        ch = glob[i]
        if ch == "]" and not first:
            i += 1
            break
        first = False
        if ch == "\\":
            i += 1
            if i >= n:
                raise _Unmatchable("unclosed [")
            ch = glob[i]
            members.append(re.escape(ch))
            previous = ch
        elif ch == "-" and previous is not None and i + 1 < n and glob[i + 1] != "]":
            i += 1
            high = glob[i]
            if high == "\\":
                i += 1
                if i >= n:
                    raise _Unmatchable("unclosed [")
                high = glob[i]
            if previous <= high:  # a reversed range holds nothing
                members.append(f"{re.escape(previous)}-{re.escape(high)}")
            previous = None
        elif ch == "[" and glob.startswith(":", i + 1):
            close = glob.find("]", i + 2)
            if close < 0:
                raise _Unmatchable("unclosed [")
            if close - 1 >= i + 2 and glob[close - 1] == ":":
                name = glob[i + 2 : close - 1]
                if name not in _POSIX_CLASSES:
                    raise _Unmatchable(f"unknown class [:{name}:]")
                members.append(_POSIX_CLASSES[name])
                previous = None
                i = close
            else:  # no `:]` before the `]`: the `[` is a member like any other
                members.append(re.escape(ch))
                previous = ch
        else:
            members.append(re.escape(ch))
            previous = ch
        i += 1
    body = "".join(members)
    if negated:
        return f"[^/{body}]", i
    return (f"(?!/)[{body}]" if body else "(?!)"), i


# One item of a pattern: a name glob, or `**` spanning zero or more folders.
_Item = Union[_NameGlob, None]
_FOLDERS = None


def _compile(glob: str) -> List[_Item]:
    """The items of a pattern (leading `/` already removed), one per `/`-separated part."""
    items: List[_Item] = []
    pieces: List[List[str]] = []  # the name glob being read: its pieces between `*`s
    piece: List[str] = []  # one regex per character
    i, n = 0, len(glob)
    part_start = True  # at the start of a `/`-separated part
    while i < n:
        ch = glob[i]
        if ch == "*":
            j = i
            while j < n and glob[j] == "*":
                j += 1
            at_end = j == n or glob[j] == "/" or glob.startswith("\\/", j)
            if j - i >= 2 and part_start and at_end:
                if j == n:  # trailing `/**`: everything inside, at least one more name
                    items.extend([_ANY_NAME, _FOLDERS])
                    return items
                items.append(_FOLDERS)  # `**/`: zero or more folders
                i = j + (1 if glob[j] == "/" else 2)
                continue
            pieces.append(piece)
            piece = []
            part_start = False
            i = j
            continue
        part_start = False
        if ch == "/" or (ch == "\\" and glob.startswith("/", i + 1)):
            pieces.append(piece)
            items.append(_NameGlob(pieces))
            pieces, piece = [], []
            part_start = True
            i += 1 if ch == "/" else 2
            continue
        if ch == "?":
            piece.append("[^/]")
            i += 1
        elif ch == "[":
            regex, i = _class(glob, i)
            piece.append(regex)
        elif ch == "\\":
            if i + 1 >= n:
                raise _Unmatchable("trailing backslash")
            piece.append(re.escape(glob[i + 1]))
            i += 2
        else:
            piece.append(re.escape(ch))
            i += 1
    pieces.append(piece)
    items.append(_NameGlob(pieces))
    return items


def _regex(items: List[_Item]) -> str:
    """The regex of a whole pattern, for a `/`-joined path."""
    out: List[str] = []
    last = len(items) - 1
    for k, item in enumerate(items):
        if item is _FOLDERS:
            out.append("(?:/.*)?" if k == last else "(?:.*/)?")
            continue
        out.append(item.source)
        if k < last and not (k + 1 == last and items[last] is _FOLDERS):
            out.append("/")
    return "".join(out)


# A regex with this many `*` and `**` at most backtracks over pairs of positions in the path, not
# over every way to share the path between them: patterns with more are matched name by name.
_MAX_REGEX_WILDCARDS = 2


def _matcher(items: List[_Item]) -> Callable[[str], object]:
    """A function of a `/`-joined path that is truthy when the pattern matches it."""
    wildcards = sum(1 if item is None else item.stars for item in items)
    if wildcards <= _MAX_REGEX_WILDCARDS:
        return re.compile(_regex(items), re.DOTALL).fullmatch
    groups: List[List[_NameGlob]] = [[]]
    for item in items:
        if item is None:  # _FOLDERS
            groups.append([])
        else:
            groups[-1].append(item)
    return lambda path: _match_names(groups, path.split("/"))


def _match_names(groups: List[List[_NameGlob]], names: Sequence[str]) -> bool:
    """Whether names match groups of name globs (each matching as many names as it has globs)
    separated by `**` folders: the first group at the start, the last at the end, those
    between leftmost-first, which is exact since a group's length is fixed."""
    first, last = groups[0], groups[-1]
    n = len(names)
    if len(groups) == 1:
        return n == len(first) and all(g.match(name) for g, name in zip(first, names))
    end = n - len(last)
    if end < len(first):
        return False
    if not all(g.match(name) for g, name in zip(first, names)):
        return False
    if not all(g.match(name) for g, name in zip(last, names[end:])):
        return False
    pos = len(first)
    for group in groups[1:-1]:
        width = len(group)
        while pos + width <= end:
            if all(g.match(name) for g, name in zip(group, names[pos : pos + width])):
                break
            pos += 1
        else:
            return False
        pos += width
    return True


@dataclass(frozen=True)
class _Rule:
    match: Callable[[str], object]  # of a `/`-joined path relative to the file's folder
    negated: bool
    dir_only: bool


def parse(text: str) -> List[_Rule]:
    rules: List[_Rule] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        line = _without_trailing_spaces(line)
        if not line:
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        if dir_only:
            line = line[:-1]  # one slash only: `a//` names nothing, as in git
        if not line:
            continue
        anchored = "/" in line
        if line.startswith("/"):
            line = line[1:]
        try:
            items = _compile(line)
        except _Unmatchable:
            continue  # a pattern that matches nothing in git either
        if not anchored:
            items.insert(0, _FOLDERS)  # a name at any depth
        rules.append(_Rule(_matcher(items), negated, dir_only))
    return rules


def _without_trailing_spaces(line: str) -> str:
    """Trailing spaces are ignored unless escaped with a backslash (itself not escaped)."""
    last_space = None
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == " ":
            if last_space is None:
                last_space = i
        else:
            if ch == "\\":
                i += 1
            last_space = None
        i += 1
    return line if last_space is None else line[:last_space]


class GitIgnore:
    """Answers "is this path ignored?" for paths under one or more roots, reading `.gitignore`
    files lazily (each folder's at most once). `warn(path, reason)` hears of each ignore file
    that exists but cannot be used (not a regular file, too large, unreadable)."""

    def __init__(self, warn: Optional[Callable[[Path, str], None]] = None) -> None:
        self._cache: Dict[Path, List[_Rule]] = {}
        self._repo: Dict[Path, Optional[Path]] = {}
        self._warn = warn

    def _read(self, path: Path) -> List[_Rule]:
        try:
            data = read_regular_file(path, MAX_IGNORE_FILE_SIZE)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            if self._warn is not None:
                self._warn(path, exc.strerror or str(exc))
            return []
        return parse(data.decode("utf-8", errors="replace"))

    def _rules(self, folder: Path) -> List[_Rule]:
        found = self._cache.get(folder)
        if found is None:
            found = self._cache[folder] = self._read(folder / ".gitignore")
        return found

    def _exclude_file(self, repo: Path) -> List[_Rule]:
        key = repo / ".git" / "info"
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._read(key / "exclude")
        return found

    def repository(self, folder: Path) -> Optional[Path]:
        """The nearest folder at or above `folder` that holds `.git`."""
        if folder in self._repo:
            return self._repo[folder]
        found = None
        for candidate in [folder, *folder.parents]:
            if os.path.exists(candidate / ".git"):  # False, not an error, where it cannot look
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


def _decide(
    rules: List[_Rule], rel: str, is_dir: bool, decision: Optional[bool]
) -> Optional[bool]:
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.match(rel):
            decision = not rule.negated
    return decision


def matches(patterns: str, rel: str, is_dir: bool = False) -> bool:
    """Whether `rel` (a posix path relative to the .gitignore's folder) is ignored by the
    patterns (for tests and one-off checks)."""
    return bool(_decide(parse(patterns), rel, is_dir, None))


__all__: Tuple[str, ...] = ("GitIgnore", "MAX_IGNORE_FILE_SIZE", "matches", "parse")
