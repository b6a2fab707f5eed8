"""Which files a run looks at.

Directories recurse into Python files and Jupyter notebooks (`*.py`, `*.ipynb`), pruning
excluded folders (`exclude`/`extend-exclude`, whose defaults cover .git, virtualenvs, build,
dist, __pycache__, node_modules, .ipynb_checkpoints, ...), any folder that is a virtual
environment (it holds `pyvenv.cfg`), and whatever `.gitignore` files ignore (`respect-gitignore`,
on by default; see gitignore.py). Symlinked folders are not followed, so a symlink loop cannot
hang a run. A file named `._<name>` whose bytes begin with the AppleDouble magic number is the
metadata macOS writes beside `<name>` where the file system cannot hold it (archives made on a
Mac, network shares, USB drives): not Python, whatever its suffix, so a walk skips it (and so
does `--force-exclude` when one is named). Paths given explicitly are always checked, unless
`--force-exclude` asks for excludes to apply to them too (as pre-commit needs).

Nothing on disk stops discovery: a folder that cannot be listed, a path that cannot be examined
and a symlink that loops are each one line in `errors` (named by their path), and the walk goes
on; a `.gitignore` that cannot be used is one line in `warnings`.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from .config import Settings
from .fixes import is_temporary_name
from .gitignore import GitIgnore
from .source import NOTEBOOK_SUFFIXES

PYTHON_SUFFIXES = (".py",)
SOURCE_SUFFIXES = PYTHON_SUFFIXES + NOTEBOOK_SUFFIXES


@dataclass
class Discovery:
    files: List[Tuple[Path, str]] = field(default_factory=list)  # (path, display path)
    errors: List[str] = field(default_factory=list)  # paths that cannot be checked
    warnings: List[str] = field(default_factory=list)  # state files that were not used
    # Files named like the temporary files of `--fix` (fixes.is_temporary_name) in the walked
    # folders: a killed run may have left them; the caller removes the stale ones.
    temporaries: List[Path] = field(default_factory=list)
    truncated: bool = False  # the walk stopped at `limit` files


def display_path(path: Path) -> str:
    """Relative to the current directory when below it, else as an absolute path."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def _is_virtualenv(folder: Path) -> bool:
    # os.path.isfile, not Path.is_file: a folder that cannot be entered is not a virtualenv
    # (its listing fails later, with a message), where Path.is_file raises PermissionError.
    return os.path.isfile(folder / "pyvenv.cfg")


def discover(
    paths: Sequence[Path],
    settings: Settings,
    limit: Optional[int] = None,
    suffixes: Tuple[str, ...] = SOURCE_SUFFIXES,
) -> Discovery:
    """The files to check under `paths`; with `limit`, the walk stops once it has found more
    than `limit` files (`truncated`). `suffixes`: what a walk collects (the project phase
    also reads launch configurations, `.yaml` files, with the same excludes)."""
    found = Discovery()
    seen = set()
    gitignore = None
    if settings.respect_gitignore:
        gitignore = GitIgnore(
            lambda path, reason: found.warnings.append(f"{display_path(path)}: {reason}; not used")
        )
    excluded = _exclusion(settings)

    def add(path: Path, real: Optional[str] = None) -> None:
        key = real or os.path.realpath(path)
        if key in seen:
            return
        seen.add(key)
        found.files.append((path, display_path(path)))

    for given in paths:
        if found.truncated:
            break
        try:
            _discover_given(
                Path(given), str(given), settings, found, add, gitignore, excluded, limit,
                suffixes,
            )
        except OSError as exc:  # the path itself cannot be examined (a folder above it is closed)
            found.errors.append(f"{given}: {exc.strerror or exc}")
    found.files.sort(key=lambda item: item[1])
    return found


def _discover_given(
    path: Path,
    given: str,
    settings: Settings,
    found: Discovery,
    add: Callable[..., None],
    gitignore: Optional[GitIgnore],
    excluded: Callable[[Path, str, str], bool],
    limit: Optional[int] = None,
    suffixes: Tuple[str, ...] = SOURCE_SUFFIXES,
) -> None:
    if not path.exists() and not path.is_symlink():
        found.errors.append(f"{given}: no such file or directory")
        return
    if _symlink_loop(str(path)):
        found.errors.append(f"{given}: {SYMLINK_LOOP}")
        return
    if path.is_file():
        if settings.force_exclude and (
            settings.is_excluded(path)
            or _is_appledouble(str(path))
        ):
            return  # pre-commit hands over every staged file: skip what a walk would
        add(path)
        return
    if not path.is_dir():
        found.errors.append(f"{given}: not a regular file or directory")
        return
    if settings.force_exclude and settings.is_excluded(path) and given not in (".", ""):
        return
    top = path.resolve()
    for root, dirs, names in os.walk(path, followlinks=False, onerror=_walk_error(found)):
        folder = Path(root)
        absolute = top / folder.relative_to(path)
        real_folder = str(absolute)
        keep = []
        for name in sorted(dirs):
            sub = folder / name
            try:
                if excluded(sub, real_folder, name) or _is_virtualenv(sub):
                    continue
                if gitignore is not None and gitignore.ignored(absolute / name, True, top):
                    continue
            except OSError as exc:
                found.errors.append(f"{display_path(sub)}: {exc.strerror or exc}")
                continue
            keep.append(name)
        dirs[:] = keep
        for name in sorted(names):
            if not name.endswith(suffixes):
                if is_temporary_name(name):
                    found.temporaries.append(folder / name)
                continue
            file = folder / name
            real = os.path.join(real_folder, name)
            linked = os.path.islink(real)
            try:
                if linked and _symlink_loop(real):
                    found.errors.append(f"{display_path(file)}: {SYMLINK_LOOP}")
                    continue
                if excluded(file, real_folder, name):
                    continue
                if gitignore is not None and gitignore.ignored(absolute / name, False, top):
                    continue
                if _is_appledouble(real):
                    continue
            except OSError as exc:
                found.errors.append(f"{display_path(file)}: {exc.strerror or exc}")
                continue
            add(file, None if linked else real)
        if limit is not None and len(found.files) > limit:
            found.truncated = True
            return


SYMLINK_LOOP = "a symlink loop (the link leads back to itself); not checked"
# The first bytes of an AppleDouble file (RFC 1740): a Mac file's resource fork and attributes.
APPLEDOUBLE_MAGIC = b"\x00\x05\x16\x07"


def _is_appledouble(path: str) -> bool:
    """Whether the file at `path` is AppleDouble metadata: named `._<name>`, and its first four
    bytes (read only for such names) are the magic number. A file that cannot be read is left to
    the check, which reports why."""
    if not os.path.basename(path).startswith("._"):
        return False
    try:
        with open(path, "rb") as handle:
            return handle.read(len(APPLEDOUBLE_MAGIC)) == APPLEDOUBLE_MAGIC
    except OSError:
        return False


def _symlink_loop(path: str) -> bool:
    """Whether following the symlinks of `path` never ends (resolving it would raise)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


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
        where = display_path(Path(exc.filename)) if exc.filename else "?"
        found.errors.append(f"{where}: {exc.strerror or exc}")

    return record
