"""Which rules run: decided once per run, from the Settings and the rules' catalog.

select / extend-select / ignore over the catalog give the run's enabled codes; per-file-ignores
narrow them file by file (`codes_for`). The runner, the cache, the engine, the project phase and
TRL002 (unused `# noqa`) all receive this one object instead of each working the selection out
again from the settings.

The catalog (rules/catalog.py) describes the rules without importing them, so a run whose files
all come from the cache never imports libcst or a rule: the rule classes are imported only when a
file is checked (`rules_for`) or the project phase runs (`project_rules`).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Mapping, Tuple, Type

from . import rules as registry
from .config import Settings
from .rules.base import Rule
from .rules.catalog import RuleInfo


class Selection:
    """The rules a run enables, and for each file the ones per-file-ignores leave on."""

    def __init__(self, settings: Settings, catalog: Mapping[str, RuleInfo]) -> None:
        self.settings = settings
        self.catalog: Dict[str, RuleInfo] = dict(catalog)
        # Every code trainlint knows, in code order (TRL002 tells unknown `# noqa` codes by it).
        self.known: Tuple[str, ...] = tuple(catalog)
        self.enabled: FrozenSet[str] = frozenset(
            code
            for code, info in catalog.items()
            if settings.selects(code, info.default_enabled, info.preview)
        )
        # The enabled rules that have a project phase, in code order.
        self.project_codes: Tuple[str, ...] = tuple(
            code for code, info in catalog.items() if info.project and code in self.enabled
        )
        self._rules_by_codes: Dict[FrozenSet[str], List[Type[Rule]]] = {}

    @classmethod
    def of(cls, settings: Settings) -> "Selection":
        """The selection of `settings` over the registered rules."""
        return cls(settings, registry.rule_catalog())

    def codes_for(self, path: str) -> FrozenSet[str]:
        """The codes enabled for the file at display path `path` (after per-file-ignores)."""
        return self.settings.codes_for(path, self.enabled)

    def file_fingerprint(self, path: str) -> str:
        """What in the settings changes this file's per-file result (the cache's key)."""
        return self.settings.file_fingerprint(path, self.enabled)

    def rules_for(self, path: str) -> List[Type[Rule]]:
        """The rule classes enabled for one file, in code order (imports the rules)."""
        codes = self.codes_for(path)
        found = self._rules_by_codes.get(codes)
        if found is None:
            found = [rule for code, rule in registry.all_rules().items() if code in codes]
            self._rules_by_codes[codes] = found
        return found

    def rule(self, code: str) -> Type[Rule]:
        """One rule's class, importing that rule's module only (the catalog names it)."""
        return registry.load_rule(self.catalog[code])

    def project_rules(self) -> List[Type[Rule]]:
        """The enabled rules with a project phase, in code order (imports the rules)."""
        rules = registry.all_rules()
        return [rules[code] for code in self.project_codes]

    def __getstate__(self) -> Dict[str, object]:
        # Sent to worker processes: the rule classes are found again there, not pickled.
        state = dict(self.__dict__)
        state["_rules_by_codes"] = {}
        return state


__all__ = ["Selection"]
