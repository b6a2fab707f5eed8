"""`trainlint check PATH...`: discover the files, run, report (or write the fixes, print the
diff, add `# noqa` comments)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Sequence

from ..config import Settings
from ..report import printable
from .options import EXIT_CLEAN, EXIT_ERROR, CheckOptions, exit_code, settings_for
from .output import (
    emit_report,
    finish_add_noqa,
    make_context,
    print_lines,
    progress_for,
    write_out,
)


NO_RULES = (
    "No rules selected (--select, --extend-select and --ignore leave none): nothing was checked"
)


def check_files(options: CheckOptions) -> int:
    from ..cache import Cache
    from ..files import discover
    from ..runner import run
    from ..selection import Selection
    from ..workers import default_jobs

    if options.add_noqa and (options.fix or options.diff):
        print("error: --add-noqa cannot be combined with --fix or --diff", file=sys.stderr)
        return EXIT_ERROR
    paths = [Path(p) for p in options.paths] or [Path(".")]
    settings = settings_for(options, paths)
    found = discover(paths, settings)
    print_lines("error", found.errors)
    print_lines(
        "warning",
        found.warnings + _remove_stale_temporaries(found.temporaries) + _missing_python(settings),
    )
    if found.errors and not found.files:
        return EXIT_ERROR
    selection = Selection.of(settings)
    # Files named on purpose and excluded (pre-commit with --force-exclude) are not "no files".
    named_and_excluded = settings.force_exclude and all(settings.is_excluded(p) for p in paths)
    if (not found.files and not named_and_excluded) or not selection.enabled:
        # As ruff: a warning on stderr and exit 0, never "All checks passed!" (nothing was).
        if not found.files:
            print("warning: No Python files found under the given path(s)", file=sys.stderr)
        else:
            print(f"warning: {NO_RULES}", file=sys.stderr)
        return EXIT_ERROR if found.errors else EXIT_CLEAN

    progress = progress_for(options, len(found.files))
    cache = None if options.no_cache else Cache.for_selection(selection, options.cache_dir)
    try:
        result = run(
            found.files,
            selection,
            fix=options.fix,
            unsafe=settings.unsafe_fixes,
            diff=options.diff,
            progress=progress,
            cache=cache,
            jobs=options.jobs or default_jobs(),
            whole_project=_covers_project(paths, settings),
        )
    finally:
        if progress is not None:
            progress.close()
    print_lines("error", result.errors + [crash.describe() for crash in result.crashes])
    print_lines("warning", result.warnings)

    internal_error = bool(found.errors or result.errors or result.crashes)
    if options.add_noqa:
        code = finish_add_noqa(result)
        return EXIT_ERROR if internal_error else code
    if options.diff:
        write_out(sys.stdout, printable(result.diff()))
        if not options.quiet:
            n = result.fixed
            print(
                f"Would fix {n} finding{'s' if n != 1 else ''}"
                f" ({len(result.diagnostics)} would remain).",
                file=sys.stderr,
            )
        return exit_code(options, result, internal_error)

    ctx = make_context(options, result, settings, sys.stdout)
    emit_report(options, result.diagnostics, ctx, sys.stdout)
    return exit_code(options, result, internal_error)


def _missing_python(settings: Settings) -> List[str]:
    """A warning when the configured interpreter is not there (installed frameworks unread)."""
    if settings.python is None or os.path.isfile(settings.python):
        return []
    where = settings.origins.get("python", "python")
    return [
        f"{where}: python interpreter {settings.python} not found; installed frameworks "
        "are not read (parent classes from them stay unknown)"
    ]


def _remove_stale_temporaries(temporaries: Sequence[Path]) -> List[str]:
    """Remove the temporary files a killed `--fix` left behind; one warning line for each."""
    from ..files import display_path
    from ..fixes import stale_temporary

    removed = []
    for path in temporaries:
        if not stale_temporary(path):
            continue
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(
            f"{display_path(path)}: removed (a temporary file left by an interrupted --fix)"
        )
    return removed


def _covers_project(paths: Sequence[Path], settings: Settings) -> bool:
    """Is the run over the project root itself (`trainlint check .` at the root), so that its
    files are the project's files?"""
    if len(paths) != 1 or not paths[0].is_dir():
        return False
    if settings.force_exclude and str(paths[0]) not in (".", ""):
        return False  # the root itself may be excluded: let the project phase walk it
    try:
        return paths[0].resolve() == settings.root.resolve()
    except OSError:
        return False
