"""A file name that is not valid UTF-8 (bytes from another locale, a broken download): every
output format still writes valid UTF-8, the name's bytes escaped as `\\xNN` (percent-encoded in
SARIF URIs), and the run never dies with UnicodeEncodeError."""

from __future__ import annotations

import json
import os
import sys

import pytest
from robustness_support import run_subprocess

from test_cli import DP_BUG
from trainlint.report import printable, printable_json

BAD_NAME = b"caf\xe9_train.py"  # latin-1 bytes: not UTF-8
SHOWN = "caf\\xe9_train.py"


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    try:
        with open(os.path.join(os.fsencode(root), BAD_NAME), "wb") as handle:
            handle.write(DP_BUG.encode())
    except (OSError, UnicodeError):  # pragma: no cover - a file system that wants UTF-8 names
        pytest.skip("this file system refuses names that are not UTF-8")
    (root / "ok.py").write_text(DP_BUG)
    return root


def _run(project, *args):
    # A strict UTF-8 stdout: writing a surrogate escape raises instead of passing the raw byte.
    proc = run_subprocess(
        ["--no-cache", *args, "."],
        project,
        120,
        env={"PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    return proc.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="names are UTF-16 there")
@pytest.mark.parametrize("output_format", ["text", "concise", "github"])
def test_text_formats_escape_the_bytes(project, output_format):
    out = _run(project, "--output-format", output_format)
    out.encode("utf-8")  # strict: no surrogate survived
    assert SHOWN in out and "ok.py" in out


@pytest.mark.skipif(sys.platform == "win32", reason="names are UTF-16 there")
def test_json_is_valid_and_names_the_file_escaped(project):
    found = json.loads(_run(project, "--output-format", "json"))
    names = sorted(os.path.basename(item["filename"]) for item in found)
    assert names == sorted([SHOWN, "ok.py"])


@pytest.mark.skipif(sys.platform == "win32", reason="names are UTF-16 there")
def test_sarif_is_valid_and_percent_encodes_the_uri(project):
    sarif = json.loads(_run(project, "--output-format", "sarif"))
    uris = sorted(
        result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for result in sarif["runs"][0]["results"]
    )
    assert uris == ["caf%E9_train.py", "ok.py"]


def test_printable():
    assert printable("plain.py") == "plain.py"
    assert printable(os.fsdecode(b"a\xff\xfe.py")) == "a\\xff\\xfe.py"
    assert printable("lone \ud800 surrogate") == "lone \\ud800 surrogate"
    text = json.dumps({"f": os.fsdecode(b"a\xff.py")}, ensure_ascii=False)
    assert json.loads(printable_json(text)) == {"f": "a\\xff.py"}
