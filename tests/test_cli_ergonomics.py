"""What a newcomer runs into: which configuration file is read, --show-settings, the JSON schema
of [tool.trainlint], "did you mean", nothing to check, misspelt commands, `rule` by name or
--all, `rules --output-format json`."""

from __future__ import annotations

import json

import jsonschema
import pytest

from trainlint import cli
from trainlint.config import ConfigError, settings_from_table
from trainlint.rules import all_rules, rule_names
from trainlint.schema import settings_schema

BUGGY = 'import torch.nn as nn\nmodel = nn.DataParallel(nn.Linear(4, 2)).to(f"cuda:{args.gpu}")\n'


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- which configuration file ----------------------------------------------------------------


def test_trainlint_toml_is_found_without_config(project, capsys):
    (project / "trainlint.toml").write_text('ignore = ["TRL201"]\n')
    code, out, err = run(capsys, "check", "pkg", "--no-cache")
    assert code == 0 and "TRL201" not in out, err


def test_nearest_configuration_wins_and_dot_file_beats_plain_beats_pyproject(project, capsys):
    (project / "pyproject.toml").write_text('[tool.trainlint]\nignore = ["TRL201"]\n')
    # A folder nearer the file has its own configuration: the root's is not read.
    (project / "pkg" / "pyproject.toml").write_text('[tool.trainlint]\nselect = ["TRL2"]\n')
    assert run(capsys, "check", "pkg", "--no-cache")[0] == 1
    (project / "pkg" / "trainlint.toml").write_text('ignore = ["TRL201"]\n')
    assert run(capsys, "check", "pkg", "--no-cache")[0] == 0
    (project / "pkg" / ".trainlint.toml").write_text('select = ["TRL201"]\n')
    code, out, _ = run(capsys, "check", "pkg", "--show-settings")
    assert code == 0
    assert f"# configuration: {project / 'pkg' / '.trainlint.toml'}" in out


def test_a_pyproject_without_a_trainlint_table_is_skipped(project, capsys):
    (project / "pkg" / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")
    (project / "trainlint.toml").write_text('ignore = ["TRL201"]\n')
    assert run(capsys, "check", "pkg", "--no-cache")[0] == 0


# -- --show-settings ---------------------------------------------------------------------------


def test_show_settings_names_where_each_value_came_from(project, capsys):
    config = project / "pyproject.toml"
    config.write_text('[tool.trainlint]\nselect = ["TRL2"]\nunsafe-fixes = true\n')
    code, out, _ = run(capsys, "check", "--show-settings", "--ignore", "TRL204", "--preview")
    assert code == 0
    assert f'select = ["TRL2"]  # {config}' in out
    assert f"unsafe-fixes = true  # {config}" in out
    assert 'ignore = ["TRL204"]  # --ignore' in out
    assert "preview = true  # --preview" in out
    assert "force-exclude = false  # default" in out
    assert "# rules enabled (3): TRL201 TRL202 TRL203" in out
    assert "TRL201" not in run(capsys, "check", "--show-settings", "--select", "TRL1")[1].split(
        "enabled"
    )[1]


# -- the JSON schema ---------------------------------------------------------------------------

VALID = [
    {},
    {"select": ["TRL1", "trl201", "ALL"], "ignore": ["TRL2"], "preview": True},
    {"per-file-ignores": {"tests/*": ["TRL101"], "scripts/x.py": "TRL2"}},
    {"exclude": ["legacy"], "extend-exclude": ["build2"], "force-exclude": True},
    {"respect-gitignore": False, "unsafe-fixes": True, "extend-select": ["TRL002"]},
    {"device-movers": ["to_device"]},
    {"max-file-size": 0, "per-file-timeout": 0},
    {"per-file-timeout": 2.5},
]
INVALID = [
    {"selct": ["TRL1"]},
    {"select": "TRL1"},
    {"select": ["E501"]},
    {"preview": "yes"},
    {"per-file-ignores": {"tests/*": [1]}},
    {"exclude": [3]},
    {"device-movers": "to_device"},
    {"max-file-size": -1},
    {"per-file-timeout": -1},
    {"per-file-timeout": "60"},
    {"per-file-timeout": 1e9},
]


@pytest.mark.parametrize("table", VALID)
def test_schema_accepts_what_configuration_accepts(table, tmp_path):
    settings_from_table(table, "t", tmp_path, rule_names())
    jsonschema.validate(table, settings_schema())


@pytest.mark.parametrize("table", INVALID)
def test_schema_rejects_what_configuration_rejects(table, tmp_path):
    with pytest.raises(ConfigError):
        settings_from_table(table, "t", tmp_path, rule_names())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(table, settings_schema())


def test_schema_covers_every_key_configuration_knows():
    from trainlint.config import known_keys

    jsonschema.Draft202012Validator.check_schema(settings_schema())
    assert set(settings_schema()["properties"]) == set(known_keys(rule_names()))


# -- did you mean --------------------------------------------------------------------------------


def test_misspelt_key_gets_a_suggestion(project, capsys):
    (project / "pyproject.toml").write_text('[tool.trainlint]\nselct = ["TRL1"]\n')
    code, _, err = run(capsys, "check", "pkg")
    assert code == 2
    assert "unknown key 'selct' in [tool.trainlint] (did you mean 'select'?)" in err


def test_misspelt_code_gets_a_suggestion(project, capsys):
    code, _, err = run(capsys, "check", "pkg", "--select", "TRL2011")
    assert code == 2 and "unknown rule selector 'TRL2011' (did you mean 'TRL201'?)" in err


def test_misspelt_command_is_refused_before_checking(project, capsys):
    code, out, err = run(capsys, "chek", "pkg/train.py")
    assert code == 2 and out == ""
    assert "unknown command 'chek' (did you mean 'check'?)" in err
    assert "TRL201" not in err


def test_a_path_named_like_a_command_is_still_checked(project, capsys):
    (project / "chek").mkdir()
    (project / "chek" / "train.py").write_text(BUGGY)
    code, out, _ = run(capsys, "chek", "--no-cache")
    assert code == 1 and "TRL201" in out


# -- nothing to check --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, warning",
    [
        (["check", "empty"], "No Python files found under the given path(s)"),
        (["check", "docs"], "No Python files found under the given path(s)"),
        (["check", "pkg", "--ignore", "ALL"], "No rules selected"),
        (["check", "pkg", "--select", ""], "No rules selected"),
    ],
)
def test_nothing_to_check_warns_and_never_says_all_passed(project, capsys, argv, warning):
    (project / "empty").mkdir()
    (project / "docs").mkdir()
    (project / "docs" / "notes.md").write_text("# notes\n")
    code, out, err = run(capsys, *argv)
    assert code == 0  # as ruff: a warning, not an error
    assert err.startswith("warning: ") and warning in err
    assert "All checks passed" not in out + err


