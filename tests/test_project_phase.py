"""The project phase's plumbing: candidates recorded per file and confirmed across files, facts of
files outside the run read through the loader, and in-file-only behaviour without one (flake8)."""

from __future__ import annotations

import libcst as cst
import pytest

from trainlint import engine
from trainlint.config import Settings
from trainlint.diagnostics import Severity
from trainlint.project import Project, run_project_phase
from trainlint.rules.base import Rule
from trainlint.rules.catalog import RuleInfo
from trainlint.selection import Selection
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


def _selection(settings: Settings) -> Selection:
    """The run's selection when the rules are TRL999 alone (enabled everywhere)."""
    rule = DefinedHereUsedElsewhere
    info = RuleInfo(rule.code, rule.name, True, True, False, rule.__module__, rule.__qualname__)
    return Selection(settings, {"TRL999": info})


def _result(path: str, text: str, selection: Selection):
    return engine.check(Source(path=path, text=text), selection, rules=[DefinedHereUsedElsewhere])


def test_candidates_are_confirmed_across_files(tmp_path):
    settings = Settings(root=tmp_path)
    selection = _selection(settings)
    results = {
        "models.py": _result(
            "models.py", "def build():\n    pass\n\ndef unused():\n    pass\n", selection
        ),
        "train.py": _result("train.py", "from models import build\nbuild()\n", selection),
    }
    found, crashes = run_project_phase(
        [DefinedHereUsedElsewhere],
        Project(root=tmp_path, settings=settings, results=results),
        selection,
    )
    assert not crashes
    assert [(d.path, d.row, d.col, d.severity, d.message) for d in found] == [
        ("models.py", 4, 4, Severity.ERROR, "`unused` is never called")
    ]


def test_facts_of_a_file_outside_the_run_come_through_the_loader_once(tmp_path):
    settings = Settings(root=tmp_path)
    selection = _selection(settings)
    (tmp_path / "lib").mkdir()
    extra = tmp_path / "lib" / "extra.py"
    extra.write_text("unused()\n")
    loads = []

    def loader(path):
        loads.append(path)
        return _result(str(path), path.read_text(), selection)

    results = {"m.py": _result("m.py", "def unused():\n    pass\n", selection)}
    project = Project(root=tmp_path, settings=settings, results=results, loader=loader)
    found, crashes = run_project_phase([DefinedHereUsedElsewhere], project, selection)
    assert not crashes and found == []
    project.facts_of(extra, "TRL999")
    assert loads == [extra.resolve()]
    # Without a loader (flake8) only the files given are evidence: the finding stays.
    alone = Project(root=tmp_path, settings=settings, results=results)
    found, _ = run_project_phase([DefinedHereUsedElsewhere], alone, selection)
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


# -- TRL301 across files: a run given some files answers like a run over the whole tree --------

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from fixture_support import RULE_FIXTURES, lint  # noqa: E402
from trainlint.flake8_plugin import TrainlintChecker  # noqa: E402

DETR_PROJECT = RULE_FIXTURES / "TRL301" / "detr_head_project"


def _project(tmp_path, source=DETR_PROJECT):
    root = tmp_path / "proj"
    shutil.copytree(source, root)
    (root / "pyproject.toml").write_text("[project]\nname = 'detector'\n")
    return root


def _relative(result, root):
    return sorted(
        (Path(d.path).resolve().relative_to(root.resolve()).as_posix(), d.row, d.severity.value,
         d.message)
        for d in result.diagnostics
        if d.code == "TRL301"
    )


def test_trl301_on_the_changed_head_alone_equals_the_whole_tree(tmp_path):
    root = _project(tmp_path)
    whole = _relative(lint([root], ["TRL301"], root=root), root)
    alone = _relative(lint([root / "models" / "head.py"], ["TRL301"], root=root), root)
    assert whole == alone
    assert [(path, row, severity) for path, row, severity, _ in whole] == [
        ("models/head.py", 19, "error")
    ]


