"""The command line's grammar: argparse, with every error one line and exit code 2."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import List, NoReturn, Sequence

from .. import __version__
from ..cache import CACHE_DIR_ENV, CACHE_DIR_NAME
from ..config import did_you_mean
from ..report import FORMATS

COMMANDS = ("check", "rule", "rules", "server")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so every error is one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _codes(value: str) -> List[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more processes, not {value!r}")
    return jobs


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="trainlint",
        description="Find the bugs in PyTorch training scripts that waste GPU-hours.",
        epilog="`check` is the default command: `trainlint --fix .` works.",
    )
    parser.add_argument("--version", action="version", version=f"trainlint {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    check = sub.add_parser("check", help="check files and folders (default command)")
    check.add_argument("paths", nargs="*", metavar="PATH", help="files or folders (default: .)")
    check.add_argument("--fix", action="store_true", help="apply safe fixes")
    check.add_argument(
        "--unsafe-fixes",
        dest="unsafe_fixes",
        action="store_true",
        default=None,
        help="also apply (with --fix) or show as fixable the fixes that may change behaviour",
    )
    check.add_argument(
        "--no-unsafe-fixes", dest="unsafe_fixes", action="store_false", help=argparse.SUPPRESS
    )
    check.add_argument(
        "--diff", action="store_true", help="print the diff --fix would apply; write nothing"
    )
    check.add_argument(
        "--preview",
        action="store_true",
        default=None,
        help="also run the preview rules (not yet on by default: see `trainlint rules`)",
    )
    check.add_argument("--no-preview", dest="preview", action="store_false", help=argparse.SUPPRESS)
    check.add_argument("--select", type=_codes, action="append", help="codes or prefixes, or ALL")
    check.add_argument("--extend-select", type=_codes, action="append", help="add to the selection")
    check.add_argument("--ignore", type=_codes, action="append", help="codes or prefixes to skip")
    check.add_argument(
        "--output-format",
        choices=FORMATS,
        default="text",
        help="text (default: findings with code frames), concise, json (ruff's schema), "
        "sarif (SARIF 2.1.0, for GitHub code scanning), github (Actions annotations)",
    )
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when findings remain")
    check.add_argument(
        "--exit-non-zero-on-fix",
        action="store_true",
        help="exit 1 if any file was fixed (for pre-commit), even when nothing remains",
    )
    check.add_argument("--config", type=Path, help="a pyproject.toml or trainlint.toml to use")
    check.add_argument("--isolated", action="store_true", help="ignore every configuration file")
    check.add_argument(
        "--python",
        metavar="PATH",
        help="the interpreter whose installed packages (mmdet, timm, ...) are read, never "
        "imported (default: $VIRTUAL_ENV, else the one running trainlint)",
    )
    check.add_argument(
        "--force-exclude",
        action="store_true",
        default=None,
        help="apply excludes to paths given on the command line too (pre-commit)",
    )
    check.add_argument(
        "--show-settings",
        action="store_true",
        help="print the resolved settings (and where each came from) instead of checking",
    )
    check.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="check again whenever a file changes (needs the `watch` extra: watchfiles)",
    )
    check.add_argument("-q", "--quiet", action="store_true", help="print findings only")
    speed = check.add_argument_group("cache and workers")
    speed.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the per-file cache"
    )
    speed.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help=f"where the cache lives (default: ${CACHE_DIR_ENV}, else {CACHE_DIR_NAME}/ in the "
        "project root)",
    )
    speed.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        metavar="N",
        help="check files in N processes (default: the CPU count; -j1: in this process)",
    )
    _add_input_output_arguments(check)

    rule = sub.add_parser(
        "rule", help="explain a rule: trainlint rule TRL201 (or its name: batch-not-on-device)"
    )
    rule.add_argument("code", nargs="?", metavar="CODE_OR_NAME")
    rule.add_argument("--all", dest="all", action="store_true", help="explain every rule")

    rules = sub.add_parser("rules", help="list every rule")
    rules.add_argument(
        "--output-format", choices=("text", "json"), default="text", help="text (a table) or json"
    )
    sub.add_parser(
        "server",
        help="run the language server (LSP over stdio; needs the `lsp` extra: pygls)",
    )
    return parser


def _add_input_output_arguments(check: argparse.ArgumentParser) -> None:
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


def normalise_argv(argv: Sequence[str]) -> List[str]:
    """`check` is the default command: `trainlint --fix .` is `trainlint check --fix .`.

    A first word that is neither a command nor an existing path, and is spelt like a command
    (`trainlint chek train.py`), is refused before anything is checked."""
    args = list(argv)
    if not args:
        return ["check"]
    if args[0] in COMMANDS or args[0] in ("-h", "--help", "--version"):
        return args
    first = args[0]
    if re.fullmatch(r"[a-z][a-z-]*", first) and not Path(first).exists():
        hint = did_you_mean(first, COMMANDS)
        if hint or len(args) > 1:
            raise UsageError(
                f"unknown command {first!r}{hint}; commands: {', '.join(COMMANDS)} "
                "(a path to check must exist)"
            )
    return ["check", *args]
