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

    The verdict does not depend on the Python trainlint runs on. f-strings that only Python
    3.12 reads (PEP 701: the f-string's own quote, a backslash, a comment or a line break
    inside a replacement field, as in `f"{row["loss"]:.3f}"`) are valid code, also under an
    older interpreter: the file is analysed. A notebook records the Python it last ran on
    (`language_info.version`); when that is older than 3.12, such a cell is reported, since
    it fails there: `SyntaxError before Python 3.12: an f-string's own quote inside its
    replacement field; this notebook records Python 3.8`.

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
    One shape has a safe fix: PyTorch's old `async=` argument (`x.cuda(async=True)`,
    `x.to(device, async=True)`, `dst.copy_(src, async=True)`, `x.type(T, async=True)`). PyTorch
    0.4 renamed it `non_blocking=`, with the same meaning, and Python 3.7 made `async` a
    reserved word, so pre-2019 training code often no longer compiles. When renaming every such
    argument makes the whole file parse, the finding says so and `--fix` renames them; the file
    is then analysed like any other. An `async=` given to any other call is left alone, and
    with it the fix (the file would still not compile). Notebook cells are reported without
    the fix. Every other syntax error has no fix. trainlint never stops because of a broken
    file: the other files are still checked and reported.

    ## Known problems
    A `.py` file does not say which Python it is for (`requires-python` is not read), so a
    3.12 f-string in a project that still supports older Pythons is not reported.
    """

    code = "TRL001"
    name = "syntax-error"
    severity = Severity.ERROR
    fix = "safe"
    markers = ()
