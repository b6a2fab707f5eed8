"""The per-file size limit: a file whose code is larger than the limit (generated code, a data
dump) is one TRL001 and is never parsed (libcst's tree holds about 700 bytes per byte of source);
the rest of the run is checked as usual."""

from __future__ import annotations

from robustness_support import run_main

from test_cli import DP_BUG
from trainlint.config import MAX_FILE_SIZE
from trainlint.parse_guard import precheck


def test_over_the_default_limit_is_one_trl001(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    generated = DP_BUG * (MAX_FILE_SIZE // len(DP_BUG) + 1)
    assert MAX_FILE_SIZE < len(generated.encode()) < MAX_FILE_SIZE + len(DP_BUG) + 1
    (tmp_path / "generated.py").write_text(generated)
    (tmp_path / "train.py").write_text(DP_BUG)
    code, out, err = run_main(["--no-cache", "--output-format", "concise", "."], tmp_path, 60)
    assert "Traceback" not in err and err == ""
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("generated.py")]
    assert lines == [
        "generated.py:1:1: TRL001 error: skipped: the code is 256.1 KiB, over the 256 KiB "
        "trainlint analyses in one file (the `max-file-size` setting); not analysed"
    ]
    assert "train.py:6:9: TRL201" in out


def test_limit_counts_utf8_bytes_and_can_be_lifted():
    text = "s = '" + "\u00e9" * 600 + "'\n"  # 600 characters, 1,200 bytes of them
    assert precheck(text, max_size=1000).problem is not None
    assert precheck(text, max_size=1300).problem is None
    assert precheck(text * 10, max_size=None).problem is None


def test_the_limit_is_a_setting(tmp_path):
    (tmp_path / "train.py").write_text(DP_BUG)
    (tmp_path / "plain.py").write_text("x = 1\n" * 400)  # no marker of any rule: checked too
    args = ["--no-cache", "--output-format", "concise", "."]
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = 100\n")
    code, out, err = run_main(args, tmp_path, 60)
    assert code == 1 and err == ""
    assert out.splitlines()[:2] == [
        "plain.py:1:1: TRL001 error: skipped: the code is 2.3 KiB, over the 100 bytes "
        "trainlint analyses in one file (the `max-file-size` setting); not analysed",
        f"train.py:1:1: TRL001 error: skipped: the code is {len(DP_BUG.encode())} bytes, over the "
        "100 bytes "
        "trainlint analyses in one file (the `max-file-size` setting); not analysed",
    ]
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = 0\n")
    code, out, err = run_main(args, tmp_path, 60)
    assert code == 1 and "TRL001" not in out and "train.py:6:9: TRL201" in out
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\nmax-file-size = -1\n")
    code, out, err = run_main(args, tmp_path, 60)
    assert code == 2
    assert err.strip().endswith("'max-file-size' must be a number of bytes (0: no limit)")
