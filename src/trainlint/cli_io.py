"""The command line's input and output habits (cli.py's "input, output and baselines" group):
standard input, colour, the progress line, --statistics, --show-fixes, --add-noqa.

- `trainlint -` or `trainlint --stdin-filename NAME` lints standard input (NAME decides the
  configuration, per-file-ignores and whether it is a notebook). With `--fix` the fixed text goes
  to stdout and the report to stderr, as ruff does; `--diff` prints the diff.
- Colour: on when stdout is a terminal; `NO_COLOR` (any non-empty value) turns it off,
  `FORCE_COLOR` (any non-empty value) turns it on; NO_COLOR wins when both are set. Only the
  human formats (text, full, concise, statistics) are ever coloured.
- The progress line is drawn on stderr only when both stdout and stderr are terminals, the run
  has many files, the output format is a human one, and neither `CI` nor `--no-progress`/`-q`
  says otherwise; it is erased before the report is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import IO, List, Optional

from .report import HUMAN_FORMATS, ReportContext, get_reporter

PROGRESS_MIN_FILES = 20
_CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "TF_BUILD", "JENKINS_URL")


def add_arguments(check: argparse.ArgumentParser) -> None:
    group = check.add_argument_group("input, output and baselines")
    group.add_argument(
        "--stdin-filename",
        metavar="NAME",
        help="lint standard input as if it were the file NAME (also with the path `-`)",
    )
    group.add_argument(
        "--statistics",
        action="store_true",
        help="print the number of findings per code (and how many are fixable) instead of them",
    )
    group.add_argument(
        "--show-fixes",
        action="store_true",
        help="show the change each fix makes; with --fix, list what was fixed",
    )
    group.add_argument(
        "--add-noqa",
        action="store_true",
        help="add `# noqa: CODES` to every line with findings (baseline an existing codebase)",
    )
    group.add_argument(
        "--no-respect-gitignore",
        dest="respect_gitignore",
        action="store_false",
        default=None,
        help="also check files that .gitignore files ignore",
    )
    group.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=True,
        help="never draw the progress line on a terminal",
    )


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


def _isatty(stream) -> bool:
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


def progress_for(args: argparse.Namespace, total: int) -> Optional[Progress]:
    if not getattr(args, "progress", True) or args.quiet or total < PROGRESS_MIN_FILES:
        return None
    if args.output_format not in HUMAN_FORMATS or args.diff or in_ci():
        return None
    if not (_isatty(sys.stdout) and _isatty(sys.stderr)):
        return None
    return Progress(sys.stderr, total)


def report_root(settings) -> Path:
    """Where SARIF URIs and GitHub annotation paths start: the git repository holding the project
    root, else the project root."""
    root = Path(settings.root).resolve()
    for folder in [root, *root.parents]:
        if (folder / ".git").exists():
            return folder
    return root


# -- output -------------------------------------------------------------------------------------


def make_context(args, result, settings, stream: IO[str]) -> ReportContext:
    sources = {
        display: state.source
        for display, state in result.states.items()
        if state.source is not None
    }
    human = args.output_format in HUMAN_FORMATS
    return ReportContext(
        sources=sources,
        unsafe_fixes=settings.unsafe_fixes,
        fixed=result.fixed,
        fix_mode=args.fix,
        color=human and use_color(stream),
        show_fixes=args.show_fixes,
        applied={d: list(s.applied) for d, s in result.states.items() if s.applied},
        root=report_root(settings),
    )


def emit_report(args, diagnostics, ctx: ReportContext, stream: IO[str]) -> None:
    from .report.text import fixed_summary, headline, report_statistics

    if args.statistics:
        report_statistics(diagnostics, ctx, stream, as_json=args.output_format == "json")
        if args.show_fixes:
            stream.write(fixed_summary(ctx))
    elif args.quiet and args.output_format in HUMAN_FORMATS:
        for d in diagnostics:
            stream.write(headline(d, ctx) + "\n")
    else:
        get_reporter(args.output_format)(diagnostics, ctx, stream)
    stream.flush()


# -- standard input -----------------------------------------------------------------------------


def reads_stdin(args: argparse.Namespace) -> bool:
    return args.paths == ["-"] or (args.stdin_filename is not None and not args.paths)


def check_stdin(args: argparse.Namespace, settings_from_args) -> int:
    from .cli import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS
    from .runner import run
    from .selection import Selection

    if args.add_noqa:
        print("error: --add-noqa cannot be used with standard input", file=sys.stderr)
        return EXIT_ERROR
    name = args.stdin_filename or "-"
    path = Path(name)
    settings = settings_from_args(args, [path])
    data = sys.stdin.buffer.read()
    if args.stdin_filename and settings.force_exclude and settings.is_excluded(path):
        if args.fix:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return EXIT_CLEAN
    result = run(
        [(path, name)],
        Selection.of(settings),
        fix=args.fix,
        unsafe=settings.unsafe_fixes,
        diff=args.fix or args.diff,  # never write: the fixed text goes to stdout
        contents={name: data},
    )
    errors: List[str] = list(result.errors) + [c.describe() for c in result.crashes]
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if args.diff:
        sys.stdout.write(result.diff())
        sys.stdout.flush()
        if errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if result.changed else EXIT_CLEAN
    report_stream = sys.stdout
    if args.fix:
        state = result.states.get(name)
        fixed = data
        if state is not None and state.source is not None and result.changed:
            fixed = state.source.to_bytes()
        sys.stdout.buffer.write(fixed)
        sys.stdout.flush()
        report_stream = sys.stderr
    ctx = make_context(args, result, settings, report_stream)
    emit_report(args, result.diagnostics, ctx, report_stream)
    if errors:
        return EXIT_ERROR
    if args.fix and args.exit_non_zero_on_fix and result.fixed:
        return EXIT_FINDINGS
    if result.diagnostics and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


# -- --add-noqa ---------------------------------------------------------------------------------


def finish_add_noqa(result) -> int:
    from .addnoqa import add_noqa
    from .cli import EXIT_CLEAN, EXIT_ERROR

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
