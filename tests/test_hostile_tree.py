"""A tree that is hostile to the walk and to trainlint's own state: FIFOs and links to devices
where a `.gitignore` or a cache entry should be, symlink loops, folders that cannot be listed.
Each costs one line about that path; every other file is still checked, and nothing hangs.

Every test builds its tree itself and runs under a time limit: a run that blocks on a FIFO or
reads /dev/zero fails the test instead of hanging the suite.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from robustness_support import run_main, time_limit

from test_cli import DP_BUG
from trainlint import cache as cache_module
from trainlint import gitignore as gitignore_module
from trainlint.cache import Cache
from trainlint.config import Settings
from trainlint.files import discover
from trainlint.selection import Selection
from trainlint.source import read_regular_file

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")


def _project(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "train.py").write_text(DP_BUG)
    (root / "ignored.py").write_text(DP_BUG)
    return root


def _discover(root: Path):
    settings = Settings(root=root)
    with time_limit(20, "discovery"):
        return discover([root], settings)


# -- the one reading helper ------------------------------------------------------------------


@needs_fifo
def test_read_regular_file_refuses_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "big").write_bytes(b"x" * 100)
    with time_limit(10, "reading"):
        for path in (tmp_path / "pipe", Path("/dev/zero"), tmp_path):
            if path.exists():
                with pytest.raises(OSError) as caught:
                    read_regular_file(path)
                assert caught.value.errno == errno.EINVAL
        with pytest.raises(OSError) as caught:
            read_regular_file(tmp_path / "big", limit=99)
        assert caught.value.errno == errno.EFBIG
    assert read_regular_file(tmp_path / "big", limit=100) == b"x" * 100


# -- .gitignore files ----------------------------------------------------------------------------


@needs_fifo
def test_gitignore_fifo_is_skipped_with_a_warning(tmp_path):
    root = _project(tmp_path / "proj")
    os.mkfifo(root / ".gitignore")
    found = _discover(root)
    assert sorted(display for _, display in found.files) == sorted(
        os.path.relpath(root / name) for name in ("ignored.py", "train.py")
    )
    assert len(found.warnings) == 1 and ".gitignore: not a regular file" in found.warnings[0]
    assert found.errors == []


@needs_dev_zero
def test_gitignore_link_to_dev_zero_is_skipped_with_a_warning(tmp_path):
    root = _project(tmp_path / "proj")
    os.symlink("/dev/zero", root / ".gitignore")
    found = _discover(root)
    assert len(found.files) == 2
    assert len(found.warnings) == 1 and "not a regular file" in found.warnings[0]


def test_oversized_gitignore_is_skipped_with_a_warning(tmp_path, monkeypatch):
    root = _project(tmp_path / "proj")
    (root / ".gitignore").write_text("ignored.py\n" + "#" * 100 + "\n")
    assert [d for _, d in _discover(root).files] == [os.path.relpath(root / "train.py")]
    monkeypatch.setattr(gitignore_module, "MAX_IGNORE_FILE_SIZE", 50)
    found = _discover(root)
    assert len(found.files) == 2
    assert len(found.warnings) == 1 and "larger than 50 bytes" in found.warnings[0]


# -- cache entries -------------------------------------------------------------------------------


def _entries(cache_dir: Path):
    return sorted(p for p in cache_dir.rglob("*.json") if p.is_file())


def _cached_run(root: Path, cache_dir: Path):
    """A run over `root` through the cache in `cache_dir`: (exit code, stdout, stderr)."""
    return run_main(["--cache-dir", str(cache_dir), "--output-format", "concise", "."], root, 20)


@pytest.mark.parametrize("replacement", ["fifo", "dev_zero", "folder", "oversized"])
def test_cache_entry_that_is_not_a_regular_file_is_a_miss(tmp_path, monkeypatch, replacement):
    if replacement == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    if replacement == "dev_zero" and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    root = _project(tmp_path / "proj")
    cache_dir = tmp_path / "cache"
    cold = _cached_run(root, cache_dir)
    entries = _entries(cache_dir)
    assert cold[0] == 1 and len(entries) == 3  # two files and the project phase
    for entry in entries:
        if replacement == "oversized":
            monkeypatch.setattr(cache_module, "MAX_ENTRY_SIZE", entry.stat().st_size - 1)
            continue
        entry.unlink()
        if replacement == "fifo":
            os.mkfifo(entry)
        elif replacement == "dev_zero":
            os.symlink("/dev/zero", entry)
        else:
            entry.mkdir()
    warm = _cached_run(root, cache_dir)
    assert warm == cold


@needs_fifo
def test_project_file_digest_does_not_open_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    with time_limit(10, "digest"):
        assert cache_module._content_of(str(tmp_path / "pipe.py")) is None


def test_cache_get_of_a_fifo_entry_is_a_miss(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    cache = Cache(tmp_path / "cache", Selection.of(Settings(root=tmp_path)))
    entry = cache._entry_path("x.py", tmp_path / "x.py", cache._settings_key("x.py"))
    entry.parent.mkdir(parents=True)
    os.mkfifo(entry)
    with time_limit(10, "cache lookup"):
        assert cache.get("x.py", tmp_path / "x.py", b"pass\n") is None
    assert cache.misses == 1
    key = "0" * 64
    project_entry = cache._project_path(key)
    project_entry.parent.mkdir(parents=True)
    os.mkfifo(project_entry)
    with time_limit(10, "project cache lookup"):
        assert cache.get_project(key, lambda: "", lambda: "") is None


# -- discovery -------------------------------------------------------------------------------


def test_symlink_loop_is_one_line_and_the_rest_is_checked(tmp_path):
    root = _project(tmp_path / "proj")
    os.symlink("b.py", root / "a.py")
    os.symlink("a.py", root / "b.py")
    code, out, err = run_main(["--output-format", "concise", "."], root, 30)
    assert "Traceback" not in err
    assert code == 2
    assert err.splitlines() == [
        "error: a.py: a symlink loop (the link leads back to itself); not checked",
        "error: b.py: a symlink loop (the link leads back to itself); not checked",
    ]
    assert "train.py:6:" in out and "ignored.py:6:" in out
    # Named on the command line, the loop is the same one line.
    code, out, err = run_main(["--output-format", "concise", "a.py", "train.py"], root, 30)
    assert code == 2 and "train.py:6:" in out
    assert err.splitlines() == [
        "error: a.py: a symlink loop (the link leads back to itself); not checked"
    ]


def test_unlistable_folder_is_one_line_and_the_rest_is_checked(tmp_path, monkeypatch):
    """A folder a non-root user cannot enter (chmod 000). The tests may run as root, which
    chmod does not stop: the refusal is simulated where the walk asks the system."""
    root = _project(tmp_path / "proj")
    closed = root / "closed"
    (closed / "inner").mkdir(parents=True)
    (closed / "inner" / "deep.py").write_text(DP_BUG)
    denied = PermissionError(errno.EACCES, "Permission denied")

    def inside(path) -> bool:
        return str(closed) + os.sep in os.path.abspath(os.fspath(path)) + os.sep

    real_scandir, real_stat = os.scandir, os.stat

    def scandir(path="."):
        if inside(path):
            denied.filename = os.fspath(path)
            raise denied
        return real_scandir(path)

    def stat(path, *args, **kwargs):
        if inside(path) and os.path.abspath(os.fspath(path)) != str(closed):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "stat", stat)
    code, out, err = run_main(["--output-format", "concise", "."], root, 30)
    assert "Traceback" not in err
    assert code == 2
    assert err.splitlines() == ["error: closed: Permission denied"]
    assert "train.py:6:" in out and "ignored.py:6:" in out
