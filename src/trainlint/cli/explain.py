"""`trainlint rule CODE|NAME` and `trainlint rule --all` (rules' explanations), and
`trainlint rules [--output-format json]` (the table of rules)."""

from __future__ import annotations

import json
import sys
from typing import Optional

from ..config import did_you_mean
from .options import EXIT_CLEAN, EXIT_ERROR


def cmd_rule(code: Optional[str], show_all: bool = False) -> int:
    from ..rules import all_rules

    rules = all_rules()
    if show_all or code is None:
        if not show_all:
            print("error: name a rule (a code or a name), or use --all", file=sys.stderr)
            return EXIT_ERROR
        for i, each in enumerate(rules.values()):
            if i:
                print()
            _print_rule(each)
        return EXIT_CLEAN
    by_name = {each.name: each for each in rules.values()}
    rule = rules.get(code.upper()) or by_name.get(code.lower().replace("_", "-"))
    if rule is None:
        hint = did_you_mean(code.upper(), rules) or did_you_mean(code.lower(), by_name)
        print(f"error: unknown rule {code!r}{hint or ' (see `trainlint rules`)'}", file=sys.stderr)
        return EXIT_ERROR
    _print_rule(rule)
    return EXIT_CLEAN


def _print_rule(rule) -> None:
    default = rule.default_label()
    print(f"# {rule.code} {rule.name}\n")
    print(f"Severity: {rule.severity.value}. Default: {default}. Fix: {rule.fix_label()}.\n")
    print(rule.explanation())


def _default(rule) -> str:
    return "off" if not rule.default_enabled() else "preview" if rule.preview else "on"


def cmd_rules(output_format: str = "text") -> int:
    from ..rules import all_rules

    if output_format == "json":
        table = [
            {
                "code": code,
                "name": rule.name,
                "severity": rule.severity.value,
                "default": _default(rule),
                "fix": rule.fix_label(),
                "summary": rule.summary(),
                "explanation": rule.explanation(),
            }
            for code, rule in all_rules().items()
        ]
        print(json.dumps(table, indent=2))
        return EXIT_CLEAN
    rows = [("code", "name", "severity", "default", "fix")]
    for code, rule in all_rules().items():
        rows.append((code, rule.name, rule.severity.value, _default(rule), rule.fix_label()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return EXIT_CLEAN
