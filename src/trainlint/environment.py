"""The Python environment whose installed packages trainlint reads, and where a module's source
file is in it, found the way the import system would find it, without importing anything.

Which environment, in this order:

1. `--python PATH` or `[tool.trainlint] python = ".venv/bin/python"` (relative to the folder
   of the configuration file): that interpreter is asked once, in a subprocess started with
   `-I -S` (isolated, and without the `site` module, so that no `.pth` file of the environment
   runs and nothing of the user's is imported), for its import path and prefixes; trainlint
   then adds the site-packages folders as `site` would. The answer is kept per interpreter
   (path and modification time) in the cache folder.
2. An active virtual environment (`$VIRTUAL_ENV`), asked the same way (unless it is the
   environment trainlint itself runs in).
3. The interpreter running trainlint: its `sys.path`, less trainlint's own source folder and the
   current folder.

Each site-packages folder's `.pth` files are read as `site` reads them, except that nothing in
them runs: a line that is a path adds that folder; a line starting with `import` is not executed,
but setuptools' editable-install finders (`__editable__.NAME.pth` importing
`__editable___NAME_finder`) are understood by reading the finder module's `MAPPING` literal
(top-level name -> folder or file). Not supported: other import hooks (`.pth` lines that install
custom finders, meta path finders, zip imports of `.egg` files), packages that extend their own
`__path__` in code other than `pkgutil.extend_path`/`pkg_resources.declare_namespace`, and
extension modules (`.so`/`.pyd`: there is no source to read). A module found nowhere is unknown,
and rules stay quiet about what it would do.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .source import read_regular_file

# Asked of the environment's interpreter (run with -I -S): its import path without `site`, and
# the prefixes `site` would add site-packages folders for. Standard library only.
_ASK = r"""
import json, os, site, sys
exe_dir = os.path.dirname(os.path.abspath(sys.executable))
cfg = None
for folder in (exe_dir, os.path.dirname(exe_dir)):
    if os.path.isfile(os.path.join(folder, "pyvenv.cfg")):
        cfg = os.path.join(folder, "pyvenv.cfg")
        break
