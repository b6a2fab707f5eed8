"""Classes across the files of a project: bases resolved through imports, families, DDP signals.

The per-file phase records `file_facts(ctx)` (plain data: the classes of modules.py, the file's
module-level imports, the wrap sites and DDP signals of wraps.py, attribute names read from
outside `self`). In the project phase `Hierarchy` joins them: a base class named
`models.base.BaseHead`, `.base.BaseHead` or `base.BaseHead` is looked up in the project (the
importing file's folder, the project root, root/src; packages' `__init__.py` re-exports are
followed), reading files outside the run through `Project.facts_of`, so that a run given only
train.py (pre-commit) sees the classes train.py builds on.

A base that resolves to no file of the project is looked up in the installed packages of the
analysed environment (installed.py: mmdet's `DINOHead`, timm's `VisionTransformer`, read, never
imported); one found nowhere is unknown: `Family.complete` is False and rules stay quiet rather
than guess what its methods read. `torch.nn.Module` is known and reads nothing of a subclass;
`nn.Sequential` / `nn.ModuleList` / `nn.ModuleDict` parents reach every submodule.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from ..base.names import LOCAL_PREFIX
from ..parallel.settings import ARGPARSE, MM
from ..parallel.wraps import DDP_KIND, DDP_WRAP_SIGNAL, REDUCER_TEXT, Wraps
from .installed import installed_class, is_library_file, library_absolute
from .mentions import MODULE_CODE
from .mmconfig import MMConfigs
from .modules import ALL, CONTAINERS, MODULE, Modules, escaped


# Bases that are plain Python: known, and they read nothing.
PLAIN_BASES = {
    "object",
    "abc.ABC",
    "typing.Generic",
    "typing.Protocol",
    "typing_extensions.Protocol",
    "abc.ABCMeta",
}
# torch classes that are not modules: an autograd Function (legacy style with an instance
# `forward`/`backward` keeping `self.saved = x` for its backward, or the static-method style)
# is built afresh for each call and never registered, replicated or reduced as a submodule.
NON_MODULE_BASES = {
    "torch.autograd.Function",
    "torch.autograd.function.Function",
    "torch.autograd.function.InplaceFunction",
    "torch.autograd.function.NestedIOFunction",
}
# Library bases whose source we know: nn.Module with weight-initialisation helpers and no
# forward, reading nothing a subclass registers. Any other library base stays unknown.
INITIALISING_MODULES = {
    "mmcv.runner.BaseModule",
    "mmcv.runner.base_module.BaseModule",
    "mmengine.model.BaseModule",
    "mmengine.model.base_module.BaseModule",
    "mmengine.model.base_module.base_module.BaseModule",
}
_MAX_STEPS = 64  # lookups one class name may take through re-exports and star imports
_MAX_NESTING = 12  # resolutions started inside a resolution (through installed packages)
_UNKNOWN = object()
_NOT_HERE = object()  # a star-imported module that does not define the name
_HELPER_IMPORT_DEPTH = 5  # imports from a model file's user to a DDP helper (packages re-export)
_STAR = "<star>."  # a lookup of a name through `from <file> import *`


OUTSIDE = "outside"  # `Hierarchy.locate`: a name the project does not define


class _Follow:
    """Where `Hierarchy.resolve` looks next: (qualname, importer, may fall through) lookups in
    the order Python would find the name."""

    __slots__ = ("lookups",)

    def __init__(self, lookups: List[Tuple[str, Path, bool]]) -> None:
        self.lookups = lookups


# Words of a file that may train with DDP or configure it (wraps.py's signals and options).
# (`DataParallel` also finds `nn.DataParallel`: TRL203's trainers outside the run.)
_DDP_WORDS = re.compile(
    r"DataParallel|init_process_group|find_unused_parameters|static_graph|"
    r"LOCAL_RANK|torchrun|torch\.distributed\.(?:launch|run)|requires_grad"
)
_FROM_IMPORT = re.compile(
    r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)", re.M
)
_DEF_LINE = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)")
_PLAIN_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#]+)", re.M)
# `import_module("loss.adversarial")`, and `import_module("model." + name)` /
# `import_module(f"model.{name}")` (any module of package `model`); `__import__` and any other
# argument are imports nobody can name.
_DYNAMIC_IMPORT = re.compile(r"\b(?:import_module|__import__)[ \t]*\(")
_DYNAMIC_LITERAL = re.compile(r"\bimport_module[ \t]*\([ \t]*(['\"])([\w.]+)\1[ \t]*\)")
_DYNAMIC_PREFIX = re.compile(
    r"\bimport_module[ \t]*\([ \t]*(?:(['\"])([\w.]+)\.\1[ \t]*\+|f(['\"])([\w.]+)\.\{)"
)


def imports_in_text(text: str) -> List[str]:
    """Qualified names a file's import lines name (`from .head import Head` -> ".head.Head",
    `import models.head as mh` -> "models.head"), read from text (any indentation)."""
    out: List[str] = []
    for module, names in _FROM_IMPORT.findall(text):
        for name in names.strip("()").replace("\\", " ").split(","):
            words = name.split()
            if words and words[0] != "*":
                joint = "" if module.endswith(".") else "."
                out.append(f"{module}{joint}{words[0]}")
        out.append(module)
    for names in _PLAIN_IMPORT.findall(text):
        for name in names.split(","):
            words = name.split()
            if words:
                out.append(words[0])
    return out


def import_qualnames(ctx) -> Dict[str, str]:
    """Name bound by an import at module level -> what it imports (`Head` -> ".head.Head"): the
    `"imports"` fact `Hierarchy.imported_files` reads where no file texts are at hand (flake8)."""
    imports: Dict[str, str] = {}
    for name, bindings in ctx.scopes.module_scope.bindings.items():
        for binding in bindings:
            if binding.kind == "import" and binding.qualname:
                imports[name] = binding.qualname
    return imports


def resolution_facts(ctx, classes: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """What `Hierarchy.resolve` reads of a file to find where a class name comes from: its
    classes (`classes`, or every class it defines with no facts of its own), the classes
    without bases, its imports, star imports and `__all__`."""
    if classes is None:
        classes = {node.name.value: {} for node in ctx.nodes(cst.ClassDef)}
    return {
        "classes": classes,
        "plain": sorted(node.name.value for node in ctx.nodes(cst.ClassDef) if not node.bases),
        "imports": import_qualnames(ctx),
        "star_imports": list(ctx.scopes.module_scope.star_imports),
        "exports": exported_names(ctx),
    }


def may_resolve_classes(ctx) -> bool:
    """Can a class name be resolved through this file: it defines classes, or it is a
    package's `__init__.py` (which may re-export them)?"""
    return bool(ctx.nodes(cst.ClassDef)) or ctx.source.path.endswith("__init__.py")


