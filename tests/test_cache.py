"""The per-file cache: a warm run reports exactly what a cold one does, every input of a file's
result invalidates its entry, broken or unwritable caches never fail a run, and the project phase
re-joins cached facts so cross-file findings follow a change to one file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fixture_support import CLEAN, REPO, RULE_FIXTURES
from test_cli import DP_BUG, Exploding
from test_project_phase import DefinedHereUsedElsewhere
from trainlint import cache as cache_module
from trainlint import cli, runner
from trainlint.cache import Cache, result_from_json, result_to_json
from trainlint.config import Settings, load_settings
from trainlint.files import discover
from trainlint.rules import rule_names
from trainlint.selection import Selection


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with one buggy training script; the current directory."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "train.py").write_text(DP_BUG)
    monkeypatch.chdir(root)
    return root


def run_cached(settings, cache_dir, paths=(".",), whole_project=False):
    found = discover([Path(p) for p in paths], settings)
    selection = Selection.of(settings)
    cache = Cache(cache_dir, selection)
    result = runner.run(found.files, selection, cache=cache, jobs=1, whole_project=whole_project)
    return result, cache


def findings(result):
    return [d.to_dict() for d in result.diagnostics], [c.describe() for c in result.crashes]


# -- a warm run is the cold run -------------------------------------------------------------


def test_warm_run_reports_exactly_what_the_cold_run_did_over_the_fixtures(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    settings = load_settings([RULE_FIXTURES], rule_names())
    settings.select = ["ALL"]
    paths = [os.path.relpath(RULE_FIXTURES), os.path.relpath(CLEAN)]
    cold, cold_cache = run_cached(settings, tmp_path / "c", paths)
    warm, warm_cache = run_cached(settings, tmp_path / "c", paths)
    checked = sum(1 for s in cold.states.values() if s.source is not None)
    assert checked > 100
    assert (cold_cache.hits, warm_cache.misses, warm_cache.hits) == (0, 0, checked)
    assert findings(warm) == findings(cold)
    assert cold.diagnostics  # the fixtures do have findings: the comparison means something
    # Each result survives JSON unchanged (facts included): the project phase sees the same data.
    for display, state in cold.states.items():
        stored = json.loads(json.dumps(result_to_json(state.result)))
        assert result_from_json(stored) == state.result, display


def test_cli_output_is_the_same_cold_and_warm(project, capsys):
    (project / "nb").mkdir()
    notebook = RULE_FIXTURES / "TRL201" / "notebook_single_cell_embeddings.ipynb"
    (project / "nb" / notebook.name).write_bytes(notebook.read_bytes())
    outputs = []
    for _ in range(2):
        code = cli.main(["--output-format", "json", "."])
        outputs.append((code, capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == 1 and len(json.loads(outputs[0][1])) == 2


# -- what invalidates an entry ----------------------------------------------------------------


def test_a_second_run_reads_the_cache(project, tmp_path, checked_here):
    run_cached(Settings(root=project), tmp_path / "c")
    run_cached(Settings(root=project), tmp_path / "c")
    assert checked_here == ["train.py"]


def test_changing_the_file_invalidates_its_entry_only(project, tmp_path, checked_here):
    (project / "other.py").write_text(DP_BUG)
    run_cached(Settings(root=project), tmp_path / "c")
    (project / "train.py").write_text(DP_BUG + "model = nn.DataParallel(model).cuda(args.gpu)\n")
    result, _ = run_cached(Settings(root=project), tmp_path / "c")
    assert checked_here == ["other.py", "train.py", "train.py"]
    assert [(d.path, d.row) for d in result.diagnostics] == [
        ("other.py", 6),
        ("train.py", 6),
        ("train.py", 7),
    ]


@pytest.mark.parametrize(
    "change, checked_again",
    [
        (lambda s: setattr(s, "select", ["TRL2"]), True),
        (lambda s: setattr(s, "ignore", ["TRL201"]), True),
        (lambda s: setattr(s, "extend_select", ["TRL5"]), True),
        (lambda s: s.per_file_ignores.update({"train.py": ["TRL201"]}), True),
        (lambda s: s.options.update({"device-movers": ["to_gpu"]}), True),
        # Settings that do not change this file's result keep its entry.
        (lambda s: s.per_file_ignores.update({"tests/*.py": ["TRL201"]}), False),
        (lambda s: setattr(s, "unsafe_fixes", True), False),
        (lambda s: s.extend_exclude.append("build2"), False),
    ],
)
def test_settings_that_change_a_files_result_invalidate_its_entry(
    project, tmp_path, checked_here, change, checked_again
):
    run_cached(Settings(root=project), tmp_path / "c")
    settings = Settings(root=project)
    change(settings)
    run_cached(settings, tmp_path / "c")
    assert checked_here == ["train.py"] * (2 if checked_again else 1)


def test_ignoring_the_code_through_the_cache_drops_the_finding(project, tmp_path):
    first, _ = run_cached(Settings(root=project), tmp_path / "c")
    second, _ = run_cached(Settings(root=project, ignore=["TRL201"]), tmp_path / "c")
    assert [d.code for d in first.diagnostics] == ["TRL201"] and second.diagnostics == []


def test_another_version_invalidates_every_entry(project, tmp_path, checked_here, monkeypatch):
    run_cached(Settings(root=project), tmp_path / "c")
    monkeypatch.setattr(cache_module, "__version__", "99.0.0")
    run_cached(Settings(root=project), tmp_path / "c")
    assert checked_here == ["train.py", "train.py"]


def test_a_changed_rule_set_invalidates_every_entry(
    project, tmp_path, checked_here, register_rule
):
    run_cached(Settings(root=project), tmp_path / "c")
    register_rule(Exploding)
    run_cached(Settings(root=project), tmp_path / "c")
    assert checked_here == ["train.py", "train.py"]


def test_editing_trainlints_own_code_invalidates_every_entry(monkeypatch):
    before = cache_module.code_fingerprint()
    stats = {}
    real_stat = Path.stat

    def newer(self, *args, **kwargs):
        info = real_stat(self, *args, **kwargs)
        if self.name == "trl201_dataparallel_wrap_then_move.py":
            stats["seen"] = True
            return os.stat_result((*info[:8], info.st_mtime + 1, info.st_ctime))
        return info

    cache_module._package_fingerprint.cache_clear()
    monkeypatch.setattr(Path, "stat", newer)
    try:
        after = cache_module.code_fingerprint()
    finally:
        monkeypatch.undo()
        cache_module._package_fingerprint.cache_clear()
    assert stats and after != before


def test_concurrent_writers_and_readers_only_ever_see_whole_entries(project, tmp_path):
    import threading

    settings = Settings(root=project)
    first, _ = run_cached(settings, tmp_path / "c")
    result = first.states["train.py"].result
    data = (project / "train.py").read_bytes()
    seen = []

    def write():
        cache = Cache(tmp_path / "c", Selection.of(settings))
        for _ in range(50):
            cache.put("train.py", Path("train.py"), data, result)

    def read():
        cache = Cache(tmp_path / "c", Selection.of(settings))
        for _ in range(200):
            seen.append(cache.get("train.py", Path("train.py"), data))

    threads = [threading.Thread(target=write) for _ in range(4)] + [threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 200 and all(found == result for found in seen)
    assert [p.name for p in (tmp_path / "c").rglob("*.tmp")] == []


# -- broken caches never fail a run -----------------------------------------------------------


@pytest.mark.parametrize(
    "content", [b"", b"{not json", b"[]", b'{"key": 1}', b"\xff\xfe", b'{"key": "x", "result": 1}']
)
def test_a_corrupt_entry_is_a_miss_and_is_rewritten(project, tmp_path, checked_here, content):
    first, _ = run_cached(Settings(root=project), tmp_path / "c")
    entries = list((tmp_path / "c" / "entries").rglob("*.json"))
    assert len(entries) == 1
    entries[0].write_bytes(content)
    second, _ = run_cached(Settings(root=project), tmp_path / "c")
    third, cache = run_cached(Settings(root=project), tmp_path / "c")
    assert findings(first) == findings(second) == findings(third)
    assert checked_here == ["train.py", "train.py"] and cache.hits == 1


def test_an_entry_with_the_right_key_but_a_wrong_result_shape_is_a_miss(
    project, tmp_path, checked_here
):
    run_cached(Settings(root=project), tmp_path / "c")
    (entry,) = (tmp_path / "c" / "entries").rglob("*.json")
    stored = json.loads(entry.read_text())
    stored["result"]["diagnostics"] = [{"code": "TRL201"}]
    entry.write_text(json.dumps(stored))
    result, _ = run_cached(Settings(root=project), tmp_path / "c")
    assert checked_here == ["train.py", "train.py"] and result.diagnostics[0].row == 6


def test_an_unwritable_cache_dir_does_not_fail_the_run(project, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = cli.main(["--cache-dir", str(blocker / "cache"), "--output-format", "concise", "."])
    out, err = capsys.readouterr()
    assert code == 1 and "train.py:6:9: TRL201" in out and err == ""
    result, cache = run_cached(Settings(root=project), blocker / "cache")
    assert not cache.writable and [d.code for d in result.diagnostics] == ["TRL201"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores modes")
def test_a_read_only_cache_dir_does_not_fail_the_run(project, tmp_path, capsys):
    cache_dir = tmp_path / "ro"
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o555)
    try:
        code = cli.main(["--cache-dir", str(cache_dir), "--output-format", "concise", "."])
    finally:
        os.chmod(cache_dir, 0o755)
    assert code == 1 and capsys.readouterr().err == ""


def test_results_with_a_rule_crash_are_never_cached(project, register_rule, capsys):
    register_rule(Exploding)
    for _ in range(2):
        assert cli.main(["--output-format", "concise", "."]) == 2
        err = capsys.readouterr().err
        assert "train.py: internal error in rule TRL999: ValueError: boom" in err
    assert not list(Path(os.environ["TRAINLINT_CACHE_DIR"]).rglob("*.json"))


# -- the project phase over cached facts ------------------------------------------------------


@pytest.fixture
def test_rule(register_rule):
    """The project-phase test rule (TRL999: a function no file of the project calls)."""
    register_rule(DefinedHereUsedElsewhere)


def test_cross_file_findings_follow_a_change_to_one_file(
    project, tmp_path, checked_here, test_rule
):
    (project / "train.py").unlink()
    (project / "models.py").write_text("def build():\n    pass\n\n\ndef unused():\n    pass\n")
    (project / "train.py").write_text("from models import build\n\nbuild()\n")
    settings = Settings(root=project, select=["TRL999"])
    first, _ = run_cached(settings, tmp_path / "c")
    (project / "train.py").write_text("from models import build, unused\n\nbuild()\nunused()\n")
    second, _ = run_cached(settings, tmp_path / "c")
    (project / "train.py").write_text("from models import build\n\nbuild()\n")
    third, _ = run_cached(settings, tmp_path / "c")
    assert [(d.path, d.row) for d in first.diagnostics] == [("models.py", 5)]
    assert second.diagnostics == []
    assert findings(third) == findings(first)
    # models.py was checked once: the other runs joined its cached facts and candidates.
    assert checked_here == ["models.py", "train.py", "train.py", "train.py"]


def test_files_outside_the_run_are_loaded_through_the_cache(
    project, tmp_path, checked_here, test_rule
):
    (project / "lib").mkdir()
    (project / "lib" / "extra.py").write_text("unused()\n")
    (project / "m.py").write_text("def unused():\n    pass\n")
    settings = Settings(root=project, select=["TRL999"])
    for _ in range(2):
        result, _ = run_cached(settings, tmp_path / "c", ["m.py"])
        assert result.diagnostics == []
    assert checked_here == ["m.py", os.path.join("lib", "extra.py")]


@pytest.fixture
def project_phases(monkeypatch):
    """How many times the project phase of TRL999 ran."""
    ran = []
    real = DefinedHereUsedElsewhere.check_project.__func__

    def counting(cls, project):
        ran.append(1)
        return real(cls, project)

    monkeypatch.setattr(DefinedHereUsedElsewhere, "check_project", classmethod(counting))
    return ran


def test_a_whole_project_run_keeps_the_project_phase_findings(
    project, tmp_path, test_rule, project_phases
):
    (project / "train.py").write_text("def unused():\n    pass\n")
    settings = Settings(root=project, select=["TRL999"])
    first, _ = run_cached(settings, tmp_path / "c", whole_project=True)
    second, _ = run_cached(settings, tmp_path / "c", whole_project=True)
    assert [(d.path, d.row) for d in first.diagnostics] == [("train.py", 1)]
    assert findings(second) == findings(first)
    assert len(project_phases) == 1  # the second run's phase came from the cache
    # A run over other files has its own entry.
    for _ in range(2):
        third, _ = run_cached(settings, tmp_path / "c", ["train.py"])
        assert findings(third) == findings(first) and len(project_phases) == 2
    # Any change to a file of the run is a miss.
    (project / "train.py").write_text("def unused():\n    pass\n\n\nunused()\n")
    fourth, _ = run_cached(settings, tmp_path / "c", whole_project=True)
    assert fourth.diagnostics == [] and len(project_phases) == 3


def test_old_project_phase_entries_are_pruned_newest_kept(
    project, tmp_path, test_rule, project_phases, monkeypatch
):
    monkeypatch.setattr(cache_module, "MAX_PROJECT_ENTRIES", 3)
    settings = Settings(root=project, select=["TRL999"])
    entries = tmp_path / "c" / cache_module.PROJECT
    dated: set = set()
    for edit in range(6):  # every edit keys a new project entry
        (project / "train.py").write_text(f"def unused():\n    pass\n# edit {edit}\n")
        run_cached(settings, tmp_path / "c", whole_project=True)
        written = set(entries.glob("*/*.json"))
        assert len(written) == min(edit + 1, 3)
        for new in written - dated:  # one second apart, whatever the file system's clock
            os.utime(new, ns=((edit + 1) * 10**9, (edit + 1) * 10**9))
        dated |= written
    phases = len(project_phases)
    run_cached(settings, tmp_path / "c", whole_project=True)  # the newest entry survived
    assert len(project_phases) == phases
    (project / "train.py").write_text("def unused():\n    pass\n# edit 0\n")
    run_cached(settings, tmp_path / "c", whole_project=True)  # the oldest did not
    assert len(project_phases) == phases + 1


class CalledInSomeText(DefinedHereUsedElsewhere):
    """TRL998: like TRL999, but a call is looked for in the project's texts (as TRL203 and
    TRL301 look for importers and configs), so a run over some files reads the others."""

    code = "TRL998"

    @classmethod
    def check_project(cls, project):
        import re

        for path, found in sorted(project.candidates(cls.code).items()):
            for key in sorted(found):
                if not project.files_matching(re.compile(rf"^\s*{key}\(\)", re.M)):
                    yield project.candidate(path, cls.code, key)


def test_kept_project_findings_of_a_run_over_some_files_follow_the_other_files(
    project, tmp_path, register_rule
):
    register_rule(CalledInSomeText)
    (project / "train.py").write_text("def unused():\n    pass\n")
    (project / "other.py").write_text("print('no call')\n")
    settings = Settings(root=project, select=["TRL998"])
    phases = []
    real = CalledInSomeText.check_project.__func__

    def reported():
        result, _ = run_cached(settings, tmp_path / "c", ["train.py"])
        return [d.row for d in result.diagnostics]

    def counting(cls, project):
        phases.append(1)
        return real(cls, project)

    CalledInSomeText.check_project = classmethod(counting)
    assert reported() == [1] and reported() == [1] and len(phases) == 1
    (project / "other.py").write_text("unused()\n")  # a file outside the run changed
    assert reported() == [] and reported() == [] and len(phases) == 2
    (project / "more.py").write_text("print('a new file')\n")  # the project gained a file
    assert reported() == [] and len(phases) == 3


def test_kept_project_findings_follow_the_files_outside_the_run(
    project, tmp_path, test_rule, project_phases
):
    """lib/ is excluded, so lib/extra.py is not in the run; TRL999 reads it through the loader.
    Creating it, changing it, and removing it each invalidate the kept findings."""
    (project / "train.py").write_text("def unused():\n    pass\n")
    settings = Settings(root=project, select=["TRL999"], extend_exclude=["lib"])

    def reported():
        result, _ = run_cached(settings, tmp_path / "c", whole_project=True)
        return [d.row for d in result.diagnostics]

    assert reported() == [1]
    (project / "lib").mkdir()
    (project / "lib" / "extra.py").write_text("unused()\n")
    assert reported() == []
    assert reported() == []
    (project / "lib" / "extra.py").write_text("print('no call')\n")
    assert reported() == [1]
    (project / "lib" / "extra.py").unlink()
    assert reported() == [1]
    assert len(project_phases) == 4  # each change ran the phase again; the repeat did not


def test_the_cli_takes_project_texts_from_the_run_only_over_the_root(project, monkeypatch):
    seen = []
    real = runner.run

    def spying(files, settings, **kwargs):
        seen.append(kwargs.get("whole_project"))
        return real(files, settings, **kwargs)

    monkeypatch.setattr(runner, "run", spying)
    (project / "sub").mkdir()
    (project / "sub" / "x.py").write_text("import torch\n")
    cli.main(["--no-cache", "."])
    cli.main(["--no-cache", str(project)])
    cli.main(["--no-cache", "sub"])
    cli.main(["--no-cache", "train.py"])
    monkeypatch.chdir(project / "sub")
    cli.main(["--no-cache", "."])
    cli.main(["--no-cache", ".."])
    assert seen == [True, True, False, False, False, True]


# -- where the cache lives, and when it is bypassed -------------------------------------------


def test_default_cache_dir_is_beside_the_project_root_and_ignored_by_git(project, monkeypatch):
    monkeypatch.delenv("TRAINLINT_CACHE_DIR")
    assert cli.main(["-q", "."]) == 1
    folder = project / ".trainlint_cache"
    assert (folder / ".gitignore").read_text() == "*\n"
    assert (folder / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172")
    assert list(folder.rglob("*.json"))


def test_default_cache_dir_is_beside_the_configuration_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINLINT_CACHE_DIR")
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nignore = ['TRL5']\n")
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "train.py").write_text(DP_BUG)
    monkeypatch.chdir(tmp_path / "src")
    assert cli.main(["-q", "pkg"]) == 1
    assert list((tmp_path / ".trainlint_cache").rglob("*.json"))
    assert not (tmp_path / "src" / ".trainlint_cache").exists()


def test_a_config_file_elsewhere_leaves_the_cache_in_the_project_root(project, monkeypatch):
    monkeypatch.delenv("TRAINLINT_CACHE_DIR")
    (project / "configs").mkdir()
    (project / "configs" / "trainlint.toml").write_text("ignore = ['TRL5']\n")
    assert cli.main(["-q", "--config", "configs/trainlint.toml", "."]) == 1
    assert (project / ".trainlint_cache").is_dir()
    assert not (project / "configs" / ".trainlint_cache").exists()


def test_cache_dir_option_wins_over_the_environment(project, tmp_path):
    assert cli.main(["-q", "--cache-dir", str(tmp_path / "mine"), "."]) == 1
    assert list((tmp_path / "mine").rglob("*.json"))
    assert not list(Path(os.environ["TRAINLINT_CACHE_DIR"]).iterdir())
    assert not (project / ".trainlint_cache").exists()


def test_no_cache_reads_and_writes_nothing(project, monkeypatch):
    monkeypatch.delenv("TRAINLINT_CACHE_DIR")
    assert cli.main(["-q", "--no-cache", "."]) == 1
    assert not (project / ".trainlint_cache").exists()


def test_standard_input_bypasses_the_cache(project, monkeypatch, capsys):
    import io
    import sys

    monkeypatch.delenv("TRAINLINT_CACHE_DIR")
    for _ in range(2):
        stdin = io.TextIOWrapper(io.BytesIO(DP_BUG.encode()))
        monkeypatch.setattr(sys, "stdin", stdin)
        assert cli.main(["-q", "-", "--stdin-filename", "train.py"]) == 1
        assert "TRL201" in capsys.readouterr().out
    assert not (project / ".trainlint_cache").exists()


def test_fix_with_a_warm_cache_writes_the_fix_and_then_finds_nothing(project):
    assert cli.main(["-q", "."]) == 1  # warms the cache
    assert cli.main(["-q", "--fix", "."]) == 0
    assert "model = nn.DataParallel(model.to(device))" in (project / "train.py").read_text()
    assert cli.main(["-q", "."]) == 0


def test_a_changed_launch_config_invalidates_the_project_phase(project, tmp_path):
    """TRL302 reads the project's Accelerate configs (YAML files, outside the run): a kept
    project result must not outlive an edit to them, nor a config added or removed."""
    source = RULE_FIXTURES / "TRL302" / "good_accelerate_fsdp_launch_configs"
    (project / "train.py").write_bytes((source / "train.py").read_bytes())
    (project / "configs").mkdir()
    config = project / "configs" / "launch.yaml"
    config.write_bytes((source / "accelerate_configs" / "fsdp_8gpu.yaml").read_bytes())
    settings = Settings(root=project, select=["TRL302"])

    def codes():
        result, _ = run_cached(settings, tmp_path / "c", whole_project=True)
        return [d.code for d in result.diagnostics]

    assert codes() == []
    assert codes() == []  # warm
    config.write_text(config.read_text().replace("FSDP", "MULTI_GPU"))
    assert codes() == ["TRL302"]
    config.unlink()
    (project / "configs" / "other.yaml").write_text("distributed_type: DEEPSPEED\n")
    assert codes() == []
