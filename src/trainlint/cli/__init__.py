"""The command line: arguments -> options -> Settings -> run -> report -> exit code.

    trainlint [check] [PATH...] [--fix] [--unsafe-fixes] [--diff] [--select ...] ...
    trainlint check - --stdin-filename train.py < train.py
    trainlint rule TRL201
    trainlint rules
    trainlint --version

Exit codes: 0 nothing left to report, 1 findings remain (or --diff would change something),
2 usage, configuration or internal error.

parser.py is the grammar; options.py reads the parsed arguments once into `CheckOptions`, builds
the Settings and decides the exit code; check.py checks files, stdin.py standard input;
output.py prints; explain.py documents the rules.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from ..config import ConfigError
from .check import check_files
from .explain import cmd_rule, cmd_rules
from .options import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, CheckOptions
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
            return cmd_rule(args.code)
        if args.command == "rules":
            return cmd_rules()
        options = CheckOptions.from_args(args)
        return check_stdin(options) if options.reads_stdin else check_files(options)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `trainlint ... | head`
        return EXIT_FINDINGS


__all__ = ["EXIT_CLEAN", "EXIT_ERROR", "EXIT_FINDINGS", "main"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