def file_facts(ctx) -> Dict[str, object]:
    """The plain data the project phase needs about one file (cacheable)."""
    facts = resolution_facts(ctx, ctx.analysis(Modules).facts())
    facts.update(ctx.analysis(Wraps).facts())
    facts["outside_reads"] = sorted(_outside_reads(ctx))
    return facts


def exported_names(ctx) -> Optional[List[str]]:
    """The names `from <file> import *` binds when the file says (`__all__ = [...]`, also
    extended with `+=`, `.extend`, `.append`); None when it has no `__all__` (every public name
    is exported) or one we cannot read (then public names are assumed, too)."""
    found: Optional[List[str]] = None
    for statement in ctx.module.body:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            target, value, extend = _all_update(small)
            if target is None:
                continue
            names = _string_list(value)
            if names is None:
                return None  # computed: cannot tell which names
            found = (found or []) + names if extend else names
    return found


def _all_update(small: cst.CSTNode):
    """(`__all__`, the value, whether it extends) for `__all__ = v`, `__all__ += v`,
    `__all__.extend(v)`, `__all__.append(x)` (as a one-element list); else (None, None, False)."""
    if type(small) is cst.Assign and len(small.targets) == 1:
        target = small.targets[0].target
        if type(target) is cst.Name and target.value == "__all__":
            return "__all__", small.value, False
    if type(small) is cst.AnnAssign and type(small.target) is cst.Name:
        if small.target.value == "__all__" and small.value is not None:
            return "__all__", small.value, False
    if type(small) is cst.AugAssign and type(small.target) is cst.Name:
        if small.target.value == "__all__":
            return "__all__", small.value, True
    if type(small) is cst.Expr and type(small.value) is cst.Call:
        call = small.value
        func = call.func
        if (
            type(func) is cst.Attribute
            and type(func.value) is cst.Name
            and func.value.value == "__all__"
            and func.attr.value in ("extend", "append")
            and len(call.args) == 1
        ):
            value = call.args[0].value
            if func.attr.value == "append":
                value = cst.List([cst.Element(value)])
            return "__all__", value, True
    return None, None, False


def _string_list(value: cst.BaseExpression) -> Optional[List[str]]:
    if type(value) not in (cst.List, cst.Tuple):
        return None
    names: List[str] = []
    for element in value.elements:  # type: ignore[attr-defined]
        text = element.value.evaluated_value if type(element.value) is cst.SimpleString else None
        if not isinstance(text, str):
            return None
        names.append(text)
    return names


def _settings(facts: dict) -> List[dict]:
    """The configuration reads (parallel/settings.py) a file's DDP options come from."""
    found = list(facts.get("unused_settings", ()))
    for wrap in facts.get("wraps", ()):
        if wrap.get("kind") == DDP_KIND:
            found.extend(wrap.get("settings", {}).values())
    return found


def _outside_reads(ctx) -> Set[str]:
    """Attribute names read on something other than a method's own `self`
    (`self.head.class_embed`, `model.module.backbone`): a module's parameter may be used by the
    module that holds it."""
    found: Set[str] = set()
    for node in ctx.nodes(cst.Attribute):
        value = node.value
        if type(value) is cst.Name and value.value in ("self", "cls"):
            continue
        found.add(node.attr.value)
    return found


@dataclass(frozen=True)
class ClassRef:
    path: Path  # absolute
    name: str


@dataclass
class Family:
    """A class with its ancestors and known subclasses."""

    members: List[Tuple[ClassRef, dict]] = field(default_factory=list)
    complete: bool = True  # every ancestor (of the class and of its subclasses) is known
    is_module: bool = False  # an ancestor is torch.nn.Module
    reaches_all: bool = False  # an nn.Sequential/ModuleList/ModuleDict parent uses every child
    unknown_bases: List[str] = field(default_factory=list)

    @property
    def has_forward(self) -> bool:
        return any(facts.get("forward") for _, facts in self.members)

    def reads_unconditionally(self, attr: str) -> bool:
        """Does a member read `attr` outside data-dependent branches (or reach it through an
        escape)?"""
        if self.reaches_all:
            return True
        for _, facts in self.members:
            if escaped(attr, facts.get("escapes", ())):
                return True
            for method in facts.get("methods", {}).values():
                if attr in method.get("reads", ()):
                    return True
        return False

    def branch_readers(self, attr: str) -> List[str]:
        return [
            f"{ref.name}.{name}"
            for ref, facts in self.members
            for name, method in facts.get("methods", {}).items()
            if attr in method.get("branch_reads", ())
        ]

    def frozen(self, attr: str) -> bool:
        return any(
            attr in facts.get("frozen", ()) or ALL in facts.get("frozen", ())
            for _, facts in self.members
        )


