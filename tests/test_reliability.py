"""Reliability beyond generated input (issue 8): pathological shapes, fix safety as properties over
every fixture that has a fix, and proof that linting never executes the analysed code.

Rule isolation (a crashing rule) and the file-write properties (atomic, mode, newline, symlink
written through, read-only reported, changed-on-disk not overwritten) are tested in
tests/test_cli.py and tests/test_fixes.py; they are not repeated here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fixture_support import RULE_FIXTURES, is_input
from robustness_support import assert_clean_outcome, check_bytes, marker_header, run_main
from trainlint import engine
from trainlint.config import Settings
from trainlint.diagnostics import Severity
from trainlint.fixes import apply_edits, apply_fixes
from trainlint.project import Project, run_project_phase
from trainlint.rules import all_rules
from trainlint.selection import Selection
from trainlint.source import Source

# -- pathological shapes -------------------------------------------------------------------------

DP_BUG = """\
import torch
import torch.nn as nn
torch.cuda.set_device(args.gpu)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.Linear(8, 2)
model = nn.DataParallel(model).to(device)
"""
CHUNK = """\
def build{i}(model):
    model = nn.DataParallel(model).to(device)
    return model

"""


def test_ten_thousand_lines(tmp_path):
    body = "".join(CHUNK.format(i=i) for i in range(2500))
    data = (marker_header() + DP_BUG + body).encode()
    assert data.count(b"\n") >= 10_000
    # 214 kB, over the default `max-file-size`: lifted, so that it is analysed.
    findings = check_bytes(tmp_path, "big.py", data, seconds=120, max_file_size=0)
    assert sum(f["code"] == "TRL201" for f in findings) == 2501


@pytest.mark.parametrize("depth", [50, 200, 1_000, 100_000])
@pytest.mark.parametrize("shape", ["({})", "[{}]", "f({})", "-{}", "a[{}]"])
def test_deep_nesting_is_trl001_or_analysed(tmp_path, shape, depth):
    left, right = shape.split("{}")
    expr = left * depth + "1" + right * depth
    data = (marker_header() + "x = " + expr + "\n").encode()
    findings = check_bytes(tmp_path, "deep.py", data, seconds=60)
    if depth >= 1_000:
        # Python's parser rejects (or trainlint's nesting bound refuses) this: a clear TRL001.
        assert [f["code"] for f in findings] == ["TRL001"], findings


def test_deeply_nested_blocks(tmp_path):
    lines = [marker_header()]
    for level in range(99):
        lines.append("    " * level + f"if x{level}:\n")
    lines.append("    " * 99 + "model = nn.DataParallel(model)\n")
    check_bytes(tmp_path, "blocks.py", "".join(lines).encode(), seconds=60)


def test_five_megabyte_single_line(tmp_path):
    data = (marker_header() + "x = '" + "a" * (5 << 20) + "'; y = nn.DataParallel(m)\n").encode()
    check_bytes(tmp_path, "long.py", data, seconds=120)


@pytest.mark.fuzz
def test_five_megabyte_single_line_of_tokens(tmp_path):
    # 1.7 million list elements on one line: correct, but about two minutes in libcst's parser
    # on this machine, so opt-in (-m fuzz) rather than in every run.
    data = (marker_header() + "x = [" + "1, " * ((5 << 20) // 3) + "]\n").encode()
    check_bytes(tmp_path, "list.py", data, seconds=600)


@pytest.mark.parametrize("data", [b"", b"\n", b"\xef\xbb\xbf", b"   ", b"\r\n\r\n", b"\x00"])
def test_empty_and_nearly_empty_files(tmp_path, data):
    check_bytes(tmp_path, "empty.py", data, fix=True)


def test_directory_symlink_loop(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(DP_BUG)
    os.symlink("..", tmp_path / "pkg" / "loop")
    os.symlink(tmp_path / "pkg", tmp_path / "pkg" / "self")
    code, out, err = run_main(["--isolated", "--output-format", "concise", "."], tmp_path, 60)
    assert "Traceback" not in err
    assert code == 1
    # The file is reported once, not once per path through the loop.
    assert out.count("TRL201") == 1, out


def test_unreadable_file_is_reported_and_the_rest_is_checked(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text(DP_BUG)
    (tmp_path / "b.py").write_text(DP_BUG)
    from trainlint import runner

    real = runner.read_regular_file

    def refuse(path):
        if Path(path).name == "a.py":
            raise PermissionError(13, "Permission denied")
        return real(path)

    # As root chmod 000 would not stop the read; refuse it where the runner reads.
    monkeypatch.setattr(runner, "read_regular_file", refuse)
    code, out, err = run_main(["--isolated", "--output-format", "concise", "."], tmp_path, 60)
    assert code == 2, (code, out, err)
    assert "a.py: cannot read: Permission denied" in err
    assert "Traceback" not in err
    assert "b.py:6:" in out, out


def test_fifo_named_py_does_not_hang(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "b.py").write_text(DP_BUG)
    code, out, err = run_main(["--isolated", "--output-format", "concise", "."], tmp_path, 30)
    assert code == 2 and "pipe.py: cannot read" in err and "b.py:6:" in out


# -- fix safety, as properties over every fixture with a fix ------------------------------------


def _fix_cases():
    """(fixture, code) for every rule fixture whose rule offers a fix and that has a golden
    .fixed.py or .unsafe.py: discovered from the folders, so new rules are covered."""
    registry = all_rules()
    cases = []
    for folder in sorted(RULE_FIXTURES.iterdir()) if RULE_FIXTURES.is_dir() else []:
        code = folder.name
        if code not in registry or registry[code].fix is None:
            continue
        for path in sorted(folder.rglob("*.py")):
            if not is_input(path):
                continue
            stem = str(path)[: -len(".py")]
            if Path(stem + ".fixed.py").exists() or Path(stem + ".unsafe.py").exists():
                cases.append(pytest.param(path, code, id=str(path.relative_to(RULE_FIXTURES))))
    return cases


FIX_CASES = _fix_cases()


def _check(text, path, select):
    settings = Settings(root=path.parent)
    settings.select = list(select)
    settings.preview = True  # the fixes of preview rules (TRL104) are checked too
    selection = Selection.of(settings)
    result = engine.check(Source.from_bytes(str(path), text.encode("utf-8")), selection)
    # Project rules (TRL301) report, and offer their fixes, from the project phase: with this
    # one file as the whole project, as `trainlint check` over a folder holding only it (fixes
    # are the CLI's; under flake8 a finding that waits on other files is not reported).
    project = Project(
        root=path.parent,
        settings=settings,
        results={str(path): result},
        loader=lambda other: None,
        texts=[(path.resolve(), text)],
    )
    joined, _ = run_project_phase(
        [r for r in all_rules().values() if r.project], project, selection
    )
    return result.diagnostics + joined


def _errors(diags):
    """Error-level findings as a multiset of (code, message with line numbers blanked): a fix
    that inserts lines shifts the rows other messages mention without making them new."""
    return Counter(
        (d.code, re.sub(r"\d+", "N", d.message))
        for d in diags
        if d.severity == Severity.ERROR and d.code != "TRL001"
    )


def test_fix_cases_are_discovered():
    assert FIX_CASES, "no rule fixture with a fix was found: the discovery is broken"


@pytest.mark.parametrize("path,code", FIX_CASES)
def test_every_fix_is_safe(path, code):
    text = path.read_bytes().decode("utf-8")
    before = _check(text, path, ["ALL"])
    errors_before = _errors(before)
    fixable = [d for d in before if d.code == code and d.fix is not None]
    assert fixable, f"{path}: the golden file promises a {code} fix but none is offered"
    for diag in fixable:
        what = f"{path}:{diag.row}: {diag.code} fix"
        edits = sorted(diag.fix.edits, key=lambda e: (e.start, e.end))
        fixed = apply_edits(text, edits)
        # The result parses.
        ast.parse(fixed)
        # Every byte outside the edited spans is unchanged.
        pos_old, pos_new = 0, 0
        for edit in edits:
            keep = text[pos_old : edit.start]
            assert fixed[pos_new : pos_new + len(keep)] == keep, f"{what}: changed outside"
            pos_new += len(keep) + len(edit.content)
            pos_old = edit.end
        assert fixed[pos_new:] == text[pos_old:], f"{what}: changed after the last edit"
        after = _check(fixed, path, ["ALL"])
        # The fixed finding is gone: at once, or (a fix that covers one of several bindings,
        # e.g. TRL101 with a name bound in both `try` and `except`) after the runner's rounds.
        count = sum(d.code == code for d in before)
        if sum(d.code == code for d in after) >= count:
            settled = _fixpoint(fixed, path, code, unsafe=True)
            assert sum(d.code == code for d in _check(settled, path, [code])) < count, what
        # No new error-level finding.
        new = _errors(after) - errors_before
        assert not new, f"{what}: new error-level findings {new}"


def _fixpoint(text, path, code, unsafe):
    for _ in range(10):  # the runner's rounds
        new, applied = apply_fixes(text, _check(text, path, [code]), unsafe=unsafe)
        if not applied:
            break
        text = new
    return text


@pytest.mark.parametrize("path,code", FIX_CASES)
@pytest.mark.parametrize("unsafe", [False, True])
def test_fixes_are_idempotent(path, code, unsafe):
    text = path.read_bytes().decode("utf-8")
    for _ in range(10):  # the runner's rounds
        diags = _check(text, path, [code])
        new, applied = apply_fixes(text, diags, unsafe=unsafe)
        if not applied:
            break
        text = new
    ast.parse(text)
    diags = _check(text, path, [code])
    assert apply_fixes(text, diags, unsafe=unsafe)[0] == text, f"{path}: fixing again changes it"


# -- never execute analysed code -----------------------------------------------------------------

SIDE_EFFECTS = """\
import os, sys
open({marker!r}, "w").write("executed")
os.system("touch " + {marker!r} + ".sh")
import torch
import torch.nn as nn
device = torch.device('cuda', int(os.environ['LOCAL_RANK']))
model = nn.DataParallel(nn.Linear(2, 2)).to(device)
sys.exit(3)
"""

MM_CONFIG = """\
_base_ = ['./base.py']
import os
open({marker!r}, "w").write("executed")
model = dict(type='ResNet', depth=50, with_cp=True)
optimizer = dict(type='SGD', lr=0.02)
raise SystemExit(4)
"""


def test_linting_never_executes_the_code(tmp_path):
    marker = tmp_path / "EXECUTED"
    project = tmp_path / "proj"
    (project / "configs").mkdir(parents=True)
    (project / "train.py").write_text(SIDE_EFFECTS.format(marker=str(marker)))
    (project / "configs" / "cfg.py").write_text(MM_CONFIG.format(marker=str(marker)))
    (project / "configs" / "base.py").write_text(MM_CONFIG.format(marker=str(marker)))
    (project / "sitecustomize.py").write_text(SIDE_EFFECTS.format(marker=str(marker)))
    (project / "conftest.py").write_text(SIDE_EFFECTS.format(marker=str(marker)))

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runs = [
        # The whole CLI, every rule, the project phase, with and without fixes.
        [sys.executable, "-m", "trainlint", "--isolated", "--select", "ALL", "."],
        [sys.executable, "-m", "trainlint", "--isolated", "--select", "ALL", "--diff", "."],
        [sys.executable, "-m", "trainlint", "--isolated", "--select", "ALL", "--fix", "."],
        # The flake8 plugin.
        [sys.executable, "-m", "flake8", "--select", "TRL", "."],
    ]
    for args in runs:
        proc = subprocess.run(
            args, cwd=project, capture_output=True, text=True, timeout=120, env=env
        )
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert proc.returncode in (0, 1), (args, proc.returncode, proc.stdout, proc.stderr)
        assert not marker.exists(), f"{args}: the analysed code ran"
        assert not Path(str(marker) + ".sh").exists(), f"{args}: the analysed code ran"
    # The check can fail: running the file really does write the marker.
    subprocess.run([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], check=True)
    assert marker.exists()


def test_in_process_check_never_executes(tmp_path):
    marker = tmp_path / "EXECUTED"
    source = SIDE_EFFECTS.format(marker=str(marker))
    findings = check_bytes(tmp_path, "train.py", source.encode())
    assert not marker.exists()
    assert any(f["code"] == "TRL201" for f in findings)


def test_outcome_helper_rejects_a_traceback():
    with pytest.raises(AssertionError):
        assert_clean_outcome(2, "[]", "Traceback (most recent call last):\n", b"", ".py", "x")
