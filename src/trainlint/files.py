"""Which files a run looks at.

Directories recurse into Python files and Jupyter notebooks (`*.py`, `*.ipynb`), pruning
excluded folders (`exclude`/`extend-exclude`, whose defaults cover .git, virtualenvs, build,
dist, __pycache__, node_modules, .ipynb_checkpoints, ...), any folder that is a virtual
environment (it holds `pyvenv.cfg`), and whatever `.gitignore` files ignore (`respect-gitignore`,
on by default; see gitignore.py). Symlinked folders are not followed, so a symlink loop cannot
hang a run. Paths given explicitly are always checked, unless `--force-exclude` asks for excludes
to apply to them too (as pre-commit needs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Sequence, Tuple

from .config import Settings
from .gitignore import GitIgnore
from .source import NOTEBOOK_SUFFIXES

PYTHON_SUFFIXES = (".py",)
SOURCE_SUFFIXES = PYTHON_SUFFIXES + NOTEBOOK_SUFFIXES


@dataclass
class Discovery:
    files: List[Tuple[Path, str]] = field(default_factory=list)  # (path, display path)
    errors: List[str] = field(default_factory=list)


def display_path(path: Path) -> str:
    """Relative to the current directory when below it, else as an absolute path."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def _is_virtualenv(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file()


def discover(paths: Sequence[Path], settings: Settings) -> Discovery:
    found = Discovery()
    seen = set()
    gitignore = GitIgnore() if settings.respect_gitignore else None

    def add(path: Path) -> None:
        key = os.path.realpath(path)
        if key in seen:
            return
        seen.add(key)
        found.files.append((path, display_path(path)))

    for given in paths:
        path = Path(given)
        if not path.exists() and not path.is_symlink():
            found.errors.append(f"{given}: no such file or directory")
            continue
        if path.is_file():
            if settings.force_exclude and settings.is_excluded(path):
                continue
            add(path)
            continue
        if not path.is_dir():
            found.errors.append(f"{given}: not a regular file or directory")
            continue
        if settings.force_exclude and settings.is_excluded(path) and str(given) not in (".", ""):
            continue
        top = path.resolve()
        for root, dirs, names in os.walk(path, followlinks=False, onerror=_walk_error(found)):
            folder = Path(root)
            absolute = top / folder.relative_to(path)
            keep = []
            for name in sorted(dirs):
                sub = folder / name
                if settings.is_excluded(sub) or _is_virtualenv(sub):
                    continue
                if gitignore is not None and gitignore.ignored(absolute / name, True, top):
                    continue
                keep.append(name)
            dirs[:] = keep
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                file = folder / name
                if settings.is_excluded(file):
                    continue
                if gitignore is not None and gitignore.ignored(absolute / name, False, top):
                    continue
                add(file)
    found.files.sort(key=lambda item: item[1])
    return found


def _walk_error(found: Discovery):
    def record(exc: OSError) -> None:
        found.errors.append(f"{exc.filename}: {exc.strerror or exc}")

    return record
