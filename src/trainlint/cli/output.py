"""What a check prints: colour, the progress line, the report (--statistics, --show-fixes,
--quiet), and --add-noqa's summary.

- Colour: on when stdout is a terminal; `NO_COLOR` (any non-empty value) turns it off,
  `FORCE_COLOR` (any non-empty value) turns it on; NO_COLOR wins when both are set. Only the
  human formats (text, full, concise, statistics) are ever coloured.
- The progress line is drawn on stderr only when both stdout and stderr are terminals, the run
  has many files, the output format is a human one, and neither `CI` nor `--no-progress`/`-q`
  says otherwise; it is erased before the report is printed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, TextIO

from ..config import Settings
from ..diagnostics import Diagnostic
from ..report import HUMAN_FORMATS, ReportContext, get_reporter, printable
from .options import EXIT_CLEAN, EXIT_ERROR, CheckOptions

if TYPE_CHECKING:  # pragma: no cover
    from ..runner import RunResult

PROGRESS_MIN_FILES = 20
_CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "TF_BUILD", "JENKINS_URL")


# -- decisions ----------------------------------------------------------------------------------


def _env(name: str) -> bool:
    return bool(os.environ.get(name, ""))


def use_color(stream: IO[str]) -> bool:
    if _env("NO_COLOR"):
        return False
    if _env("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def in_ci() -> bool:
    return any(os.environ.get(name, "").lower() not in ("", "0", "false") for name in _CI_VARIABLES)


class Progress:
    """`[  12/340] path/to/file.py` redrawn in place on stderr, at most ten times a second."""

    def __init__(self, stream: IO[str], total: int) -> None:
        self.stream = stream
        self.total = total
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int, display: str) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        width = len(str(total))
        text = f"[{done:>{width}}/{total}] {display}"
        columns = _columns()
        if len(text) > columns - 1:
            text = text[: columns - 2] + "\u2026"
        self.stream.write("\r\x1b[K" + text)
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False


def _columns() -> int:
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return columns if columns >= 20 else 80


def progress_for(options: CheckOptions, total: int) -> Optional[Progress]:
    if not options.progress or options.quiet or total < PROGRESS_MIN_FILES:
        return None
    if options.output_format not in HUMAN_FORMATS or options.diff or in_ci():
        return None
    if not (_isatty(sys.stdout) and _isatty(sys.stderr)):
        return None
    return Progress(sys.stderr, total)


def report_root(settings: Settings) -> Path:
    """Where SARIF URIs and GitHub annotation paths start: the git repository holding the project
    root, else the project root."""
    root = Path(settings.root).resolve()
    for folder in [root, *root.parents]:
        if (folder / ".git").exists():
            return folder
    return root


# -- output -------------------------------------------------------------------------------------


def make_context(
    options: CheckOptions, result: "RunResult", settings: Settings, stream: TextIO
) -> ReportContext:
    sources = {
        display: state.source
        for display, state in result.states.items()
        if state.source is not None
    }
    human = options.output_format in HUMAN_FORMATS
    return ReportContext(
        sources=sources,
        unsafe_fixes=settings.unsafe_fixes,
        fixed=result.fixed,
        fix_mode=options.fix,
        color=human and use_color(stream),
        show_fixes=options.show_fixes,
        quiet=options.quiet,
        applied={d: list(s.applied) for d, s in result.states.items() if s.applied},
        root=report_root(settings),
    )


class OutputError(Exception):
    """The report could not be written (a full disk, an I/O error): one line, exit 2."""


def write_out(stream: TextIO, text: str) -> None:
    """Write and flush `text`; a failure to write is an OutputError (a closed pipe is not: the
    reader stopped reading, `trainlint ... | head`)."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def emit_report(
    options: CheckOptions, diagnostics: Sequence[Diagnostic], ctx: ReportContext, stream: TextIO
) -> None:
    try:
        _emit_report(options, diagnostics, ctx, stream)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(exc.strerror or str(exc)) from None


def _emit_report(
    options: CheckOptions, diagnostics: Sequence[Diagnostic], ctx: ReportContext, stream: TextIO
) -> None:
    from ..report.text import fixed_summary, report_statistics

    if options.statistics:
        report_statistics(diagnostics, ctx, stream, as_json=options.output_format == "json")
        if options.show_fixes:
            stream.write(fixed_summary(ctx))
    else:
        get_reporter(options.output_format)(diagnostics, ctx, stream)
    stream.flush()


# -- --add-noqa ---------------------------------------------------------------------------------


def print_lines(kind: str, lines: Sequence[str]) -> None:
    """`kind: line` on stderr for each line (`error`, `warning`), file names made printable."""
    for line in lines:
        print(f"{kind}: {printable(line)}", file=sys.stderr)


def finish_add_noqa(result: "RunResult") -> int:
    """Add the `# noqa` comments and say how many; EXIT_ERROR when one could not be added."""
    from ..addnoqa import add_noqa

    added = add_noqa(result)
    for skipped in added.skipped:
        print(f"warning: {skipped}", file=sys.stderr)
    for error in added.errors:
        print(f"error: {error}", file=sys.stderr)
    n = added.added
    files = len(added.files)
    print(
        f"Added {n} noqa directive{'s' if n != 1 else ''} "
        f"in {files} file{'s' if files != 1 else ''}.",
        file=sys.stderr,
    )
    return EXIT_ERROR if added.errors else EXIT_CLEAN
