"""The rule registry: every `rules/**/trl*.py` module defines one rule, and nothing else."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Dict, Type

from ..config import RuleNames
from . import catalog
from .base import Rule


@lru_cache(maxsize=None)
def _discover() -> Dict[str, Type[Rule]]:
    found: Dict[str, Type[Rule]] = {}
    for family in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not family.ispkg:
            continue
        family_pkg = importlib.import_module(f"{__name__}.{family.name}")
        for mod in sorted(pkgutil.iter_modules(family_pkg.__path__), key=lambda m: m.name):
            if not mod.name.startswith("trl"):
                continue
            module = importlib.import_module(f"{family_pkg.__name__}.{mod.name}")
            rules = [
                obj
                for obj in vars(module).values()
                if isinstance(obj, type)
                and issubclass(obj, Rule)
                and obj is not Rule
                and obj.__module__ == module.__name__
            ]
            if len(rules) != 1:
                raise RuntimeError(f"{module.__name__} must define exactly one Rule subclass")
            rule = rules[0]
            if rule.code in found:
                raise RuntimeError(f"duplicate rule code {rule.code} in {module.__name__}")
            expected = f"trl{rule.code[3:]}_"
            if not mod.name.startswith(expected.lower()):
                raise RuntimeError(f"{module.__name__} defines {rule.code}; module name must match")
            found[rule.code] = rule
    return dict(sorted(found.items()))


def rule_catalog() -> Dict[str, catalog.RuleInfo]:
    """code -> what the rule is (name, default selection, project phase, module), sorted by
    code, without importing the rules when catalog.json describes the rules on disk
    (rules/catalog.py)."""
    stored = catalog.stored()
    if stored is not None:
        return stored
    return catalog.from_rules(all_rules())


def rule_names() -> RuleNames:
    """The rules as configuration knows them: codes, and (imported on demand) their options."""
    return RuleNames(tuple(rule_catalog()), _declared_options)


def _declared_options() -> Dict[str, type]:
    options: Dict[str, type] = {}
    for rule in all_rules().values():
        options.update(rule.options)
    return options


def all_rules() -> Dict[str, Type[Rule]]:
    """code -> rule class, sorted by code."""
    return _discover()


def load_rule(info: catalog.RuleInfo) -> Type[Rule]:
    """The class `info` describes, importing its module only (not every rule)."""
    rule = getattr(importlib.import_module(info.module), info.qualname)
    if not (isinstance(rule, type) and issubclass(rule, Rule) and rule.code == info.code):
        raise RuntimeError(f"{info.module}.{info.qualname} is not rule {info.code}")
    return rule
