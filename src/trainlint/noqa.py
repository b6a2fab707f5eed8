"""`# noqa` handling, compatible with flake8.

`# noqa` on the row of a finding suppresses every code; `# noqa: TRL201,TRL3` suppresses the
listed codes and every code that starts with a listed prefix (flake8 matches with `startswith`).
Like flake8 the comment is read from the physical line, so it works after any statement.
TRL001 (a file or cell that was not analysed) is the exception: only `# noqa: TRL001` names it
away; a bare `# noqa` on the row where parsing stopped does not.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Tuple

# flake8's own pattern (flake8/defaults.py), kept byte-compatible so that the same comment means
# the same thing under both tools.
NOQA_RE = re.compile(
    r"# noqa" r"(?::[\s]?(?P<codes>([A-Z]+[0-9]+(?:[,\s]+)?)+))?",
    re.IGNORECASE,
)
_CODE_RE = re.compile(r"[A-Z]+[0-9]*", re.IGNORECASE)

NoqaMap = Dict[int, Optional[Tuple[str, ...]]]

# The code that says a file or cell was not analysed (syntax error, size or time limit).
NOT_ANALYSED = "TRL001"


def parse_line(line: str) -> Tuple[bool, Optional[Tuple[str, ...]]]:
    """(has noqa, codes or None for a bare noqa)."""
    if "noqa" not in line.lower():
        return False, None
    match = NOQA_RE.search(line)
    if match is None:
        return False, None
    codes = match.group("codes")
    if not codes:
        return True, None
    return True, tuple(c.upper() for c in _CODE_RE.findall(codes))


def scan(lines: Iterable[str]) -> NoqaMap:
    """row -> codes for every row that carries a noqa comment."""
    found: NoqaMap = {}
    for row, line in enumerate(lines, start=1):
        has, codes = parse_line(line)
        if has:
            found[row] = codes
    return found


def suppresses(codes: Optional[Tuple[str, ...]], code: str) -> bool:
    if codes is None:
        return True
    return any(code == c or code.startswith(c) for c in codes)


def matching_codes(codes: Optional[Tuple[str, ...]], code: str) -> List[str]:
    """Which of the comment's codes suppress `code` (for the unused-noqa rule)."""
    if codes is None:
        return []
    return [c for c in codes if code == c or code.startswith(c)]
