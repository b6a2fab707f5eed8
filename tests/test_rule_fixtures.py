"""The fixtures are the spec: every `# expect:` line is flagged, nothing else is, fixes match
their goldens, and fixing a golden again changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixture_support import (
    CLEAN,
    INPUT_SUFFIXES,
    codes_checked,
    expected_findings,
    golden_for,
    is_input,
    lint,
    rule_cases,
)
from trainlint.diagnostics import Applicability
from trainlint.rules import all_rules

CASES = list(rule_cases())


def _case_id(case):
    code, path = case
    return f"{code}/{path.name}"


def _inputs(path: Path):
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in INPUT_SUFFIXES and is_input(p))
    return [path]


def test_fixture_folders_name_real_rules():
    codes = set(all_rules())
    for code, path in CASES:
        assert code in codes, f"fixtures/rules/{code} names no rule"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_findings_match_expect_comments(case):
    code, path = case
    files = _inputs(path)
    expected = {}
    for file in files:
        for (cell, row, c), severity in expected_findings(file).items():
            expected[(file.resolve(), cell or 0, row, c)] = severity
    checked = codes_checked(code, {(r, c): s for (_, _, r, c), s in expected.items()})
    result = lint([path], sorted(checked), root=path if path.is_dir() else path.parent)
    assert not result.crashes, [c.describe() for c in result.crashes]
    got = {}
    for d in result.diagnostics:
        if d.code in checked:
            got.setdefault((Path(d.path).resolve(), d.cell or 0, d.row, d.code), d)

    def where(p, cell, r):
        return f"{p.name}:cell {cell}:{r}" if cell else f"{p.name}:{r}"

    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    assert not missing, "not reported: " + ", ".join(
        f"{where(p, cell, r)} {c}" for p, cell, r, c in missing
    )
    assert not unexpected, "reported but not expected: " + "; ".join(
        f"{where(p, cell, r)} {c}: {got[(p, cell, r, c)].message}" for p, cell, r, c in unexpected
    )
    for key, severity in expected.items():
        if severity is not None:
            assert got[key].severity.value == severity, f"{key}: {got[key].severity.value}"


def _golden_cases():
    for code, path in CASES:
        if path.is_dir():
            continue
        yield code, path


GOLDEN_CASES = list(_golden_cases())


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[_case_id(c) for c in GOLDEN_CASES])
@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
def test_fixes_match_goldens(case, unsafe, tmp_path):
    code, path = case
    golden = golden_for(path, unsafe)
    work = tmp_path / path.name
    shutil.copyfile(path, work)
    before = lint([work], [code], root=tmp_path, unsafe=unsafe)
    wanted = [
        d
        for d in before.diagnostics
        if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)
    ]
    if not golden.exists():
        if unsafe and not any(
            d.fix and d.fix.applicability is Applicability.UNSAFE for d in before.diagnostics
        ):
            return  # no unsafe fix here: the safe golden covers it
        assert not wanted, (
            f"{path.name} has fixable {code} findings but no golden {golden.name}; "
            "write one (the expected file after the fix)"
        )
        return
    result = lint([work], [code], root=tmp_path, fix=True, unsafe=unsafe)
    assert not result.errors, result.errors
    assert work.read_bytes() == golden.read_bytes(), f"--fix output differs from {golden.name}"
    # Fixing the fixed file again changes nothing (idempotent).
    again = lint([work], [code], root=tmp_path, fix=True, unsafe=unsafe)
    assert again.fixed == 0
    assert work.read_bytes() == golden.read_bytes()


def test_goldens_have_inputs():
    for golden in Path(CLEAN).parent.joinpath("rules").rglob("*"):
        name = golden.name
        for ext in INPUT_SUFFIXES:
            for kind in (".fixed", ".unsafe"):
                suffix = kind + ext
                if name.endswith(suffix):
                    source = golden.with_name(name[: -len(suffix)] + ext)
                    assert source.exists(), f"{golden} has no input {source.name}"
