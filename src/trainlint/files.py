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
from typing import Callable, List, Optional, Sequence, Tuple

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
    excluded = _exclusion(settings)

    def add(path: Path, real: Optional[str] = None) -> None:
        key = real or os.path.realpath(path)
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
            real_folder = str(absolute)
            keep = []
            for name in sorted(dirs):
                sub = folder / name
                if excluded(sub, real_folder, name) or _is_virtualenv(sub):
                    continue
                if gitignore is not None and gitignore.ignored(absolute / name, True, top):
                    continue
                keep.append(name)
            dirs[:] = keep
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                file = folder / name
                if excluded(file, real_folder, name):
                    continue
                if gitignore is not None and gitignore.ignored(absolute / name, False, top):
                    continue
                real = os.path.join(real_folder, name)
                add(file, None if os.path.islink(real) else real)
    found.files.sort(key=lambda item: item[1])
    return found


def _exclusion(settings: Settings) -> Callable[[Path, str, str], bool]:
    """`excluded(path, real_folder, name)`: `settings.is_excluded(path)` for an entry `name` of
    a walked folder whose resolved path is `real_folder`. The path relative to the project
    root is made from strings (resolving every path of a large tree cost more than the rest of
    discovery); symlinks, which resolve elsewhere, and paths outside the root take the slow
    road."""
    root = str(settings.root.resolve())
    prefix = root.rstrip(os.sep) + os.sep

    def excluded(path: Path, real_folder: str, name: str) -> bool:
        real = os.path.join(real_folder, name)
        if real.startswith(prefix) and not os.path.islink(real):
            return settings.excludes_relative(real[len(prefix) :].replace(os.sep, "/"))
        return settings.is_excluded(path)

    return excluded


def _walk_error(found: Discovery):
    def record(exc: OSError) -> None:
        found.errors.append(f"{exc.filename}: {exc.strerror or exc}")

    return record
