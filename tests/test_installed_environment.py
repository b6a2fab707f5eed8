"""Finding installed sources without importing them (environment.py): the import path of the
environment chosen by `python` / `--python`, $VIRTUAL_ENV or trainlint's own interpreter, `.pth`
path lines, editable installs, namespace packages, and nothing of the environment ever run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from installed_support import executed_markers, make_venv, populate_site
from trainlint.config import ConfigError, python_path
from trainlint.environment import (
    Environment,
    ModuleFinder,
    ask_interpreter,
    expand_site_dirs,
    find_environment,
)


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "lib" / "site-packages"
    populate_site(site, tmp_path / "extra", tmp_path / "editable-src")
    return site


def finder_for(site: Path) -> ModuleFinder:
    entries, editable = expand_site_dirs([], [str(site)])
    return ModuleFinder(Environment(None, "test", entries, editable))


def test_packages_modules_and_namespaces_resolve_like_the_import_system(site, tmp_path):
    finder = finder_for(site)
    heads = site / "fakedet" / "models" / "dense_heads"
    assert finder.find("fakedet") == site / "fakedet" / "__init__.py"
    assert finder.find("fakedet.models.dense_heads") == heads / "__init__.py"
    assert finder.find("fakedet.models.dense_heads.dino_head") == heads / "dino_head.py"
    assert finder.module_name(heads / "dino_head.py") == "fakedet.models.dense_heads.dino_head"
    assert finder.find("single") == site / "single.py"
    # fakens has no __init__: its portions in the site folder and in the .pth's folder are one
    # namespace package, whose own name has no file.
    assert finder.find("fakens") is None
    assert finder.find("fakens.vision.heads") == site / "fakens" / "vision" / "heads.py"
    assert finder.find("fakens.text.heads") == tmp_path / "extra" / "fakens" / "text" / "heads.py"
    assert finder.find("fakedet.models.nothing") is None
    assert finder.find("not_installed") is None
    # An extension module wins over a same-named source file, as the path finder's loaders
    # are ordered: there is no source to read.
    assert finder.find("fastops") is None


def test_pth_path_lines_are_followed_and_import_lines_never_run(site, tmp_path):
    entries, _ = expand_site_dirs([], [str(site)])
    assert str(tmp_path / "extra") in entries
    assert finder_for(site).find("pthonly") == tmp_path / "extra" / "pthonly.py"
    assert executed_markers(tmp_path) == []


def test_editable_installs_by_finder_mapping_and_by_path_line(site, tmp_path):
    finder = finder_for(site)
    src = tmp_path / "editable-src"
    assert finder.find("fakeedit") == src / "fakeedit" / "__init__.py"
    assert finder.find("fakeedit.layers") == src / "fakeedit" / "layers.py"
    assert finder.find("plainedit") == src / "plainedit" / "__init__.py"
    assert executed_markers(tmp_path) == []


def test_versions_come_from_the_distribution_metadata(site):
    finder = finder_for(site)
    assert finder.version("fakedet") == "1.2.0"
    assert finder.version("single") is None


def test_a_real_venv_is_asked_for_its_path_in_isolation_and_the_answer_kept(tmp_path):
    venv = make_venv(tmp_path / "venv")
    cache = tmp_path / "cache"
    env = find_environment(str(venv["python"]), "--python", cache)
    assert env.problem is None and env.python == str(venv["python"])
    assert str(venv["site"]) in env.entries
    finder = ModuleFinder(env)
    assert finder.find("fakedet.models.dense_heads.dino_head") is not None
    assert finder.find("trainlint") is None  # trainlint's own environment is not this one
    assert finder.frameworks(["fakedet", "single"]) == [("fakedet", "1.2.0"), ("single", None)]
    # Asked once per interpreter: the answer is kept in the cache folder.
    assert len(list((cache / "environments").glob("*.json"))) == 1
    assert ask_interpreter(str(venv["python"]), cache)[0] is not None
    assert executed_markers(tmp_path) == []


def test_virtual_env_is_used_when_no_python_is_set(tmp_path, monkeypatch):
    venv = make_venv(tmp_path / "venv")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv["prefix"]))
    env = find_environment(None)
    assert env.origin == "$VIRTUAL_ENV" and str(venv["site"]) in env.entries
    assert ModuleFinder(env).find("fakedet") is not None
    assert executed_markers(tmp_path) == []


def test_without_a_setting_or_venv_trainlint_s_own_path_is_read_less_its_source(monkeypatch):
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    env = find_environment(None)
    assert env.python is None and "running trainlint" in env.origin
    own = str(Path(__file__).resolve().parents[1] / "src")
    assert own not in env.entries
    assert ModuleFinder(env).find("trainlint") in (None, *[
        Path(e) / "trainlint" / "__init__.py" for e in env.entries
    ])


def test_an_interpreter_that_cannot_answer_is_a_problem_not_a_crash(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho not json\n")
    fake.chmod(0o755)
    env = find_environment(str(fake), "--python")
    assert env.problem and env.entries == []
    assert ModuleFinder(env).find("fakedet") is None


def test_the_python_setting_must_name_an_existing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        python_path("missing/bin/python", tmp_path, "--python")
    # A configuration file may name a .venv this checkout lacks: the check warns instead.
    missing = python_path("missing/bin/python", tmp_path, "pyproject.toml", must_exist=False)
    assert missing == str(tmp_path / "missing" / "bin" / "python")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert python_path("bin/python", tmp_path, "x") == str(tmp_path / "bin" / "python")


@pytest.mark.skipif(os.name == "nt", reason="POSIX venv layout")
def test_show_settings_names_the_environment_and_its_frameworks(tmp_path, monkeypatch, capsys):
    from trainlint import cli, environment

    monkeypatch.setattr(environment, "FRAMEWORKS", ("fakedet", "timm"))
    make_venv(tmp_path / "venv")
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".git").mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.trainlint]\npython = "../venv/bin/python"\n'
    )
    monkeypatch.chdir(project)
    assert cli.main(["check", "--show-settings"]) == 0
    out = capsys.readouterr().out
    assert f'python = "{project / ".." / "venv" / "bin" / "python"}"' in out
    assert "# frameworks visible: fakedet 1.2.0" in out
    assert cli.main(["check", "--show-settings", "--python", sys.executable]) == 0
    out = capsys.readouterr().out
    assert "# --python" in out and "fakedet" not in out
    assert executed_markers(tmp_path) == []


def test_the_python_key_is_in_the_schema_and_checked_like_the_others(tmp_path):
    from trainlint.config import settings_from_table
    from trainlint.rules import rule_names
    from trainlint.schema import settings_schema

    assert settings_schema()["properties"]["python"] == {"type": "string"}
    (tmp_path / "py").write_text("")
    settings = settings_from_table({"python": "py"}, "pyproject.toml", tmp_path, rule_names())
    assert settings.python == str(tmp_path / "py")
    with pytest.raises(ConfigError, match="'python' must be a str"):
        settings_from_table({"python": 3}, "pyproject.toml", tmp_path, rule_names())


def test_the_standard_library_torch_and_trainlint_are_never_summarised(site):
    from trainlint.config import Settings
    from trainlint.library import Library
    from trainlint.selection import Selection

    entries, editable = expand_site_dirs(list(sys.path), [str(site)])
    library = Library(Selection.of(Settings()), None, Environment(None, "t", entries, editable))
    assert library.find("enum") is None and library.find("unittest.case") is None
    assert library.find("torch.nn.modules.module") is None
    assert library.find("fakedet.models.dense_heads") is not None
