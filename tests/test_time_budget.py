"""The per-file time budget (`per-file-timeout`): a file whose check takes longer is one TRL001
saying so, in this process and in worker processes alike, and every other file's findings are
reported; a file that kills or hangs its worker is reported, never checked in this process."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import threading
import time
from pathlib import Path

import libcst as cst
import pytest

from test_cli import DP_BUG
from trainlint import budget, cli, workers
from trainlint.config import MAX_FILE_SIZE, ConfigError, settings_from_table
from trainlint.diagnostics import Severity
from trainlint.rules import rule_names
from trainlint.rules.base import Rule

OVERTIME = (
    "TRL001 error: skipped: checking this file was stopped after 0.2 s "
    "(the `per-file-timeout` setting); not analysed"
)
# Worker processes share two cores with this one: a budget far above an ordinary file's check
# (tens of milliseconds) keeps every file but slow.py within it on a loaded machine.
WORKER_BUDGET = 2.0
DIED = (
    "TRL001 error: skipped: the process checking this file died (killed, out of memory, or "
    "over the `per-file-timeout` budget); not analysed"
)
SELECT = ["--select", "TRL001,TRL201,TRL999"]
# A rule that would run this long stands for an analysis that never ends: the test fails (it does
# not hang) when the budget does not stop it.
STALL = 30.0


class Slow(Rule):
    """Test rule: on slow.py, sleeps in Python for STALL seconds (a super-linear analysis)."""

    code = "TRL999"
    name = "slow"
    severity = Severity.ERROR

    def visit_Module(self, node: cst.Module) -> None:
        if self.ctx.path.endswith("slow.py"):
            deadline = time.monotonic() + STALL
            while time.monotonic() < deadline:
                time.sleep(0.01)


def run_main(capsys, *args):
    code = cli.main(["check", "--output-format", "concise", *args])
    out, err = capsys.readouterr()
    return code, out, err


def lines_of(out: str, name: str):
    return [line.split(":", 3)[3].strip() for line in out.splitlines() if line.startswith(name)]


@pytest.fixture
def pools(monkeypatch):
    """The `jobs` of each worker pool started."""
    started = []
    real = workers._in_pool

    def counting(*args, **kwargs):
        started.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(workers, "_in_pool", counting)
    return started


def write_project(root: Path, budget_seconds: float, files: int = 2, padding: int = 0) -> None:
    """slow.py and train1.py .. train<files-1>.py, each with a TRL201 on line 6 and `padding`
    comment lines after it (a pool needs MIN_BYTES_FOR_POOL bytes)."""
    (root / "pyproject.toml").write_text(f"[tool.trainlint]\nper-file-timeout = {budget_seconds}\n")
    text = DP_BUG + "# padding\n" * padding
    (root / "slow.py").write_text(text)
    for number in range(1, files):
        (root / f"train{number}.py").write_text(text)


# -- in this process and in workers --------------------------------------------------------------


def test_a_file_over_the_budget_is_one_finding_and_the_rest_is_reported(
    tmp_path, monkeypatch, capsys, register_rule
):
    register_rule(Slow)
    write_project(tmp_path, 0.2)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "--no-cache", "-j1", *SELECT, ".")
    assert (code, err) == (1, "")
    assert lines_of(out, "slow.py") == [OVERTIME]
    assert [line for line in lines_of(out, "train1.py") if line.startswith("TRL201")]


def test_workers_stop_a_file_over_the_budget_as_this_process_does(
    tmp_path, monkeypatch, capsys, register_rule, pools
):
    register_rule(Slow)
    files = workers.MIN_FILES_FOR_POOL + 2
    padding = workers.MIN_BYTES_FOR_POOL // (files * len("# padding\n")) + 1
    write_project(tmp_path, WORKER_BUDGET, files, padding)
    monkeypatch.chdir(tmp_path)
    serial = run_main(capsys, "--no-cache", "-j1", *SELECT, ".")
    assert pools == []
    parallel = run_main(capsys, "--no-cache", "-j2", *SELECT, ".")
    assert pools == [2]
    assert parallel == serial
    code, out, err = parallel
    assert (code, err) == (1, "")
    assert lines_of(out, "slow.py") == [OVERTIME.replace("0.2 s", f"{WORKER_BUDGET:g} s")]
    assert out.count(": TRL201 ") == files - 1


def test_a_result_cut_short_is_not_cached(
    tmp_path, monkeypatch, capsys, register_rule, checked_here
):
    register_rule(Slow)
    write_project(tmp_path, 0.2)
    monkeypatch.chdir(tmp_path)
    first = run_main(capsys, "-j1", *SELECT, ".")
    assert sorted(checked_here) == ["slow.py", "train1.py"]
    checked_here.clear()
    # On a less loaded machine the file may finish in time: it is checked again.
    assert run_main(capsys, "-j1", *SELECT, ".") == first
    assert checked_here == ["slow.py"]


def test_zero_turns_the_budget_off(tmp_path, monkeypatch, capsys, register_rule):
    class Slowish(Rule):
        """Test rule: takes 0.3 s on slow.py, then reports."""

        code = "TRL999"
        name = "slowish"
        severity = Severity.ERROR

        def visit_Module(self, node: cst.Module) -> None:
            if self.ctx.path.endswith("slow.py"):
                time.sleep(0.3)
                self.report(node, "finished")

    register_rule(Slowish)
    write_project(tmp_path, 0)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "--no-cache", "-j1", *SELECT, ".")
    assert (code, err) == (1, "")
    assert "TRL999 error: finished" in lines_of(out, "slow.py")
    assert not any("per-file-timeout" in line for line in lines_of(out, "slow.py"))


# -- a file that kills or hangs its worker ---------------------------------------------------------


def pool_project(root: Path) -> int:
    """A project large enough for a pool, its file victim.py among them; how many files."""
    files = workers.MIN_FILES_FOR_POOL + 2
    padding = workers.MIN_BYTES_FOR_POOL // (files * len("# padding\n")) + 1
    write_project(root, 60, files, padding)
    (root / "slow.py").rename(root / "victim.py")
    return files


def findings_by_file(out: str):
    found = {}
    for item in json.loads(out):
        name = os.path.basename(item["filename"])
        found.setdefault(name, []).append((item["code"], item["message"]))
    return found


@pytest.mark.parametrize("how", ["killed", "hangs in native code"])
def test_a_file_that_takes_its_worker_down_is_reported_and_never_checked_here(
    how, tmp_path, monkeypatch, capsys, register_rule, pools, checked_here
):
    parent = os.getpid()

    class Deadly(Rule):
        """Test rule: in a worker process, on victim.py, ends the process (as the OOM killer
        would) or blocks in C code with the budget's signal blocked (as libcst's parser on a
        pathological file), for STALL seconds."""

        code = "TRL999"
        name = "deadly"
        severity = Severity.ERROR

        def visit_Module(self, node: cst.Module) -> None:
            if os.getpid() == parent or not self.ctx.path.endswith("victim.py"):
                return
            if how == "killed":
                os._exit(9)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            ctypes.PyDLL(None).sleep(int(STALL))  # holds the interpreter, as native code does

    register_rule(Deadly)
    # The watchdog's limit, short for the test (the budget's own default is 90 s).
    monkeypatch.setattr(budget, "hard_limit", lambda seconds: 1.0)
    files = pool_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["--no-cache", "--output-format", "json", *SELECT, "."]
    serial = cli.main(["check", "-j1", *args]), capsys.readouterr()
    checked_here.clear()
    started = time.monotonic()
    parallel = cli.main(["check", "-j2", *args]), capsys.readouterr()
    assert time.monotonic() - started < STALL  # the worker was ended, not waited for
    assert parallel[0] == serial[0] == 1 and parallel[1].err == ""
    assert pools[0] == 2 and len(pools) >= 2
    # Checked again alone, in a worker of its own, which died too; never in this process.
    assert "victim.py" not in checked_here
    assert checked_here == []
    found, expected = findings_by_file(parallel[1].out), findings_by_file(serial[1].out)
    assert found.pop("victim.py") == [("TRL001", DIED.split(" error: ")[1])]
    expected.pop("victim.py")
    assert found == expected and len(found) == files - 1


def test_every_file_comes_back_once_when_a_worker_dies(tmp_path, monkeypatch):
    from trainlint import engine
    from trainlint.config import Settings
    from trainlint.selection import Selection
    from trainlint.source import Source

    parent = os.getpid()
    real = engine.check

    def dying(source, selection, rules=None):
        if os.getpid() != parent and source.path == "victim.py":
            os._exit(9)
        return real(source, selection, rules)

    monkeypatch.setattr(engine, "check", dying)
    selection = Selection.of(Settings(root=tmp_path))
    files = workers.MIN_FILES_FOR_POOL + 4
    data = (DP_BUG + "# padding\n" * (workers.MIN_BYTES_FOR_POOL // 40)).encode()
    names = ["victim.py"] + [f"train{number}.py" for number in range(1, files)]
    sources = [Source.from_bytes(name, data) for name in names]
    here = []

    def check_here(source):
        here.append(source.path)
        return real(source, selection)

    returned = list(workers.check_all(sources, [data] * files, selection, 2, check_here))
    assert sorted(index for index, _ in returned) == list(range(files))
    assert here == []
    results = {sources[index].path: result for index, result in returned}
    victim = results.pop("victim.py")
    assert victim.unfinished
    assert [d.message for d in victim.diagnostics] == [budget.DIED_MESSAGE]
    assert all(
        [d.code for d in result.diagnostics] == ["TRL201"] and not result.unfinished
        for result in results.values()
    )


# -- the timer ---------------------------------------------------------------------------------


def test_within_returns_the_work_or_none_and_leaves_no_timer():
    handler = signal.getsignal(signal.SIGALRM)
    assert budget.within(5, lambda: 42) == 42
    assert budget.within(0.05, lambda: time.sleep(STALL)) is None
    assert signal.getsignal(signal.SIGALRM) is handler
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_within_leaves_a_running_timer_alone():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 100)
    try:
        assert not budget.can_interrupt()
        assert budget.within(0.01, lambda: time.sleep(0.1) or "done") == "done"
        assert 90 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_within_off_the_main_thread_runs_the_work_to_its_end():
    results = []
    worker = threading.Thread(
        target=lambda: results.append(budget.within(0.01, lambda: time.sleep(0.1) or "done"))
    )
    worker.start()
    worker.join()
    assert results == ["done"]


def test_the_hard_limit_leaves_the_soft_budget_time_to_act():
    assert budget.hard_limit(0) is None
    assert budget.hard_limit(1) == 11
    assert budget.hard_limit(60) == 90


# -- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize("value, seconds", [(0, 0.0), (2.5, 2.5), (60, 60.0), (86400, 86400.0)])
def test_the_setting_takes_a_number_of_seconds(value, seconds, tmp_path):
    table = {"per-file-timeout": value}
    assert settings_from_table(table, "t", tmp_path, rule_names()).per_file_timeout == seconds


@pytest.mark.parametrize(
    "toml, message",
    [
        ("-1", "'per-file-timeout' must be a number of seconds up to 86400 (0: no limit)"),
        ("inf", "'per-file-timeout' must be a number of seconds up to 86400 (0: no limit)"),
        ("nan", "'per-file-timeout' must be a number of seconds up to 86400 (0: no limit)"),
        ("1e9", "'per-file-timeout' must be a number of seconds up to 86400 (0: no limit)"),
        ("true", "'per-file-timeout' must be a number of seconds up to 86400 (0: no limit)"),
        ('"60"', "'per-file-timeout' must be a number, not str"),
    ],
)
def test_a_bad_value_is_a_configuration_error(toml, message, tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text(f"[tool.trainlint]\nper-file-timeout = {toml}\n")
    (tmp_path / "train.py").write_text(DP_BUG)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "--no-cache", ".")
    assert (code, out) == (2, "")
    assert err.strip().endswith(message) and "Traceback" not in err
    with pytest.raises(ConfigError):
        settings_from_table({"per-file-timeout": -1}, "t", tmp_path, rule_names())


def test_show_settings_shows_the_budget(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nper-file-timeout = 5\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_main(capsys, "--show-settings")
    assert code == 0
    assert f"per-file-timeout = 5.0  # {tmp_path / 'pyproject.toml'}" in out
    assert f"max-file-size = {MAX_FILE_SIZE}  # default" in out
