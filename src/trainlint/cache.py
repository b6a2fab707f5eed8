"""The per-file result cache: `.trainlint_cache/` in the project root (beside the configuration).

A file's per-file result (findings, facts, candidates, noqa map) depends only on its bytes, the
path it is shown as, the settings that apply to it (its enabled codes after per-file-ignores, and
the rule options), the trainlint version and trainlint's own code. An entry stores that key and the
result as JSON; an entry whose key differs is a miss and is overwritten. Entries are named after
the file and its settings, not its content, so editing a file replaces its entry instead of adding
one: the folder stays about as large as the project, and deleting it is always safe.

Robustness: an entry is written to a temporary file and moved into place (`os.replace`), so a
concurrent run reads a whole entry or none; an entry that cannot be read or decoded is a miss, and
so is one that is not a regular file (a FIFO would block the run, a link to /dev/zero would read
forever) or is larger than `MAX_ENTRY_SIZE`; a folder that cannot be written (a read-only
checkout) turns writing off for the run, silently.
Results with rule crashes are never stored, so a crash is reported on every run until fixed; nor
are unfinished ones (a check stopped by the time budget), which depend on the machine's load.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from . import __version__
from .config import Settings
from .diagnostics import Diagnostic, FileResult
from .source import read_regular_file

if TYPE_CHECKING:  # pragma: no cover
    from .selection import Selection

CACHE_DIR_NAME = ".trainlint_cache"
CACHE_DIR_ENV = "TRAINLINT_CACHE_DIR"
ENTRIES = "entries"
PROJECT = "project"  # the project phase's findings over a whole project's files
LIBRARY = "library"  # summaries of installed library files (library.py)
# Bumped when the layout of an entry changes, so an old entry is a miss rather than misread.
ENTRY_FORMAT = 1
PROJECT_FORMAT = 2  # 2: entries record the digest of the launch configs read
# The project phase's entries are keyed by the content of every file of the run, so each edit
# makes a new one and the old ones never serve again once the files have moved on. The newest
# are kept (an undo, a switch back to another branch, runs over different file lists); older ones
# are deleted after each write, so the folder stays bounded.
MAX_PROJECT_ENTRIES = 32
# An entry holds one file's findings and facts: far below this even for a generated file of
# megabytes. A larger one is not trainlint's (or is corrupt) and is a miss, not read.
MAX_ENTRY_SIZE = 64 * 1024 * 1024

CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by trainlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


def default_cache_dir(settings: Settings) -> Path:
    """$TRAINLINT_CACHE_DIR, else `.trainlint_cache` in the project root: the folder of the
    pyproject.toml that configures trainlint, or the nearest one with pyproject.toml, setup.cfg
    or .git. Not beside a `--config` file, which may be shared by several projects."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(settings.root) / CACHE_DIR_NAME