prefixes, system, user = [sys.prefix, sys.exec_prefix], True, True
if cfg is not None:
    system = False
    with open(cfg, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            key, _, value = line.partition("=")
            if key.strip().lower() == "include-system-site-packages":
                system = value.strip().lower() == "true"
    prefixes = [os.path.dirname(cfg)]
    if system:
        prefixes += [sys.base_prefix, sys.base_exec_prefix]
    user = system
sites = []
if user:
    sites.append(site.getusersitepackages())
for folder in site.getsitepackages(prefixes):
    if folder not in sites:
        sites.append(folder)
print(json.dumps({"path": [p for p in sys.path if p], "site": sites,
                  "version": "%d.%d" % sys.version_info[:2], "executable": sys.executable}))
"""
_ASK_TIMEOUT = 30.0
_ASKED: Dict[str, dict] = {}  # interpreter path and mtime -> its answer, in this process
_ENVIRONMENTS = "environments"
# setuptools' editable-install finder module named in a `.pth` line.
_EDITABLE_FINDER = re.compile(r"^import\s+(__editable___[\w.]+_finder)\b")
_NAMESPACE_INIT = re.compile(r"pkgutil\s*\.\s*extend_path|declare_namespace\s*\(")
# Top-level packages worth naming in `--show-settings`: the frameworks rules reason about.
FRAMEWORKS = (
    "mmdet", "mmengine", "mmcv", "mmseg", "mmpretrain", "timm", "transformers", "diffusers",
    "peft", "accelerate", "lightning", "pytorch_lightning", "detectron2", "torchvision",
    "ultralytics", "deepspeed", "ignite", "fairseq", "trl",
)


@dataclass
class Environment:
    """An import path to search, and how it was chosen."""

    python: Optional[str]  # the interpreter asked; None: the one running trainlint
    origin: str  # why this one ("--python", a configuration file, "$VIRTUAL_ENV", ...)
    entries: List[str] = field(default_factory=list)  # the import path, in order
    # top-level name -> the folders or files an editable-install finder maps it to
    editable: Dict[str, List[str]] = field(default_factory=dict)
    problem: Optional[str] = None  # why the interpreter could not be asked

    def describe(self) -> str:
        text = f"{self.python or sys.executable}  # {self.origin}"
        if self.problem:
            text += f"; not usable: {self.problem}"
        return text

    def fingerprint(self) -> str:
        """What a stored project-phase result depends on: the import path and each folder's
        modification time (installing or removing a package changes its site-packages)."""
        digest = hashlib.sha256(json.dumps([self.python, self.entries, self.editable]).encode())
        for entry in self.entries:
            try:
                digest.update(f"{entry}:{os.stat(entry).st_mtime_ns}\n".encode())
            except OSError:
                digest.update(f"{entry}:missing\n".encode())
        return digest.hexdigest()


def interpreter_for(python: Optional[str], origin: str) -> Tuple[Optional[str], str]:
    """(the interpreter to ask, why) from the `python` setting (already an absolute path, or
    None), else `$VIRTUAL_ENV`; (None, ...) for the interpreter running trainlint."""
    if python:
        return python, origin
    venv = os.environ.get("VIRTUAL_ENV")
    if venv and not _same_path(venv, sys.prefix):
        for candidate in ("bin/python", "bin/python3", "Scripts/python.exe"):
            path = os.path.join(venv, candidate)
            if os.path.isfile(path):
                return path, "$VIRTUAL_ENV"
    return None, "the interpreter running trainlint"


def find_environment(
    python: Optional[str], origin: str = "python setting", cache_dir: Optional[Path] = None
) -> Environment:
    """The environment to read installed packages from (see the module's docstring)."""
    chosen, why = interpreter_for(python, origin)
    if chosen is None:
        own = _own_source_dirs()
        here = os.path.abspath(os.getcwd())
        entries = [
            os.path.abspath(p)
            for p in sys.path
            if p and os.path.abspath(p) not in own and os.path.abspath(p) != here
        ]
        env = Environment(None, why)
        env.entries, env.editable = expand_site_dirs(entries, [], exclude=own)
        return env
    env = Environment(chosen, why)
    answer, problem = ask_interpreter(chosen, cache_dir)
    if answer is None:
        env.problem = problem
        return env
    own = _own_source_dirs()
    env.entries, env.editable = expand_site_dirs(
        [os.path.abspath(p) for p in answer.get("path", [])], answer.get("site", []), exclude=own
    )
    return env


def ask_interpreter(
    python: str, cache_dir: Optional[Path] = None
) -> Tuple[Optional[dict], Optional[str]]:
    """The interpreter's import path and site folders ({"path": [...], "site": [...]}), asked
    in a subprocess (`-I -S`: nothing of the environment runs); (None, why) when it cannot be."""
    try:
        info = os.stat(python)
    except OSError as exc:
        return None, f"{python}: {exc.strerror or exc}"
    key = hashlib.sha256(f"{os.path.abspath(python)}\0{info.st_mtime_ns}".encode()).hexdigest()
    if key in _ASKED:
        return _ASKED[key], None  # a long-lived process (the language server) asks once
    stored = cache_dir / _ENVIRONMENTS / f"{key}.json" if cache_dir is not None else None
    if stored is not None:
        try:
            found = json.loads(read_regular_file(stored, 1024 * 1024))
            if isinstance(found, dict) and isinstance(found.get("path"), list):
                _ASKED[key] = found
                return found, None
        except (OSError, ValueError):
            pass
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", _ASK],
            capture_output=True,
            timeout=_ASK_TIMEOUT,
            cwd=tempfile.gettempdir(),  # never the project: nothing of it is on the path
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot run {python}: {exc}"
    try:
        found = json.loads(done.stdout.decode("utf-8", "replace"))
        assert isinstance(found, dict) and isinstance(found.get("path"), list)
    except (ValueError, AssertionError):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        return None, f"{python} is not a Python interpreter trainlint can ask" + (
            f" ({tail[0]})" if tail else ""
        )
    _ASKED[key] = found
    if stored is not None:
        try:
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_text(json.dumps(found), encoding="utf-8")
        except OSError:
            pass
    return found, None


def expand_site_dirs(
    entries: Sequence[str], sites: Sequence[str], exclude: Sequence[str] = ()
) -> Tuple[List[str], Dict[str, List[str]]]:
    """`entries` followed by each existing site folder of `sites`, each site folder (also one
    already in `entries`) followed by the path lines of its `.pth` files, as `site.addsitedir`
    does, in name order; and the editable installs those `.pth` files declare. Nothing runs."""
    out: List[str] = []
    editable: Dict[str, List[str]] = {}
    skip = {os.path.abspath(p) for p in exclude}

    def add(path: str) -> None:
        path = os.path.abspath(path)
        if path not in out and path not in skip:
            out.append(path)

    for entry in entries:
        add(entry)
    for site_dir in sites:
        if os.path.isdir(site_dir):
            add(site_dir)
    for site_dir in list(out):
        if not site_dir.endswith(("site-packages", "dist-packages")):
            continue
        for folder, finder in _read_pth_files(site_dir):
            if folder is not None:
                if os.path.isdir(folder):
                    add(folder)
            elif finder is not None:
                for name, locations in _editable_mapping(site_dir, finder).items():
                    kept = [p for p in locations if os.path.abspath(p) not in skip]
                    if kept:
                        editable.setdefault(name, kept)
    return out, editable


def _read_pth_files(site_dir: str) -> List[Tuple[Optional[str], Optional[str]]]:
    """(folder, None) for each path line, (None, finder module) for each editable-install
    finder import, of the site folder's `.pth` files (name order, as `site` reads them)."""
    found: List[Tuple[Optional[str], Optional[str]]] = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return found
    for name in names:
        if name.startswith("."):
            continue  # `site` skips hidden .pth files too
        try:
            text = read_regular_file(os.path.join(site_dir, name), 1024 * 1024).decode(
                "utf-8", "replace"
            )
        except OSError:
            continue
        for line in text.splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import\t")):
                match = _EDITABLE_FINDER.match(line)
                if match:
                    found.append((None, match.group(1)))
                continue  # never executed
            found.append((os.path.join(site_dir, line), None))
    return found


def _editable_mapping(site_dir: str, finder: str) -> Dict[str, List[str]]:
    """setuptools' editable finder `MAPPING` ({"pkg": "/src/pkg"}), read as a literal."""
    path = os.path.join(site_dir, finder.replace(".", os.sep) + ".py")
    try:
        tree = ast.parse(read_regular_file(path, 4 * 1024 * 1024))
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id == "MAPPING":
            try:
                mapping = ast.literal_eval(value)
            except ValueError:
                return {}
            if isinstance(mapping, dict):
                return {
                    str(k): [str(v)] for k, v in mapping.items() if isinstance(v, str) and k
                }
    return {}


def _own_source_dirs() -> List[str]:
    """The folder holding trainlint's own package (`src/` of a checkout): not the user's."""
    package = Path(__file__).resolve().parent
    return [str(package.parent)]


def _same_path(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


# -- finding a module -------------------------------------------------------------------------


class ModuleFinder:
    """Dotted module name -> its source file in an environment, as the import system's path
    finder would pick it (regular packages, namespace packages spread over several folders,
    single-file modules, editable installs), reading folders only; never imports anything."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self._listings: Dict[str, Optional[frozenset]] = {}
        self._found: Dict[str, Optional[Tuple[str, ...]]] = {}  # package -> its __path__
        self._files: Dict[str, Optional[Path]] = {}
        self._names: Dict[Path, str] = {}
        self._versions: Dict[str, Optional[str]] = {}

    def _listing(self, folder: str) -> frozenset:
        found = self._listings.get(folder)
        if found is None:
            try:
                found = frozenset(os.listdir(folder))
            except OSError:
                found = frozenset()
            self._listings[folder] = found
        return found

    def find(self, dotted: str) -> Optional[Path]:
        """The source file of module `dotted` (a package's `__init__.py`), or None (not
        installed, a namespace package, an extension module)."""
        if dotted in self._files:
            return self._files[dotted]
        found = self._find(dotted)
        self._files[dotted] = found
        if found is not None:
            self._names.setdefault(found, dotted)
        return found

    def module_name(self, path: Path) -> Optional[str]:
        """The dotted name a file returned by `find` was found as."""
        return self._names.get(Path(path))

    def is_package(self, path: Path) -> bool:
        return Path(path).name == "__init__.py"

    def _search_path(self, package: str) -> Optional[Tuple[str, ...]]:
        """The folders a package's submodules are looked up in (its `__path__`), or None."""
        if package in self._found:
            return self._found[package]
        parts = package.split(".")
        if len(parts) == 1:
            parent: Optional[Tuple[str, ...]] = tuple(self.environment.entries)
        else:
            parent = self._search_path(".".join(parts[:-1]))
        result: Optional[Tuple[str, ...]] = None
        if parent is not None:
            kind, where = self._locate(parts[-1], parent, top=len(parts) == 1)
            if kind == "package":
                folder = os.path.dirname(where[0])
                result = (folder,)
                if self._extends_path(where[0]):
                    # pkgutil/pkg_resources namespace: every folder of that name on the path
                    others = [
                        os.path.join(p, parts[-1])
                        for p in parent
                        if os.path.join(p, parts[-1]) != folder
                        and os.path.isdir(os.path.join(p, parts[-1]))
                    ]
                    result = tuple([folder] + others)
            elif kind == "namespace":
                result = tuple(where)
        self._found[package] = result
        return result

    def _find(self, dotted: str) -> Optional[Path]:
        parts = dotted.split(".")
        if not all(p.isidentifier() for p in parts):
            return None
        if len(parts) == 1:
            parent: Optional[Tuple[str, ...]] = tuple(self.environment.entries)
        else:
            parent = self._search_path(".".join(parts[:-1]))
        if parent is None:
            return None
        kind, where = self._locate(parts[-1], parent, top=len(parts) == 1)
        if kind in ("package", "module"):
            return Path(where[0])
        return None

    def _locate(self, name: str, folders: Sequence[str], top: bool) -> Tuple[str, List[str]]:
        """("package", [__init__.py]) / ("module", [name.py]) / ("namespace", [folders]) /
        ("binary", []) / ("missing", []) for `name` searched in `folders` in order."""
        if top and name in self.environment.editable:
            # An editable install's finder is consulted after the path (setuptools appends
            # it to sys.meta_path); the path wins when it holds the name.
            found = self._locate_plain(name, folders)
            if found[0] in ("package", "module", "binary"):
                return found
            for location in self.environment.editable[name]:
                if os.path.isfile(os.path.join(location, "__init__.py")):
                    return "package", [os.path.join(location, "__init__.py")]
                if location.endswith(".py") and os.path.isfile(location):
                    return "module", [location]
            return found
        return self._locate_plain(name, folders)

    def _locate_plain(self, name: str, folders: Sequence[str]) -> Tuple[str, List[str]]:
        portions: List[str] = []
        for folder in folders:
            names = self._listing(folder)
            if name in names:
                package = os.path.join(folder, name)
                inner = self._listing(package)
                if "__init__.py" in inner:
                    return "package", [os.path.join(package, "__init__.py")]
                if any(n.startswith("__init__.") for n in inner):
                    return "binary", []  # a compiled __init__ (.so, .pyc only): no source
            # Extension modules come before source files in the path finder's loaders.
            if any(
                n.startswith(name + ".") and n.endswith((".so", ".pyd")) for n in names
            ):
                return "binary", []
            if name + ".py" in names:
                return "module", [os.path.join(folder, name + ".py")]
            if name in names and os.path.isdir(os.path.join(folder, name)):
                portions.append(os.path.join(folder, name))
        if portions:
            return "namespace", portions
        return "missing", []

    def _extends_path(self, init: str) -> bool:
        try:
            text = read_regular_file(init, 4 * 1024 * 1024).decode("utf-8", "replace")
        except OSError:
            return False
        return bool(_NAMESPACE_INIT.search(text))

    # -- versions -------------------------------------------------------------------------------

    def version(self, top: str) -> Optional[str]:
        """The installed version of the distribution providing top-level package `top` (from
        its `.dist-info`/`.egg-info` metadata), or None when no metadata names it."""
        if top not in self._versions:
            self._versions[top] = self._version(top)
        return self._versions[top]

    def _version(self, top: str) -> Optional[str]:
        wanted = _normalise(top)
        for folder in self.environment.entries:
            for name in sorted(self._listing(folder)):
                if not name.endswith((".dist-info", ".egg-info")):
                    continue
                meta = os.path.join(folder, name)
                dist, _, rest = name.rpartition(".")[0].partition("-")
                version = rest.split("-")[0] if rest else None
                if _normalise(dist) != wanted and top not in _top_level(meta):
                    continue
                return version or _metadata_version(meta)
        return None

    def frameworks(self, names: Sequence[str] = ()) -> List[Tuple[str, Optional[str]]]:
        """The frameworks among `names` (default: `FRAMEWORKS`) this environment has, with
        their versions."""
        found = []
        for name in names or FRAMEWORKS:
            if self.find(name) is not None:
                found.append((name, self.version(name)))
        return found


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _top_level(meta: str) -> List[str]:
    try:
        text = read_regular_file(os.path.join(meta, "top_level.txt"), 1024 * 1024)
    except OSError:
        return []
    return text.decode("utf-8", "replace").split()


def _metadata_version(meta: str) -> Optional[str]:
    for name in ("METADATA", "PKG-INFO"):
        try:
            text = read_regular_file(os.path.join(meta, name), 4 * 1024 * 1024)
        except OSError:
            continue
        for line in text.decode("utf-8", "replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break
    return None


__all__ = ["Environment", "ModuleFinder", "expand_site_dirs", "find_environment"]
