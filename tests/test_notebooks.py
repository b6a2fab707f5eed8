"""Jupyter notebooks: discovered like .py files, code cells joined with IPython syntax masked,
findings at `path:cell N:row:col`, noqa inside cells, fixes written back byte for byte outside
the changed cells, broken notebooks reported (never a crash)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import libcst as cst
import pytest

from fixture_support import REPO
from trainlint import cli
from trainlint.notebook import mask_cell
from trainlint.source import Source

SCHEMA = json.loads((REPO / "tests" / "data" / "json_output.schema.json").read_text())
INCIDENT = REPO / "fixtures" / "rules" / "TRL201" / "notebook_single_cell_embeddings.ipynb"

IMPORTS = "%matplotlib inline\nimport torch\nimport torch.nn as nn\ntorch.cuda.set_device(args.gpu)"
MODEL = (
    'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
    "model = nn.Linear(8, 2)\n"
    "model = nn.DataParallel(model).to(device)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"
)
BUG = "model = nn.DataParallel(model).to(device)"
FIXED = "model = nn.DataParallel(model.to(device))"


def code_cell(source, outputs=(), count=None, as_string=False):
    lines = source if as_string else source.splitlines(True)
    return {
        "cell_type": "code",
        "execution_count": count,
        "metadata": {},
        "outputs": list(outputs),
        "source": lines,
    }


def markdown_cell(source):
    return {"cell_type": "markdown", "metadata": {}, "source": source.splitlines(True)}


def notebook(*cells, **metadata):
    return {
        "cells": list(cells),
        "metadata": metadata
        or {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def dumps(nb, indent=1, ensure_ascii=False, sort_keys=True, newline=True):
    text = json.dumps(nb, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)
    return text + ("\n" if newline else "")


def run_main(monkeypatch, capsys, cwd, *args):
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("NO_COLOR", "1")
    code = cli.main(["--isolated", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    return tmp_path


def standard_notebook():
    return notebook(
        markdown_cell("# Train a tiny model\nOn one GPU \u2014 or several."),
        code_cell("!pip install -q torch", outputs=[]),
        code_cell(IMPORTS, count=1),
        markdown_cell("## Model"),
        code_cell(MODEL, count=2),
        code_cell("%%time\nfor step in range(3):\n    optimizer.step()", count=3),
    )


# -- reading -------------------------------------------------------------------------------------


def test_directory_walk_finds_notebooks_and_skips_checkpoints(project, monkeypatch, capsys):
    (project / "nb.ipynb").write_text(dumps(standard_notebook()))
    checkpoints = project / ".ipynb_checkpoints"
    checkpoints.mkdir()
    (checkpoints / "nb-checkpoint.ipynb").write_text(dumps(standard_notebook()))
    code, out, err = run_main(monkeypatch, capsys, project, "--output-format", "concise", ".")
    assert code == 1, out + err
    assert out.splitlines()[0].startswith("nb.ipynb:cell 5:3:9: TRL201 [*] warning: ")
    assert "checkpoint" not in out
    assert err == ""


def test_text_output_names_the_cell_and_shows_the_cell_line(project, monkeypatch, capsys):
    (project / "nb.ipynb").write_text(dumps(standard_notebook()))
    code, out, _ = run_main(monkeypatch, capsys, project, "nb.ipynb")
    assert code == 1
    assert "nb.ipynb:cell 5:3:9: TRL201" in out
    assert f" 3 | {BUG}" in out


def test_json_output_has_cell_and_cell_rows(project, monkeypatch, capsys):
    (project / "nb.ipynb").write_text(dumps(standard_notebook()))
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "json", "nb.ipynb")
    data = json.loads(out)
    jsonschema.validate(data, SCHEMA)
    (finding,) = data
    assert finding["cell"] == 5
    assert finding["location"] == {"row": 3, "column": 9}
    assert finding["noqa_row"] == 3
    edit = finding["fix"]["edits"][0]
    assert edit["location"]["row"] == 3 and edit["content"] == "nn.DataParallel(model.to(device))"


def test_ipython_syntax_is_masked_and_cell_magics_of_other_languages_are_left_out():
    cells = [
        "%matplotlib inline\n%load_ext autoreload\n%autoreload 2",
        "!pip install -q timm \\\n    torchvision\nimport torch",
        "files = !ls data\nout = %sx nvidia-smi\ntorch?\n??torch.nn\nimport torch.nn as nn",
        "pip install einops\ncd data\npwd\nrun train.py --epochs 3",
        "for path in files:\n    !wc -l $path",
        "%%time\nmodel = nn.Linear(2, 2)",
        "%%bash\nfor f in *.ckpt; do echo $f; done",
        "%%writefile train.py\nimport torch\nmodel = torch.nn.DataParallel(m).to('cuda:1')",
        'doc = """\n!not a shell escape inside a string\n"""\nx = (10\n%3)',
    ]
    nb = notebook(*[code_cell(c) for c in cells])
    source = Source.from_bytes("nb.ipynb", dumps(nb).encode())
    assert source.notebook.broken == []
    cst.parse_module(source.text)  # the joined text parses
    numbers = [n for n, _ in source.cells]
    assert numbers == [1, 2, 3, 4, 5, 6, 9]  # the %%bash and %%writefile cells are left out
    assert mask_cell("files = !ls data") == "files = ..."
    # IPython unpacks a system command's output like any value: `path, = !echo $PYTHONPATH`
    assert mask_cell("path, = !echo $PYTHONPATH") == "path, = ..."
    assert mask_cell("ckpt, = ! {ls_logs} | {only_ckpts} | head -n 1") == "ckpt, = ..."
    assert mask_cell("a, b, = %sx ls") == "a, b, = ..."
    assert mask_cell("    !wc -l $path\n") == "    ...\n"
    assert mask_cell("%%bash\nls") is None
    # Cell magics stack: `%%time` over `%%bash` times a shell script (not Python), while
    # `%%capture` over `%%time` still runs Python.
    assert mask_cell("%%time\n%%bash\ngit clone https://example.org/repo") is None
    assert mask_cell("%%time\n\n%%writefile train.py\nimport torch") is None
    assert mask_cell("%%capture\n%%time\nx = 1") == "...\n...\nx = 1"
    # Automagic (no `%`) is masked only where the line is not Python already.
    assert mask_cell(cells[3]) == "...\n...\npwd\n..."
    assert mask_cell("config = {\n    'lr': 0.1,\n}") == "config = {\n    'lr': 0.1,\n}"
    assert mask_cell("run += (\n    1)") == "run += (\n    1)"
    assert mask_cell(cells[8]) == cells[8]  # nothing outside statements is masked
    # Every joined line maps back to its own cell line.
    for number, first in source.cells:
        cell_text = cells[number - 1]
        masked = mask_cell(cell_text)
        assert source.text.splitlines()[first - 1] == masked.splitlines()[0]
        assert source.cell_of(first) == (number, 1)


def test_wildcard_help_search_is_ipython_not_a_syntax_error():
    # `torch.*Tensor?` is IPython's wildcard object search (it runs %psearch).
    assert mask_cell("torch.*Tensor?\n") == "...\n"
    assert mask_cell("?torch.*Tensor\n") == "...\n"
    assert mask_cell("torch.nn.*Loss??\n") == "...\n"
    nb = notebook(code_cell("import torch"), code_cell("torch.*Tensor?"))
    assert Source.from_bytes("nb.ipynb", dumps(nb).encode()).notebook.broken == []


def test_a_cell_indented_as_a_whole_is_left_out_not_reported():
    # IPython strips an indentation shared by every line of a cell before running it, so such
    # a cell runs; it is not analysed (its columns would not map back), and not a TRL001.
    indented = " x = torch.ones(3)\n for i in range(3):\n     x = x * 2\n print(x)"
    nb = notebook(code_cell("import torch"), code_cell(indented), code_cell("print 'py2'"))
    source = Source.from_bytes("nb.ipynb", dumps(nb).encode())
    assert [cell for cell, *_ in source.notebook.broken] == [3]
    assert [number for number, _ in source.cells] == [1]
    # An indented cell that does not parse even dedented is still a syntax error.
    broken = notebook(code_cell(" x = (1,\n y = 2"))
    reported = Source.from_bytes("b.ipynb", dumps(broken).encode()).notebook.broken
    assert [cell for cell, *_ in reported] == [1]


def test_ipython_strips_the_first_lines_indent_only_where_a_line_starts_with_it():
    # ` def f(...):` with a 4-space body and an unindented call after it: IPython removes one
    # space from the lines that start with one (the body keeps 3) and leaves `print` alone.
    cell = " def compute_z(a, b):\n    return torch.sub(a, b)\n\nprint(compute_z(1, 2))"
    nb = notebook(code_cell("import torch"), code_cell(cell))
    assert Source.from_bytes("nb.ipynb", dumps(nb).encode()).notebook.broken == []
    # Where IPython's stripping still leaves bad indentation, the cell is a syntax error.
    bad = notebook(code_cell(" def f(a):\nreturn a"))
    reported = Source.from_bytes("b.ipynb", dumps(bad).encode()).notebook.broken
    assert [cell for cell, *_ in reported] == [1]


def test_a_cell_that_does_not_parse_is_reported_and_the_others_are_checked(
    project, monkeypatch, capsys
):
    nb = standard_notebook()
    nb["cells"].insert(2, code_cell("print 'python 2'"))  # now cell 3; the model is cell 6
    (project / "nb.ipynb").write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "concise", "nb.ipynb")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("nb.ipynb:cell 3:1:1: TRL001 error: SyntaxError: ")
    assert "(this cell is not analysed)" in lines[0]
    assert lines[1].startswith("nb.ipynb:cell 6:3:9: TRL201")


@pytest.mark.parametrize(
    "content, message, position",
    [
        ('{"cells": [\n  {"cell_type": "code",}\n]}', "invalid JSON: Expecting property", "2:24"),
        ("[1, 2]\n", "the top-level JSON value is a list", "1:1"),
        ('{"nbformat": 3, "nbformat_minor": 0, "worksheets": []}', "nbformat 3", "1:14"),
        ('{"metadata": {}, "cells": []}', "no integer `nbformat`", "1:1"),
        (
            '{\n "cells": [\n  {"cell_type": "code", "metadata": {}, "outputs": [],\n'
            '   "source": 42}\n ],\n "metadata": {}, "nbformat": 4, "nbformat_minor": 5\n}\n',
            "cell 1: `source` must be a string or a list of strings",
            "4:14",
        ),
        (b"\xff\xfe{}", "is not valid UTF-8", "1:1"),
    ],
)
def test_a_notebook_that_is_not_valid_is_a_trl001_with_its_position(
    project, monkeypatch, capsys, content, message, position
):
    path = project / "broken.ipynb"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    (project / "train.py").write_text(
        "import torch\nimport torch.nn as nn\ntorch.cuda.set_device(args.gpu)\n" + MODEL + "\n"
    )
    code, out, err = run_main(monkeypatch, capsys, project, "--output-format", "concise", ".")
    assert code == 1, err
    assert "Traceback" not in err and err == ""
    first = out.splitlines()[0]
    assert first.startswith(f"broken.ipynb:{position}: TRL001 error: not a valid notebook"), first
    assert message in first
    assert "train.py:6:9: TRL201" in out  # the rest of the run goes on


def test_a_notebook_for_another_language_is_not_analysed(project, monkeypatch, capsys):
    nb = notebook(
        code_cell("library(torch)\nx <- torch_randn(3)"),
        kernelspec={"display_name": "R", "language": "R", "name": "ir"},
    )
    (project / "r.ipynb").write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "--select", "ALL", "r.ipynb")
    assert code == 0, out


def test_a_cell_switched_to_another_language_is_left_out(project, monkeypatch, capsys):
    # VS Code keeps a cell's chosen language in its metadata: a book shows the launch command
    # of a training script as a shell cell, which the Python kernel is never given.
    launch = 'accelerate launch train.py \\\n  --mixed_precision="fp16" \\\n  --use_ema'
    shell = code_cell(launch)
    shell["metadata"] = {"vscode": {"languageId": "bat"}}
    python = code_cell("import torch\nx = torch.ones(2)")
    python["metadata"] = {"vscode": {"languageId": "python"}}
    nb = standard_notebook()
    nb["cells"][2:2] = [shell, python]  # cells 3 and 4; the model is now cell 7
    (project / "nb.ipynb").write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "concise", "nb.ipynb")
    assert code == 1
    assert out.splitlines()[0].startswith("nb.ipynb:cell 7:3:9: TRL201"), out
    assert "TRL001" not in out
    source = Source.from_bytes("nb.ipynb", dumps(nb).encode())
    assert 3 not in [n for n, _ in source.cells] and 4 in [n for n, _ in source.cells]
    # The same command in a cell nobody marked is a syntax error when the cell runs.
    del nb["cells"][2]["metadata"]["vscode"]
    (project / "nb.ipynb").write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "--output-format", "concise", "nb.ipynb")
    assert out.splitlines()[0].startswith("nb.ipynb:cell 3:1:"), out
    assert "TRL001 error: SyntaxError" in out.splitlines()[0]


def test_noqa_inside_a_cell(project, monkeypatch, capsys):
    nb = standard_notebook()
    nb["cells"][4] = code_cell(MODEL.replace(BUG, BUG + "  # noqa: TRL201"))
    (project / "nb.ipynb").write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "nb.ipynb")
    assert code == 0, out
    # The same comment in another cell row does not suppress it.
    nb["cells"][2] = code_cell(
        IMPORTS.replace("import torch.nn as nn", "import torch.nn as nn  # noqa: TRL201")
    )
    nb["cells"][4] = code_cell(MODEL)
    (project / "nb.ipynb").write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "nb.ipynb")
    assert code == 1


# -- writing back ---------------------------------------------------------------------------------

LAYOUTS = {
    "nbformat (indent 1, sorted keys)": dict(indent=1),
    "indent 2, file key order": dict(indent=2, sort_keys=False),
    "indent 4, no final newline": dict(indent=4, newline=False),
    "compact one line": dict(indent=None, newline=False),
    "ASCII escapes": dict(indent=1, ensure_ascii=True),
}


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_fix_changes_only_the_fixed_line_byte_for_byte(project, monkeypatch, capsys, layout):
    nb = standard_notebook()
    nb["cells"][0] = markdown_cell("# Caf\u00e9 \u2014 entra\u00eenement \U0001f525")
    nb["cells"][2]["outputs"] = [
        {"name": "stdout", "output_type": "stream", "text": ["\u2588\u2588 100%\n"]},
        {
            "data": {"image/png": "iVBORw0KGgo=", "text/plain": ["<Figure>"]},
            "metadata": {"needs_background": "light"},
            "output_type": "display_data",
        },
    ]
    nb["metadata"]["colab"] = {"provenance": [], "toc_visible": True}
    before = dumps(nb, **LAYOUTS[layout])
    path = project / "nb.ipynb"
    path.write_bytes(before.encode())
    code, out, _ = run_main(monkeypatch, capsys, project, "--fix", "nb.ipynb")
    assert code == 0, out
    after = path.read_bytes().decode()
    old_line = json.dumps(BUG + "\n", ensure_ascii=LAYOUTS[layout].get("ensure_ascii", False))
    new_line = json.dumps(FIXED + "\n")
    assert before.count(old_line) == 1
    assert after == before.replace(old_line, new_line)
    # And it is still the same notebook, with the fixed cell.
    assert json.loads(after)["cells"][4]["source"][2] == FIXED + "\n"


def test_fix_keeps_a_source_string_a_string_and_a_bom(project, monkeypatch, capsys):
    nb = standard_notebook()
    nb["cells"][4] = code_cell(MODEL, as_string=True)
    before = dumps(nb, indent=1)
    path = project / "nb.ipynb"
    path.write_bytes(b"\xef\xbb\xbf" + before.encode())
    code, out, _ = run_main(monkeypatch, capsys, project, "--fix", "nb.ipynb")
    assert code == 0, out
    expected = before.replace(json.dumps(MODEL), json.dumps(MODEL.replace(BUG, FIXED)))
    assert path.read_bytes() == b"\xef\xbb\xbf" + expected.encode()


def test_unchanged_lines_keep_their_exact_json_spelling(project, monkeypatch, capsys):
    """Lines of the fixed cell that did not change keep their bytes, even when the file spells
    them differently from Python's json (escaped slashes, \\u escapes of ASCII)."""
    nb = standard_notebook()
    before = dumps(nb, indent=1)
    odd = json.dumps("model = nn.Linear(8, 2)\n")
    spelled = odd.replace("Linear", "\\u004cinear").replace(" = ", " \\u003d ")
    assert before.count(odd) == 1
    before = before.replace(odd, spelled)
    path = project / "nb.ipynb"
    path.write_text(before)
    run_main(monkeypatch, capsys, project, "--fix", "nb.ipynb")
    after = path.read_text()
    assert spelled in after
    assert after == before.replace(json.dumps(BUG + "\n"), json.dumps(FIXED + "\n"))


