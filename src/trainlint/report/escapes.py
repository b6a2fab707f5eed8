"""Text every output format can encode: file names that are not valid UTF-8 (Python keeps their
bytes as surrogate escapes, U+DC80..U+DCFF) written as `\\xNN`."""

from __future__ import annotations

import re

_SURROGATES = re.compile("[\ud800-\udfff]")


def printable(text: str, backslash: str = "\\") -> str:
    """`text` with each byte of a file name that is not UTF-8 (kept by Python as a surrogate
    escape, U+DC80..U+DCFF) written as `\\xNN`, and any other lone surrogate as `\\uNNNN`:
    what is left encodes as UTF-8. `backslash` is how a backslash is written (`\\\\` inside JSON
    text)."""
    if _SURROGATES.search(text) is None:
        return text

    def escaped(match: "re.Match[str]") -> str:
        code = ord(match.group())
        if 0xDC80 <= code <= 0xDCFF:
            return f"{backslash}x{code - 0xDC00:02x}"
        return f"{backslash}u{code:04x}"

    return _SURROGATES.sub(escaped, text)


def printable_json(text: str) -> str:
    """JSON text (written with ensure_ascii=False) whose strings are `printable`."""
    return printable(text, "\\\\")
