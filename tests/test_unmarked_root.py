"""A project root nothing marks: the folder a run starts in. Below a size it is read as one
project, as a marked root is; past it (a scratch folder, a home directory, /tmp) the project is
the run's files and the project files they import, and one warning says so. A script checked in
such a folder must not make the project phase read and analyse every Python file below it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from test_cli_ergonomics import run
from trainlint import project
from trainlint.config import Settings, find_project_root, load_settings
from trainlint.files import discover
from trainlint.rules import rule_names

RULES = Path(__file__).parent.parent / "fixtures" / "rules"
# train.py imports dist_utils, which reads LOCAL_RANK: TRL306 is quiet when that file is read.
READ_BY_HELPER = RULES / "TRL306" / "good_local_rank_read_by_helper_project"
# sample.py's "cuda:1" default is overridden by pipeline.py, which imports it: TRL102 is quiet
# when pipeline.py is read.
OVERRIDDEN_BY_AN_IMPORTER = RULES / "TRL102" / "good_defaults_every_caller_overrides_project"
LIMIT_WARNING = "marks the project root"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Both fixtures in one folder with no root marker, beside a few unrelated scripts; the
    limit is lowered so that "a few" is too many."""
    if find_project_root(tmp_path) != tmp_path.resolve():
        pytest.skip("a folder above the temporary directory marks a project root")
    shutil.copytree(READ_BY_HELPER, tmp_path, dirs_exist_ok=True)
    shutil.copytree(OVERRIDDEN_BY_AN_IMPORTER, tmp_path, dirs_exist_ok=True)
    (tmp_path / "train.py").unlink()  # both fixtures have one; keep the helper project's
    shutil.copy(READ_BY_HELPER / "train.py", tmp_path / "train.py")
    for n in range(4):
        (tmp_path / "other" / f"s{n}").mkdir(parents=True)
        (tmp_path / "other" / f"s{n}" / "script.py").write_text("print(1)\n")
    monkeypatch.setattr(project, "GUESSED_ROOT_LIMIT", 3)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_discovery_stops_past_its_limit(tmp_path):
    for n in range(6):
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}" / "m.py").write_text("x = 1\n")
    settings = Settings(root=tmp_path)
    assert not discover([tmp_path], settings, limit=10).truncated
    limited = discover([tmp_path], settings, limit=2)
    assert limited.truncated and len(limited.files) < 6
    for n in range(3):
        (tmp_path / f"flat{n}.py").write_text("x = 1\n")
    flat = tmp_path / "d0"
    assert discover([flat], settings, limit=0).truncated  # one folder is enough to stop


def test_settings_say_whether_a_marker_found_the_root(tmp_path):
    (tmp_path / "marked").mkdir()
    (tmp_path / "marked" / "pyproject.toml").write_text("")
    (tmp_path / "marked" / "train.py").write_text("")
    names = rule_names()
    assert load_settings([tmp_path / "marked" / "train.py"], names).root_marked
    if find_project_root(tmp_path) == tmp_path.resolve():
        (tmp_path / "loose.py").write_text("")
        assert not load_settings([tmp_path / "loose.py"], names).root_marked


def test_a_small_unmarked_folder_is_one_project(scratch, capsys, monkeypatch):
    monkeypatch.setattr(project, "GUESSED_ROOT_LIMIT", 100)
    code, out, err = run(capsys, "check", "train.py", "sample.py", "--no-cache")
    assert "TRL306" not in out and "TRL102" not in out, out
    assert LIMIT_WARNING not in err, err


def test_a_big_unmarked_folder_reads_what_the_run_imports(scratch, capsys):
    code, out, err = run(capsys, "check", "train.py", "sample.py", "--no-cache")
    # dist_utils.py, which train.py imports, is read: LOCAL_RANK is read there.
    assert "TRL306" not in out, out
    # pipeline.py imports sample.py but nothing in the run imports pipeline.py: it is not
    # read, so the default nobody else overrides is reported, as in a project of its own.
    assert "sample.py:5:38: TRL102" in out, out
    assert err.count(LIMIT_WARNING) == 1, err
    assert "more than 3 Python files" in err and "pyproject.toml" in err, err


def test_a_marker_makes_any_folder_one_project(scratch, capsys):
    (scratch / ".git").mkdir()
    code, out, err = run(capsys, "check", "train.py", "sample.py", "--no-cache")
    assert "TRL306" not in out and "TRL102" not in out, out
    assert LIMIT_WARNING not in err, err


def test_a_run_over_the_whole_folder_is_not_limited(scratch, capsys):
    code, out, err = run(capsys, "check", ".", "--no-cache")
    assert LIMIT_WARNING not in err, err
    assert "TRL306" not in out and "TRL102" not in out, out