def test_incident_notebook_round_trips_and_diff_shows_the_json_change(project, monkeypatch, capsys):
    path = project / "metric.ipynb"
    path.write_bytes(INCIDENT.read_bytes())
    code, out, _ = run_main(monkeypatch, capsys, project, "--diff", "metric.ipynb")
    assert code == 1
    assert f'-    "{BUG}  # expect: TRL201\\n",' in out
    assert f'+    "{FIXED}  # expect: TRL201\\n",' in out
    assert path.read_bytes() == INCIDENT.read_bytes()
    # Nothing to fix: the file is not rewritten, not even re-serialised.
    code, out, _ = run_main(monkeypatch, capsys, project, "--fix", "--select", "TRL001", path)
    assert path.read_bytes() == INCIDENT.read_bytes()


def _edge_rule():
    """A test rule that adds a line before and after every `nn.DataParallel(...)` statement: at
    a cell's first and last line, the new lines must land in that cell."""
    from trainlint.diagnostics import Severity
    from trainlint.rules.base import Rule

    class Edges(Rule):
        code = "TRL998"
        name = "edges"
        severity = Severity.WARNING
        fix = "safe"

        def visit_Call(self, node: cst.Call) -> None:
            if self.ctx.code(node.func) != "nn.DataParallel":
                return
            statement = self.ctx.statement_of(node)
            if "# edged" in self.ctx.source.line(self.ctx.span(node)[0]):
                return
            self.report(
                node,
                "edges",
                fix=self.safe_fix(
                    "add lines",
                    self.ctx.line_before(statement, "before = 1"),
                    self.ctx.line_after(statement, "after = 2"),
                    self.ctx.insert_after(statement, "  # edged"),
                ),
            )

    return Edges


