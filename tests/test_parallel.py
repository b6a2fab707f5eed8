"""Worker processes (-j): the output, exit code and reported crashes of a parallel run are those
of a serial run; small runs start no pool; a dying worker or Ctrl-C never loses the run."""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import shutil
from pathlib import Path

import libcst as cst
import pytest

from fixture_support import FIXTURES, REPO, RULE_FIXTURES
from test_cli import Exploding
from trainlint import cli, runner, workers
from trainlint.config import load_settings
from trainlint.diagnostics import Severity
from trainlint.rules import rule_names
from trainlint.rules.base import Rule


@pytest.fixture
def pools(monkeypatch):
    """How many worker pools were started."""
    started = []
    real = workers._in_pool

    def counting(*args, **kwargs):
        started.append(args[3])  # jobs
        return real(*args, **kwargs)

    monkeypatch.setattr(workers, "_in_pool", counting)
    return started


def run_main(capsys, *args):
    code = cli.main(["--no-cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_parallel_json_output_equals_serial_over_the_fixture_tree(monkeypatch, capsys, pools):
    monkeypatch.chdir(REPO)
    args = ["--select", "ALL", "--output-format", "json", "fixtures"]
    serial = run_main(capsys, "-j1", *args)
    assert pools == []
    parallel = run_main(capsys, "-j2", *args)
    assert pools == [2]
    assert parallel == serial
    assert serial[0] == 1 and serial[1].count('"code"') > 100


def test_parallel_text_output_equals_serial(monkeypatch, capsys, pools):
    monkeypatch.chdir(REPO)
    args = ["--select", "ALL", "fixtures/rules/TRL101", "fixtures/rules/TRL201", "fixtures/clean"]
    serial = run_main(capsys, "-j1", *args)
    parallel = run_main(capsys, "-j2", *args)
    assert pools == [2]
    assert parallel == serial and serial[0] == 1 and "TRL201" in serial[1]


def test_a_handful_of_files_is_checked_without_a_pool(monkeypatch, capsys, pools):
    monkeypatch.chdir(REPO)
    few = sorted(str(p.relative_to(REPO)) for p in (RULE_FIXTURES / "TRL201").glob("*.py"))[:5]
    assert run_main(capsys, "-j2", *few)[0] == 1
    assert pools == []
    assert not workers.worth_a_pool([100_000] * 7, 2)  # too few files
    assert not workers.worth_a_pool([1_000] * 50, 2)  # too few bytes
    assert not workers.worth_a_pool([100_000] * 50, 1)  # -j1
    assert workers.worth_a_pool([100_000] * 8, 2)


def test_only_cache_hits_start_no_pool(monkeypatch, capsys, pools):
    monkeypatch.chdir(REPO)
    args = ["-j2", "--output-format", "json", "fixtures/clean", "fixtures/rules/TRL101"]
    cold = cli.main(args), capsys.readouterr()
    warm = cli.main(args), capsys.readouterr()
    assert pools == [2] and warm == cold


@pytest.fixture
def many_files(tmp_path, monkeypatch):
    """A project with enough files for a pool: copies of the TRL1xx/TRL2xx fixtures."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for family in ("TRL101", "TRL102", "TRL201"):
        shutil.copytree(RULE_FIXTURES / family, root / family)
    monkeypatch.chdir(root)
    return root


def test_a_rule_crash_in_a_worker_is_reported_as_in_a_serial_run(
    many_files, register_rule, capsys, pools
):
    register_rule(Exploding)
    args = ["--output-format", "concise", "--select", "TRL1,TRL2,TRL999", "."]
    serial = run_main(capsys, "-j1", *args)
    parallel = run_main(capsys, "-j2", *args)
    assert pools == [2]
    assert parallel == serial
    assert serial[0] == 2
    assert serial[2].count("internal error in rule TRL999: ValueError: boom") > 20
    assert "TRL201" in serial[1]


class HeapWatcher(Rule):
    """Test rule: reports, on every module, which process checked it and whether the garbage
    collector of that process leaves frozen objects alone."""

    code = "TRL999"
    name = "heap-watcher"
    severity = Severity.ERROR

    def visit_Module(self, node: cst.Module) -> None:
        frozen = "frozen" if gc.get_freeze_count() else "collected"
        self.report(node, f"pid {os.getpid()}: inherited objects {frozen}")


def test_forked_workers_leave_the_heap_they_inherit_to_this_process(
    many_files, register_rule, capsys, pools
):
    """A forked worker's full collection would walk (and copy) every object it inherited: in a
    process with a large heap that is seconds of each worker's first file's budget. The workers
    see this process's objects frozen; this process has them back once the workers started."""
    if workers._context().get_start_method() != "fork":
        pytest.skip("workers are not forked here")
    register_rule(HeapWatcher)
    assert gc.get_freeze_count() == 0
    args = ["--output-format", "concise", "--select", "TRL999", "."]
    code, out, err = run_main(capsys, "-j2", *args)
    assert pools == [2] and err == ""
    reports = [line.split(": TRL999 error: ")[1] for line in out.splitlines() if "TRL999" in line]
    assert reports and all(report.endswith("inherited objects frozen") for report in reports)
    assert f"pid {os.getpid()}:" not in out
    assert gc.get_freeze_count() == 0


def test_objects_a_host_froze_stay_frozen(many_files, register_rule, capsys, pools):
    if workers._context().get_start_method() != "fork":
        pytest.skip("workers are not forked here")
    register_rule(HeapWatcher)
    gc.freeze()
    try:
        run_main(capsys, "-j2", "--output-format", "concise", "--select", "TRL999", ".")
        assert pools == [2]
        assert gc.get_freeze_count() > 0  # (objects freed since are no longer counted)
    finally:
        gc.unfreeze()


# A worker that dies (killed, or ended by the time budget's watchdog): tests/test_time_budget.py.


def test_ctrl_c_stops_the_workers_and_exits_2(many_files, monkeypatch, capsys):
    real_put = runner.Cache.put

    def interrupted(self, *args):
        real_put(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.Cache, "put", interrupted)
    # Only the processes this run started count (a broken pool of an earlier test may still be
    # winding down). On a loaded machine a terminated worker can take a moment to be reaped:
    # each must be gone within seconds, never left running.
    earlier = set(multiprocessing.active_children())
    code = cli.main(["-j2", "-q", "."])
    assert code == 2 and capsys.readouterr().err == "error: interrupted\n"
    started = [p for p in multiprocessing.active_children() if p not in earlier]
    for process in started:
        process.join(timeout=10)
    # Asked of the OS, not of the Process objects: the pool's own manager thread may have reaped
    # a worker first, and then Process.is_alive() can no longer tell that it ended.
    assert [p.pid for p in started if _still_running(p.pid)] == []


def _still_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask whether the pid still exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")  # a zombie has exited; only its exit status is left


def test_settings_cross_to_workers_intact():
    settings = load_settings([FIXTURES], rule_names())
    settings.per_file_ignores = {"tests/*.py": ["TRL1"]}
    settings.options = {"device-movers": ["to_gpu"]}
    assert pickle.loads(pickle.dumps(settings)) == settings


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_jobs_must_be_a_positive_number(value, capsys):
    assert cli.main(["-j", value, str(Path(".").resolve())]) == 2
    assert "expected 1 or more processes" in capsys.readouterr().err


def test_default_jobs_is_the_cpus_this_process_may_use():
    assert 1 <= workers.default_jobs() <= (os.cpu_count() or 1)
