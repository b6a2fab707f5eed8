"""`trainlint -` or `trainlint --stdin-filename NAME`: lint standard input.

NAME decides the configuration, per-file-ignores and whether the text is a notebook. With `--fix`
the fixed text goes to stdout and the report to stderr, as ruff does; `--diff` prints the diff.
Nothing is written to disk and nothing is cached.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from ..report import printable
from .options import EXIT_CLEAN, EXIT_ERROR, CheckOptions, exit_code, settings_for
from .output import OutputError, emit_report, make_context, print_lines, write_out


def check_stdin(options: CheckOptions) -> int:
    from ..runner import run
    from ..selection import Selection

    if options.add_noqa:
        print("error: --add-noqa cannot be used with standard input", file=sys.stderr)
        return EXIT_ERROR
    name = options.stdin_filename or "-"
    path = Path(name)
    settings = settings_for(options, [path])
    data = sys.stdin.buffer.read()
    if options.stdin_filename and settings.force_exclude and settings.is_excluded(path):
        if options.fix:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return EXIT_CLEAN
    result = run(
        [(path, name)],
        Selection.of(settings),
        fix=options.fix,
        unsafe=settings.unsafe_fixes,
        diff=options.fix or options.diff,  # never write: the fixed text goes to stdout
        contents={name: data},
    )
    errors: List[str] = list(result.errors) + [c.describe() for c in result.crashes]
    print_lines("error", errors)
    if options.diff:
        write_out(sys.stdout, printable(result.diff()))
        return exit_code(options, result, bool(errors))
    report_stream = sys.stdout
    if options.fix:
        state = result.states.get(name)
        fixed = data
        if state is not None and state.source is not None and result.changed:
            fixed = state.source.to_bytes()
        try:
            sys.stdout.buffer.write(fixed)
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None
        report_stream = sys.stderr
    ctx = make_context(options, result, settings, report_stream)
    emit_report(options, result.diagnostics, ctx, report_stream)
    return exit_code(options, result, bool(errors))
