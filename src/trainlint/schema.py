"""A JSON schema for `[tool.trainlint]` (and trainlint.toml), made from the one table of keys
configuration reads (`config.known_keys`: trainlint's own keys and the options rules declare).

    python -m trainlint.schema > trainlint.schema.json

Editors with a TOML language server (Even Better TOML / taplo) use it for completion and
checking. A table `config.settings_from_table` accepts, the schema accepts; what the schema
rejects, configuration rejects too (tests/test_schema.py). The one check left to trainlint: a
selector of the right shape (`TRL9`) that names no rule.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

from .config import MAX_PER_FILE_TIMEOUT, known_keys

# A rule selector: ALL, or a prefix of a code (TRL, TRL2, TRL201), in either case.
SELECTOR_PATTERN = "^([Aa][Ll][Ll]|[Tt]([Rr]([Ll][0-9]{0,3})?)?)$"
_CODE_LISTS = ("select", "extend-select", "ignore")
# The ranges configuration accepts for its numbers (0: no limit).
_BOUNDS: Dict[str, Dict[str, Any]] = {
    "max-file-size": {"minimum": 0},
    "per-file-timeout": {"minimum": 0, "maximum": MAX_PER_FILE_TIMEOUT},
}


def _schema_of(key: str, kind: type) -> Dict[str, Any]:
    if kind is bool:
        return {"type": "boolean"}
    if kind is int:
        return {"type": "integer", **_BOUNDS.get(key, {})}
    if kind is float:
        return {"type": "number", **_BOUNDS.get(key, {})}
    if kind is str:
        return {"type": "string"}
    selectors = {"type": "array", "items": {"type": "string", "pattern": SELECTOR_PATTERN}}
    if kind is list:
        return selectors if key in _CODE_LISTS else {"type": "array", "items": {"type": "string"}}
    if kind is dict and key == "per-file-ignores":
        one = {"type": "string", "pattern": SELECTOR_PATTERN}
        return {"type": "object", "additionalProperties": {"anyOf": [selectors, one]}}
    if kind is dict:
        return {"type": "object"}
    raise TypeError(f"no JSON schema for the type of {key!r}: {kind!r}")


def settings_schema() -> Dict[str, Any]:
    from .rules import rule_names

    keys = known_keys(rule_names())
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "trainlint settings ([tool.trainlint] in pyproject.toml, or trainlint.toml)",
        "type": "object",
        "properties": {key: _schema_of(key, kind) for key, kind in keys.items()},
        "additionalProperties": False,
    }


def main() -> int:
    json.dump(settings_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