def test_the_incident_shape_is_an_error_on_the_head_alone_and_on_the_whole_tree(tmp_path):
    # The shape TRL301 exists for: a head whose family has an `(object)` mixin and a base
    # re-exported with `from .heads import *`, trained under DDP whose find_unused_parameters
    # comes from the MM-style config (`cfg.get(...)`, not set there).
    root = _project(tmp_path, RULE_FIXTURES / "TRL301" / "incident_star_reexport_project")
    head = root / "opendet" / "models" / "heads" / "detr_head.py"
    whole = _relative(lint([root], ["TRL301"], root=root), root)
    alone = _relative(lint([head], ["TRL301"], root=root), root)
    assert whole == alone
    assert [(path, row, severity) for path, row, severity, _ in whole] == [
        ("opendet/models/heads/detr_head.py", 21, "error")
    ]


def test_trl301_find_unused_in_a_script_outside_the_run_is_seen(tmp_path):
    root = _project(tmp_path)
    train = root / "train.py"
    train.write_text(
        train.read_text().replace(
            "device_ids=[local_rank])", "device_ids=[local_rank], find_unused_parameters=True)"
        )
    )
    assert _relative(lint([root / "models" / "head.py"], ["TRL301"], root=root), root) == []
    assert _relative(lint([root], ["TRL301"], root=root), root) == []


def test_trl301_on_train_py_alone_reads_its_parent_in_another_file(tmp_path):
    root = tmp_path / "proj"
    (root / "models").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "base.py").write_text(
        "import torch.nn as nn\n\n\n"
        "class Base(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return self.head(self.neck(x))\n"
    )
    (root / "train.py").write_text(
        "import torch.distributed as dist\n"
        "import torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "from models.base import Base\n\n\n"
        "class Net(Base):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.neck = nn.Linear(8, 8)\n"
        "        self.head = nn.Linear(8, 2)\n"
        "        self.aux = nn.Linear(8, 2)\n\n\n"
        "dist.init_process_group('gloo')\n"
        "model = DDP(Net())\n"
    )
    whole = _relative(lint([root], ["TRL301"], root=root), root)
    alone = _relative(lint([root / "train.py"], ["TRL301"], root=root), root)
    assert whole == alone
    assert [(path, row, severity) for path, row, severity, _ in alone] == [
        ("train.py", 13, "error")
    ]


def _flake8(path: Path):
    lines = path.read_text().splitlines(True)
    checker = TrainlintChecker(None, lines, str(path))
    return [message.split()[0] for _, _, message, _ in checker.run()]


def test_trl301_under_flake8_uses_in_file_evidence_only(tmp_path):
    root = _project(tmp_path)
    # The head's parent is in another file: unknown to flake8, so nothing is guessed.
    assert "TRL301" not in _flake8(root / "models" / "head.py")
    # A class whose parents are all in the file is judged; no DDP in the file: a warning.
    single = root / "single.py"
    single.write_text(
        "import torch.nn as nn\n\n\n"
        "class Head(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 2)\n"
        "        self.unused = nn.Linear(8, 2)\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
    )
    lines = single.read_text().splitlines(True)
    checker = TrainlintChecker(None, lines, str(single))
    found = [row for row, _, message, _ in checker.run() if message.startswith("TRL301")]
    assert found == [8]


INCIDENT = RULE_FIXTURES / "TRL301" / "incident_star_reexport_project"
INCIDENT_HEAD = Path("opendet") / "models" / "heads" / "detr_head.py"


def test_trl301_incident_on_the_head_alone_equals_the_whole_tree(tmp_path):
    # A parameter added to a head whose family has an `(object)` mixin, reached through
    # chained star re-exports, with find_unused_parameters read from the loaded MM config.
    root = _project(tmp_path, INCIDENT)
    whole = _relative(lint([root], ["TRL301"], root=root), root)
    alone = _relative(lint([root / INCIDENT_HEAD], ["TRL301"], root=root), root)
    assert whole == alone
    assert [(path, row, severity) for path, row, severity, _ in whole] == [
        (INCIDENT_HEAD.as_posix(), 21, "error")
    ]


