"""The rules' table (rules/catalog.py): current, equal to the rules it describes, never used when
it is not of the rules on disk, and what lets a run served by the cache skip libcst."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from test_cli import DP_BUG
from test_project_phase import DefinedHereUsedElsewhere
from trainlint import rules as registry
from trainlint.rules import catalog


def test_catalog_json_describes_the_rules_on_disk():
    with open(catalog.CATALOG_PATH, encoding="utf-8") as handle:
        on_disk = handle.read()
    assert on_disk == catalog.render(registry.all_rules()), (
        "src/trainlint/rules/catalog.json is out of date: run `python -m trainlint.rules`"
    )


def test_the_stored_table_equals_the_imported_rules():
    catalog.stored.cache_clear()
    stored = catalog.stored()
    assert stored is not None
    assert stored == catalog.from_rules(registry.all_rules())
    assert list(stored) == sorted(stored)
    assert any(info.project for info in stored.values())
    assert not stored["TRL501"].default_enabled and stored["TRL101"].default_enabled


def test_a_table_of_other_sources_is_never_used(tmp_path, monkeypatch):
    with open(catalog.CATALOG_PATH, encoding="utf-8") as handle:
        data = json.load(handle)
    data["rules"]["TRL101"][1] = False  # what a stale table could say
    data["digest"] = "0" * 64
    stale = tmp_path / "catalog.json"
    stale.write_text(json.dumps(data))
    monkeypatch.setattr(catalog, "CATALOG_PATH", str(stale))
    catalog.stored.cache_clear()
    try:
        assert catalog.stored() is None
        stale.write_text("{not json")
        catalog.stored.cache_clear()
        assert catalog.stored() is None
    finally:
        catalog.stored.cache_clear()


def test_a_registered_rule_is_in_the_catalog(register_rule):
    register_rule(DefinedHereUsedElsewhere)
    table = registry.rule_catalog()
    assert table["TRL999"].project and table["TRL999"].module == DefinedHereUsedElsewhere.__module__


RUN_AND_REPORT_IMPORTS = """
import contextlib, io, json, sys
from trainlint.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(),
                  "libcst": "libcst" in sys.modules,
                  "rules": sorted(m for m in sys.modules if m.startswith("trainlint.rules.")
                                  and m.count(".") == 3)}))
"""


def test_a_run_served_by_the_cache_imports_neither_libcst_nor_the_rules(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nper-file-ignores = {}\n")
    (tmp_path / "train.py").write_text(DP_BUG + "x = 1  # noqa: TRL104\n")
    (tmp_path / "models.py").write_text("import torch.nn as nn\n\n\nclass M(nn.Module):\n"
                                        "    def forward(self, x):\n        return x\n")
    env = {**os.environ, "TRAINLINT_CACHE_DIR": str(tmp_path / "cache")}

    def run():
        done = subprocess.run(
            [sys.executable, "-c", RUN_AND_REPORT_IMPORTS, "--select", "ALL",
             "--output-format", "json", "."],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold, warm = run(), run()
    assert cold["libcst"] and cold["rules"]  # checking files needs them
    assert (warm["code"], warm["out"]) == (cold["code"], cold["out"])
    assert json.loads(warm["out"])  # findings were reported, from the cache
    # TRL002 (unused noqa) is the one rule module such a run uses; it needs no libcst.
    assert not warm["libcst"] and warm["rules"] == ["trainlint.rules.engine.trl002_unused_noqa"]
