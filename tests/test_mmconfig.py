"""analysis/project/mmconfig.py: MM-style configs read without executing them, and their
`_base_` chains merged with MMEngine's semantics."""

from __future__ import annotations

import textwrap
from pathlib import Path

from trainlint import engine
from trainlint.analysis.project.mmconfig import (
    checkpointed_layers,
    find_unused_setting,
    merge,
    resolve,
)
from trainlint.config import Settings
from trainlint.rules import all_rules
from trainlint.selection import Selection
from trainlint.source import Source


def config_facts(text: str, path: str = "configs/x.py"):
    settings = Settings(root=Path("."))
    result = engine.check(
        Source(path=path, text=textwrap.dedent(text)),
        Selection.of(settings),
        rules=[all_rules()["TRL302"]],
    )
    facts = result.facts.get("TRL302") or {}
    return facts.get("config")


def test_a_config_is_read_into_plain_data_with_positions():
    facts = config_facts(
        """
        _base_ = ['../_base_/models/detr_r50.py', '../_base_/default_runtime.py']
        with_cp = 4
        encoder = dict(num_layers=6, with_cp=with_cp)
        model = dict(backbone=dict(type='ResNet', with_cp=True), encoder=encoder)
        #find_unused_parameters = True
        """
    )
    assert [b["path"] for b in facts["base"]] == [
        "../_base_/models/detr_r50.py",
        "../_base_/default_runtime.py",
    ]
    tree = facts["cfg"]
    assert "find_unused_parameters" not in tree["dict"]  # a comment is not a setting
    layers = {dotted: leaf["value"] for dotted, leaf in checkpointed_layers(tree)}
    assert layers == {"model.backbone.with_cp": True, "model.encoder.with_cp": 4}
    backbone = tree["dict"]["model"]["dict"]["backbone"]["dict"]["with_cp"]
    assert backbone["at"] == [5, 42]


def test_training_scripts_are_not_configs():
    assert (
        config_facts(
            """
            import torch
            model = dict(type='ResNet', with_cp=True)

            def main():
                pass
            """
        )
        is None
    )
    assert config_facts("find_unused = 1\nprint(find_unused)\n") is None


def test_pure_python_style_bases_and_top_level_method_calls():
    facts = config_facts(
        """
        from mmengine.config import read_base

        with read_base():
            from .._base_.models.mae_vit_base_p16 import *

        custom_keys = {'pos_embed': dict(decay_mult=0.0)}
        custom_keys.update({'cls_token': dict(decay_mult=0.0)})
        find_unused_parameters = True
        """
    )
    assert facts["base"][0]["path"] == "../_base_/models/mae_vit_base_p16.py"
    assert find_unused_setting(facts["cfg"])["value"] is True


def _leaf(value, file="base.py", row=1):
    return {"value": value, "at": [row, 0], "key": f"k@{row}:0", "file": file}


def test_merge_follows_mmengine():
    base = {
        "dict": {
            "model": {
                "dict": {
                    "backbone": {"dict": {"with_cp": _leaf(True), "type": _leaf("ResNet")}},
                    "encoder": {"dict": {"with_cp": _leaf(4)}},
                }
            }
        }
    }
    # A dict over a dict merges key by key.
    child = {"dict": {"model": {"dict": {"backbone": {"dict": {"depth": None}}}}}}
    assert len(checkpointed_layers(merge(base, child))) == 2
    # with_cp=False overrides.
    child = {"dict": {"model": {"dict": {"encoder": {"dict": {"with_cp": _leaf(False)}}}}}}
    assert [d for d, _ in checkpointed_layers(merge(base, child))] == ["model.backbone.with_cp"]
    # _delete_=True replaces the whole dict.
    child = {"dict": {"model": {"dict": {"backbone": {"dict": {}, "delete": True}}}}}
    assert [d for d, _ in checkpointed_layers(merge(base, child))] == ["model.encoder.with_cp"]


def test_model_wrapper_cfg_decides_over_the_top_level_key():
    top = {"find_unused_parameters": _leaf(True)}
    assert find_unused_setting({"dict": top})["value"] is True
    static = {"dict": {"static_graph": _leaf(True), "find_unused_parameters": _leaf(True)}}
    assert find_unused_setting({"dict": dict(top, model_wrapper_cfg=static)}) is None
    wrapper = {"dict": {"type": _leaf("MMDistributedDataParallel")}}
    assert find_unused_setting({"dict": dict(top, model_wrapper_cfg=wrapper)}) is None
    fsdp = {"dict": {"type": _leaf("MMFullyShardedDataParallel"), "find_unused_parameters": 1}}
    assert find_unused_setting({"dict": {"model_wrapper_cfg": fsdp}}) is None


def test_resolve_reads_the_chain_relative_to_each_file(tmp_path):
    child = config_facts("_base_ = '../_base_/m.py'\nfind_unused_parameters = True\n")
    base = config_facts("model = dict(encoder=dict(with_cp=2))\n")
    files = {tmp_path / "_base_" / "m.py": base}
    merged = resolve(
        tmp_path / "detr" / "c.py",
        child,
        lambda p: files.get(Path(p)),
        lambda p: Path(p).relative_to(tmp_path).as_posix(),
    )
    assert merged.files == ["detr/c.py", "_base_/m.py"] and not merged.missing
    (dotted, leaf), = checkpointed_layers(merged.tree)
    assert (dotted, leaf["file"]) == ("model.encoder.with_cp", "_base_/m.py")
    assert find_unused_setting(merged.tree)["file"] == "detr/c.py"
