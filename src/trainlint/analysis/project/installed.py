"""Classes of installed packages, seen through the project's class hierarchy.

A base class that names no module of the project (`mmdet.models.dense_heads.DINOHead`) is
looked up in the analysed environment's installed packages (`Project.library`, library.py),
read, never imported: the longest prefix of the name that is an installed module, then the
class in that file, following its imports and its `from .module import *` re-exports (which the
per-file facts do not record: the library summary lists them). A relative name used in a
library file (`.detr_head.DETRHead`) is made absolute from that file's own module name, so a
library class's ancestors resolve the same way. Library files never count as files of the
project: they are not searched for subclasses, wraps or DDP signals.

Without a library (flake8), with the package missing from the environment, or past the bound on
library files read, the base stays unknown, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..base.names import LOCAL_PREFIX

if TYPE_CHECKING:  # pragma: no cover
    from .hierarchy import Hierarchy

_MAX_STAR_DEPTH = 6


def is_library_file(project, path: Path) -> bool:
    library = getattr(project, "library", None)
    return library is not None and library.owns(path)


def library_absolute(project, qualname: str, importer: Path) -> str:
    """`qualname` as an absolute name when it is relative and `importer` is a library file
    (`.detr_head.DETRHead` in `fakedet/models/dense_heads/dino_head.py` ->
    `fakedet.models.dense_heads.detr_head.DETRHead`); else `qualname` unchanged."""
    if not qualname.startswith("."):
        return qualname
    library = getattr(project, "library", None)
    module = library.module_name(importer) if library is not None else None
    if module is None:
        return qualname
    level = len(qualname) - len(qualname.lstrip("."))
    package = module.split(".")
    if Path(importer).name != "__init__.py":
        package = package[:-1]  # a module's relative imports start from its package
    if level - 1 > len(package):
        return qualname  # beyond the top-level package: not importable
    if level > 1:
        package = package[: len(package) - (level - 1)]
    rest = qualname.lstrip(".")
    return ".".join(package + ([rest] if rest else []))


def installed_class(hierarchy: "Hierarchy", qualname: str, depth: int = 0):
    """What an absolute name that is no module of the project resolves to in the installed
    packages (as `Hierarchy.resolve` answers), or None."""
    library = getattr(hierarchy.project, "library", None)
    if library is None or qualname.startswith("."):
        return None
    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        path = library.find(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        return name_in_library_file(hierarchy, path, rest[0], depth) if len(rest) == 1 else None
    return None


def name_in_library_file(hierarchy: "Hierarchy", path: Path, name: str, depth: int, stars=0):
    """`name` in a library file: a class of it, a name it imports, or one it re-exports
    through `from module import *` (followed in order, as the names would be bound)."""
    found = hierarchy.resolve(LOCAL_PREFIX + name, path)
    if found is not None or stars > _MAX_STAR_DEPTH:
        return found
    library = hierarchy.project.library
    facts = hierarchy.facts_at(path) or {}
    if name in facts.get("imports", {}):
        return None  # imported by name, and that did not resolve: a star cannot rebind it
    for star in library.stars(path):
        module = library_absolute(hierarchy.project, star, path)
        if module.startswith("."):
            continue
        target = library.find(module)
        if target is None or not library.mentions(target, name):
            continue  # (a module that never spells the name cannot define or re-export it)
        found = name_in_library_file(hierarchy, target, name, depth + 1, stars + 1)
        if found is not None:
            return found
    return None


__all__ = ["installed_class", "is_library_file", "library_absolute", "name_in_library_file"]
