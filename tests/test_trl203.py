"""TRL203 across files: a run given only the model file (pre-commit) finds the trainer that
wraps it in DataParallel, as a whole-tree run does; under flake8 only the file itself is
evidence."""

from __future__ import annotations

from fixture_support import RULE_FIXTURES, lint
from trainlint import engine
from trainlint.config import Settings
from trainlint.project import Project, run_project_phase
from trainlint.rules import all_rules
from trainlint.selection import Selection
from trainlint.source import Source

PROJECT = RULE_FIXTURES / "TRL203" / "zoedepth_project"


def _found(result):
    return sorted((d.path.split("/")[-1], d.row, d.severity.value) for d in result.diagnostics)


def test_a_run_on_the_model_file_alone_finds_the_dataparallel_trainer():
    whole = _found(lint([PROJECT], ["TRL203"], root=PROJECT))
    alone = _found(lint([PROJECT / "models" / "core.py"], ["TRL203"], root=PROJECT))
    assert alone == [entry for entry in whole if entry[0] == "core.py"]
    assert alone == [("core.py", 28, "error")]


def test_without_a_loader_the_model_file_alone_is_quiet():
    settings = Settings(root=PROJECT)
    settings.select = ["TRL203"]
    path = PROJECT / "models" / "core.py"
    selection = Selection.of(settings)
    result = engine.check(Source(path=str(path), text=path.read_text()), selection)
    project = Project(root=PROJECT, settings=settings, results={str(path): result})
    found, crashes = run_project_phase([all_rules()["TRL203"]], project, selection)
    assert not crashes and found == []


def test_a_dataparallel_only_trainer_outside_the_run_is_found():
    # No DistributedDataParallel, no process group: only `nn.DataParallel` in train.py.
    project = RULE_FIXTURES / "TRL203" / "dataparallel_only_project"
    model_file = project / "models" / "tapped_resnet.py"
    alone = _found(lint([model_file], ["TRL203"], root=project))
    assert alone == [("tapped_resnet.py", 15, "error")]