def test_lines_added_at_the_edges_of_a_cell_stay_in_that_cell(
    project, monkeypatch, capsys, register_rule
):

    register_rule(_edge_rule())
    nb = notebook(
        code_cell("import torch\nimport torch.nn as nn"),
        code_cell("model = nn.DataParallel(nn.Linear(2, 2))"),  # one line: both edges
        markdown_cell("between"),
        code_cell("x = 1\nnet = nn.DataParallel(nn.Linear(2, 2))\n"),  # ends with a newline
        code_cell("wrapped = nn.DataParallel(nn.Linear(2, 2))\ny = 2"),
        code_cell("!echo a\n!echo a\nw = nn.DataParallel(nn.Linear(2, 2))\n!echo a"),
    )
    path = project / "nb.ipynb"
    path.write_text(dumps(nb))
    code, out, _ = run_main(monkeypatch, capsys, project, "--select", "TRL998", "--fix", path)
    assert code == 0, out
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["source"] == ["import torch\n", "import torch.nn as nn"]
    assert cells[1]["source"] == [
        "before = 1\n",
        "model = nn.DataParallel(nn.Linear(2, 2))  # edged\n",
        "after = 2",
    ]
    assert cells[3]["source"] == [
        "x = 1\n",
        "before = 1\n",
        "net = nn.DataParallel(nn.Linear(2, 2))  # edged\n",
        "after = 2\n",
    ]
    assert cells[4]["source"] == [
        "before = 1\n",
        "wrapped = nn.DataParallel(nn.Linear(2, 2))  # edged\n",
        "after = 2\n",
        "y = 2",
    ]
    # Identical masked lines around the fix come back as they were.
    assert cells[5]["source"] == [
        "!echo a\n",
        "!echo a\n",
        "before = 1\n",
        "w = nn.DataParallel(nn.Linear(2, 2))  # edged\n",
        "after = 2\n",
        "!echo a",
    ]


