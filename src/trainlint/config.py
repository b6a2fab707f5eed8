"""Configuration: `[tool.trainlint]` in pyproject.toml (or the top level of trainlint.toml /
.trainlint.toml), plus command-line overrides -> Settings.

Which file: `--config FILE` when given; else, from the first path upwards, the nearest folder
that has `.trainlint.toml`, `trainlint.toml`, or a pyproject.toml with a [tool.trainlint] table
(in that order of precedence within one folder, as ruff's .ruff.toml > ruff.toml >
pyproject.toml); files further up are not read (no merging).

Keys (kebab-case as in ruff): select, extend-select, ignore, per-file-ignores, exclude,
extend-exclude, force-exclude, respect-gitignore, unsafe-fixes, preview, max-file-size,
per-file-timeout, python, plus the options rules declare (`Rule.options`).
An unknown key, a wrong type or a code that names no rule is a `ConfigError` (one line, exit 2).

Configuration knows the rules only through `RuleNames` (their codes, and the option keys they
declare), which the caller passes in: reading settings never imports the rule registry, and which
rules a run enables is decided once, from these Settings, in selection.py.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

from .source import read_regular_file

if sys.version_info >= (3, 11):  # pragma: no cover - depends on the interpreter
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")

DEFAULT_EXCLUDES: Tuple[str, ...] = (
    ".bzr",
    ".direnv",
    ".eggs",
    ".git",
    ".hg",
    ".ipynb_checkpoints",
    ".mypy_cache",
    ".nox",
    ".pytest_cache",
    ".ruff_cache",
    ".svn",
    ".tox",
    ".trainlint_cache",
    ".venv",
    "__pycache__",
    "__pypackages__",
    "_build",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    "venv",
)


# The default of `max-file-size`: the largest code analysed in one file, in UTF-8 bytes (for a
# notebook, of its code cells). The bar: a 1 MB file finishes under 3 s and 1 GB. The shipped
# example repeated to 1 MiB took 18.6 s and 729 MB (libcst's tree and the analyses hold about 700
# bytes per byte of source, and some analyses grow faster than the file), to 254 KiB 3.8 s and
# 207 MB, to 128 KiB 2.7 s of CPU. 256 KiB keeps real scripts (the corpus's largest file is
# 224 kB; a 462 kB test module of PyTorch: 4.7 s) while a 1 MiB file is one TRL001 in 0.7 s.
MAX_FILE_SIZE = 256 * 1024
# The default of `per-file-timeout`: how long checking one file may take, in seconds (budget.py).
# Far above what real files take, low enough that a run never seems to hang on one file.
PER_FILE_TIMEOUT = 60.0
# The largest value it accepts: timers take no more than their platform's time range, and a
# budget of days is no budget (0 turns it off).
MAX_PER_FILE_TIMEOUT = 86400.0
# A pyproject.toml larger than this is not read (a link to /dev/zero would be read forever).
MAX_CONFIG_SIZE = 16 * 1024 * 1024


class ConfigError(Exception):
    """A configuration problem, shown as one line; exit code 2."""


@dataclass(frozen=True)
class RuleNames:
    """What reading the configuration needs to know of the rules: their codes (a selector must
    name one) and the option keys they declare (`Rule.options`; asked only when a table holds
    keys that are not trainlint's own, because answering imports every rule)."""

    codes: Tuple[str, ...]
    options: Callable[[], Dict[str, type]]


@dataclass
class Settings:
    select: Optional[List[str]] = None  # None: the default set (every rule that is not info)
    extend_select: List[str] = field(default_factory=list)
    ignore: List[str] = field(default_factory=list)
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    exclude: List[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDES))
    extend_exclude: List[str] = field(default_factory=list)
    force_exclude: bool = False
    respect_gitignore: bool = True  # skip what .gitignore files ignore when walking folders
    unsafe_fixes: bool = False
    # Preview rules (not yet precise enough to be on by default) join the default set.
    preview: bool = False
    max_file_size: int = MAX_FILE_SIZE  # 0: no limit
    per_file_timeout: float = PER_FILE_TIMEOUT  # seconds; 0: no limit
    # The interpreter whose installed packages are read (never imported): an absolute path,
    # or None for $VIRTUAL_ENV / the interpreter running trainlint (environment.py).
    python: Optional[str] = None
    options: Dict[str, Any] = field(default_factory=dict)  # rule-declared keys
    root: Path = field(default_factory=Path.cwd)  # project root: relative globs start here
    # False when nothing marks the root (no configuration, pyproject.toml, setup.cfg, setup.py
    # or .git at or above the first path): it is then only the folder the run started in.
    root_marked: bool = True
    config_path: Optional[Path] = None
    # key -> where its value came from (a configuration file, or a command-line option); keys
    # not named keep their default (`trainlint check --show-settings`).
    origins: Dict[str, str] = field(default_factory=dict)

    # -- which rules run ----------------------------------------------------------------------

    def selects(self, code: str, default_on: bool, preview: bool = False) -> bool:
        """Do select / extend-select / ignore turn rule `code` on (before per-file-ignores)?

        A preview rule (`preview=True`) outside preview mode is on only when its exact code is
        selected: `ALL` and prefixes, like the default set, leave it off (as in ruff)."""
        if preview and not self.preview:
            return _selected(
                code,
                False,
                [s for s in self.select or () if s.upper() == code],
                [s for s in self.extend_select if s.upper() == code],
                self.ignore,
            )
        return _selected(code, default_on, self.select, self.extend_select, self.ignore)

    def codes_for(self, path: str, enabled: FrozenSet[str]) -> FrozenSet[str]:
        """The `enabled` codes (selection.py) that per-file-ignores leave on for one file."""
        if not self.per_file_ignores:
            return enabled
        ignored: List[str] = []
        rel = self.relative(path)
        for pattern, codes in self.per_file_ignores.items():
            if path_matches(rel, pattern):
                ignored.extend(codes)
        if not ignored:
            return enabled
        return frozenset(
            c for c in enabled if not any(c.startswith(p) or p == "ALL" for p in ignored)
        )

    def relative(self, path: str) -> str:
        p = Path(path)
        try:
            return p.resolve().relative_to(self.root.resolve()).as_posix()
        except (ValueError, OSError):
            return p.as_posix()

    def is_excluded(self, path: Path) -> bool:
        return self.excludes_relative(self.relative(str(path)))

    def excludes_relative(self, rel_posix: str) -> bool:
        """Does `exclude`/`extend-exclude` match this path relative to the root?"""
        return _any_matches(tuple(self.exclude) + tuple(self.extend_exclude))(rel_posix)

    def file_fingerprint(self, path: str, enabled: FrozenSet[str]) -> str:
        """Everything in the settings that changes one file's per-file result: its enabled codes
        after per-file-ignores, and the rule options (not excludes or the output format, which
        decide whether and how a file is reported, not what its result is)."""
        data = {
            "codes": sorted(self.codes_for(path, enabled)),
            "options": self.options,
            "max_file_size": self.max_file_size,
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _matches(code: str, selector: str) -> int:
    """Specificity of `selector` for `code`: 0 = no match, else the matched prefix length."""
    selector = selector.upper()
    if selector == "ALL":
        return 1
    if code.startswith(selector):
        return len(selector) + 1
    return 0


def _selected(
    code: str,
    default_on: bool,
    select: Optional[Sequence[str]],
    extend_select: Sequence[str],
    ignore: Sequence[str],
) -> bool:
    """Most specific selector wins (as in ruff); a tie between select and ignore ignores.

    Info-level rules are never on by default, but any explicit selector that matches them
    (`ALL`, `TRL`, `TRL5`, `TRL501`) turns them on.
    """
    best_on = 0
    if select is None:
        best_on = 1 if default_on else 0
    else:
        best_on = max((_matches(code, s) for s in select), default=0)
    best_on = max([best_on] + [_matches(code, s) for s in extend_select])
    best_off = max((_matches(code, s) for s in ignore), default=0)
    return best_on > 0 and best_on > best_off


def path_matches(rel_posix: str, pattern: str) -> bool:
    """Glob semantics close to ruff's: a pattern without `/` matches any path component or the
    file name; with `/` it matches the path from the root; `**` spans directories."""
    matchers = _compiled_pattern(pattern)
    if matchers is None:
        return False
    component, whole = matchers
    if component is not None:
        if component(rel_posix):
            return True
        # The parts PurePosixPath would give: an absolute path's first part is "/".
        parts = rel_posix.split("/")
        if rel_posix.startswith("/"):
            parts[0] = "/"
        return any(component(part) for part in parts if part)
    return any(match(rel_posix) for match in whole)


@lru_cache(maxsize=64)
def _any_matches(patterns: Tuple[str, ...]) -> Callable[[str], bool]:
    """`any(path_matches(rel, p) for p in patterns)` as one function: the patterns without `/`
    joined into one regular expression asked once per path component (discovery asks about
    every folder and file of the tree, and the default excludes are 22 patterns)."""
    compiled = [_compiled_pattern(pattern) for pattern in patterns]
    components = [
        fnmatch.translate(_normalised(pattern))
        for pattern, found in zip(patterns, compiled)
        if found is not None and found[0] is not None
    ]
    wholes = [match for found in compiled if found is not None for match in found[1]]
    component = re.compile("|".join(components)).match if components else None

    def matches(rel_posix: str) -> bool:
        if component is not None:
            if component(rel_posix) is not None:
                return True
            parts = rel_posix.split("/")
            if rel_posix.startswith("/"):
                parts[0] = "/"
            if any(component(part) is not None for part in parts if part):
                return True
        return any(match(rel_posix) for match in wholes)

    return matches


def _normalised(pattern: str) -> str:
    pattern = pattern.strip()
    if pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern.rstrip("/")


@lru_cache(maxsize=4096)
def _compiled_pattern(pattern: str):
    """(matcher of one path component, None) for a pattern without `/`; (None, matchers of the
    whole relative path) for one with `/`; None for an empty pattern. Compiled once per pattern:
    discovery asks every pattern of `exclude` about every folder and file of the tree."""
    pattern = _normalised(pattern)
    if not pattern:
        return None
    if "/" not in pattern:
        return _glob(pattern), ()
    candidates = [pattern]
    if "**/" in pattern:
        candidates.append(pattern.replace("**/", ""))
    whole = []
    for candidate in candidates:
        whole.append(_glob(candidate))
        # A directory pattern matches everything under it.
        whole.append(_glob(candidate.rstrip("/") + "/*"))
    return None, tuple(whole)


def _glob(pattern: str):
    """`fnmatch.fnmatchcase(name, pattern)` as one compiled match function."""
    match = re.compile(fnmatch.translate(pattern)).match
    return lambda name: match(name) is not None


# -- reading configuration --------------------------------------------------------------------

_CORE_KEYS: Dict[str, Any] = {
    "select": list,
    "extend-select": list,
    "ignore": list,
    "per-file-ignores": dict,
    "exclude": list,
    "extend-exclude": list,
    "force-exclude": bool,
    "respect-gitignore": bool,
    "unsafe-fixes": bool,
    "preview": bool,
    "max-file-size": int,
    "per-file-timeout": float,  # an integer is accepted too
    "python": str,
}


def has_root_marker(folder: Path) -> bool:
    """Does `folder` hold one of the files that mark a project root (ROOT_MARKERS)?"""
    return any((folder / marker).exists() for marker in ROOT_MARKERS)


def find_project_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding pyproject.toml, setup.cfg, setup.py or
    .git; `start` itself (its folder, for a file) when there is none."""
    start = start.resolve()
    if start.is_file():
        start = start.parent
    for folder in [start, *start.parents]:
        if has_root_marker(folder):
            return folder
    return start


CONFIG_FILES = (".trainlint.toml", "trainlint.toml")  # before pyproject.toml, in this order


def find_config(start: Path) -> Optional[Path]:
    """The nearest configuration at or above `start`: in each folder `.trainlint.toml`, then
    `trainlint.toml`, then a pyproject.toml that has a [tool.trainlint] table."""
    start = start.resolve()
    if start.is_file():
        start = start.parent
    for folder in [start, *start.parents]:
        for name in CONFIG_FILES:
            if (folder / name).is_file():
                return folder / name
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                raw = read_regular_file(candidate, MAX_CONFIG_SIZE)
            except OSError:
                continue  # not a file we can read: not the configuration (load_table would say)
            try:
                data = tomllib.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
                # A broken pyproject.toml that does not belong to us is not our error unless it
                # is the one we would read: report it when it mentions trainlint.
                if b"[tool.trainlint" in raw:
                    return candidate
                continue
            if "trainlint" in data.get("tool", {}):
                return candidate
    return None


def load_table(path: Path) -> Dict[str, Any]:
    try:
        data = tomllib.loads(read_regular_file(path, MAX_CONFIG_SIZE).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid UTF-8")
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}")
    except RecursionError:
        # The TOML reader recurses once per nested array or inline table.
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deeply to read")
    if path.name == "pyproject.toml" or "tool" in data:
        table = data.get("tool", {}).get("trainlint", {})
    else:
        table = data  # a dedicated trainlint.toml holds the keys at top level
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.trainlint] must be a table")
    return table


def known_keys(rules: RuleNames) -> Dict[str, Any]:
    keys = dict(_CORE_KEYS)
    keys.update(rules.options())
    return keys


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """" (did you mean 'X'?)" for the choice closest to a misspelt `word`, else ""."""
    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def validate_codes(codes: Iterable[str], where: str, known: Sequence[str]) -> List[str]:
    """The selectors of `codes`, upper-cased; each must be ALL or a prefix of a `known` code."""
    out = []
    for raw in codes:
        if not isinstance(raw, str):
            raise ConfigError(f"{where}: {raw!r} is not a rule code")
        code = raw.strip().upper()
        if not code:
            continue
        if code != "ALL" and not any(k.startswith(code) for k in known):
            hint = did_you_mean(code, ["ALL", *known]) or " (see `trainlint rules`)"
            raise ConfigError(f"{where}: unknown rule selector {raw!r}{hint}")
        out.append(code)
    return out


def settings_from_table(
    table: Dict[str, Any], where: str, root: Path, rules: RuleNames
) -> Settings:
    # The rules' own keys need the rules imported: only when the table has other keys.
    keys = dict(_CORE_KEYS) if all(key in _CORE_KEYS for key in table) else known_keys(rules)
    settings = Settings(root=root)
    for key, value in table.items():
        expected = keys.get(key)
        if expected is None:
            near = [k for k in keys if k.replace("-", "_") == key.replace("-", "_")]
            hint = f" (did you mean {near[0]!r}?)" if near else did_you_mean(key, keys)
            raise ConfigError(f"{where}: unknown key {key!r} in [tool.trainlint]{hint}")
        # TOML tells 60 from 60.0; a number of seconds may be either.
        accepted = (int, float) if expected is float else expected
        if not isinstance(value, accepted):
            kind = "number" if expected is float else expected.__name__
            raise ConfigError(f"{where}: {key!r} must be a {kind}, not {type(value).__name__}")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key!r} must be a list of strings")
    if "select" in table:
        settings.select = validate_codes(table["select"], f"{where}: select", rules.codes)
    settings.extend_select = validate_codes(
        table.get("extend-select", []), f"{where}: extend-select", rules.codes
    )
    settings.ignore = validate_codes(table.get("ignore", []), f"{where}: ignore", rules.codes)
    pfi = table.get("per-file-ignores", {})
    for pattern, codes in pfi.items():
        if isinstance(codes, str):
            codes = [codes]
        if not isinstance(codes, list):
            raise ConfigError(f"{where}: per-file-ignores[{pattern!r}] must be a list of codes")
        settings.per_file_ignores[pattern] = validate_codes(
            codes, f"{where}: per-file-ignores[{pattern!r}]", rules.codes
        )
    if "exclude" in table:
        settings.exclude = list(table["exclude"])
    settings.extend_exclude = list(table.get("extend-exclude", []))
    settings.force_exclude = bool(table.get("force-exclude", False))
    settings.respect_gitignore = bool(table.get("respect-gitignore", True))
    settings.unsafe_fixes = bool(table.get("unsafe-fixes", False))
    settings.preview = bool(table.get("preview", False))
    size = table.get("max-file-size", MAX_FILE_SIZE)
    if isinstance(size, bool) or size < 0:
        raise ConfigError(f"{where}: 'max-file-size' must be a number of bytes (0: no limit)")
    settings.max_file_size = size
    seconds = table.get("per-file-timeout", PER_FILE_TIMEOUT)
    # TOML also has inf and nan.
    if isinstance(seconds, bool) or not 0 <= seconds <= MAX_PER_FILE_TIMEOUT:
        raise ConfigError(
            f"{where}: 'per-file-timeout' must be a number of seconds up to "
            f"{MAX_PER_FILE_TIMEOUT:g} (0: no limit)"
        )
    settings.per_file_timeout = float(seconds)
    if "python" in table:
        settings.python = python_path(table["python"], root, where, must_exist=False)
    for key in keys:
        if key not in _CORE_KEYS and key in table:
            settings.options[key] = table[key]
    settings.origins = {key: where for key in table}
    return settings


def python_path(value: str, base: Path, where: str, must_exist: bool = True) -> str:
    """The `python` setting as an absolute path (relative to `base`: the configuration file's
    folder, or the current folder for `--python`). `--python` must name an existing file; a
    configuration file may name one that is missing here (a `.venv` a CI checkout does not
    have): the check warns and reads no installed framework."""
    if not value.strip():
        raise ConfigError(f"{where}: 'python' must name a Python interpreter")
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base / path
    if must_exist and not path.is_file():
        raise ConfigError(f"{where}: python interpreter {value!r} not found (looked at {path})")
    return str(path.absolute())


def load_settings(
    paths: Sequence[Path],
    rules: RuleNames,
    config: Optional[Path] = None,
    *,
    isolated: bool = False,
) -> Settings:
    """Settings from `--config FILE`, or the nearest pyproject.toml above the first path."""
    first = Path(paths[0]) if paths else Path.cwd()
    if config is not None:
        if not config.is_file():
            raise ConfigError(f"config file {config} does not exist")
        table = load_table(config)
        root = find_project_root(config.parent)
        settings = settings_from_table(table, str(config), root, rules)
        settings.config_path = config
        return settings
    root = find_project_root(first if first.exists() else Path.cwd())
    marked = has_root_marker(root)
    if isolated:
        return Settings(root=root, root_marked=marked)
    found = find_config(first if first.exists() else Path.cwd())
    if found is None:
        return Settings(root=root, root_marked=marked)
    settings = settings_from_table(load_table(found), str(found), found.parent, rules)
    settings.config_path = found
    return settings
