"""What a `check` was asked to do, read once from the parsed arguments; the settings it runs
with; and the exit code it ends with.

Exit codes: 0 nothing left to report, 1 findings remain (or --diff would change something, or
--exit-non-zero-on-fix and something was fixed), 2 usage, configuration or internal error.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from ..config import Settings, load_settings, python_path, validate_codes
from ..rules import rule_names

if TYPE_CHECKING:  # pragma: no cover
    # Annotation only: `trainlint rule CODE` does not need the runner imported.
    from ..runner import RunResult

EXIT_CLEAN = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


@dataclass(frozen=True)
class CheckOptions:
    """The options of `trainlint check`, as given (None: not given on the command line)."""

    paths: Tuple[str, ...] = ()
    fix: bool = False
    unsafe_fixes: Optional[bool] = None
    diff: bool = False
    select: Optional[List[str]] = None
    extend_select: Optional[List[str]] = None
    ignore: Optional[List[str]] = None
    output_format: str = "text"
    exit_zero: bool = False
    exit_non_zero_on_fix: bool = False
    config: Optional[Path] = None
    isolated: bool = False
    force_exclude: Optional[bool] = None
    quiet: bool = False
    no_cache: bool = False
    cache_dir: Optional[Path] = None
    jobs: Optional[int] = None
    stdin_filename: Optional[str] = None
    statistics: bool = False
    show_fixes: bool = False
    add_noqa: bool = False
    respect_gitignore: Optional[bool] = None
    progress: bool = True
    preview: Optional[bool] = None
    show_settings: bool = False
    watch: bool = False
    python: Optional[str] = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "CheckOptions":
        return cls(
            paths=tuple(args.paths),
            fix=args.fix,
            unsafe_fixes=args.unsafe_fixes,
            diff=args.diff,
            select=_flatten(args.select),
            extend_select=_flatten(args.extend_select),
            ignore=_flatten(args.ignore),
            output_format=args.output_format,
            exit_zero=args.exit_zero,
            exit_non_zero_on_fix=args.exit_non_zero_on_fix,
            config=args.config,
            isolated=args.isolated,
            force_exclude=args.force_exclude,
            quiet=args.quiet,
            no_cache=args.no_cache,
            cache_dir=args.cache_dir,
            jobs=args.jobs,
            stdin_filename=args.stdin_filename,
            statistics=args.statistics,
            show_fixes=args.show_fixes,
            add_noqa=args.add_noqa,
            respect_gitignore=args.respect_gitignore,
            progress=args.progress,
            preview=args.preview,
            show_settings=args.show_settings,
            watch=args.watch,
            python=args.python,
        )

    @property
    def reads_stdin(self) -> bool:
        """`trainlint -`, or `--stdin-filename NAME` without paths."""
        return self.paths == ("-",) or (self.stdin_filename is not None and not self.paths)


def _flatten(values: Optional[List[List[str]]]) -> Optional[List[str]]:
    if values is None:
        return None
    return [code for group in values for code in group]


def settings_for(options: CheckOptions, paths: Sequence[Path]) -> Settings:
    """The configuration found for `paths` (or given), with the command line's overrides."""
    rules = rule_names()
    settings = load_settings(paths, rules, options.config, isolated=options.isolated)
    given = settings.origins
    if options.select is not None:
        settings.select = validate_codes(options.select, "--select", rules.codes)
        given["select"] = "--select"
    if options.extend_select:
        settings.extend_select = settings.extend_select + validate_codes(
            options.extend_select, "--extend-select", rules.codes
        )
        given["extend-select"] = _joined(given.get("extend-select"), "--extend-select")
    if options.ignore:
        settings.ignore = settings.ignore + validate_codes(options.ignore, "--ignore", rules.codes)
        given["ignore"] = _joined(given.get("ignore"), "--ignore")
    if options.unsafe_fixes is not None:
        settings.unsafe_fixes = options.unsafe_fixes
        given["unsafe-fixes"] = "--unsafe-fixes" if options.unsafe_fixes else "--no-unsafe-fixes"
    if options.preview is not None:
        settings.preview = options.preview
        given["preview"] = "--preview" if options.preview else "--no-preview"
    if options.force_exclude:
        settings.force_exclude = True
        given["force-exclude"] = "--force-exclude"
    if options.respect_gitignore is False:
        settings.respect_gitignore = False
        given["respect-gitignore"] = "--no-respect-gitignore"
    if options.python is not None:
        settings.python = python_path(options.python, Path.cwd(), "--python")
        given["python"] = "--python"
    return settings


def _joined(first: Optional[str], then: str) -> str:
    return f"{first} + {then}" if first else then


def exit_code(options: CheckOptions, result: "RunResult", internal_error: bool) -> int:
    """How a check of files or of standard input ends (not --add-noqa's, which says whether
    every comment was added)."""
    if internal_error:
        return EXIT_ERROR
    if options.diff:
        return EXIT_FINDINGS if result.changed else EXIT_CLEAN
    if options.fix and options.exit_non_zero_on_fix and result.fixed:
        return EXIT_FINDINGS
    if result.diagnostics and not options.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN
