"""flake8 plugin: `flake8 --select TRL`.

A thin adapter over the same engine. flake8 hands over the file's lines; columns go back 0-based
(flake8 adds 1 itself). Info-level rules are added to flake8's default ignore list, so they run
only when selected. `# noqa` is flake8's job here. Rules that join several files (the project
phase) see only the one file flake8 gives them; `trainlint check` is the complete tool.

Configuration: of `[tool.trainlint]` (or trainlint.toml) found for the file, flake8 mode reads
the rules' own options (`device-movers`) and nothing else: select, extend-select, ignore,
per-file-ignores, exclude, extend-exclude, force-exclude, respect-gitignore and preview are
flake8's to decide here (its --select/--extend-select/--ignore/--per-file-ignores/--exclude), and
fixes do not exist under flake8. A configuration error is printed once per folder and the rules
then run with their defaults.

A file libcst cannot parse yields TRL001; a rule that raises is reported on stderr and skipped,
so one bad file or rule never stops flake8's run over the others.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Generator, List, Optional, Sequence, Tuple

from . import __version__

Result = Tuple[int, int, str, type]


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
            print(
                f"trainlint: internal error on {self.filename}: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            return
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
        settings.options = dict(_rule_options(Path(self.filename).resolve().parent))
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
        for crash in result.crashes:
            print(f"trainlint: {crash.describe()}", file=sys.stderr)
        out = []
        for d in sorted(result.diagnostics, key=lambda d: d.sort_key()):
            out.append((d.row, d.col, f"{d.code} {d.message}"))
        return out


@lru_cache(maxsize=64)
def _rule_options(folder: Path) -> Dict[str, Any]:
    """The rules' options in the configuration found for files in `folder` (once per folder)."""
    from .config import ConfigError, load_settings
    from .rules import rule_names

    try:
        return load_settings([folder], rule_names()).options
    except ConfigError as exc:
        print(f"trainlint: {exc} (flake8 mode: the rules use their defaults)", file=sys.stderr)
        return {}
