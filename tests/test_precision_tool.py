"""benchmarks/precision.py on a tiny synthetic corpus: the keys, the join with labels, the
precision arithmetic, the report of labels whose finding is gone, the skeleton and the merge.
trainlint is replaced by a stand-in command that prints fixed findings, so the numbers do not
move when the rules do; no network."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from fixture_support import REPO


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


precision_tool = load("precision_tool", REPO / "benchmarks" / "precision.py")

REPOS_TOML = """\
[[repo]]
name = "someone/gan-zoo"
commit = "{commit}"
split = "dev"
categories = ["gan"]
note = "test"

[[repo]]
name = "else/course"
commit = "{commit}"
split = "dev"
categories = ["notebooks"]
note = "test"

[[repo]]
name = "kept/back"
commit = "{commit}"
split = "holdout"
categories = ["rl"]
note = "test"
"""

# What the stand-in prints for each repository (by folder name): file, cell, row, column, code,
# severity. Two TRL105 on one line of train.py; one info finding, which the benchmark drops.
STAND_IN_FINDINGS = {
    "someone+gan-zoo": [
        ("train.py", None, 3, 1, "TRL101", "error"),
        ("train.py", None, 7, 5, "TRL101", "error"),
        ("train.py", None, 9, 20, "TRL105", "error"),
        ("train.py", None, 9, 4, "TRL105", "error"),
        ("models/net.py", None, 12, 1, "TRL405", "warning"),
        ("models/net.py", None, 2, 1, "TRL601", "info"),
    ],
    "else+course": [
        ("lesson.ipynb", 4, 2, 1, "TRL105", "error"),
    ],
}

STAND_IN = """\
import json, os, sys
findings = json.loads({table!r})[os.path.basename(os.getcwd())]
print(json.dumps([
    {{"filename": os.path.join(os.getcwd(), name), "cell": cell, "code": code,
      "location": {{"row": row, "column": col}}, "severity": severity,
      "message": code + " headline\\nmore detail"}}
    for name, cell, row, col, code, severity in findings]))
