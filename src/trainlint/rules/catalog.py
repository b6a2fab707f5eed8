"""What the rules are without importing them: codes, names, default selection, project rules.

Importing every rule imports libcst and every analysis, about 0.35 s on a 2-core machine: more
than the rest of a run whose files all come from the cache (reading the settings only needs the
codes, the cache key only needs the codes and the modules). `catalog.json`, beside this module,
holds that table, with a digest of the rules' source files; it is used only while the digest
matches the files on disk, so an edited rule can never be described by a stale table (the run
imports the rules instead, and is as fast as before). `tests/test_catalog.py` fails when the file
is out of date; rewrite it with

    python -m trainlint.rules
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from typing import Dict, NamedTuple, Optional

FORMAT = 2
RULES_DIR = os.path.dirname(os.path.abspath(__file__))
CATALOG_PATH = os.path.join(RULES_DIR, "catalog.json")


class RuleInfo(NamedTuple):
    code: str
    name: str
    default_enabled: bool
    project: bool  # the rule has a project phase (`check_project`)
    preview: bool  # on by default only in preview mode (see Rule.preview)
    module: str
    qualname: str


def source_digest() -> str:
    """sha256 of every module of the rules package (names and bytes): what the table is of."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    for folder, dirs, names in os.walk(RULES_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, RULES_DIR).replace(os.sep, "/")
                with open(path, "rb") as handle:
                    digest.update(f"{relative}\0".encode() + handle.read() + b"\0")
    return digest.hexdigest()


def from_rules(rules) -> Dict[str, RuleInfo]:
    """The table of rule classes (code -> class), as imported."""
    return {
        code: RuleInfo(
            code, rule.name, rule.default_enabled(), rule.project, rule.preview,
            rule.__module__, rule.__qualname__,
        )
        for code, rule in rules.items()
    }


@lru_cache(maxsize=None)
def stored() -> Optional[Dict[str, RuleInfo]]:
    """The table in catalog.json, or None when it is missing, unreadable, or not of the rules
    on disk."""
    try:
        with open(CATALOG_PATH, encoding="utf-8") as handle:
            data = json.load(handle)
        if data.get("format") != FORMAT or data.get("digest") != source_digest():
            return None
        return {code: RuleInfo(code, *fields) for code, fields in data["rules"].items()}
    except (OSError, ValueError, TypeError, KeyError):
        return None


def render(rules) -> str:
    table = from_rules(rules)
    data = {
        "format": FORMAT,
        "digest": source_digest(),
        "rules": {code: list(info)[1:] for code, info in table.items()},
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"
