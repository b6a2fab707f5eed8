"""The README's promises: two commands first, and a rule table that matches the registry."""

from __future__ import annotations

import re

from fixture_support import REPO
from trainlint.rules import all_rules

README = (REPO / "README.md").read_text()


def readme_commands():
    block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_starts_with_exactly_two_commands():
    head = README.split("```sh", 1)
    assert head[0].strip().startswith("# trainlint")
    assert len(head[0].strip().splitlines()) == 1, "nothing but the title before the commands"
    install_and_run, install_and_test = readme_commands()
    assert "pip install ." in install_and_run and "trainlint examples/" in install_and_run
    example = install_and_run.split("trainlint ")[-1].split()[0]
    assert (REPO / example).is_file()
    assert "pip install -e" in install_and_test and "[test" in install_and_test
    assert install_and_test.rstrip().endswith("python -m pytest")


def test_ci_runs_the_readme_commands():
    ci = (REPO / ".ci" / "run").read_text()
    assert "README.md" in ci


def test_rule_table_lists_every_rule():
    rows = {}
    for line in README.splitlines():
        match = re.match(
            r"\| \[(TRL\d{3})\]\([^)]*\) \| ([a-z0-9-]+) \| (\w+)[^|]* \| (\w+) \| (\w+) \|",
            line,
        )
        if match:
            rows[match.group(1)] = match.groups()[1:]
    rules = all_rules()
    assert sorted(rows) == sorted(rules)
    for code, rule in rules.items():
        name, severity, fix, default = rows[code]
        assert name == rule.name, code
        assert severity == rule.severity.value, code
        assert fix == rule.fix_label(), code
        expected = "off" if not rule.default_enabled() else "preview" if rule.preview else "on"
        assert default == expected, code


def test_generated_docs_are_up_to_date():
    from trainlint import docs

    assert docs.main(["--root", str(REPO), "--check"]) == 0, "run: python -m trainlint.docs"


def test_rule_command_prints_the_same_text_as_the_docs():
    from trainlint import docs

    text = docs.rules_markdown()
    for code, rule in all_rules().items():
        assert rule.summary() in text
        assert f"## {code} {rule.name}" in text
