"""`trainlint check --watch`: check, then check again whenever a Python file, a notebook or a
configuration file under the given paths changes, until Ctrl-C.

Each round clears the screen and runs the same check as without --watch. The per-file cache
(on unless --no-cache) is what makes a round cheap: only the files that changed are analysed
again; the others' results are read back. watchfiles (the optional extra `watch`) does the
watching; the configuration is read again each round, so an edit
to pyproject.toml takes effect at once.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List

from .options import EXIT_CLEAN, EXIT_ERROR, CheckOptions

CLEAR_SCREEN = "\x1b[2J\x1b[H"
WATCHED_SUFFIXES = (".ipynb", ".toml")  # besides Python files; .toml: configuration
IDLE_WAKEUP_MS = 300  # the watcher yields (nothing) this often when no file changed


def watch(options: CheckOptions) -> int:
    """Check now and after every change until interrupted (Ctrl-C: exit code 0)."""
    try:
        import watchfiles
    except ImportError:
        print("error: --watch needs watchfiles, the `watch` extra", file=sys.stderr)
        return EXIT_ERROR
    if options.reads_stdin or options.add_noqa or options.diff:
        print(
            "error: --watch cannot be used with standard input, --add-noqa or --diff",
            file=sys.stderr,
        )
        return EXIT_ERROR
    paths: List[Path] = [Path(p) for p in options.paths] or [Path(".")]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"error: {', '.join(missing)}: no such file or directory", file=sys.stderr)
        return EXIT_ERROR
    # The watcher starts with the first `next()`: the first check runs after it (on the first
    # empty yield), so a file saved during that check is not missed.
    changes = watchfiles.watch(
        *paths,
        watch_filter=watchfiles.PythonFilter(extra_extensions=WATCHED_SUFFIXES),
        rust_timeout=IDLE_WAKEUP_MS,
        yield_on_timeout=True,
        raise_interrupt=False,  # Ctrl-C ends the watch quietly
    )
    started = False
    try:
        for changed in changes:
            if not started:
                _round(options, "Starting trainlint in watch mode...")
                started = True
            if changed:
                names = sorted({Path(name).name for _, name in changed})
                _round(options, f"File change detected ({', '.join(names)}): checking again...")
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends, whenever it comes
        pass
    return EXIT_CLEAN


def _round(options: CheckOptions, banner: str) -> None:
    from ..config import ConfigError
    from .check import check_files

    sys.stdout.write(CLEAR_SCREEN)
    sys.stdout.write(f"[{time.strftime('%H:%M:%S')}] {banner}\n\n")
    sys.stdout.flush()
    try:
        check_files(options)
    except ConfigError as exc:  # keep watching: the next save may fix the configuration
        print(f"error: {exc}", file=sys.stderr)
    sys.stdout.write(f"\n[{time.strftime('%H:%M:%S')}] Watching for file changes.\n")
    sys.stdout.flush()