def test_trl301_incident_config_setting_find_unused_silences_it_in_both_runs(tmp_path):
    root = _project(tmp_path, INCIDENT)
    base = root / "configs" / "_base_" / "default_runtime.py"
    base.write_text(base.read_text() + "find_unused_parameters = True\n")
    assert _relative(lint([root / INCIDENT_HEAD], ["TRL301"], root=root), root) == []
    assert _relative(lint([root], ["TRL301"], root=root), root) == []


def test_trl301_incident_commented_config_setting_does_not_silence_it(tmp_path):
    root = _project(tmp_path, INCIDENT)
    base = root / "configs" / "_base_" / "default_runtime.py"
    base.write_text(base.read_text() + "# find_unused_parameters = True\n")
    alone = _relative(lint([root / INCIDENT_HEAD], ["TRL301"], root=root), root)
    assert [(path, severity) for path, _, severity, _ in alone] == [
        (INCIDENT_HEAD.as_posix(), "error")
    ]


def test_trl301_incident_config_read_without_configs_in_the_project_is_quiet(tmp_path):
    # The config is loaded from a path, and the project holds none: undecidable.
    root = _project(tmp_path, INCIDENT)
    shutil.rmtree(root / "configs")
    assert _relative(lint([root], ["TRL301"], root=root), root) == []


@pytest.mark.parametrize(
    "variant", ["good_incident_parameter_used_project", "good_unresolved_library_base_project"]
)
def test_trl301_incident_neighbours_are_quiet_on_the_head_alone(tmp_path, variant):
    root = _project(tmp_path, RULE_FIXTURES / "TRL301" / variant)
    assert _relative(lint([root / INCIDENT_HEAD], ["TRL301"], root=root), root) == []
    assert _relative(lint([root], ["TRL301"], root=root), root) == []


# -- TRL103: the custom ops live in a model module the script imports ------------------------

TRL103_FIXTURES = RULE_FIXTURES / "TRL103"


def _trl103(result, root):
    return sorted(
        (Path(d.path).resolve().relative_to(root.resolve()).as_posix(), d.row, d.severity.value,
         d.help)
        for d in result.diagnostics
        if d.code == "TRL103"
    )


@pytest.mark.parametrize(
    "name, script, row, ops",
    [
        ("rotated_detector_ops_in_model_project", "train.py", 20,
         "`mmcv.ops.box_iou_rotated` via rotdet/model.py"),
        ("deformable_attention_extension_project", "main.py", 24,
         "`MSDeformAttnKernel` via deformable/ops/attention.py"),
    ],
)
def test_trl103_custom_ops_imported_by_a_project_module_on_the_script_alone(
    tmp_path, monkeypatch, name, script, row, ops
):
    root = _project(tmp_path, TRL103_FIXTURES / name)
    monkeypatch.chdir(root)
    whole = _trl103(lint([root], ["TRL103"], root=root), root)
    alone = _trl103(lint([root / script], ["TRL103"], root=root), root)
    assert whole == alone
    assert [(path, found_row, severity) for path, found_row, severity, _ in whole] == [
        (script, row, "error")
    ]
    assert f"compiled extensions such as {ops})" in whole[0][3]


def test_trl103_quiet_when_the_imported_modules_load_no_custom_ops(tmp_path):
    root = _project(tmp_path, TRL103_FIXTURES / "rotated_detector_ops_in_model_project")
    model = root / "rotdet" / "model.py"
    model.write_text(
        model.read_text()
        .replace("from mmcv.ops import box_iou_rotated, nms_rotated\n", "")
        .replace("nms_rotated(b, s.max(-1).values, 0.1)[1]", "s.max(-1).values > 0.5")
        .replace("box_iou_rotated(b, t[\"boxes\"])", "torch.cdist(b, t[\"boxes\"])")
    )
    assert _trl103(lint([root], ["TRL103"], root=root), root) == []
    assert _trl103(lint([root / "train.py"], ["TRL103"], root=root), root) == []