def test_magic_lines_survive_a_fix_in_their_cell(project, monkeypatch, capsys):
    cell = "%%time\n!nvidia-smi\n" + MODEL.replace(
        "device = ", "%env CUDA_VISIBLE_DEVICES=0\ndevice = "
    )
    nb = notebook(code_cell(IMPORTS), code_cell(cell))
    path = project / "nb.ipynb"
    path.write_text(dumps(nb))
    run_main(monkeypatch, capsys, project, "--fix", path)
    source = json.loads(path.read_text())["cells"][1]["source"]
    assert "".join(source) == cell.replace(BUG, FIXED)


def test_add_noqa_in_a_notebook(project, monkeypatch, capsys):
    path = project / "nb.ipynb"
    before = dumps(standard_notebook())
    path.write_text(before)
    code, out, err = run_main(monkeypatch, capsys, project, "--add-noqa", path)
    assert code == 0, err
    assert "Added 1 noqa directive in 1 file." in err
    assert path.read_text() == before.replace(
        json.dumps(BUG + "\n"), json.dumps(BUG + "  # noqa: TRL201\n")
    )
    code, out, _ = run_main(monkeypatch, capsys, project, path)
    assert code == 0, out


def test_unused_noqa_in_a_cell_is_reported_and_removed(project, monkeypatch, capsys):
    nb = standard_notebook()
    nb["cells"][2] = code_cell(
        IMPORTS.replace("import torch.nn as nn", "import torch.nn as nn  # noqa: TRL201")
    )
    before = dumps(nb)
    path = project / "nb.ipynb"
    path.write_text(before)
    code, out, _ = run_main(
        monkeypatch,
        capsys,
        project,
        "--extend-select",
        "TRL002",
        "--output-format",
        "concise",
        path,
    )
    assert "nb.ipynb:cell 3:3:24: TRL002 [*] warning: unused `noqa` code TRL201" in out
    # Only codes of enabled rules are judged: with TRL201 off, its noqa is left alone.
    code, out, _ = run_main(monkeypatch, capsys, project, "--select", "TRL002", "--fix", path)
    assert code == 0 and path.read_text() == before
    run_main(monkeypatch, capsys, project, "--select", "TRL002,TRL201", "--fix", path)
    assert path.read_text() == before.replace(
        json.dumps("import torch.nn as nn  # noqa: TRL201\n"), json.dumps("import torch.nn as nn\n")
    ).replace(json.dumps(BUG + "\n"), json.dumps(FIXED + "\n"))


def test_cli_subprocess_end_to_end_on_the_incident_notebook(project):
    path = project / "metric.ipynb"
    path.write_bytes(INCIDENT.read_bytes())
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "trainlint", "--fix", "metric.ipynb"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Fixed 1 finding" in proc.stdout
    golden = INCIDENT.with_name("notebook_single_cell_embeddings.fixed.ipynb")
    assert path.read_bytes() == golden.read_bytes()
