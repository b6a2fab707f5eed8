"""The command line: arguments -> Settings -> run -> report -> exit code.

    trainlint [check] [PATH...] [--fix] [--unsafe-fixes] [--diff] [--select ...] ...
    trainlint check - --stdin-filename train.py < train.py
    trainlint rule TRL201
    trainlint rules
    trainlint --version

Exit codes: 0 nothing left to report, 1 findings remain (or --diff would change something),
2 usage, configuration or internal error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from . import __version__, cli_io
from .cache import CACHE_DIR_ENV, CACHE_DIR_NAME
from .config import ConfigError, Settings, load_settings, validate_codes
from .report import FORMATS

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

COMMANDS = ("check", "rule", "rules")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so every error is one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
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
        "--force-exclude",
        action="store_true",
        default=None,
        help="apply excludes to paths given on the command line too (pre-commit)",
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
    cli_io.add_arguments(check)

    rule = sub.add_parser("rule", help="explain a rule: trainlint rule TRL201")
    rule.add_argument("code")

    sub.add_parser("rules", help="list every rule")
    return parser


def _normalise_argv(argv: Sequence[str]) -> List[str]:
    args = list(argv)
    if not args:
        return ["check"]
    if args[0] in COMMANDS or args[0] in ("-h", "--help", "--version"):
        return args
    return ["check", *args]


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(_normalise_argv(argv))
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
        return cmd_check(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `trainlint ... | head`
        return EXIT_FINDINGS


def cmd_rule(code: str) -> int:
    from .rules import all_rules

    rules = all_rules()
    rule = rules.get(code.upper())
    if rule is None:
        print(f"error: unknown rule {code!r} (see `trainlint rules`)", file=sys.stderr)
        return EXIT_ERROR
    default = "on" if rule.default_enabled() else "off (select it to enable)"
    print(f"# {rule.code} {rule.name}\n")
    print(f"Severity: {rule.severity.value}. Default: {default}. Fix: {rule.fix_label()}.\n")
    print(rule.explanation())
    return EXIT_CLEAN


def cmd_rules() -> int:
    from .rules import all_rules

    rows = [("code", "name", "severity", "default", "fix")]
    for code, rule in all_rules().items():
        rows.append(
            (
                code,
                rule.name,
                rule.severity.value,
                "on" if rule.default_enabled() else "off",
                rule.fix_label(),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return EXIT_CLEAN


def _flatten(values: Optional[List[List[str]]]) -> Optional[List[str]]:
    if values is None:
        return None
    return [code for group in values for code in group]


def settings_from_args(args: argparse.Namespace, paths: Sequence[Path]) -> Settings:
    from .rules import rule_names

    rules = rule_names()
    settings = load_settings(paths, rules, args.config, isolated=args.isolated)
    select = _flatten(args.select)
    if select is not None:
        settings.select = validate_codes(select, "--select", rules.codes)
    extend = _flatten(args.extend_select)
    if extend:
        settings.extend_select = settings.extend_select + validate_codes(
            extend, "--extend-select", rules.codes
        )
    ignore = _flatten(args.ignore)
    if ignore:
        settings.ignore = settings.ignore + validate_codes(ignore, "--ignore", rules.codes)
    if args.unsafe_fixes is not None:
        settings.unsafe_fixes = args.unsafe_fixes
    if args.force_exclude:
        settings.force_exclude = True
    if getattr(args, "respect_gitignore", None) is False:
        settings.respect_gitignore = False
    return settings


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


def cmd_check(args: argparse.Namespace) -> int:
    from .cache import Cache
    from .files import discover
    from .runner import run
    from .selection import Selection
    from .workers import default_jobs

    if cli_io.reads_stdin(args):
        return cli_io.check_stdin(args, settings_from_args)
    if args.add_noqa and (args.fix or args.diff):
        print("error: --add-noqa cannot be combined with --fix or --diff", file=sys.stderr)
        return EXIT_ERROR
    paths = [Path(p) for p in args.paths] or [Path(".")]
    settings = settings_from_args(args, paths)
    found = discover(paths, settings)
    for error in found.errors:
        print(f"error: {error}", file=sys.stderr)
    if found.errors and not found.files:
        return EXIT_ERROR

    progress = cli_io.progress_for(args, len(found.files))
    selection = Selection.of(settings)
    cache = None if args.no_cache else Cache.for_selection(selection, args.cache_dir)
    try:
        result = run(
            found.files,
            selection,
            fix=args.fix,
            unsafe=settings.unsafe_fixes,
            diff=args.diff,
            progress=progress,
            cache=cache,
            jobs=args.jobs or default_jobs(),
            whole_project=_covers_project(paths, settings),
        )
    finally:
        if progress is not None:
            progress.close()
    for error in result.errors:
        print(f"error: {error}", file=sys.stderr)
    for crash in result.crashes:
        print(f"error: {crash.describe()}", file=sys.stderr)

    internal_error = bool(found.errors or result.errors or result.crashes)
    if args.add_noqa:
        code = cli_io.finish_add_noqa(result)
        return EXIT_ERROR if internal_error else code
    if args.diff:
        text = result.diff()
        sys.stdout.write(text)
        if not args.quiet:
            n = result.fixed
            print(
                f"Would fix {n} finding{'s' if n != 1 else ''}"
                f" ({len(result.diagnostics)} would remain).",
                file=sys.stderr,
            )
        if internal_error:
            return EXIT_ERROR
        return EXIT_FINDINGS if text else EXIT_CLEAN

    ctx = cli_io.make_context(args, result, settings, sys.stdout)
    cli_io.emit_report(args, result.diagnostics, ctx, sys.stdout)

    if internal_error:
        return EXIT_ERROR
    if args.fix and args.exit_non_zero_on_fix and result.fixed:
        return EXIT_FINDINGS
    if result.diagnostics and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
