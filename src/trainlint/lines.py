"""A text's physical lines, split exactly where Python's tokenizer splits them.

Python ends lines only at \\r\\n, \\r and \\n; str.splitlines() also splits at form feeds,
\\x1c..\\x1e and \\u2028, which would shift every row after them. Sources, notebooks, the parse
guard and --add-noqa all count rows this way.
"""

from __future__ import annotations

import re
from typing import List

_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> List[str]:
    """Lines with their line endings, split exactly where Python's tokenizer splits them."""
    return _LINE_RE.findall(text)
