"""The command line: arguments -> options -> Settings -> run -> report -> exit code.

    trainlint [check] [PATH...] [--fix] [--unsafe-fixes] [--diff] [--select ...] ...
    trainlint check - --stdin-filename train.py < train.py
    trainlint rule TRL201
    trainlint rules
    trainlint server                 (a language server for editors)
    trainlint --version

Exit codes: 0 nothing left to report, 1 findings remain (or --diff would change something),
2 usage, configuration or internal error. Whatever fails inside trainlint ends here as one line
on stderr and exit 2: an uncaught exception would end the process with Python's exit code 1,
which CI and pre-commit read as "findings remain".

parser.py is the grammar; options.py reads the parsed arguments once into `CheckOptions`, builds
the Settings and decides the exit code; check.py checks files, stdin.py standard input;
output.py prints; explain.py documents the rules.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Optional, Sequence

from ..config import ConfigError
from .check import check_files
from .explain import cmd_rule, cmd_rules
from .options import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, CheckOptions
from .output import OutputError
from .parser import UsageError, build_parser, normalise_argv
from .stdin import check_stdin


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(normalise_argv(argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    try:
        if args.command == "rule":
            return cmd_rule(args.code, args.all)
        if args.command == "rules":
            return cmd_rules(args.output_format)
        if args.command == "server":
            from ..server import serve

            return serve(cache=not args.no_cache, cache_dir=args.cache_dir)
        options = CheckOptions.from_args(args)
        if options.show_settings:
            from .show import show_settings

            return show_settings(options, sys.stdout)
        if options.watch:
            from .watch import watch

            return watch(options)
        return check_stdin(options) if options.reads_stdin else check_files(options)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `trainlint ... | head`
        return EXIT_FINDINGS
    except OutputError as exc:  # `trainlint check . > /dev/full`
        _discard_stdout()
        print(f"error: cannot write the report: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # trainlint's own bug: say what and where, in one line
        print(f"error: internal error: {_describe(exc)}; please report it", file=sys.stderr)
        return EXIT_ERROR


def _describe(exc: BaseException) -> str:
    """`Type: message (at file.py:line)`, where the exception was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    message = " ".join(str(exc).split())  # one line
    return f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"


def _discard_stdout() -> None:
    """Point stdout at the null device: what could not be written is dropped instead of failing
    again (with a second message) when Python flushes stdout at exit."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # stdout is not a file (a test's StringIO)
        pass


__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "main"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