# -- rule / rules ------------------------------------------------------------------------------


def test_rule_by_name_and_by_code_print_the_same(capsys):
    assert run(capsys, "rule", "batch-not-on-device")[1] == run(capsys, "rule", "trl101")[1]


def test_unknown_rule_name_gets_a_suggestion(capsys):
    code, _, err = run(capsys, "rule", "batch-not-on-devise")
    assert code == 2 and "(did you mean 'batch-not-on-device'?)" in err


def test_rule_all_explains_every_rule(capsys):
    code, out, _ = run(capsys, "rule", "--all")
    assert code == 0
    for rule_code, rule in all_rules().items():
        assert f"# {rule_code} {rule.name}\n" in out
        assert rule.explanation() in out


def test_rules_as_json(capsys):
    code, out, _ = run(capsys, "rules", "--output-format", "json")
    table = json.loads(out)
    assert code == 0 and [row["code"] for row in table] == list(all_rules())
    trl201 = next(row for row in table if row["code"] == "TRL201")
    assert trl201["name"] == "dataparallel-wrap-then-move" and trl201["fix"] == "safe"
    assert set(trl201) == {"code", "name", "severity", "default", "fix", "summary", "explanation"}


# -- output that cannot be misread -------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "concise", "full"])
def test_quiet_keeps_the_format_and_drops_the_summary(project, capsys, fmt):
    loud = run(capsys, "check", "pkg", "--no-cache", "--output-format", fmt)[1]
    code, quiet, _ = run(capsys, "check", "pkg", "--no-cache", "-q", "--output-format", fmt)
    assert code == 1
    summary = loud.rstrip("\n").splitlines()[-1]
    assert summary.startswith("Found 1 finding")
    assert quiet == loud[: loud.rindex(summary)]


def test_unsafe_fixes_hint_says_it_counts_fixes(capsys):
    from fixture_support import REPO

    out = run(capsys, "check", str(REPO / "examples" / "train_buggy.py"), "--no-cache")[1]
    assert out.rstrip().endswith("1 more fix available with `--unsafe-fixes`.")
    assert "1 more with" not in out


def test_a_fix_rerun_that_fixes_nothing_does_not_say_fixed_0(project, capsys):
    code, out, _ = run(capsys, "check", "pkg", "--no-cache", "--fix")
    assert code == 0 and out.strip() == "Fixed 1 finding, 0 remaining."
    code, out, _ = run(capsys, "check", "pkg", "--no-cache", "--fix")
    assert code == 0 and out.strip() == "All checks passed!"
    # A finding --fix cannot fix (its fix is unsafe): counted as found, not as "Fixed 0".
    (project / "pkg" / "loop.py").write_text(
        "import torch.nn.functional as F\n\n\n"
        "def train(model, loader, device):\n"
        "    for images, labels in loader:\n"
        "        images = images.to(device)\n"
        "        loss = F.cross_entropy(model(images), labels)\n"
    )
    code, out, _ = run(capsys, "check", "pkg/loop.py", "--no-cache", "--fix")
    assert code == 1 and "Fixed 0" not in out
    assert out.splitlines()[-1].startswith("Found 1 finding (1 error, 0 warnings).")


def test_sarif_short_description_is_a_short_title():
    from trainlint.report.sarif import SHORT_TITLE_MAX, rule_descriptors, short_title

    for descriptor in rule_descriptors()[0]:
        short = descriptor["shortDescription"]["text"]
        full = descriptor["fullDescription"]["text"]
        assert 0 < len(short) <= SHORT_TITLE_MAX
        assert short != full or len(full) <= SHORT_TITLE_MAX
    assert short_title("Reports X. Then more.", "some-rule") == "Reports X."
    assert short_title("A" * 81 + ".", "dataparallel-wrap-then-move") == (
        "Dataparallel wrap then move"
    )
