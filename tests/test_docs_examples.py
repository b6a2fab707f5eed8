"""What the README and docs promise about reports: the GitHub Actions examples are valid
workflows whose trainlint commands our CLI accepts, and `trainlint rule CODE` prints exactly the
section of docs/rules.md that the JSON/SARIF `url` points at."""

from __future__ import annotations

import re
import shlex

import yaml

from fixture_support import REPO
from trainlint import cli, rule_url
from trainlint.cli.parser import build_parser, normalise_argv
from trainlint.rules import all_rules

README = (REPO / "README.md").read_text()
RULES_MD = (REPO / "docs" / "rules.md").read_text()


def workflows():
    blocks = re.findall(r"```yaml\n(.*?)```", README, re.S)
    return [yaml.safe_load(block) for block in blocks if "runs-on" in block]


def trainlint_commands(workflow):
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            run = step.get("run", "")
            if run.startswith("trainlint"):
                yield shlex.split(run.split(">")[0])[1:]


def test_readme_has_github_actions_examples_for_annotations_and_sarif():
    found = workflows()
    assert len(found) == 2
    commands = [args for workflow in found for args in trainlint_commands(workflow)]
    formats = {args[args.index("--output-format") + 1] for args in commands}
    assert formats == {"github", "sarif"}
    parser = build_parser()
    for args in commands:
        parsed = parser.parse_args(normalise_argv(args))
        assert parsed.command == "check"
    sarif = next(w for w in found if "security-events" in w.get("permissions", {}))
    steps = sarif["jobs"]["trainlint"]["steps"]
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert upload["with"]["sarif_file"] == "trainlint.sarif"
    assert any("> trainlint.sarif" in s.get("run", "") for s in steps)


def test_rule_command_prints_the_docs_section(capsys):
    for code, rule in all_rules().items():
        assert cli.main(["rule", code]) == 0
        printed = capsys.readouterr().out
        anchor = f'<a id="{code.lower()}"></a>'
        assert anchor in RULES_MD and rule_url(code).endswith(f"#{code.lower()}")
        section = RULES_MD.split(anchor, 1)[1].split('<a id="', 1)[0]
        # The same explanation, with the docs' headings one level down.
        assert rule.explanation().replace("## ", "### ") in section
        assert rule.explanation() in printed
