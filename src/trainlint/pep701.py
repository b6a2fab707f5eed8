"""f-strings that only Python 3.12 and later read (PEP 701), on any Python trainlint runs on.

Python 3.12 parses an f-string's replacement fields as ordinary expressions: they may hold the
f-string's own quote character (`f'{row['loss']:.3f}'`), backslashes (`f"{'\\n'.join(lines)}"`),
comments, and line breaks inside a single-quoted f-string. Python 3.8 to 3.11 reject all four
with a SyntaxError. Code written since 3.12 uses them freely, so on an older interpreter
trainlint's first check of a file (Python's own parser, `parse_guard.py`) would call valid code
broken, and analyse none of it.

This module scans f-strings by PEP 701's rules without a parser of its own (`scan`):
- `masked` gives the text with every f-string replaced by a plain string on the same rows,
  which any Python 3 parser reads when the rest of the file is valid. `parse` uses it
  only after the interpreter has refused the text itself, and only on Pythons before 3.12;
  whether the f-strings themselves are well formed is then for libcst, which reads 3.12's
  f-strings on every Python, to say.
- `first_feature` names the first f-string part that needs Python 3.12, for a notebook whose
  recorded Python is older (`notebook.py`): there the cell fails as written, on any host.

The scanner only finds where strings, comments and replacement fields begin and end; it checks
nothing an interpreter checks. Text it cannot follow (an unterminated string) gives None.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from typing import List, NamedTuple, Optional, Tuple

# A string literal's start, matched where a token starts: its prefix (at most two letters) and
# its quote.
_STRING_START = re.compile(r"([rRbBuUfF]{0,2})('''|\"\"\"|'|\")")
# The next place outside strings where something starts: a comment or a string (a prefix only
# where no name goes on before it; `else"a"` is a bare quote after a keyword).
_CODE_TOKEN = re.compile(r"#|(?<![\w])[rRbBuUfF]{1,2}['\"]|['\"]")
# Anything that may hold an f-string: a prefix with an `f` right before a quote.
HAS_FSTRING = re.compile(r"(?<![\w])(?:[fF][rR]?|[rR][fF])['\"]")
# Plain (non-f) string bodies up to and including the closing quote. A backslash escapes the
# next character for the purpose of finding the end, in raw strings too.
_PLAIN_BODY = {
    "'": re.compile(r"(?:[^'\\\n]|\\[\s\S])*'"),
    '"': re.compile(r'(?:[^"\\\n]|\\[\s\S])*"'),
    "'''": re.compile(r"(?:[^\\]|\\[\s\S])*?'''"),
    '"""': re.compile(r'(?:[^\\]|\\[\s\S])*?"""'),
}


class Feature(NamedTuple):
    """An f-string part that needs Python 3.12: where (offset into the text) and what it is."""

    offset: int
    what: str


class FString(NamedTuple):
    """An f-string literal at the top level of the text: [start, end) offsets, prefix included."""

    start: int
    end: int


class _Scan:
    def __init__(self, text: str) -> None:
        self.text = text
        self.features: List[Feature] = []

    def string(self, start: int) -> Optional[int]:
        """The end of the string literal whose prefix starts at `start`, or None."""
        match = _STRING_START.match(self.text, start)
        if match is None:
            return None
        prefix, quote = match.group(1), match.group(2)
        if "f" in prefix.lower():
            return self.fstring(match.end(), quote, raw="r" in prefix.lower())
        body = _PLAIN_BODY[quote].match(self.text, match.end())
        return None if body is None else body.end()

    def fstring(self, at: int, quote: str, raw: bool) -> Optional[int]:
        """The end of an f-string whose body starts at `at` (after its opening quote)."""
        text = self.text
        while at < len(text):
            char = text[at]
            if text.startswith(quote, at):
                return at + len(quote)
            if char == "\\":
                if not raw and text.startswith("N{", at + 1):  # "\N{BULLET}" is one character
                    close = text.find("}", at)
                    if close < 0:
                        return None
                    at = close + 1
                else:
                    # A backslash hides the next character from the search for the closing
                    # quote, but not a brace: `rf"\{x}"` still opens a field.
                    at += 1 if text[at + 1 : at + 2] in ("{", "}") else 2
                continue
            if char == "\n" and len(quote) == 1:
                return None  # a single-quoted string ends at the line's end: unterminated
            if char in "{}" and text.startswith(char * 2, at):
                at += 2  # `{{` and `}}` are literal braces
                continue
            if char == "}":
                return None  # a single `}` outside a replacement field
            if char == "{":
                end = self.field(at + 1, quote)
                if end is None:
                    return None
                at = end
                continue
            at += 1
        return None

    def field(self, at: int, quote: str) -> Optional[int]:
        """The end (after its `}`) of a replacement field whose expression starts at `at`, inside
        an f-string delimited by `quote`. Records what in it needs Python 3.12."""
        text = self.text
        start = at
        depth = 0
        while at < len(text):
            char = text[at]
            if char in "([{":
                depth += 1
            elif char in ")]":
                depth -= 1
            elif char == "}":
                if depth == 0:
                    self._judge(start, at, quote)
                    return at + 1
                depth -= 1
            elif char == "#":
                self.features.append(
                    Feature(at, "a comment inside an f-string's replacement field")
                )
                line_end = text.find("\n", at)
                if line_end < 0:
                    return None
                at = line_end
                continue
            elif char == ":" and depth == 0:
                self._judge(start, at, quote)
                return self.format_spec(at + 1, quote)
            elif char in "'\"" or (
                char in "rRbBuUfF"
                and not (text[at - 1 : at].isalnum() or text[at - 1 : at] == "_")
                and _STRING_START.match(text, at)
            ):
                end = self.string(at)
                if end is None:
                    return None
                at = end
                continue
            at += 1
        return None

    def format_spec(self, at: int, quote: str) -> Optional[int]:
        """The end (after the field's `}`) of a format spec starting at `at`: literal text that
        may hold nested fields (`{x:{width}.{precision}f}`)."""
        text = self.text
        while at < len(text):
            char = text[at]
            if text.startswith(quote, at):
                return None
            if char == "}":
                return at + 1
            if char == "{":
                end = self.field(at + 1, quote)
                if end is None:
                    return None
                at = end
                continue
            at += 1
        return None

    def _judge(self, start: int, end: int, quote: str) -> None:
        """What in the expression text[start:end] an f-string delimited by `quote` may hold only
        on Python 3.12 and later (nested strings included: older Pythons end the f-string at its
        own quote wherever it stands, and reject any backslash in the expression part)."""
        expression = self.text[start:end]
        where = expression.find(quote if len(quote) == 3 else quote[0])
        if where >= 0:
            self.features.append(
                Feature(start + where, "an f-string's own quote inside its replacement field")
            )
        where = expression.find("\\")
        if where >= 0:
            self.features.append(
                Feature(start + where, "a backslash inside an f-string's replacement field")
            )
        where = expression.find("\n")
        if where >= 0 and len(quote) == 1:
            self.features.append(
                Feature(start + where, "a line break inside a single-quoted f-string")
            )


def scan(text: str) -> Optional[Tuple[List[FString], List[Feature]]]:
    """The f-strings at the top level of `text` and the parts of them that need Python 3.12,
    or None when the text's strings cannot be followed to their ends."""
    found = _Scan(text)
    fstrings: List[FString] = []
    at = 0
    while True:
        token = _CODE_TOKEN.search(text, at)
        if token is None:
            return fstrings, found.features
        if token.group(0) == "#":
            line_end = text.find("\n", token.start())
            if line_end < 0:
                return fstrings, found.features
            at = line_end
            continue
        end = found.string(token.start())
        if end is None:
            return None
        if "f" in token.group(0).lower():
            fstrings.append(FString(token.start(), end))
        at = end


def masked(text: str) -> Optional[str]:
    """`text` with every f-string replaced by a plain string on the same rows (`'   '` of the
    same width for a one-line f-string, `'''` around the same line breaks for one that spans
    lines), or None when the text's strings cannot be followed."""
    scanned = scan(text)
    if scanned is None:
        return None
    parts: List[str] = []
    at = 0
    for fstring in scanned[0]:
        parts.append(text[at : fstring.start])
        literal = text[fstring.start : fstring.end]
        if "\n" in literal or "\r" in literal:
            # the same line breaks; what follows on its last line moves to other columns,
            # which only the position of a later error would show
            parts.append("'''" + re.sub(r"[^\r\n]", "", literal) + "'''")
        else:
            parts.append("'" + " " * (len(literal) - 2) + "'")
        at = fstring.end
    parts.append(text[at:])
    return "".join(parts)


def first_feature(text: str) -> Optional[Feature]:
    """The first part of an f-string in `text` that needs Python 3.12 (None: there is none, or
    the text's strings cannot be followed)."""
    if HAS_FSTRING.search(text) is None:
        return None
    scanned = scan(text)
    if scanned is None or not scanned[1]:
        return None
    return min(scanned[1])


def parse(text: str) -> Tuple[ast.Module, bool]:
    """Python's tree of `text` and whether it is the tree of `masked(text)`: on a Python older
    than 3.12, a text the interpreter refuses but reads once its f-strings are masked is valid
    3.12 code (if libcst agrees about the f-strings). Raises what `ast.parse` raises."""
    with warnings.catch_warnings():
        # Python warns about the analysed code itself ("invalid escape sequence '\\d'"): that
        # is the user's business, not output of a linter that did not ask for it.
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text), False
        except SyntaxError:
            if sys.version_info >= (3, 12) or HAS_FSTRING.search(text) is None:
                raise
            plain = masked(text)
            if plain is None or plain == text:
                raise
            try:
                return ast.parse(plain), True
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
            raise  # the original error stands: the file is broken on 3.12 as well
