"""Proof by execution (docs/architecture.md, "Proof by execution"): for every
fixtures/oracle/<CODE>/, `bad.py` really fails on CPU PyTorch with the error the rule documents,
`good.py` (the fixed version) runs, and trainlint reports <CODE> on bad.py and nothing of that
code on good.py.

bad.py names the expected failure in a comment: `# oracle-expect: <text in the output>`.
A good.py that carries `# oracle-fix: trainlint` must be exactly what `trainlint --fix
--unsafe-fixes --select <CODE>` makes of bad.py (oracle comment lines aside): the fix itself is
then what was proven to run.

These tests need torch (`pip install -e ".[oracle]"`). Without it they are skipped, unless
TRAINLINT_REQUIRE_ORACLE=1 (CI sets it), where a missing torch is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from fixture_support import ORACLE, lint
from trainlint.diagnostics import Severity
from trainlint.rules import all_rules

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

CASES = sorted(p for p in ORACLE.iterdir() if p.is_dir()) if ORACLE.is_dir() else []


def _code(case) -> str:
    """A case folder is named for its rule: `TRL401`, or `TRL401-meter` for a further claim."""
    return case.name.split("-", 1)[0]


EXPECT_RE = re.compile(r"#\s*oracle-expect:\s*(?P<text>.+?)\s*$", re.MULTILINE)
TIMEOUT = 300


def _need_torch():
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("TRAINLINT_REQUIRE_ORACLE") == "1":
            pytest.fail("torch is not installed but TRAINLINT_REQUIRE_ORACLE=1")
        pytest.skip("torch is not installed: pip install -e '.[oracle]'")


def _run(script, cwd):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))
    }
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONHASHSEED"] = "0"
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )


def test_every_oracle_folder_is_complete():
    for case in CASES:
        assert (case / "bad.py").is_file(), f"{case} has no bad.py"
        assert (case / "good.py").is_file(), f"{case} has no good.py"
        assert EXPECT_RE.search(
            (case / "bad.py").read_text()
        ), f"{case}/bad.py has no oracle-expect"


NO_ORACLE_FILE = ORACLE / "no_oracle.toml"


def _no_oracle():
    if not NO_ORACLE_FILE.is_file():
        return {}
    return tomllib.loads(NO_ORACLE_FILE.read_text(encoding="utf-8"))


def _can_be_error(rule) -> bool:
    """Error-level, or a warning that becomes an error in some projects ("error when the
    class is wrapped in DataParallel"): such a rule may give its reason here too."""
    return rule.severity == Severity.ERROR or "error" in rule.severity_note


def test_every_error_rule_has_an_oracle_or_a_reason():
    """Discovered from the registry: a new error-level rule needs fixtures/oracle/<CODE>/ or a
    line in fixtures/oracle/no_oracle.toml saying why CPU torch cannot show its failure."""
    with_oracle = {_code(case) for case in CASES}
    exempt = _no_oracle()
    missing = [
        code
        for code, rule in sorted(all_rules().items())
        if rule.severity == Severity.ERROR and code not in with_oracle and code not in exempt
    ]
    assert not missing, (
        f"error-level rules without an oracle: {missing}; add fixtures/oracle/<CODE>/ or a "
        f"reason in {NO_ORACLE_FILE.relative_to(ORACLE.parent.parent)}"
    )


def test_no_oracle_list_is_not_stale():
    rules = all_rules()
    with_oracle = {_code(case) for case in CASES}
    for code, reason in _no_oracle().items():
        assert isinstance(reason, str) and reason.strip(), f"{code}: give the reason"
        assert code in rules, f"{code} is listed in no_oracle.toml but not registered"
        assert _can_be_error(rules[code]), f"{code} is not error-level: drop it"
        assert code not in with_oracle, f"{code} has an oracle now: drop it from no_oracle.toml"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_fails_as_documented_and_good_runs(case, tmp_path):
    _need_torch()
    bad = case / "bad.py"
    expected = EXPECT_RE.search(bad.read_text()).group("text")
    for extra in case.iterdir():  # helper modules and data the scripts import
        if extra.is_file():
            shutil.copy2(extra, tmp_path / extra.name)
    bad_run = _run(tmp_path / "bad.py", tmp_path)
    output = bad_run.stdout + bad_run.stderr
    assert bad_run.returncode != 0, f"bad.py ran without error:\n{output[-3000:]}"
    assert expected in output, f"expected {expected!r} in:\n{output[-3000:]}"
    good_run = _run(tmp_path / "good.py", tmp_path)
    assert good_run.returncode == 0, (good_run.stdout + good_run.stderr)[-3000:]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_trainlint_flags_bad_and_not_good(case):
    code = _code(case)
    bad = lint([case / "bad.py"], [code], root=case)
    assert any(d.code == code for d in bad.diagnostics), f"{code} not reported on bad.py"
    good = lint([case / "good.py"], [code], root=case)
    assert not [d for d in good.diagnostics if d.code == code], [
        d.message for d in good.diagnostics
    ]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_good_is_our_fix_when_it_says_so(case, tmp_path):
    good_text = (case / "good.py").read_text()
    if "# oracle-fix: trainlint" not in good_text:
        pytest.skip("good.py is written by hand")
    work = tmp_path / "bad.py"
    shutil.copyfile(case / "bad.py", work)
    lint([work], [_code(case)], root=tmp_path, fix=True, unsafe=True)

    def strip(text):
        return "".join(line for line in text.splitlines(True) if "oracle-" not in line)

    assert strip(work.read_text()) == strip(good_text)
