"""TRL301 sees through installed frameworks: a custom head whose parent lives in site-packages
(`class MyHead(DINOHead)`, DINOHead star re-exported by `fakedet.models.dense_heads`) is judged
against what the library ancestors read; the framework is read, never imported or executed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from installed_support import executed_markers, make_venv
from trainlint import cli
from trainlint import library as library_module

pytestmark = pytest.mark.skipif(os.name == "nt", reason="POSIX venv layout")

MY_HEAD = """
import torch
from torch import nn
from fakedet.models.dense_heads import {parent}


class MyHead({parent}):
    def __init__(self, num_classes=80, embed_dims=256):
        super().__init__({args})
        self.class_embed = nn.Parameter(torch.zeros(embed_dims, 512))

    def forward(self, hidden_states, dn_meta=None):
        {body}
"""
UNUSED = "logits, boxes = super().forward(hidden_states)\n        return logits, boxes"
USED = (
    "logits, boxes = super().forward(hidden_states)\n"
    "        return logits + hidden_states @ self.class_embed.sum(-1, keepdim=True), boxes"
)
TRAIN = """
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from models.my_head import MyHead


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(MyHead().cuda(local_rank), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(1000):
        hidden = torch.randn(8, 300, 256, device=local_rank)
        logits, boxes = model(hidden)
        loss = logits.mean() + boxes.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    """A venv with the fake framework installed, and one without it (both real, no pip)."""
    root = tmp_path_factory.mktemp("envs")
    with_framework = make_venv(root / "with")
    bare = root / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    return {"with": with_framework, "bare": bare / "bin" / "python", "root": root}


def write_project(root: Path, body: str = UNUSED, parent: str = "DINOHead", python=None) -> Path:
    args = "" if parent == "WalkingHead" else "num_classes, embed_dims"
    (root / ".git").mkdir(parents=True)
    (root / "models").mkdir()
    (root / "models" / "__init__.py").write_text("")
    head = MY_HEAD.format(parent=parent, args=args, body=body)
    (root / "models" / "my_head.py").write_text(textwrap.dedent(head).lstrip())
    (root / "train.py").write_text(TRAIN.lstrip())
    if python is not None:
        (root / "pyproject.toml").write_text(f"[tool.trainlint]\npython = {str(python)!r}\n")
    return root


def check(project: Path, monkeypatch, capsys, *extra: str):
    monkeypatch.chdir(project)
    code = cli.main(["check", ".", "--output-format", "json", *extra])
    out = capsys.readouterr().out
    found = [(d["code"], os.path.relpath(d["filename"]), d["severity"]) for d in json.loads(out)]
    return code, found


def test_an_unused_parameter_on_an_installed_parent_is_an_error(
    venvs, tmp_path, monkeypatch, capsys
):
    project = write_project(tmp_path / "proj", python=venvs["with"]["python"])
    code, found = check(project, monkeypatch, capsys)
    assert code == 1
    assert found == [("TRL301", "models/my_head.py", "error")]
    assert executed_markers(venvs["root"]) == []


def test_the_parameter_used_in_forward_gives_nothing(venvs, tmp_path, monkeypatch, capsys):
    project = write_project(tmp_path / "proj", body=USED, python=venvs["with"]["python"])
    assert check(project, monkeypatch, capsys) == (0, [])


def test_a_library_parent_that_walks_every_child_keeps_it_quiet(
    venvs, tmp_path, monkeypatch, capsys
):
    project = write_project(
        tmp_path / "proj", parent="WalkingHead", python=venvs["with"]["python"]
    )
    assert check(project, monkeypatch, capsys) == (0, [])


def test_with_the_framework_absent_nothing_is_reported(venvs, tmp_path, monkeypatch, capsys):
    project = write_project(tmp_path / "proj", python=venvs["bare"])
    assert check(project, monkeypatch, capsys) == (0, [])
    # trainlint's own interpreter has no fakedet either
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    (project / "pyproject.toml").unlink()
    assert check(project, monkeypatch, capsys) == (0, [])


def test_virtual_env_and_the_python_option_choose_the_environment(
    venvs, tmp_path, monkeypatch, capsys
):
    project = write_project(tmp_path / "proj")
    monkeypatch.setenv("VIRTUAL_ENV", str(venvs["with"]["prefix"]))
    assert check(project, monkeypatch, capsys)[1] == [("TRL301", "models/my_head.py", "error")]
    # --python wins over $VIRTUAL_ENV
    assert check(project, monkeypatch, capsys, "--python", str(venvs["bare"])) == (0, [])
    assert executed_markers(venvs["root"]) == []


def test_library_files_are_summarised_once_per_version(venvs, tmp_path, monkeypatch, capsys):
    made = []
    real = library_module.Library._summarise

    def counting(self, path, data, codes):
        made.append(path.name)
        return real(self, path, data, codes)

    monkeypatch.setattr(library_module.Library, "_summarise", counting)
    project = write_project(tmp_path / "proj", python=venvs["with"]["python"])
    check(project, monkeypatch, capsys)
    # The class the project inherits from and its ancestors, nothing else of the framework.
    assert sorted(made) == ["__init__.py", "detr_head.py", "dino_head.py"]
    # Another project on the same framework version: the summaries come from the cache.
    other = write_project(tmp_path / "other", python=venvs["with"]["python"])
    made.clear()
    assert check(other, monkeypatch, capsys)[1] == [("TRL301", "models/my_head.py", "error")]
    assert made == []


def test_installing_the_framework_later_is_seen_by_a_cached_run(tmp_path, monkeypatch, capsys):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    project = write_project(tmp_path / "proj", python=venv / "bin" / "python")
    assert check(project, monkeypatch, capsys) == (0, [])
    staged = make_venv(tmp_path / "staged")
    site = next(venv.glob("lib/python*/site-packages"))
    for name in ("fakedet", "fakedet-1.2.0.dist-info"):
        shutil.copytree(staged["site"] / name, site / name)
    assert check(project, monkeypatch, capsys)[1] == [("TRL301", "models/my_head.py", "error")]
    assert executed_markers(tmp_path) == []


def test_a_broken_interpreter_setting_is_quiet_not_a_crash(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    project = write_project(tmp_path / "proj", python=fake)
    assert check(project, monkeypatch, capsys) == (0, [])


def test_star_re_exports_are_followed_only_where_the_name_may_be(
    venvs, tmp_path, monkeypatch, capsys
):
    made = []
    real = library_module.Library._summarise

    def counting(self, path, data, codes):
        made.append(path.name)
        return real(self, path, data, codes)

    monkeypatch.setattr(library_module.Library, "_summarise", counting)
    project = write_project(
        tmp_path / "proj", parent="WalkingHead", python=venvs["with"]["python"]
    )
    assert check(project, monkeypatch, capsys) == (0, [])
    # dino_head.py, re-exported before walking_head.py, never spells WalkingHead: not parsed.
    assert sorted(made) == ["__init__.py", "walking_head.py"]


def test_a_star_re_export_of_a_star_re_export(venvs, tmp_path, monkeypatch, capsys):
    project = write_project(tmp_path / "proj", python=venvs["with"]["python"])
    head = project / "models" / "my_head.py"
    head.write_text(head.read_text().replace("fakedet.models.dense_heads", "fakedet.models"))
    code, found = check(project, monkeypatch, capsys)
    assert found == [("TRL301", "models/my_head.py", "error")]
    assert executed_markers(venvs["root"]) == []


def test_the_project_s_own_dot_venv_named_relative_to_the_configuration(
    tmp_path, monkeypatch, capsys
):
    project = write_project(tmp_path / "proj")
    make_venv(project / ".venv")
    (project / "pyproject.toml").write_text('[tool.trainlint]\npython = ".venv/bin/python"\n')
    monkeypatch.chdir(project / "models")  # the setting is relative to its file, not to here
    code = cli.main(["check", "..", "--output-format", "json"])
    found = [(d["code"], d["severity"]) for d in json.loads(capsys.readouterr().out)]
    assert (code, found) == (1, [("TRL301", "error")])
    # the library files inside the project root are neither checked nor reported
    assert executed_markers(project) == []


TRACKED = """
import torch
from torch import nn
from fakedet.models.dense_heads import TrackingHead


class AttentionHead(TrackingHead):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(16, 16)

    def forward(self, x):
        attention = torch.softmax(self.query(x) @ x.transpose(1, 2), dim=-1)
        self.last_attention = attention
        return attention @ x


model = nn.DataParallel(AttentionHead().cuda())
for batch in torch.randn(10, 4, 8, 16):
    out = model(batch.cuda())
    heat = model.module.attention_map()
"""


def test_trl203_sees_a_library_parent_read_what_forward_leaves_on_a_replica(
    venvs, tmp_path, monkeypatch, capsys
):
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (project / "viz.py").write_text(TRACKED.lstrip())
    (project / "pyproject.toml").write_text(
        f"[tool.trainlint]\npython = {str(venvs['with']['python'])!r}\n"
    )
    assert check(project, monkeypatch, capsys)[1] == [("TRL203", "viz.py", "error")]
    # The parent unread (not installed): its helper is unknown, and the write is not reported.
    (project / "pyproject.toml").write_text(
        f"[tool.trainlint]\npython = {str(venvs['bare'])!r}\n"
    )
    assert check(project, monkeypatch, capsys) == (0, [])
    assert executed_markers(venvs["root"]) == []


def test_an_mm_style_config_building_the_head_makes_it_an_error(
    venvs, tmp_path, monkeypatch, capsys
):
    project = write_project(tmp_path / "proj", python=venvs["with"]["python"])
    (project / "train.py").unlink()
    (project / "configs").mkdir()
    (project / "configs" / "dino_base.py").write_text(
        "model = dict(type='DINO', bbox_head=dict(type='DINOHead', num_classes=80))\n"
    )
    (project / "configs" / "my_dino.py").write_text(
        "_base_ = ['./dino_base.py']\n"
        "custom_imports = dict(imports=['models.my_head'], allow_failed_imports=False)\n"
        "model = dict(bbox_head=dict(type='MyHead'))\n"
    )
    assert check(project, monkeypatch, capsys)[1] == [("TRL301", "models/my_head.py", "error")]
    # the same config tolerating unused parameters: nothing
    with (project / "configs" / "my_dino.py").open("a") as handle:
        handle.write("find_unused_parameters = True\n")
    assert check(project, monkeypatch, capsys) == (0, [])


def test_a_changed_library_file_is_read_again(tmp_path, monkeypatch, capsys):
    venv = make_venv(tmp_path / "venv")
    project = write_project(tmp_path / "proj", python=venv["python"])
    assert check(project, monkeypatch, capsys)[1] == [("TRL301", "models/my_head.py", "error")]
    # A new release of the parent reads the attribute (say, an editable install edited).
    detr = venv["site"] / "fakedet" / "models" / "dense_heads" / "detr_head.py"
    detr.write_text(
        detr.read_text().replace(
            "return logits, boxes", "return logits + getattr(self, 'class_embed', 0).sum(), boxes"
        )
    )
    assert check(project, monkeypatch, capsys) == (0, [])


def test_a_configured_interpreter_missing_here_is_a_warning(tmp_path, monkeypatch, capsys):
    project = write_project(tmp_path / "proj", python=".venv/bin/python")
    monkeypatch.chdir(project)
    assert cli.main(["check", "."]) == 0
    err = capsys.readouterr().err
    assert "python interpreter" in err and "not found" in err and "pyproject.toml" in err
