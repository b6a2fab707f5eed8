"""flake8 plugin: `flake8 --select TRL`.

A thin adapter over the same engine. flake8 hands over the file's lines; columns go back 0-based
(flake8 adds 1 itself). Info-level rules are added to flake8's default ignore list, so they run
only when selected. `# noqa` is flake8's job here. Rules that join several files (the project
phase) see only the one file flake8 gives them; `trainlint check` is the complete tool.

Configuration: of `[tool.trainlint]` (or trainlint.toml) found for the file, flake8 mode reads
the rules' own options (`device-movers`) and the limits of one file's work (`max-file-size`,
`per-file-timeout`), nothing else: select, extend-select, ignore, per-file-ignores, exclude,
extend-exclude, force-exclude, respect-gitignore and preview are flake8's to decide here (its
--select/--extend-select/--ignore/--per-file-ignores/--exclude), and fixes do not exist under
flake8. A configuration error is printed once per folder and the rules
then run with their defaults.

A file libcst cannot parse yields TRL001. trainlint's own failure (a rule that raises, or the
checker itself) is a TRL000 finding on line 1 that names the error: flake8 shows it and exits 1
like any finding, where an error printed on stderr and nothing yielded let the run pass. The
file's other findings are still reported, and flake8 goes on with the other files.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, List, Optional, Sequence, Tuple

from . import __version__

if TYPE_CHECKING:  # pragma: no cover
    from .config import Settings

Result = Tuple[int, int, str, type]

# The code of trainlint's own failures under flake8 (no rule has it).
INTERNAL_ERROR = "TRL000"


class TrainlintChecker:
    name = "trainlint"
    version = __version__

    def __init__(
        self, tree: Any = None, lines: Optional[Sequence[str]] = None, filename: str = ""
    ) -> None:
        self.lines = list(lines or [])
        self.filename = filename or "stdin"

    @classmethod
    def add_options(cls, option_manager: Any) -> None:
        from .rules import all_rules

        # Off by default, as in the CLI: info-level rules and preview rules.
        off = [
            code
            for code, rule in all_rules().items()
            if not rule.default_enabled() or rule.preview
        ]
        try:
            option_manager.extend_default_ignore(off)
        except AttributeError:  # very old flake8
            pass

    def run(self) -> Generator[Result, None, None]:
        try:
            found = self._check()
        except Exception as exc:  # never take flake8's run down with us
            found = [
                (
                    1,
                    0,
                    f"{INTERNAL_ERROR} trainlint internal error: {type(exc).__name__}: {exc}; "
                    "this file was not checked (please report it)",
                )
            ]
        for row, col, message in found:
            yield row, col, message, type(self)

    def _check(self) -> List[Tuple[int, int, str]]:
        from .config import Settings, find_project_root
        from .engine import check
        from .project import Project, run_project_phase
        from .rules import all_rules
        from .selection import Selection
        from .source import Source

        # flake8 decides what is selected; run every rule and let it filter.
        settings = Settings(root=find_project_root(Path(self.filename).parent))
        configured = _configured(Path(self.filename).resolve().parent)
        if configured is not None:
            settings.options = dict(configured.options)
            # How much work one file may cost is the project's to say, under flake8 too.
            settings.max_file_size = configured.max_file_size
            settings.per_file_timeout = configured.per_file_timeout
        source = Source(path=self.filename, text="".join(self.lines))
        selection = Selection.of(settings)
        rules = list(all_rules().values())
        result = check(source, selection, rules=rules)
        # Project rules see this one file only (no loader): in-file evidence, never a guess
        # about files flake8 was not given.
        joined, crashes = run_project_phase(
            rules,
            Project(root=settings.root, settings=settings, results={self.filename: result}),
            selection,
        )
        result.diagnostics.extend(joined)
        result.crashes.extend(crashes)
        out = [
            (
                1,
                0,
                f"{INTERNAL_ERROR} trainlint internal error in rule {crash.code}: {crash.error}; "
                "its findings are missing (please report it)",
            )
            for crash in result.crashes
        ]
        for d in sorted(result.diagnostics, key=lambda d: d.sort_key()):
            out.append((d.row, d.col, f"{d.code} {d.message}"))
        return out


@lru_cache(maxsize=64)
def _configured(folder: Path) -> Optional["Settings"]:
    """The configuration found for files in `folder` (once per folder); None when it is broken."""
    from .config import ConfigError, load_settings
    from .rules import rule_names

    try:
        return load_settings([folder], rule_names())
    except ConfigError as exc:
        print(f"trainlint: {exc} (flake8 mode: the rules use their defaults)", file=sys.stderr)
        return None
