"""`trainlint rule CODE` (a rule's explanation) and `trainlint rules` (the table of rules)."""

from __future__ import annotations

import sys

from .options import EXIT_CLEAN, EXIT_ERROR


def cmd_rule(code: str) -> int:
    from ..rules import all_rules

    rules = all_rules()
    rule = rules.get(code.upper())
    if rule is None:
        print(f"error: unknown rule {code!r} (see `trainlint rules`)", file=sys.stderr)
        return EXIT_ERROR
    default = rule.default_label()
    print(f"# {rule.code} {rule.name}\n")
    print(f"Severity: {rule.severity.value}. Default: {default}. Fix: {rule.fix_label()}.\n")
    print(rule.explanation())
    return EXIT_CLEAN


def cmd_rules() -> int:
    from ..rules import all_rules

    rows = [("code", "name", "severity", "default", "fix")]
    for code, rule in all_rules().items():
        rows.append(
            (
                code,
                rule.name,
                rule.severity.value,
                "off" if not rule.default_enabled() else "preview" if rule.preview else "on",
                rule.fix_label(),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    return EXIT_CLEAN