class Hierarchy:
    def __init__(self, project, code: str) -> None:
        self.project = project
        self.code = code
        self.root = Path(os.path.abspath(project.root))
        self._facts: Dict[Path, Optional[dict]] = {}
        for display, facts in project.facts(code).items():
            path = project.paths.get(display, Path(display))
            self._facts[Path(os.path.abspath(path))] = facts
        self._run_paths = set(self._facts)
        self._run_import_words: Optional[Dict[str, Set[Path]]] = None
        self._bases: Dict[ClassRef, List[Tuple[str, object]]] = {}
        self._imports: Dict[Path, Set[Path]] = {}
        self._evidence: Dict[Path, List[Tuple[Path, dict]]] = {}
        self._ddp: Optional[Set[Path]] = None
        self._reducer: Optional[bool] = None
        self._display_by_path: Optional[Dict[Path, str]] = None
        self._module_files: Dict[Tuple[str, Path], Optional[Path]] = {}
        self._file_classes: Dict[Path, List[Tuple[ClassRef, List[object]]]] = {}
        self._children: Dict[ClassRef, List[ClassRef]] = {}  # base -> its direct subclasses
        self._indexed: Set[Path] = set()
        self._facts_indexed = -1  # how many files were known when the index was last extended
        self._evidence_files: Dict[Path, Set[Path]] = {}
        self._configs: Optional[MMConfigs] = None
        self._resolving = 0  # resolutions under way (installed.py resolves through `resolve`)
        self._set_keys: Dict[Tuple[str, Tuple[str, ...]], bool] = {}
        # builder file -> the files it can build classes of (None: unknown, any)
        self._buildable: Dict[Path, Optional[Set[Path]]] = {}

    # -- files --------------------------------------------------------------------------------

    def facts_at(self, path: Path) -> Optional[dict]:
        path = Path(os.path.abspath(path))
        if path not in self._facts:
            facts = self.project.facts_of(path, self.code)
            self._facts[path] = facts if isinstance(facts, dict) else None
        return self._facts[path]

    def known_files(self) -> Iterator[Tuple[Path, dict]]:
        """Files whose facts were read so far: the run's, and those reached through imports."""
        for path, facts in list(self._facts.items()):
            if facts is not None and not is_library_file(self.project, path):
                yield path, facts

    def module_file(self, dotted: str, importer: Path) -> Optional[Path]:
        """The file of module `dotted` (`models.head`, `.head`, `..models`) imported from
        `importer`, within the project; None when it is not a project module."""
        # Memoised: it depends on the importer's folder only, and every class base, import and
        # importer of the project asks (pathlib made it a third of the project phase).
        key = (dotted, importer.parent)
        found = self._module_files.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._module_files[key] = module_file(
                dotted, importer, self.root, self.project.is_file
            )
        return found  # type: ignore[return-value]

    # -- classes ------------------------------------------------------------------------------

    def class_facts(self, ref: ClassRef) -> Optional[dict]:
        facts = self.facts_at(ref.path)
        if facts is None:
            return None
        return facts.get("classes", {}).get(ref.name)

    def listed_class(self, qualname: str, importer: Path, key: str) -> bool:
        """Is the class `qualname` (as imported in `importer`) a class of the project that the
        file defining it lists under `key` in its facts (`mode_free_classes`,
        `grad_resetting_classes`)?"""
        ref = self.resolve(qualname, importer)
        if not isinstance(ref, ClassRef):
            return False
        return ref.name in (self.facts_at(ref.path) or {}).get(key, ())

    def unread_class(self, qualname: str, importer: Path) -> bool:
        """Is `qualname` (as imported in `importer`) a class of a project file that cannot be
        read here (flake8 hands over one file)? What that file lists is then unknown, which is
        not the same as "not listed": a rule waiting on it stays quiet."""
        if self.project.complete:
            return False
        ref = self.resolve(qualname, importer)
        if isinstance(ref, ClassRef):
            return self.facts_at(ref.path) is None
        if "." not in qualname.lstrip("."):
            return False
        module = qualname.rsplit(".", 1)[0]
        return module.startswith(".") or self.module_file(module, importer) is not None

    def resolve(self, qualname: str, importer: Path):
        """What a class name used in `importer` is: a ClassRef of the project, "module"
        (torch.nn.Module), "container" (nn.Sequential & co.), "plain" (object, ABC, a builtin,
        an autograd Function, a class of the project without bases), or None (unknown: a
        library, or not a class).

        Imports are followed through the files that re-export the name (`from .head import
        Head` in a package's `__init__.py`) and through star imports (`from .heads import *`,
        honouring `__all__`), iteratively and within a fixed number of steps."""
        # A stack of lookups; each is (qualname, importer, may_fall_through). A star import
        # offers several places a name may come from: one that does not define it falls
        # through to the next. A name imported explicitly must be where the import says.
        if self._resolving >= _MAX_NESTING:
            return None  # installed packages' files resolve their own names through here
        self._resolving += 1
        try:
            return _walk(qualname, importer, self._resolve_step, None)
        finally:
            self._resolving -= 1

    def locate(self, qualname: str, importer: Path):
        """Where a name used in `importer` is defined in the project, for the files that
        record what their definitions mention (mentions.py): (file, top-level name), (file,
        MODULE_CODE) for a module of the project named as a whole (`flow_ssl`,
        `models.__dict__`), OUTSIDE for a name the project does not define (a library's, a
        builtin), or None when that cannot be told (a file on the way without facts, a star
        import from nobody knows where). Imports are followed as `resolve` follows them."""
        return _walk(qualname, importer, self._locate_step, OUTSIDE)

    def _locate_step(self, qualname: str, importer: Path):
        if qualname.startswith(LOCAL_PREFIX):
            return self._defined_in(importer, qualname[len(LOCAL_PREFIX) :].split(".")[0])
        if qualname.startswith(_STAR):
            return self._defined_in(importer, qualname[len(_STAR) :], star=True)
        level = len(qualname) - len(qualname.lstrip("."))
        parts = [part for part in qualname.lstrip(".").split(".") if part]
        for cut in range(len(parts), -1 if level else 0, -1):
            path = self.module_file("." * level + ".".join(parts[:cut]), importer)
            if path is None:
                continue
            rest = parts[cut:]
            if not rest:
                return (path, MODULE_CODE)
            return self._defined_in(path, rest[0], whole_if_missing=rest[0].startswith("__"))
        return OUTSIDE

    def _defined_in(self, path: Path, name: str, star: bool = False, whole_if_missing=False):
        """One step of `locate` in the file at `path`: the definition, where to look next, or
        `_NOT_HERE` (a star-imported file that does not bind it)."""
        facts = self.facts_at(path)
        if facts is None or "mentions" not in facts or MODULE_CODE in facts.get("dynamic", ()):
            return None  # unknown, or its top level binds names at run time
        if star:
            exported = facts.get("exports")
            public = name in exported if exported is not None else not name.startswith("_")
            if not public:
                return _NOT_HERE
        if name in facts["mentions"]:
            return (Path(os.path.abspath(path)), name)
        imported = facts.get("imports", {}).get(name)
        if imported:
            return _Follow([(imported, path, False)])
        if whole_if_missing:
            return (Path(os.path.abspath(path)), MODULE_CODE)  # `models.__dict__`
        lookups = []
        for module in facts.get("star_imports", ()):
            target = self.module_file(module, path)
            if target is None:
                continue  # `from torch.nn import *`: a library's names build no project class
            lookups.append((f"{_STAR}{name}", target, True))
        for target in self.submodules(path, facts):
            lookups.append((f"{_STAR}{name}", target, True))
        lookups.reverse()
        return _Follow(lookups) if lookups else _NOT_HERE

    def submodules(self, path: Path, facts: dict) -> List[Path]:
        """The files a package's __init__.py imports by computed name when its facts say it
        imports its own submodules (`import_module("." + name, package=__name__)` over
        `pkgutil.walk_packages(__path__)`): every file of its folder, below it too."""
        if not facts.get("imports_submodules"):
            return []
        package = Path(os.path.abspath(path)).parent
        files = {
            Path(os.path.abspath(file))
            for file in self.project.files_under(package)
            if file.suffix == ".py"
        }
        files.discard(package / "__init__.py")
        # A folder is a package to walk only with its __init__.py, up to this one.
        return sorted(
            file
            for file in files
            if file.parent == package or all(
                folder / "__init__.py" in files
                for folder in file.parents
                if package in folder.parents
            )
        )

    def _resolve_step(self, qualname: str, importer: Path):
        """One step of `resolve`: a final answer, `_NOT_HERE`, or the lookups to make next."""
        if qualname == MODULE or qualname in INITIALISING_MODULES:
            return "module"
        if qualname in CONTAINERS:
            return "container"
        if qualname in PLAIN_BASES or qualname in NON_MODULE_BASES:
            return "plain"
        if qualname.startswith("builtins."):
            return "plain"
        if qualname.startswith(LOCAL_PREFIX):
            return self._in_file(importer, qualname[len(LOCAL_PREFIX) :])
        if qualname.startswith(_STAR):
            return self._in_file(importer, qualname[len(_STAR) :], star=True)
        if qualname.startswith(("torch.", "?")):
            return None
        qualname = library_absolute(self.project, qualname, importer)
        level = len(qualname) - len(qualname.lstrip("."))
        parts = qualname.lstrip(".").split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = "." * level + ".".join(parts[:cut])
            path = self.module_file(module, importer)
            if path is None:
                continue
            rest = parts[cut:]
            return self._in_file(path, rest[0]) if len(rest) == 1 else None
        if level and len(parts) == 1:
            # `from . import Head` in a package: the name comes from the package's __init__.py
            path = self.module_file("." * level, importer)
            if path is not None:
                return self._in_file(path, parts[0])
        return installed_class(self, qualname)  # an installed package's, read

    def _in_file(self, path: Path, name: str, star: bool = False):
        """What `name` is in the file at `path`: a final answer, `_NOT_HERE`, or where to look
        next (the import that binds it, or the modules the file star-imports). `star`: the
        name is wanted through `from <file> import *`, which binds only the names of its
        `__all__` (when it has one) or its public names."""
        facts = self.facts_at(path)
        if facts is None:
            return None
        if star:
            exported = facts.get("exports")
            public = name in exported if exported is not None else not name.startswith("_")
            if not public:
                return _NOT_HERE
        if name in facts.get("classes", {}):
            return ClassRef(Path(os.path.abspath(path)), name)
        if name in facts.get("plain", ()):
            return "plain"
        imported = facts.get("imports", {}).get(name)
        if imported:
            return _Follow([(imported, path, False)])
        lookups = []
        unknown_source = False
        for module in facts.get("star_imports", ()):
            target = self.module_file(module, path)
            if target is None:
                unknown_source = True  # `from torch.nn import *`: may define it, unknowable
                continue
            lookups.append((f"{_STAR}{name}", target, True))
        if lookups:
            # The last star import that defines the name wins; an unknown source may too.
            lookups.reverse()
            if unknown_source:
                lookups.append(("?", path, False))
            return _Follow(lookups)
        return None if unknown_source else _NOT_HERE

    def bases_of(self, ref: ClassRef) -> List[Tuple[str, object]]:
        """(base as written, what it resolves to) for each base of `ref`."""
        if ref not in self._bases:
            facts = self.class_facts(ref) or {}
            self._bases[ref] = [(b, self.resolve(b, ref.path)) for b in facts.get("bases", [])]
        return self._bases[ref]

    def family(self, ref: ClassRef) -> Family:
        family = Family()
        seen: Set[ClassRef] = set()
        self._add_with_ancestors(ref, family, seen)
        for sub in self.subclasses(ref):
            self._add_with_ancestors(sub, family, seen)
        return family

    def _add_with_ancestors(self, ref: ClassRef, family: Family, seen: Set[ClassRef]) -> None:
        todo = [ref]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            facts = self.class_facts(current)
            if facts is None:
                family.complete = False
                continue
            family.members.append((current, facts))
            for written, resolved in self.bases_of(current):
                if isinstance(resolved, ClassRef):
                    todo.append(resolved)
                elif resolved == "module":
                    family.is_module = True
                elif resolved == "container":
                    family.is_module = family.reaches_all = True
                elif resolved is None:
                    family.complete = False
                    family.unknown_bases.append(written)

    def ancestry(self, ref: ClassRef) -> Family:
        """`ref` and its ancestors (no subclasses)."""
        family = Family()
        self._add_with_ancestors(ref, family, set())
        return family

    def subclasses(self, ref: ClassRef) -> List[ClassRef]:
        """Known classes (in files read so far) deriving from `ref`, directly or not."""
        self._index_subclasses()
        out: List[ClassRef] = []
        seen = {ref}
        frontier = [ref]
        while frontier:  # breadth first over the index: direct subclasses, then theirs
            following = []
            for base in frontier:
                for candidate in self._children.get(base, ()):
                    if candidate not in seen:
                        seen.add(candidate)
                        out.append(candidate)
                        following.append(candidate)
            frontier = following
        return out

    def _index_subclasses(self) -> None:
        """Add the classes of every known file not indexed yet to base -> direct subclasses.
        Each file is indexed once per run (every family asks for its subclasses: rescanning
        every class of the project per question made the project phase quadratic); resolving a
        base may read another file, so this repeats until no new file is known."""
        while True:
            # Files only ever become known (`facts_at` adds them): with no new one since the
            # last pass there is nothing to index, and each question costs nothing.
            if len(self._facts) == self._facts_indexed:
                return
            self._facts_indexed = len(self._facts)
            new = [path for path, _facts in self.known_files() if path not in self._indexed]
            if not new:
                return
            for path in new:
                self._indexed.add(path)
                for candidate, bases in self._classes_in(path):
                    for base in bases:
                        if isinstance(base, ClassRef):
                            self._children.setdefault(base, []).append(candidate)

    def _classes_in(self, path: Path) -> List[Tuple[ClassRef, List[object]]]:
        """The classes of a known file with what their bases resolve to, made once per file:
        every family asks for its subclasses, over every class of the project."""
        found = self._file_classes.get(path)
        if found is None:
            facts = self._facts.get(path) or {}
            found = self._file_classes[path] = [
                (candidate, [b for _, b in self.bases_of(candidate)])
                for candidate in (ClassRef(path, name) for name in facts.get("classes", {}))
            ]
        return found

    # -- who uses a file ------------------------------------------------------------------------

    def imported_files(self, path: Path) -> Set[Path]:
        """The project files `path` imports. Read from the file's import lines when the
        project's texts are at hand (the CLI: no need to parse every importer, and the same
        answer whether the file is in the run or not), else from its facts (flake8)."""
        found = self._imports.get(path)
        if found is None:
            found = set()
            text = self.project.text_of(path)
            if text is not None:
                qualnames = imports_in_text(text)
            else:
                qualnames = list((self.facts_at(path) or {}).get("imports", {}).values())
            for qualname in qualnames:
                target = self.import_file(qualname, path)
                if target is not None:
                    found.add(target)
            self._imports[path] = found
        return found

    def imported_closure(self, path: Path, depth: int) -> Dict[Path, Path]:
        """The project files `path` imports directly or through at most `depth` - 1 further
        project imports, each mapped to the file that imports it on the shortest route (breadth
        first, iterative: an import chain of any length costs no recursion)."""
        path = Path(os.path.abspath(path))
        reached: Dict[Path, Path] = {}
        frontier = [path]
        for _level in range(depth):
            following = []
            for importer in frontier:
                for imported in sorted(self.imported_files(importer)):
                    if imported != path and imported not in reached:
                        reached[imported] = importer
                        following.append(imported)
            frontier = following
        return reached

    def may_build_from(self, builder: Path, source: Path) -> bool:
        """Can code of `builder` construct objects of `source`'s classes? Only when `source`
        is `builder` or among the project files it imports, directly or through other project
        files: by import lines, by `importlib.import_module` of a literal module, or of a
        package prefix (`import_module("model." + name)`: any module of package `model`).
        Unknown answers yes: a file whose text is not at hand (flake8), or a dynamic import of
        a name nobody can tell."""
        start = Path(os.path.abspath(builder))
        if not self.project.complete:
            return True
        if start not in self._buildable:
            self._buildable[start] = self._reachable(start)
        reached = self._buildable[start]
        return reached is None or Path(os.path.abspath(source)) in reached

    def _reachable(self, start: Path) -> Optional[Set[Path]]:
        """`start` and the project files it imports, transitively, statically or by
        `import_module`; None when some file on the way is unknown."""
        seen = {start}
        todo = [start]
        while todo:
            current = todo.pop()
            text = self.project.text_of(current)
            if text is None:
                return None
            dynamic = self._dynamic_imports(current, text)
            if dynamic is None:
                return None
            for found in set(self.imported_files(current)) | dynamic:
                if found not in seen:
                    seen.add(found)
                    todo.append(found)
        return seen

    def _dynamic_imports(self, importer: Path, text: str) -> Optional[Set[Path]]:
        """The project files `importlib.import_module` calls of `text` may load; None when one
        of them (or an `__import__`) loads a module nobody can name."""
        calls = len(_DYNAMIC_IMPORT.findall(text))
        if not calls:
            return set()
        found: Set[Path] = set()
        named = 0
        for _, module in _DYNAMIC_LITERAL.findall(text):
            named += 1
            target = self.import_file(module, importer)
            if target is not None:
                found.add(target)
        for _, plain, _, formatted in _DYNAMIC_PREFIX.findall(text):
            named += 1
            package = self._package_from(plain or formatted, importer)
            if package is None or package.name != "__init__.py":
                return None
            found |= set(self.project.files_under(package.parent))
        return found if named >= calls else None

    def _package_from(self, dotted: str, importer: Path) -> Optional[Path]:
        """The package a dynamic import names, looked up from the importer's folder and then
        from each folder above it: `import_module("model." + name)` in `code/model/__init__.py`
        names `code/model`, the script folder being where Python looks."""
        found = self.module_file(dotted, importer)
        folder = importer.parent
        while found is None and self.root in folder.parents:
            folder = folder.parent
            found = self.module_file(dotted, folder / "__init__.py")
        return found

    def import_file(self, qualname: str, importer: Path) -> Optional[Path]:
        """The file an import names: the longest prefix of `models.head.Head` that is a
        project module."""
        return longest_module(qualname, lambda dotted: self.module_file(dotted, importer))

    def importers(self, path: Path) -> Set[Path]:
        """`path` and the project files that import it, directly or through other project
        modules (a package's `__init__.py` re-exporting it, the script importing the package).
        Files of the run are read from their facts; other files are found by their text (an
        import line naming the module) and read through the loader."""
        path = Path(os.path.abspath(path))
        closure = {path}
        todo = [path]
        while todo:
            target = todo.pop()
            word = target.parent.name if target.name == "__init__.py" else target.stem
            candidates = set(self._run_files_naming(word))
            candidates.update(self.project.files_importing(word))
            for candidate in candidates:
                if candidate in closure:
                    continue
                if target in self.imported_files(candidate):
                    closure.add(candidate)
                    todo.append(candidate)
        return closure

    def _ddp_files(self) -> Set[Path]:
        if self._ddp is None:
            self._ddp = set(self.project.files_matching(_DDP_WORDS))
        return self._ddp

    def _run_files_naming(self, word: str) -> Set[Path]:
        """Files of the run with an import naming `word` (a module or package name). Indexed
        once: the run's facts never change, and looking through every file of the run for each
        model module made the project phase quadratic (0.6 s of a 2 s warm run on 680 files)."""
        if self._run_import_words is None:
            index: Dict[str, Set[Path]] = {}
            for path in self._run_paths:
                facts = self._facts.get(path) or {}
                for qualname in facts.get("imports", {}).values():
                    for name in qualname.replace(".", " ").split():
                        index.setdefault(name, set()).add(path)
            self._run_import_words = index
        return self._run_import_words.get(word, set())

    def evidence(self, path: Path) -> List[Tuple[Path, dict]]:
        """The files that say how `path`'s classes are trained: `path`, the files that import
        it (transitively), and the files speaking of DDP that those import, directly or through
        a few more project imports (a `setup_ddp()` helper; a trainer class the script imports
        from a package, whose base class, in another package, wraps the model in DDP)."""
        path = Path(os.path.abspath(path))
        if path not in self._evidence:
            users = self.importers(path)
            files = set(users)
            # A helper module the script imports may wrap in DDP (`setup_ddp(model)`); only
            # those that speak of DDP are read, in the run or not (same answer either way).
            helpers = self._ddp_files() if self.project.complete else self._run_paths
            for user in users:
                files |= set(self.imported_closure(user, _HELPER_IMPORT_DEPTH)) & helpers
            self._evidence[path] = [
                (file, facts)
                for file in sorted(files)
                if file in self._run_paths or file in self._ddp_files()
                for facts in [self.facts_at(file)]
                if facts is not None
            ]
            self._evidence_files[path] = files
        return self._evidence[path]

    # -- the project's DDP ----------------------------------------------------------------------

    def ddp_signals(self, evidence: List[Tuple[Path, dict]]) -> List[Tuple[Path, str]]:
        """(file, signal) for every file of the evidence that trains with DDP. A file that
        all-reduces gradients itself and wraps nothing in DDP (`hand_reduced`) does not: its
        process group and launcher say nothing about PyTorch's reducer. Nor does any file of
        a project that nothing in it can wrap in DDP (`may_build_reducer`)."""
        if not self.may_build_reducer():
            return []
        return [
            (path, signal)
            for path, facts in evidence
            if not facts.get("hand_reduced") or DDP_WRAP_SIGNAL in facts.get("signals", ())
            for signal in facts.get("signals", ())
        ]

    def may_build_reducer(self) -> bool:
        """Can anything in the project build PyTorch's DDP reducer: its code names
        `DistributedDataParallel` or `DDP`, or imports a framework that wraps models in DDP for
        the user (`REDUCER_TEXT`)? A project that only opens a process group (a distributed
        sampler, hand-made all-reduces of metrics) and wraps nothing has no reducer to wait for
        a parameter without a gradient. Under flake8, which sees one file, the answer is yes."""
        if self._reducer is None:
            self._reducer = not self.project.complete or bool(
                self.project.files_matching(REDUCER_TEXT)
            )
        return self._reducer

    def tolerates_unused(self, evidence: List[Tuple[Path, dict]]) -> Optional[Path]:
        """A file that asks DDP to tolerate unused parameters (`find_unused_parameters=True`,
        `static_graph=True`, an option DDP gets from an expression or **kwargs, or from a
        configuration the project's configs set, or may set), or None."""
        for path, facts in evidence:
            if facts.get("finds_unused"):
                return path
            for setting in _settings(facts):
                if self.setting_tolerates(setting) is not False:
                    return path
            for wrap in facts.get("wraps", ()):
                if wrap.get("kind") == DDP_KIND and any(
                    v in ("true", "unknown") for v in wrap.get("options", {}).values()
                ):
                    return path
        return None

    def assumptions(self, evidence: List[Tuple[Path, dict]]) -> List[str]:
        """What a finding assumes about settings it cannot see (a command-line option whose
        default is False and that no file of the project passes), for its warning."""
        found: List[str] = []
        for _path, facts in evidence:
            for setting in _settings(facts):
                if self.setting_tolerates(setting) is False and setting["source"] == ARGPARSE:
                    flag = (setting.get("flags") or ["--" + setting["key"]])[0]
                    text = f"`{flag}` is not passed"
                    if text not in found:
                        found.append(text)
        return found

    def setting_tolerates(self, setting: dict) -> Optional[bool]:
        """Does a configuration read (parallel/settings.py) turn the option on? True when its
        default does or some file of the project sets it (`find_unused_parameters = True` in a
        config, `--find_unused_parameters` passed by a launcher); False when it is read from
        the project's MM configs and none sets it, or from a command-line option no file
        passes (an assumption: `assumptions`); None when it cannot be decided (a config
        loaded from a path while the project holds no config)."""
        key = str(setting.get("key"))
        if setting.get("default") is not False:
            return True  # on by default, or a default we cannot read
        if self._set_in_project(key, [str(f) for f in setting.get("flags", ())]):
            return True
        if setting.get("source") == MM:
            return False if self.configs.exist() else None
        return False

    def _set_in_project(self, key: str, flags: List[str]) -> bool:
        """Does a file of the project set `key` to True (not in a comment), or pass one of
        `flags` on a line other than the option's declaration?"""
        remembered = self._set_keys.get((key, tuple(flags)))
        if remembered is None:
            patterns = [rf"^[^#\n]*\b{re.escape(key)}['\"]?\s*[:=]\s*True\b"]
            patterns += [rf"^(?![^#\n]*add_argument)[^#\n]*{re.escape(f)}\b" for f in flags]
            remembered = bool(self.project.files_matching(re.compile("|".join(patterns), re.M)))
            self._set_keys[(key, tuple(flags))] = remembered
        return remembered

    @property
    def configs(self) -> MMConfigs:
        """The project's MM-style configs (the facts the rule `code` records under
        `"mm_config"`)."""
        if self._configs is None:
            self._configs = MMConfigs(self.project, self.code)
        return self._configs

    @staticmethod
    def frozen_outside(evidence: List[Tuple[Path, dict]]) -> Set[str]:
        return {name for _, facts in evidence for name in facts.get("frozen", ())}

    def read_outside(self, source: Path, attr: str, by_parents: bool = True) -> bool:
        """Is `attr` read on an object other than `self` (`model.head.class_embed`) in a file of
        `source`'s evidence (by text when the project's texts are at hand)? With `by_parents`
        False, a module reading its own submodule's attribute (`self.decoder.last_state`) does
        not count: the caller judges those by the reading method (`sub_reads` facts)."""
        return any(True for _ in self._outside_readers(source, attr, by_parents))

    def read_past_a_wrapper(
        self,
        source: Path,
        attr: str,
        wrapping: Set[Path],
        classes: Iterable[str],
        by_parents: bool = True,
    ) -> bool:
        """Is `attr` read, on an object other than `self`, where a wrapped module's value would
        be read: through a wrapper's `.module` (`model.module.list_att`), or in a file that
        wraps a model itself (one of `wrapping`) or builds one of `classes` by name, and so may
        hold the module it hands a wrapper. A plain `model.list_att` elsewhere reads a model
        nobody wrapped: on the wrapper itself it would raise AttributeError. Without the
        project's texts, any read counts."""
        through_module = re.compile(rf"\.module\.{re.escape(attr)}\b")
        names = sorted(set(classes))
        built = (
            re.compile(rf"(?<!class )\b(?:{'|'.join(map(re.escape, names))})\s*\(")
            if names
            else None
        )
        for file, text in self._outside_readers(source, attr, by_parents):
            if text is None or through_module.search(text):
                return True
            if self._read_only_where_modules_hand_themselves(text, attr):
                continue  # read during a module's own call, on what that call runs
            if Path(os.path.abspath(file)) in wrapping:
                return True
            if built is not None and built.search(text):
                return True
        return False

    def _read_only_where_modules_hand_themselves(self, text: str, attr: str) -> bool:
        """Is every read of `.<attr>` in `text` inside a function that the project uses only in
        calls that hand it a module itself, from what a call of that module runs
        (`self.exits.collect(self)` in `forward`)? Such a function reads the module it is given
        while that module's call is under way: on a replica, the replica's own submodules, as
        that call left them. Every mention of the function's name counts as a use (a mention
        in a comment or an alias makes the answer no); so does any doubt."""
        if not self.project.complete:
            return False  # flake8: the other files' uses cannot be counted
        pattern = re.compile(rf"(?<!\bself)\.{re.escape(attr)}\b")
        functions: Set[str] = set()
        for match in pattern.finditer(text):
            function = _enclosing_def(text, match.start())
            if function is None:
                return False  # a read at module level or in a class body
            functions.add(function)
        return bool(functions) and all(self._used_only_handed_a_module(f) for f in functions)

    def may_be_a_module(self, ref: ClassRef) -> bool:
        """An nn.Module, or a class with a `forward` whose bases are not all known (a
        library's model class, `torchvision.models.ResNet`)."""
        family = self.ancestry(ref)
        return family.is_module or (not family.complete and family.has_forward)

    def _used_only_handed_a_module(self, function: str) -> bool:
        """Is every mention of `function` in the project's files (but its `def` lines) a call
        that a module's `forward`, or a method it runs, makes with the module itself?"""
        word = re.compile(rf"\b{re.escape(function)}\b")
        definition = re.compile(rf"\bdef[ \t]+{re.escape(function)}\b")
        mentions = handed = 0
        for path in self.project.files_matching(word):
            text = self.project.text_of(path) or ""
            mentions += len(word.findall(text)) - len(definition.findall(text))
            facts = self.facts_at(path)
            if facts is None:
                return False
            reach = facts.get("call_reach", {})
            for name, cls in (facts.get("classes") or {}).items():
                reached = set(reach.get(name, ()))
                methods = cls.get("methods") or {}
                calls = [
                    callee
                    for method_name, method in methods.items()
                    if method_name in reached
                    for callee in method.get("hands_self_to", ())
                    if callee == function
                ]
                if calls and self.may_be_a_module(ClassRef(Path(os.path.abspath(path)), name)):
                    handed += len(calls)
        return mentions > 0 and handed == mentions

    def _outside_readers(
        self, source: Path, attr: str, by_parents: bool = True
    ) -> Iterator[Tuple[Path, Optional[str]]]:
        """(file, its text) for each file of `source`'s evidence that reads `attr` on an object
        other than `self` (with `by_parents` False, other than `self.<submodule>` too); the text
        is None for a file known only by its facts."""
        pattern = re.compile(rf"(?<!\bself)\.{re.escape(attr)}\b")
        by_parent = re.compile(rf"\bself\.\w+\.{re.escape(attr)}\b")
        for file in self._evidence_files.get(Path(os.path.abspath(source)), ()):
            text = self.project.text_of(file)
            if text is not None:
                found = len(pattern.findall(text))
                if found and (by_parents or found > len(by_parent.findall(text))):
                    yield file, text
            elif attr in (self.facts_at(file) or {}).get("outside_reads", ()):
                yield file, None

    def mentioned_outside(self, source: Path, pattern: str) -> bool:
        """Does a file of `source`'s evidence other than `source` match `pattern` (a call of
        a method, a keyword passed)? Without the project's texts it cannot be told: True."""
        source = Path(os.path.abspath(source))
        compiled = re.compile(pattern)
        for file in self._evidence_files.get(source, ()):
            if file == source:
                continue
            text = self.project.text_of(file)
            if text is None or compiled.search(text):
                return True
        return False

    def absolute(self, display: str) -> Path:
        """The absolute path of a file of the run, from its display path."""
        return Path(os.path.abspath(self.project.paths.get(display, Path(display))))

    def display(self, path: Path) -> str:
        if self._display_by_path is None:
            # Indexed once: messages name a file per wrap site and per signal of every file.
            self._display_by_path = {}
            for display, known in self.project.paths.items():
                self._display_by_path.setdefault(Path(os.path.abspath(known)), display)
        display = self._display_by_path.get(path)
        if display is not None:
            return display
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def _enclosing_def(text: str, offset: int) -> Optional[str]:
    """The name of the innermost function whose body holds `offset` of a Python source text,
    read by indentation; None at module level or directly in a class body."""
    lines = text[:offset].split("\n")
    current = lines[-1]
    indent = len(current) - len(current.lstrip())
    for line in reversed(lines[:-1]):
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(stripped)
        if depth >= indent:
            continue
        found = _DEF_LINE.match(stripped)
        if found:
            return found.group(1)
        if depth == 0:
            return None
        indent = depth
    return None


