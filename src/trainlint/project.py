"""The project phase: per-file facts joined across the files of a run.

Rules with `project = True` return plain-data facts from the per-file phase (`Rule.facts()`);
after every file has been checked, `run_project_phase` hands each such rule a `Project` holding
those facts, and the rule returns findings that need more than one file (a class defined in
models.py and wrapped in DDP in train.py). Under flake8, which sees one file at a time, these
rules only use what one file shows.

Given only some files (pre-commit passes the changed ones), a rule can still read the facts of
another file of the project (a module the checked file imports, a config's `_base_`) with
`Project.facts_of(path, code)`: the runner's loader reads and checks that file once per run
(never executing it) and its facts are used, its findings are not reported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
)

from .config import Settings
from .diagnostics import Diagnostic, FileResult, RuleCrash, Severity
from .rules.base import Rule
from .source import read_regular_file

if TYPE_CHECKING:  # pragma: no cover
    from .selection import Selection


@dataclass
class Project:
    root: Path
    settings: Settings
    results: Mapping[str, FileResult]  # display path -> result of the per-file phase
    # display path -> absolute path, for rules that need to name or resolve files
    paths: Dict[str, Path] = field(default_factory=dict)
    # absolute path -> the per-file result of a file outside the run (None: unreadable, or not
    # Python). None under flake8, which sees one file: only in-file evidence is used there.
    loader: Optional[Callable[[Path], Optional[FileResult]]] = None
    _loaded: Dict[Path, Optional[FileResult]] = field(default_factory=dict, repr=False)
    # What the rules learnt of files outside the run, so that the phase's findings can be kept
    # (cache.py) while those files stay as they were: path -> whether it was a file.
    probes: Dict[str, bool] = field(default_factory=dict, repr=False)
    read_texts: bool = field(default=False, repr=False)  # walked the project for its texts
    # The project's Python files and their texts, when the caller has them already (a run over
    # the whole project root read them all); else read on first use.
    texts: Optional[List[Tuple[Path, str]]] = field(default=None, repr=False)
    # The installed packages of the analysed environment (library.py's `Library`: `find`,
    # `module_name`, `owns`, `facts`, `stars`); None where they are not read (flake8).
    library: Optional[Any] = field(default=None, repr=False)
    _import_words: Optional[Dict[str, List[Path]]] = field(default=None, repr=False)
    _text_by_path: Optional[Dict[Path, str]] = field(default=None, repr=False)
    _display_by_path: Optional[Dict[Path, str]] = field(default=None, repr=False)
    _match_counts: Dict[str, int] = field(default_factory=dict, repr=False)
    # The project's YAML files (launch configurations), read on first use like `texts`.
    launch_configs: Optional[List[Tuple[Path, str]]] = field(default=None, repr=False)
    read_launch_configs: bool = field(default=False, repr=False)

    def facts(self, code: str) -> Dict[str, object]:
        """display path -> the facts rule `code` recorded for that file."""
        return {
            path: result.facts[code]
            for path, result in self.results.items()
            if code in result.facts
        }

    def candidates(self, code: str) -> Dict[str, Dict[str, Dict[str, object]]]:
        """display path -> key -> the candidate findings rule `code` recorded in files of the
        run (plain data; `candidate()` makes the Diagnostic)."""
        return {
            path: result.candidates[code]
            for path, result in self.results.items()
            if code in result.candidates
        }

    def candidate(
        self,
        path: str,
        code: str,
        key: str,
        *,
        message: Optional[str] = None,
        severity: Optional[Severity] = None,
        drop_fix: bool = False,
        help: Optional[str] = None,
    ) -> Optional[Diagnostic]:
        """The Diagnostic for candidate `key` of rule `code` in file `path` of the run (None if
        it was not recorded), with the message, help or severity the project phase decided."""
        result = self.results.get(path)
        if result is None or key not in result.candidates.get(code, {}):
            return None
        diagnostic = Diagnostic.from_dict(result.candidates[code][key])
        if message is not None:
            diagnostic = dataclasses.replace(diagnostic, message=message)
        if help is not None:
            diagnostic = dataclasses.replace(diagnostic, help=help)
        if severity is not None:
            diagnostic = dataclasses.replace(diagnostic, severity=severity)
        if drop_fix:
            diagnostic = dataclasses.replace(diagnostic, fix=None)
        return diagnostic

    def result_of(self, path: Path) -> Optional[FileResult]:
        """The per-file result for `path` (absolute): from the run when the file is part of
        it, else loaded once through the loader. None for files outside the project root, files
        that do not exist, and whenever no loader is given (flake8)."""
        path = Path(os.path.abspath(path))
        display = self.display_of(path)
        if display is not None:
            return self.results.get(display)
        if self.loader is None or not _inside(path, self.root) or not self.is_file(path):
            return None
        if path not in self._loaded:
            self._loaded[path] = self.loader(path)
        return self._loaded[path]

    def is_file(self, path: Path) -> bool:
        """`path.is_file()`, remembered (and recorded in `probes`)."""
        key = os.path.abspath(path)
        found = self.probes.get(key)
        if found is None:
            found = self.probes[key] = os.path.isfile(key)
        return found

    def display_of(self, path: Path) -> Optional[str]:
        """The display path of the file at `path` when it is part of the run, else None."""
        if self._display_by_path is None:
            # Built once: lookups come per import and per config of every file of the run.
            # Files without an entry in `paths` (flake8) are named by their path.
            self._display_by_path = {
                Path(os.path.abspath(self.paths.get(display, display))): display
                for display in self.results
            }
            for display, known in self.paths.items():
                self._display_by_path.setdefault(Path(os.path.abspath(known)), display)
        return self._display_by_path.get(Path(os.path.abspath(path)))

    def facts_of(self, path: Path, code: str) -> Optional[object]:
        """The facts rule `code` recorded for the file at `path`, in the run or not (or, for a
        file of an installed package, the facts its summary holds)."""
        if self.library is not None and self.library.owns(path):
            return self.library.facts(path, code)
        result = self.result_of(path)
        if result is None:
            return None
        return result.facts.get(code)

    def files_matching(self, pattern: re.Pattern) -> List[Path]:
        """Python files and notebooks of the project (under the root, excludes and .gitignore
        honoured) whose text (a notebook's code cells) matches `pattern`: for joins that start
        from the other file (which config builds this class), so that a run given only some
        files answers like a whole-tree run. Empty without a loader (flake8). The texts are read
        once per run; nothing is parsed here."""
        return [path for path, text in self._project_texts() if pattern.search(text)]

    def count_matching(self, pattern: re.Pattern) -> Optional[int]:
        """How often `pattern` matches in the texts of the project's files and notebooks;
        None without a loader (flake8), where the other files cannot be read."""
        if self.loader is None:
            return None
        # Asked once per finding that depends on it: the project's texts are scanned once per
        # pattern.
        count = self._match_counts.get(pattern.pattern)
        if count is None:
            count = sum(len(pattern.findall(text)) for _, text in self._project_texts())
            self._match_counts[pattern.pattern] = count
        return count

    def importers_of(self, name: str, path: Path) -> Set[Path]:
        """The other project files that may import `name` from the file at `path`: an import
        line names it or the file's module (`from train import fit`, `import train as T`)."""
        found = set(self.files_importing(name)) | set(self.files_importing(Path(path).stem))
        found.discard(Path(path))
        return found

    def files_importing(self, name: str) -> List[Path]:
        """Project files with an import line naming `name` (`from models.head import Head`,
        `from .head import ...`, `import head`): the files that may import module `name`."""
        if self._import_words is None:
            index: Dict[str, List[Path]] = {}
            for path, text in self._project_texts():
                words: set = set()
                for line in _IMPORT_LINE.findall(text):
                    words.update(_WORD.findall(line))
                for word in words:
                    index.setdefault(word, []).append(path)
            self._import_words = index
        return list(self._import_words.get(name, ()))

    def files_under(self, folder: Path) -> List[Path]:
        """Python files of the project inside `folder` (empty without a loader)."""
        folder = Path(os.path.abspath(folder))
        return [path for path, _ in self._project_texts() if folder in path.parents]

    def text_of(self, path: Path) -> Optional[str]:
        """The text of a project file (None without a loader, or outside the project)."""
        if self._text_by_path is None:
            self._text_by_path = dict(self._project_texts())
        return self._text_by_path.get(Path(os.path.abspath(path)))

    def _project_texts(self) -> List[Tuple[Path, str]]:
        if self.loader is None:
            return []
        if self.texts is None:
            self.texts = read_project_texts(self.root, self.settings)
            self.read_texts = True
        return self.texts

    def launch_config_texts(self) -> List[Tuple[Path, str]]:
        """(absolute path, text) of the project's YAML files, where launch configurations live
        (Accelerate's `--config_file`): excludes and .gitignore honoured, read once per run.
        Empty without a loader (flake8)."""
        if self.loader is None:
            return []
        if self.launch_configs is None:
            self.launch_configs = read_launch_configs(self.root, self.settings)
            self.read_launch_configs = True
        return self.launch_configs

    @property
    def complete(self) -> bool:
        """True when files outside the run can be read (the CLI); False under flake8."""
        return self.loader is not None


# A root nothing marks is only the folder a run started in (a scratch folder, a home
# directory, /tmp): past this many Python files and notebooks it is not read as one project.
GUESSED_ROOT_LIMIT = 2000


def unmarked_root_too_big(settings: Settings) -> Optional[str]:
    """Why the project phase should not read the files around the run: a warning line when
    nothing marks the project root (`Settings.root_marked`) and more than GUESSED_ROOT_LIMIT
    Python files and notebooks lie under it; None otherwise. Reading them all would take
    minutes and mix unrelated code into one project."""
    if settings.root_marked:
        return None
    from .files import discover

    if not discover([settings.root], settings, limit=GUESSED_ROOT_LIMIT).truncated:
        return None
    return (
        f"{settings.root}: no pyproject.toml, setup.cfg, setup.py or .git marks the project "
        f"root here or above, and it holds more than {GUESSED_ROOT_LIMIT:,} Python files and "
        "notebooks; checks across files read only the files given and the project files "
        "they import. Add a pyproject.toml (or run `git init`) where the project starts."
    )


_IMPORT_LINE = re.compile(r"^[ \t]*(?:from|import)[ \t][^\n]*", re.M)
_WORD = re.compile(r"\w+")


def read_project_texts(root: Path, settings: Settings) -> List[Tuple[Path, str]]:
    """(absolute path, text) of the project's Python files and notebooks: what discovery
    finds under the root (excludes and .gitignore honoured), read as text (a notebook as its
    code cells, `notebook_code`); unreadable files are left out."""
    from .files import discover

    texts: List[Tuple[Path, str]] = []
    for path, _display in discover([root], settings).files:
        if path.suffix not in (".py", ".ipynb"):
            continue
        try:
            data = read_regular_file(path)
        except OSError:
            continue
        text = file_text(path, data)
        if text is not None:
            texts.append((Path(os.path.abspath(path)), text))
    return texts


LAUNCH_CONFIG_SUFFIXES = (".yaml", ".yml")
# A YAML file larger than this is data (a dataset index, a label map), not a launch config.
LAUNCH_CONFIG_LIMIT = 256 * 1024


def read_launch_configs(root: Path, settings: Settings) -> List[Tuple[Path, str]]:
    """(absolute path, text) of the YAML files under the root (excludes and .gitignore
    honoured); unreadable and oversized files are left out."""
    from .files import discover

    texts: List[Tuple[Path, str]] = []
    for path, _display in discover([root], settings, suffixes=LAUNCH_CONFIG_SUFFIXES).files:
        try:
            data = read_regular_file(path, LAUNCH_CONFIG_LIMIT)
        except OSError:
            continue
        texts.append((Path(os.path.abspath(path)), project_text(data)))
    return texts


def file_text(path: Path, data: bytes) -> Optional[str]:
    """What the project phase searches in a file: a Python file's text (`project_text`), a
    notebook's code cells one after another (a class a notebook builds is named there; its
    outputs and prose are not code), None for a notebook that cannot be read."""
    text = project_text(data)
    if path.suffix != ".ipynb":
        return text
    from .notebook import NotebookError, load

    try:
        _, cells = load(text)
    except (NotebookError, RecursionError, ValueError):
        return None
    return "\n".join(code for _, code in cells)


def texts_digest(texts: List[Tuple[Path, str]]) -> str:
    digest = hashlib.sha256()
    for path, text in texts:
        digest.update(f"{path}\0{len(text)}\0".encode() + text.encode("utf-8"))
    return digest.hexdigest()


def project_text(data: bytes) -> str:
    """A project file's text: its bytes as UTF-8 (undecodable bytes replaced) with universal
    newlines, the same for files read from disk and for the bytes a run already has."""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(Path(os.path.abspath(root)))
    except ValueError:
        return False
    return True


def run_project_phase(
    rules: Sequence[Type[Rule]], project: Project, selection: "Selection"
) -> Tuple[List[Diagnostic], List[RuleCrash]]:
    """The findings of the project rules among `rules`, each kept only in files where
    `selection` enables its rule (per-file-ignores), and the rules that crashed."""
    found: List[Diagnostic] = []
    crashes: List[RuleCrash] = []
    for rule in rules:
        if not rule.project:
            continue
        try:
            mine = []
            for diagnostic in rule.check_project(project):
                if not isinstance(diagnostic, Diagnostic):
                    raise TypeError(
                        f"check_project() must yield Diagnostics, not {type(diagnostic).__name__}"
                    )
                if rule.code in selection.codes_for(diagnostic.path):
                    mine.append(diagnostic)
            found.extend(mine)  # all or nothing: a rule that fails halfway reports no findings
        except Exception as exc:  # one rule's bug must not stop the run
            crashes.append(RuleCrash.of("<project>", rule.code, exc))
    return found, crashes
