"""The project phase's plumbing: candidates recorded per file and confirmed across files, facts of
files outside the run read through the loader, and in-file-only behaviour without one (flake8)."""

from __future__ import annotations

import libcst as cst

from trainlint import engine
from trainlint.config import Settings
from trainlint.diagnostics import Severity
from trainlint.project import Project, run_project_phase
from trainlint.rules.base import Rule
from trainlint.source import Source


class DefinedHereUsedElsewhere(Rule):
    """Test rule: a top-level function is a finding unless some file of the project calls it."""

    code = "TRL999"
    name = "test-defined-not-called"
    project = True
    markers = ()

    def __init__(self, ctx):
        super().__init__(ctx)
        self.called = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.candidate(node.name.value, node.name, f"`{node.name.value}` is never called")

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name):
            self.called.append(node.func.value)

    def facts(self):
        return {"called": self.called}

    @classmethod
    def check_project(cls, project):
        called = {name for facts in project.facts(cls.code).values() for name in facts["called"]}
        extra = project.facts_of(project.root / "lib" / "extra.py", cls.code)
        if extra:
            called.update(extra["called"])
        for path, found in sorted(project.candidates(cls.code).items()):
            for key in sorted(found):
                if key not in called:
                    yield project.candidate(path, cls.code, key, severity=Severity.ERROR)


def _result(path: str, text: str, settings: Settings):
    return engine.check(Source(path=path, text=text), settings, rules=[DefinedHereUsedElsewhere])


def _codes_ok(monkeypatch, settings):
    monkeypatch.setattr(type(settings), "codes_for", lambda self, path: frozenset({"TRL999"}))


def test_candidates_are_confirmed_across_files(tmp_path, monkeypatch):
    settings = Settings(root=tmp_path)
    _codes_ok(monkeypatch, settings)
    results = {
        "models.py": _result(
            "models.py", "def build():\n    pass\n\ndef unused():\n    pass\n", settings
        ),
        "train.py": _result("train.py", "from models import build\nbuild()\n", settings),
    }
    found, crashes = run_project_phase(
        [DefinedHereUsedElsewhere], Project(root=tmp_path, settings=settings, results=results)
    )
    assert not crashes
    assert [(d.path, d.row, d.col, d.severity, d.message) for d in found] == [
        ("models.py", 4, 4, Severity.ERROR, "`unused` is never called")
    ]


def test_facts_of_a_file_outside_the_run_come_through_the_loader_once(tmp_path, monkeypatch):
    settings = Settings(root=tmp_path)
    _codes_ok(monkeypatch, settings)
    (tmp_path / "lib").mkdir()
    extra = tmp_path / "lib" / "extra.py"
    extra.write_text("unused()\n")
    loads = []

    def loader(path):
        loads.append(path)
        return _result(str(path), path.read_text(), settings)

    results = {"m.py": _result("m.py", "def unused():\n    pass\n", settings)}
    project = Project(root=tmp_path, settings=settings, results=results, loader=loader)
    found, crashes = run_project_phase([DefinedHereUsedElsewhere], project)
    assert not crashes and found == []
    project.facts_of(extra, "TRL999")
    assert loads == [extra.resolve()]
    # Without a loader (flake8) only the files given are evidence: the finding stays.
    alone = Project(root=tmp_path, settings=settings, results=results)
    found, _ = run_project_phase([DefinedHereUsedElsewhere], alone)
    assert [d.row for d in found] == [1]
    assert not alone.complete and project.complete


def test_files_outside_the_project_root_are_never_loaded(tmp_path, monkeypatch):
    settings = Settings(root=tmp_path / "proj")
    (tmp_path / "proj").mkdir()
    outside = tmp_path / "other.py"
    outside.write_text("x = 1\n")
    project = Project(
        root=tmp_path / "proj", settings=settings, results={}, loader=lambda p: 1 / 0
    )
    assert project.result_of(outside) is None