def _walk(qualname: str, importer: Path, step, missing):
    """Follow a name through re-exports and star imports: `step(name, file)` gives a final
    answer, `_NOT_HERE`, or the lookups to make next (a star import offers several places a
    name may come from: one that does not define it falls through to the next; a name imported
    explicitly must be where the import says, else the answer is `missing`). Iterative, within
    a fixed number of steps."""
    stack: List[Tuple[str, Path, bool]] = [(qualname, importer, False)]
    seen: Set[Tuple[str, Path]] = set()
    steps = 0
    while stack and steps < _MAX_STEPS:
        steps += 1
        name, where, falls_through = stack.pop()
        if (name, where) in seen:
            continue  # a cycle of re-exports defines nothing new
        seen.add((name, where))
        found = step(name, where)
        if isinstance(found, _Follow):
            stack.extend(reversed(found.lookups))
        elif found is _NOT_HERE:
            if not falls_through:
                return missing
        else:
            return found
    return missing if not stack else None


def classes_run_by(
    hierarchy: Hierarchy, wraps: List[Tuple[str, Path, List[str]]]
) -> Dict[ClassRef, str]:
    """Classes whose code runs when the wrapped models run -> where: each wrapped class (by
    the name its wrap site used), its ancestors, and (through `__init__`'s submodules) the
    classes of its submodules. `wraps` are (where, importing file, class names)."""
    out: Dict[ClassRef, str] = {}
    todo: List[Tuple[str, Path, str, int]] = [
        (name, path, where, 0) for where, path, names in wraps for name in names
    ]
    while todo:
        name, importer, where, depth = todo.pop()
        ref = hierarchy.resolve(name, importer)
        if not isinstance(ref, ClassRef) or ref in out or depth > 6:
            continue
        for member, facts in hierarchy.ancestry(ref).members:
            out.setdefault(member, where)
            for attr in facts.get("attrs", {}).values():
                if attr.get("callee"):
                    todo.append((attr["callee"], member.path, where, depth + 1))
    return out