@lru_cache(maxsize=None)
def _package_fingerprint() -> str:
    """trainlint's version and the name, size and mtime of every module of the package: a
    developer who edits a rule or an analysis invalidates every entry. Stat calls only (about a
    hundred files, once per process)."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256(__version__.encode())
    for folder, dirs, names in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(".py"):
                _stat_into(digest, Path(folder) / name)
    return digest.hexdigest()


def _stat_into(digest: Any, path: Path) -> None:
    try:
        info = path.stat()
    except OSError:
        digest.update(f"{path}:missing".encode())
        return
    digest.update(f"{path}:{info.st_size}:{info.st_mtime_ns}\n".encode())


def code_fingerprint() -> str:
    """The package's fingerprint plus the registered rules (code, class, defining file), so a
    rule registered from outside the package (a plugin, a test) is part of the key too."""
    from .rules import rule_catalog

    digest = hashlib.sha256(_package_fingerprint().encode())
    for code, rule in rule_catalog().items():
        digest.update(f"{code}:{rule.module}.{rule.qualname}\n".encode())
        filename = getattr(sys.modules.get(rule.module), "__file__", None)
        filename = filename or _package_module_file(rule.module)
        if filename:
            _stat_into(digest, Path(filename))
    return digest.hexdigest()


def _package_module_file(module: str) -> Optional[str]:
    """The file of a trainlint module that is not imported (yet): the name its `__file__`
    will have, so the fingerprint is the same before and after the rules are imported."""
    import trainlint

    parts = module.split(".")
    if parts[0] != "trainlint" or len(parts) < 2:
        return None
    return os.path.join(os.path.dirname(trainlint.__file__), *parts[1:]) + ".py"


class Cache:
    """Per-file results of one run's settings, read and written under `directory`."""

    def __init__(self, directory: Path, selection: "Selection") -> None:
        self.directory = Path(directory)
        self.selection = selection
        self.settings = selection.settings
        self.code = code_fingerprint()
        # The settings are final for the run: each file's settings key is worked out once (get
        # and put both need it).
        self._settings_keys: Dict[str, str] = {}
        self.writable = True  # turned off at the first failed write
        self.hits = 0
        self.misses = 0

    @classmethod
    def for_selection(cls, selection: "Selection", directory: Optional[Path] = None) -> "Cache":
        settings = selection.settings
        return cls(directory if directory is not None else default_cache_dir(settings), selection)

    # -- keys ---------------------------------------------------------------------------------

    def _settings_key(self, display: str) -> str:
        key = self._settings_keys.get(display)
        if key is None:
            key = self._settings_keys[display] = self.selection.file_fingerprint(display)
        return key

    def _entry_path(self, display: str, path: Path, settings_key: str) -> Path:
        name = hashlib.sha256(
            f"{os.path.abspath(path)}\0{display}\0{settings_key}".encode()
        ).hexdigest()
        return self.directory / ENTRIES / name[:2] / f"{name}.json"

    def _key(self, display: str, data: bytes, settings_key: str) -> str:
        content = hashlib.sha256(data).hexdigest()
        return f"{ENTRY_FORMAT}:{__version__}:{self.code}:{settings_key}:{content}:{display}"

    # -- reading and writing ------------------------------------------------------------------

    def get(self, display: str, path: Path, data: bytes) -> Optional[FileResult]:
        """The stored result for `data` shown as `display`, or None."""
        settings_key = self._settings_key(display)
        entry = self._entry_path(display, path, settings_key)
        try:
            stored = json.loads(read_regular_file(entry, MAX_ENTRY_SIZE))
            if stored["key"] != self._key(display, data, settings_key):
                self.misses += 1
                return None
            result = result_from_json(stored["result"])
        except Exception:  # missing, unreadable, truncated by hand, or from another layout
            self.misses += 1
            return None
        self.hits += 1
        return result

    def put(self, display: str, path: Path, data: bytes, result: FileResult) -> None:
        """Store `result` for `data` shown as `display`; never raises."""
        if not self.writable or result.crashes or result.unfinished:
            return
        settings_key = self._settings_key(display)
        entry = self._entry_path(display, path, settings_key)
        payload = json.dumps(
            {"key": self._key(display, data, settings_key), "result": result_to_json(result)},
            separators=(",", ":"),
        ).encode()
        self._write(entry, payload)

    # -- the project phase ----------------------------------------------------------------------

    def project_key(
        self, files: List[Tuple[str, Path, Optional[bytes]]], whole: bool, environment: str = ""
    ) -> str:
        """The key of the project phase over `files` ((display, path, bytes or None when
        unreadable), in run order): the code, the settings, and every file's content. `whole`:
        the files are the whole project's (the phase reads no other texts then, so its entry
        must never serve a run over a list of files that a new file of the project joined).
        `environment`: the fingerprint of the installed packages' environment (a package
        installed or removed since may change what the phase can see)."""
        digest = hashlib.sha256(
            json.dumps(
                [
                    PROJECT_FORMAT, __version__, self.code, sorted(self.selection.enabled),
                    self.settings.per_file_ignores, self.settings.options,
                    str(self.settings.root), os.getcwd(),  # messages name files from here
                    whole, environment,
                ],
                sort_keys=True, default=str,
            ).encode()
        )
        for display, path, data in files:
            content = content_digest(data) or "unreadable"
            digest.update(f"{display}\0{os.path.abspath(path)}\0{content}\n".encode())
        return digest.hexdigest()

    def get_project(
        self,
        key: str,
        texts_digest: Callable[[], str],
        launch_digest: Callable[[], str],
    ) -> Optional[List[Diagnostic]]:
        """The project phase's findings stored under `key`, if every file it looked at outside
        the run is as it was (it exists or not, its bytes) and, when it read the project's
        texts (a run over some files) or its launch configurations (YAML files),
        `texts_digest()` / `launch_digest()` of them now is what it was."""
        try:
            stored = json.loads(read_regular_file(self._project_path(key), MAX_ENTRY_SIZE))
            if stored["key"] != key:
                return None
            for path, existed in stored["probes"].items():
                if os.path.isfile(path) != existed:
                    return None
            for path, content in stored["reads"].items():
                if _content_of(path) != content:
                    return None
            if stored["texts"] is not None and stored["texts"] != texts_digest():
                return None
            if stored["launch"] is not None and stored["launch"] != launch_digest():
                return None
            return [Diagnostic.from_dict(d) for d in stored["diagnostics"]]
        except Exception:  # missing, unreadable, or from another layout
            return None

    def put_project(
        self,
        key: str,
        diagnostics: List[Diagnostic],
        probes: Dict[str, bool],
        reads: Dict[str, Optional[str]],
        texts: Optional[str],
        launch: Optional[str] = None,
    ) -> None:
        if not self.writable:
            return
        payload = json.dumps(
            {
                "key": key,
                "diagnostics": [d.to_dict() for d in diagnostics],
                "probes": probes,
                "reads": reads,
                "texts": texts,
                "launch": launch,
            },
            separators=(",", ":"),
        ).encode()
        self._write(self._project_path(key), payload)
        self._prune_project_entries()

    def _prune_project_entries(self) -> None:
        """Delete all but the `MAX_PROJECT_ENTRIES` most recently written project entries;
        never raises (another run may be deleting or writing the same entries)."""
        if not self.writable:
            return
        entries = []
        try:
            with os.scandir(self.directory / PROJECT) as buckets:
                for bucket in buckets:
                    if not bucket.is_dir(follow_symlinks=False):
                        continue
                    with os.scandir(bucket.path) as files:
                        for entry in files:
                            if entry.name.endswith(".json") and entry.is_file(
                                follow_symlinks=False
                            ):
                                entries.append((entry.stat(follow_symlinks=False).st_mtime_ns,
                                                entry.path))
        except OSError:
            return
        entries.sort(reverse=True)
        for _mtime, path in entries[MAX_PROJECT_ENTRIES:]:
            try:
                os.unlink(path)
            except OSError:
                pass

    # -- installed library files (library.py) ------------------------------------------------

    def get_library(self, key: str) -> Optional[Dict[str, Any]]:
        """The summary of a library file stored under `key` (its package, version, digest and
        trainlint's code), or None."""
        try:
            stored = json.loads(read_regular_file(self._library_path(key), MAX_ENTRY_SIZE))
            if stored["key"] != key or not isinstance(stored["summary"], dict):
                return None
            return stored["summary"]
        except Exception:  # missing, unreadable, or from another layout
            return None

    def put_library(self, key: str, summary: Dict[str, Any]) -> None:
        if self.writable:
            payload = json.dumps({"key": key, "summary": summary}, separators=(",", ":"))
            self._write(self._library_path(key), payload.encode())

    def _library_path(self, key: str) -> Path:
        return self.directory / LIBRARY / key[:2] / f"{key}.json"

    def _project_path(self, key: str) -> Path:
        return self.directory / PROJECT / key[:2] / f"{key}.json"

    def _write(self, entry: Path, payload: bytes) -> None:
        temporary = None
        try:
            if not entry.parent.is_dir():
                self._prepare()
                entry.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=entry.parent, prefix=entry.stem, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
            os.replace(temporary, entry)
            temporary = None
        except OSError:  # read-only checkout, full disk, permissions: run without writing
            self.writable = False
        finally:
            if temporary is not None:
                try:
                    os.unlink(temporary)
                except OSError:
                    pass

    def _prepare(self) -> None:
        """Create the folder with a `.gitignore` that ignores everything in it (so it never shows
        in `git status`) and a CACHEDIR.TAG (so backup tools skip it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, text in ((".gitignore", "*\n"), ("CACHEDIR.TAG", CACHEDIR_TAG)):
            marker = self.directory / name
            if not marker.exists():
                marker.write_text(text, encoding="utf-8")


def content_digest(data: Optional[bytes]) -> Optional[str]:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _content_of(path: str) -> Optional[str]:
    try:
        return content_digest(read_regular_file(path))
    except OSError:
        return None


# -- FileResult <-> JSON ------------------------------------------------------------------------


def result_to_json(result: FileResult) -> Dict[str, Any]:
    return {
        "path": result.path,
        "diagnostics": [d.to_dict() for d in result.diagnostics],
        "facts": result.facts,
        "candidates": result.candidates,
        # JSON object keys are strings; rows are turned back into ints when read.
        "noqa": [
            [row, list(codes) if codes is not None else None] for row, codes in result.noqa.items()
        ],
    }


def result_from_json(data: Dict[str, Any]) -> FileResult:
    return FileResult(
        path=data["path"],
        diagnostics=[Diagnostic.from_dict(d) for d in data["diagnostics"]],
        facts=data["facts"],
        candidates=data["candidates"],
        noqa={
            int(row): tuple(codes) if codes is not None else None for row, codes in data["noqa"]
        },
    )
