"""The project phase: per-file facts joined across the files of a run.

Rules with `project = True` return plain-data facts from the per-file phase (`Rule.facts()`);
after every file has been checked, `run_project_phase` hands each such rule a `Project` holding
those facts, and the rule returns findings that need more than one file (a class defined in
models.py and wrapped in DDP in train.py). Under flake8, which sees one file at a time, these
rules only use what one file shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Tuple, Type

from .config import Settings
from .diagnostics import Diagnostic, FileResult, RuleCrash
from .rules.base import Rule


@dataclass
class Project:
    root: Path
    settings: Settings
    results: Mapping[str, FileResult]  # display path -> result of the per-file phase
    # display path -> absolute path, for rules that need to name or resolve files
    paths: Dict[str, Path] = field(default_factory=dict)

    def facts(self, code: str) -> Dict[str, object]:
        """display path -> the facts rule `code` recorded for that file."""
        return {
            path: result.facts[code]
            for path, result in self.results.items()
            if code in result.facts
        }


def run_project_phase(
    rules: List[Type[Rule]], project: Project
) -> Tuple[List[Diagnostic], List[RuleCrash]]:
    found: List[Diagnostic] = []
    crashes: List[RuleCrash] = []
    for rule in rules:
        if not rule.project:
            continue
        try:
            mine = []
            for diagnostic in rule.check_project(project):
                if not isinstance(diagnostic, Diagnostic):
                    raise TypeError(
                        f"check_project() must yield Diagnostics, not {type(diagnostic).__name__}"
                    )
                if rule.code in project.settings.codes_for(diagnostic.path):
                    mine.append(diagnostic)
            found.extend(mine)  # all or nothing: a rule that fails halfway reports no findings
        except Exception as exc:  # one rule's bug must not stop the run
            from .engine import _crash

            crashes.append(_crash("<project>", rule.code, exc))
    return found, crashes
