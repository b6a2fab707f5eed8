"""Summaries of installed library files: the facts the project rules record for a file of the
project, made for a file of an installed framework (mmdet's `DINOHead`, timm's
`VisionTransformer`) that a project class inherits from, so that the project phase can judge a
subclass against what its library ancestors read.

The files are found through the analysed environment (environment.py) and read, parsed and
checked like a project file by the project rules only (`engine.check`), for their facts: never
imported, never executed, their findings never reported. Only what the project phase asks for is
read (the module a project class's base names, and then that class's ancestors), at most
`MAX_FILES` files per run. A summary is kept in the cache folder under the distribution, its
version, the file's digest, trainlint's code and the rules' options, so a framework is read
once per version, not once per run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

from .cache import Cache, content_digest
from .environment import Environment, ModuleFinder, find_environment
from .selection import Selection
from .source import Source, SourceError, read_regular_file

# Library files read in one run, at most: enough for a deep hierarchy (a DINO head is five
# files from nn.Module), few enough that a star re-export of a whole framework cannot make a
# run read all of it. A file beyond the bound is unknown (rules stay quiet).
MAX_FILES = 200
# A library file larger than this is not read (unknown).
MAX_LIBRARY_FILE = 4 * 1024 * 1024
# `from .module import *` at the top level of a file: names it re-exports (star imports bind
# no name the per-file facts could record).
_STAR_IMPORT = re.compile(r"^from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+\*", re.M)
_STAR_IMPORT_BYTES = re.compile(rb"^from[ \t]+[\w.]+[ \t]+import[ \t]+\*", re.M)
SUMMARY_FORMAT = 1
# (Python < 3.10 has no list of its own modules: the ones classes commonly derive from.)
_STDLIB = frozenset(
    getattr(sys, "stdlib_module_names", ())
    or ("abc", "argparse", "collections", "enum", "io", "json", "logging", "multiprocessing",
        "threading", "typing", "unittest", "dataclasses", "contextlib", "string", "ast")
)


class Library:
    """The installed packages of the analysed environment, as the project phase reads them."""

    def __init__(
        self,
        selection: Selection,
        cache: Optional[Cache] = None,
        environment: Optional[Environment] = None,
        max_files: int = MAX_FILES,
    ) -> None:
        self.selection = selection
        self.cache = cache
        self._environment = environment
        self._finder: Optional[ModuleFinder] = None
        self.max_files = max_files
        self._summaries: Dict[Path, Optional[dict]] = {}
        # What was read (absolute path -> digest of its bytes): a stored project-phase result
        # is kept only while these files are unchanged (cache.py).
        self.reads: Dict[str, Optional[str]] = {}
        self.parsed = 0  # summaries made in this run (the others came from the cache)
        self._texts: Dict[Path, bytes] = {}

    @property
    def environment(self) -> Environment:
        if self._environment is None:
            settings = self.selection.settings
            origin = settings.origins.get("python", "python setting")
            directory = self.cache.directory if self.cache is not None else None
            self._environment = find_environment(settings.python, origin, directory)
        return self._environment

    @property
    def finder(self) -> ModuleFinder:
        if self._finder is None:
            self._finder = ModuleFinder(self.environment)
        return self._finder

    def find(self, dotted: str) -> Optional[Path]:
        """The source file of installed module `dotted`, or None."""
        top = dotted.split(".")[0]
        if top in ("torch", "trainlint") or top in _STDLIB:
            # torch's classes are known by name; trainlint is not the user's; the standard
            # library holds no module a training script subclasses (and `enum.Enum`,
            # `threading.Thread` or `unittest.TestCase` would cost a parse each for nothing).
            return None
        return self.finder.find(dotted)

    def module_name(self, path: Path) -> Optional[str]:
        """The dotted name of a library file found by `find` (None: not a library file)."""
        if self._finder is None:
            return None
        return self._finder.module_name(Path(os.path.abspath(path)))

    def owns(self, path: Path) -> bool:
        return self.module_name(path) is not None

    def facts(self, path: Path, code: str) -> Optional[dict]:
        """The facts rule `code` records for the library file at `path` (None: unreadable,
        over the bounds, or not a file `find` returned)."""
        summary = self._summary(Path(os.path.abspath(path)))
        if summary is None:
            return None
        found = summary["facts"].get(code)
        return found if isinstance(found, dict) else None

    def stars(self, path: Path) -> List[str]:
        """The modules the library file re-exports with `from module import *`, as written."""
        summary = self._summary(Path(os.path.abspath(path)))
        return list(summary["stars"]) if summary is not None else []

    def mentions(self, path: Path, name: str) -> bool:
        """Might the library file define or import `name` (a `class Name`, `Name = `, an import
        naming it, or a star import of its own)? Asked before following a star
        re-export into it: timm's `models/__init__.py` re-exports seventy modules with `*`, and
        only the one defining the name is worth parsing."""
        path = Path(os.path.abspath(path))
        text = self._texts.get(path)
        if text is None:
            try:
                text = self._texts[path] = read_regular_file(path, MAX_LIBRARY_FILE)
            except OSError:
                self.reads.setdefault(str(path), None)
                return False
            # What the text said decided which files were parsed: it keys the phase's result.
            self.reads.setdefault(str(path), content_digest(text))
        word = re.escape(name.encode())
        defines = (
            rb"^[ \t]*class[ \t]+" + word + rb"\b|^" + word + rb"[ \t]*[:=]"
            rb"|\bimport[ \t]+(?:\([^)]*|[^\n]*)\b" + word + rb"\b"
        )
        if re.search(defines, text, re.M) is not None:
            return True
        return _STAR_IMPORT_BYTES.search(text) is not None  # may pass it on from elsewhere

    def fingerprint(self) -> str:
        return self.environment.fingerprint()

    # -- summaries ------------------------------------------------------------------------------

    def _summary(self, path: Path) -> Optional[dict]:
        if path in self._summaries:
            return self._summaries[path]
        dotted = self.module_name(path)
        summary = None
        if dotted is not None and len(self._summaries) < self.max_files:
            summary = self._read(path, dotted)
        self._summaries[path] = summary
        return summary

    def _read(self, path: Path, dotted: str) -> Optional[dict]:
        try:
            data = read_regular_file(path, MAX_LIBRARY_FILE)
        except OSError:
            self.reads[str(path)] = None
            return None
        digest = content_digest(data)
        self.reads[str(path)] = digest
        top = dotted.split(".")[0]
        codes = self.selection.project_codes
        key = self._key(top, dotted, path, digest or "")
        if self.cache is not None:
            stored = self.cache.get_library(key)
            if stored is not None:
                return stored
        summary = self._summarise(path, data, codes)
        if summary is not None and self.cache is not None:
            self.cache.put_library(key, summary)
        return summary

    def _key(self, top: str, dotted: str, path: Path, digest: str) -> str:
        settings = self.selection.settings
        material = [
            SUMMARY_FORMAT,
            top,
            self.finder.version(top),
            dotted,
            digest,
            self.cache.code if self.cache is not None else "",
            list(self.selection.project_codes),
            settings.options,
            settings.max_file_size,
        ]
        return hashlib.sha256(json.dumps(material, default=str).encode()).hexdigest()

    def _summarise(self, path: Path, data: bytes, codes) -> Optional[dict]:
        from . import engine

        try:
            source = Source.from_bytes(str(path), data)
        except SourceError:
            return None
        rules = [self.selection.rule(code) for code in codes]
        result = engine.check(source, self.selection, rules=rules)
        if result.crashes or result.unfinished:
            # A rule's bug on library code, or a check the time budget stopped: unknown, and
            # not kept.
            return None
        self.parsed += 1
        text = source.text
        return {"facts": dict(result.facts), "stars": _STAR_IMPORT.findall(text)}


__all__ = ["Library", "MAX_FILES"]