def longest_module(
    qualname: str, lookup: Callable[[str], Optional[Path]]
) -> Optional[Path]:
    """The file of the longest prefix of `qualname` (`models.head.Head`, `.head.Head`) that
    `lookup` finds as a project module."""
    level = len(qualname) - len(qualname.lstrip("."))
    parts = qualname.lstrip(".").split(".")
    for cut in range(len(parts), -1 if level else 0, -1):
        found = lookup("." * level + ".".join(parts[:cut]))
        if found is not None:
            return found
    return None


def import_closure(
    start: List[Tuple[Path, str]],
    root: Path,
    read: Callable[[Path], Optional[str]],
    limit: int,
) -> List[Tuple[Path, str]]:
    """`start` ((absolute path, text) pairs) and the project files under `root` they import,
    directly or through each other (import lines, `imports_in_text`), each read with `read`
    (None: unreadable, left out); at most `limit` files in all. What a run reaches from its
    own files, for a project whose root nothing marks (project.py's `unmarked_root_too_big`)."""
    found = list(start)
    seen = {path for path, _ in start}
    todo = list(start)
    while todo and len(found) < limit:
        importer, text = todo.pop(0)
        for qualname in imports_in_text(text):
            target = longest_module(
                qualname, lambda dotted: module_file(dotted, importer, root, os.path.isfile)
            )
            if target is None or target in seen:
                continue
            seen.add(target)
            target_text = read(target)
            if target_text is not None and len(found) < limit:
                found.append((target, target_text))
                todo.append((target, target_text))
    return found


