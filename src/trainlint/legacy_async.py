"""`x.cuda(async=True)`: PyTorch's keyword until 0.4, a syntax error since Python 3.7.

PyTorch 0.4 renamed the `async` argument of `Tensor.cuda`, `Tensor.to`, `Tensor.copy_` and
`Tensor.type` to `non_blocking` (same meaning: copy without waiting when the source is pinned
memory); Python 3.7 then made `async` a reserved word, so a file that still passes `async=True`
does not even compile. Such files are common in pre-2019 training code (data loading loops
that do `input.cuda(async=True)`).

`renaming(text)` finds those keyword arguments with Python's tokenizer (the file does not
parse, so there is no tree) and returns the edits that rename them, but only when the renamed
text parses: then `async=` was the file's only syntax error, and TRL001 offers the rename as a
safe fix. A keyword `async=` given to any other call (a library of its own with such a
parameter) is not renamed; where one remains the file still does not parse and no fix is
offered.
"""

from __future__ import annotations

import io
import tokenize
from typing import List, Optional

from . import parse_guard
from .diagnostics import Edit

# Tensor methods whose `async` argument PyTorch 0.4 renamed to `non_blocking`.
RENAMED_IN = ("cuda", "to", "copy_", "type")
NEW_NAME = "non_blocking"


def renaming(text: str) -> Optional[List[Edit]]:
    """The edits that turn every `async=` argument of `.cuda(...)`, `.to(...)`, `.copy_(...)`
    and `.type(...)` into `non_blocking=`, when there is one and the renamed text parses
    (libcst and Python's compiler); otherwise None."""
    if "async" not in text:
        return None
    edits = _async_keywords(text)
    if not edits:
        return None
    from .fixes import apply_edits, broken_by_fixes

    renamed = apply_edits(text, edits)
    # Python's parser first: libcst's native parser must not meet what parse_guard refuses.
    if parse_guard.precheck(renamed, max_size=None).problem is not None:
        return None
    if broken_by_fixes(text, renamed) is not None:
        return None
    return edits


def _async_keywords(text: str) -> List[Edit]:
    starts = [0]
    for line in io.StringIO(text):
        starts.append(starts[-1] + len(line))
    edits: List[Edit] = []
    # One entry per open bracket: the method whose call it opens (".cuda("), else None.
    opened: List[Optional[str]] = []
    previous: List[tokenize.TokenInfo] = []  # the last two significant tokens
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return []  # not even tokens: some other error comes first
    for index, token in enumerate(tokens):
        if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            continue
        if token.type == tokenize.OP and token.string in "([{":
            method = None
            if (
                token.string == "("
                and len(previous) == 2
                and previous[0].string == "."
                and previous[1].type == tokenize.NAME
                and previous[1].string in RENAMED_IN
            ):
                method = previous[1].string
            opened.append(method)
        elif token.type == tokenize.OP and token.string in ")]}":
            if opened:
                opened.pop()
        elif (
            token.type == tokenize.NAME
            and token.string == "async"
            and opened
            and opened[-1] is not None
            and previous
            and previous[-1].string in ("(", ",")
            and index + 1 < len(tokens)
            and tokens[index + 1].string == "="
        ):
            row, col = token.start
            start = starts[row - 1] + col
            edits.append(Edit(start, start + len("async"), NEW_NAME, row, col, row, col + 5))
        previous = (previous + [token])[-2:]
    return edits


__all__ = ["NEW_NAME", "RENAMED_IN", "renaming"]