"""

LABELS = {
    "someone/gan-zoo::train.py::L3::TRL101": {"label": "TP", "reason": "r", "message": "m"},
    "someone/gan-zoo::train.py::L7::TRL101": {"label": "FP", "reason": "r", "message": "m"},
    "someone/gan-zoo::train.py::L9::TRL105": {"label": "FP", "reason": "r", "message": "m"},
    "someone/gan-zoo::train.py::L9::TRL105#2": {"label": "debatable", "reason": "r",
                                                "message": "m"},
    "else/course::lesson.ipynb::cell4:L2::TRL105": {"label": "TP", "reason": "r", "message": "m"},
    # no longer reported: a true positive lost, a false positive fixed
    "someone/gan-zoo::train.py::L30::TRL102": {"label": "TP", "reason": "r", "message": "lost"},
    "else/course::lesson.ipynb::cell9:L1::TRL203": {"label": "FP", "reason": "r", "message": "m"},
    # a repository outside the split that ran: not reported as gone
    "kept/back::a.py::L1::TRL101": {"label": "TP", "reason": "r", "message": "m"},
}


@pytest.fixture
def corpus(tmp_path):
    repos = tmp_path / "repos.toml"
    repos.write_text(REPOS_TOML.format(commit="0" * 40))
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps(LABELS))
    sources = tmp_path / "sources"
    for folder in ("someone+gan-zoo", "else+course"):
        (sources / folder / "models").mkdir(parents=True)
        (sources / folder / "train.py").write_text("import torch\n")
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(STAND_IN.format(table=json.dumps(STAND_IN_FINDINGS)))
    args = ["--sources", str(sources), "--repos", str(repos), "--labels", str(labels),
            "--trainlint", f"{sys.executable} {stand_in}"]
    return tmp_path, args


def run_json(args, capsys):
    assert precision_tool.main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_join_counts_labels_per_rule_and_overall(corpus, capsys):
    _, args = corpus
    report = run_json(args, capsys)
    assert report["repos"] == ["someone/gan-zoo", "else/course"]
    assert report["rules"]["TRL101"] == {"TP": 1, "FP": 1, "debatable": 0, "unlabelled": 0,
                                         "findings": 2, "precision": 0.5}
    assert report["rules"]["TRL105"] == {"TP": 1, "FP": 1, "debatable": 1, "unlabelled": 0,
                                         "findings": 3, "precision": 0.5}
    assert report["rules"]["TRL405"]["unlabelled"] == 1
    assert report["rules"]["TRL405"]["precision"] is None
    assert "TRL601" not in report["rules"]  # info level is not measured
    overall = report["overall"]
    assert (overall["TP"], overall["FP"], overall["debatable"], overall["unlabelled"]) == (
        2, 2, 1, 1)
    assert overall["precision"] == 0.5
    assert report["debatable_share"] == pytest.approx(1 / 6)


def test_same_code_twice_on_a_line_is_numbered_in_column_order(corpus, capsys):
    _, args = corpus
    report = run_json(args, capsys)
    assert [item["key"] for item in report["unlabelled"]] == [
        "someone/gan-zoo::models/net.py::L12::TRL405"]
    keys = precision_tool.findings_of("r/x", corpus[0], [
        {"filename": "a.py", "cell": None, "code": "TRL105", "severity": "error",
         "location": {"row": 9, "column": col}, "message": str(col)} for col in (20, 4)])
    assert [(finding.key, finding.headline) for finding in keys] == [
        ("r/x::a.py::L9::TRL105", "4"), ("r/x::a.py::L9::TRL105#2", "20")]


def test_lost_true_positive_and_fixed_false_positive_are_reported(corpus, capsys):
    _, args = corpus
    report = run_json(args, capsys)
    assert [entry["key"] for entry in report["lost_true_positives"]] == [
        "someone/gan-zoo::train.py::L30::TRL102"]
    assert [entry["key"] for entry in report["gone_other_labels"]] == [
        "else/course::lesson.ipynb::cell9:L1::TRL203"]
    assert precision_tool.main(args) == 0
    text = capsys.readouterr().out
    assert "LOST TRUE POSITIVES (1)" in text
    assert "someone/gan-zoo::train.py::L30::TRL102  lost" in text


def test_a_narrower_select_does_not_report_other_rules_labels_as_gone(corpus, capsys):
    _, args = corpus
    report = run_json([*args, "--select", "TRL1"], capsys)
    assert [entry["key"] for entry in report["lost_true_positives"]] == [
        "someone/gan-zoo::train.py::L30::TRL102"]
    assert report["gone_other_labels"] == []  # TRL203 was not selected


def test_labels_of_preview_rules_are_not_gone_from_a_run_without_preview():
    labels = {"r/x::a.py::L3::TRL104": {"label": "TP"}, "r/x::a.py::L4::TRL101": {"label": "TP"}}
    report = precision_tool.join([], labels, ["r/x"], None, ["TRL104"])
    assert [entry["key"] for entry in report["lost_true_positives"]] == ["r/x::a.py::L4::TRL101"]
    assert "TRL104" in precision_tool.preview_codes(None)
    assert "TRL104" not in precision_tool.preview_codes("TRL104")  # its exact code selects it
    assert "TRL101" not in precision_tool.preview_codes(None)


def test_skeleton_then_merge_refuses_bad_entries(corpus, capsys):
    tmp_path, args = corpus
    todo = tmp_path / "todo.json"
    assert precision_tool.main([*args, "--unlabelled-out", str(todo)]) == 0
    skeleton = json.loads(todo.read_text())
    key = "someone/gan-zoo::models/net.py::L12::TRL405"
    assert skeleton == {key: {"label": "", "reason": "", "message": "TRL405 headline"}}
    by_repo = tmp_path / "todo"
    assert precision_tool.main([*args, "--unlabelled-dir", str(by_repo)]) == 0
    assert sorted(path.name for path in by_repo.iterdir()) == ["someone+gan-zoo.json"]
    assert json.loads((by_repo / "someone+gan-zoo.json").read_text()) == skeleton
    labels_path = tmp_path / "labels.json"
    filled = {
        key: {"label": "FP", "reason": "the model has no dropout or norm", "message": "h"},
        "a/b::x.py::L1::TRL101": {"label": "wrong", "reason": "x", "message": "h"},
        "a/b::x.py::L2::TRL101": {"label": "TP", "reason": "  ", "message": "h"},
        "a/b::x.py::L3::TRL101": {"label": "", "reason": "", "message": "h"},
        "not a key": {"label": "TP", "reason": "x", "message": "h"},
    }
    todo.write_text(json.dumps(filled))
    assert precision_tool.main(["--labels", str(labels_path), "--merge", str(todo)]) == 1
    captured = capsys.readouterr()
    assert "1 new, 3 refused, 1 left unfilled" in captured.out
    merged = json.loads(labels_path.read_text())
    assert merged[key]["label"] == "FP"
    assert not any(name.startswith("a/b::") for name in merged)
    report = run_json(args, capsys)
    assert report["rules"]["TRL405"]["FP"] == 1 and report["unlabelled"] == []


def test_a_git_checkout_at_another_commit_is_refused(corpus, tmp_path, capsys):
    _, args = corpus
    folder = tmp_path / "sources" / "someone+gan-zoo"
    for command in (["init", "-q"], ["add", "-A"],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(folder), *command], check=True)
    assert precision_tool.main(args) == 2
    assert "pinned at " + "0" * 40 in capsys.readouterr().err


def test_a_split_is_dev_holdout_holdoutN_or_all_and_an_empty_one_is_refused(corpus, capsys):
    _, args = corpus
    for good in ("dev", "holdout", "holdout2", "holdout91", "all"):
        assert precision_tool.split_name(good) == good
    for bad in ("holdout1", "holdout0", "holdout02", "heldout", "holdout2a"):
        with pytest.raises(SystemExit):
            precision_tool.main([*args, "--split", bad])
        assert "expected dev, holdout, holdoutN" in capsys.readouterr().err
    assert precision_tool.main([*args, "--split", "holdout7"]) == 2
    assert "has no repository in the split 'holdout7'" in capsys.readouterr().err


def test_the_corpus_split_is_the_seeded_draw():
    draw_split = load("draw_split", REPO / "benchmarks" / "precision" / "draw_split.py")
    assert draw_split.main(["--check"]) == 0