def module_file(
    dotted: str, importer: Path, root: Path, is_file: Callable[[Path], bool]
) -> Optional[Path]:
    """The file of module `dotted` (`models.head`, `.head`, `..models`) imported from `importer`,
    within the project at `root`; None when it is not a project module. A relative import is
    looked up from the importer's package; an absolute one where Python finds it when the
    project runs: the importer's own folder (a script's folder is on `sys.path`), the project
    root, and `root/src`."""
    level = len(dotted) - len(dotted.lstrip("."))
    parts = [p for p in dotted.lstrip(".").split(".") if p]
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        bases = [base]
    else:
        bases = [importer.parent, root, root / "src"]
    for base in bases:
        target = base.joinpath(*parts)
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if parts or candidate.name == "__init__.py":
                if is_file(candidate) and _inside(candidate, root):
                    return Path(os.path.abspath(candidate))
    return None


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(os.path.abspath(path)).relative_to(root)
    except ValueError:
        return False
    return True


def candidate_files(project, code: str) -> Iterator[Tuple["Hierarchy", str, Path, List[str]]]:
    """The project phase's walk over the files where rule `code` recorded candidates:
    (one Hierarchy shared by all, display path, absolute path, the keys in order). Nothing is
    built when no file recorded any."""
    candidates = project.candidates(code)
    if not candidates:
        return
    hierarchy = Hierarchy(project, code)
    for display, keys in sorted(candidates.items()):
        yield hierarchy, display, hierarchy.absolute(display), sorted(keys)


