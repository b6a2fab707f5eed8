"""TRL001 syntax-error."""

from __future__ import annotations

from ...diagnostics import Severity
from ..base import Rule


class SyntaxErrorRule(Rule):
    """## What it does
    Reports a file that trainlint cannot analyse: it does not parse as Python, it cannot be
    decoded (bytes that are not valid in the file's encoding), or it contains NUL bytes.
    A file Python reads is not reported for an indent libcst's tokenizer refuses (tabs and
    spaces mixed, `"    \t"` or `"\t  "`, read at tab stops of 8): it is analysed with those
    indents expanded, a notebook's cells included, and its findings offer no fix.

    ## Why is this bad
    A file that does not parse cannot be checked, so every other rule is silent about it. The
    message is Python's own (`'(' was never closed`, `expected ':'`) with its position, so it
    reads like the error `python train.py` would print, before the job is queued.

    ## Example
    ```python
    for epoch in range(args.epochs)
        train_one_epoch(model, loader)
    ```

    ## Use instead
    ```python
    for epoch in range(args.epochs):
        train_one_epoch(model, loader)
    ```

    ## Fix safety
    There is no fix. trainlint never stops because of a broken file: the other files are still
    checked and reported.
    """

    code = "TRL001"
    name = "syntax-error"
    severity = Severity.ERROR
    markers = ()
