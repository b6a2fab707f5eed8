"""TRL302 across files: a config's `_base_` chain read when only the child is given (pre-commit),
in-file evidence only under flake8, and checkpoint calls paired only with scripts that import
their module."""

from __future__ import annotations

import shutil
import textwrap

from fixture_support import RULE_FIXTURES, lint
from trainlint.flake8_plugin import TrainlintChecker

CHAIN = RULE_FIXTURES / "TRL302" / "mm_detr_config_chain"


def test_a_child_config_alone_still_reads_its_bases(tmp_path):
    project = tmp_path / "proj"
    shutil.copytree(CHAIN, project)
    (project / ".git").mkdir()
    child = project / "detr" / "detr_r50_wrapper_cfg_coco.py"
    result = lint([child], ["TRL302"], root=project)
    (finding,) = result.diagnostics
    assert (finding.row, finding.col) == (7, 4)
    assert [(n[0].endswith("detr_r50.py"), n[1]) for n in finding.related] == [
        (True, 21),
        (True, 33),
    ]


def _flake8(path):
    checker = TrainlintChecker(None, path.read_text().splitlines(True), str(path))
    return [(row, message.split()[0]) for row, _col, message, _type in checker.run()]


def test_flake8_uses_what_the_one_file_shows(tmp_path):
    # The base is not read under flake8: the child alone shows no checkpointing.
    assert _flake8(CHAIN / "detr" / "detr_r50_wrapper_cfg_coco.py") == []
    config = tmp_path / "co_dino_r50.py"
    config.write_text(
        textwrap.dedent(
            """\
            model = dict(
                type='CoDETR',
                encoder=dict(num_layers=6, with_cp=4))
            optimizer = dict(type='AdamW', lr=2e-4)
            find_unused_parameters = True
            """
        )
    )
    assert _flake8(config) == [(5, "TRL302")]


MODEL = """\
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Trunk(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(8))

    def forward(self, x):
        for layer in self.layers:
            x = checkpoint(layer, x)
        return x
"""

SCRIPT = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
{import_line}

model = DDP(Trunk(), find_unused_parameters=True)
"""


def test_checkpoints_pair_only_with_scripts_that_import_them(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "trunk.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(SCRIPT.format(import_line="from nets.trunk import Trunk"))
    found = lint([tmp_path], ["TRL302"], root=tmp_path).diagnostics
    assert [(d.path.endswith("trunk.py"), d.row) for d in found] == [(True, 12)]
    assert found[0].related[0][0].endswith("train.py")
    # Through a package that re-exports the module, and from two scripts: reported once.
    (tmp_path / "nets" / "__init__.py").write_text("from .trunk import Trunk\n")
    (tmp_path / "train.py").write_text(SCRIPT.format(import_line="from nets import Trunk"))
    (tmp_path / "finetune.py").write_text(SCRIPT.format(import_line="from nets import Trunk"))
    found = lint([tmp_path], ["TRL302"], root=tmp_path).diagnostics
    assert [(d.path.endswith("trunk.py"), d.row) for d in found] == [(True, 12)]
    (tmp_path / "finetune.py").unlink()
    (tmp_path / "train.py").write_text(SCRIPT.format(import_line="from other import Trunk"))
    assert lint([tmp_path], ["TRL302"], root=tmp_path).diagnostics == []


def test_a_run_given_some_files_reports_what_a_whole_tree_run_reports_in_them(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "__init__.py").write_text("from .trunk import Trunk\n")
    (tmp_path / "nets" / "trunk.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(SCRIPT.format(import_line="from nets import Trunk"))
    whole = lint([tmp_path], ["TRL302"], root=tmp_path).diagnostics
    assert [(d.path.endswith("trunk.py"), d.row) for d in whole] == [(True, 12)]
    # Pre-commit passes the changed model module: the script outside the run is read.
    found = lint([tmp_path / "nets" / "trunk.py"], ["TRL302"], root=tmp_path).diagnostics
    # (A file outside the run is named relative to the working directory, as the CLI names all.)
    assert [d.row for d in found] == [d.row for d in whole]
    assert found[0].message.endswith("while DDP has `find_unused_parameters=True`")
    assert found[0].help == (
        'The checkpoint is reentrant (no `use_reentrant=False`), so DDP raises "Expected to mark '
        'a variable ready only once" in the first backward. Use non-reentrant checkpointing.'
    )
    assert found[0].related[0][0].endswith("train.py")
    # Given only the script, the finding stays at the checkpoint call, which is not in the run.
    assert lint([tmp_path / "train.py"], ["TRL302"], root=tmp_path).diagnostics == []


def _rows(tmp_path, text):
    path = tmp_path / "launch.py"
    path.write_text(textwrap.dedent(text))
    return [d.row for d in lint([path], ["TRL302"], root=tmp_path).diagnostics]


def test_find_unused_spelled_as_flags_and_strategy_names(tmp_path):
    enable = "model.gradient_checkpointing_enable()\n"
    assert _rows(tmp_path, 'argv = ["--ddp_find_unused_parameters", "False"]\n' + enable) == []
    assert _rows(tmp_path, 'cmd = "train.py --ddp_find_unused_parameters=true"\n' + enable) == [2]
    assert _rows(tmp_path, 'cmd = "train.py --ddp_find_unused_parameters"\n' + enable) == [2]
    lightning = 'trainer = Trainer(strategy="ddp_find_unused_parameters_true")\n'
    assert _rows(tmp_path, lightning + enable) == [2]
    keep = 'model.gradient_checkpointing_enable({"use_reentrant": False})\n'
    assert _rows(tmp_path, lightning + keep) == []