def deferred_candidates(
    project, code: str
) -> Iterator[Tuple["Hierarchy", str, Path, str, Optional[dict]]]:
    """`candidate_files`, one candidate at a time, with what its file deferred about it
    (`facts["deferred"][key]`, None when nothing was): (hierarchy, display path, absolute
    path, key, entry)."""
    for hierarchy, display, path, keys in candidate_files(project, code):
        deferred = (hierarchy.facts_at(path) or {}).get("deferred", {})
        for key in keys:
            yield hierarchy, display, path, key, deferred.get(key)


def class_question_facts(
    ctx, deferred: Dict[str, object], listed: Dict[str, List[str]]
) -> Optional[Dict[str, object]]:
    """The facts of a rule whose findings about a model of an imported class wait for the file
    that defines the class: that file's class lists (`listed`, e.g. its mode-free classes),
    the findings it deferred, and what `Hierarchy.resolve` reads to find a class. None for a
    file with nothing to tell or to ask."""
    if not deferred and not any(listed.values()) and not may_resolve_classes(ctx):
        return None
    facts = resolution_facts(ctx)
    facts.update(listed)
    facts["deferred"] = deferred
    return facts


def pending_callees(project, code: str) -> Iterator[Tuple[str, str, dict, dict, str]]:
    """(display, key, entry, callee facts, callee name) for each call a file of the run left
    pending in rule `code`'s facts (`{"pending": {key: {"callee": "pkg.mod.fn", ...}}}`): the
    facts the same rule recorded for the module the callee's qualified name names (one level,
    no re-exports)."""
    root = Path(os.path.abspath(project.root))
    for display, data in project.facts(code).items():
        pending = data.get("pending") if isinstance(data, dict) else None
        if not pending:
            continue
        importer = Path(os.path.abspath(project.paths.get(display, Path(display))))
        for key, entry in pending.items():
            qualname = str(entry.get("callee") or "")
            if "." not in qualname.lstrip("."):
                continue
            module, name = qualname.rsplit(".", 1)
            path = module_file(module, importer, root, project.is_file)
            facts = project.facts_of(path, code) if path is not None else None
            if isinstance(facts, dict):
                yield display, key, entry, facts, name
