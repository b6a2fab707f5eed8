"""Which classes of the project the code of a file may build, following what it names.

A DataParallel wrap of a model the analysis cannot name (`getattr(flow_ssl, args.flow)(...)`,
`build_model(cfg)`) may run any class that the code building it can reach: what the slice of
the wrapped value names (wrapped_model.py), or, when that slice is not closed, the wrapping file
and the files that import it (one of them may hand it the model); every definition they name,
everything those name, and so on (mentions.py records the names; `Hierarchy.locate` finds where
each is defined). A module-level statement naming several things links them both ways; a
module named as a whole reaches every name it binds.

Registration runs at import: every file the reached code lives in, and every file those import,
runs its decorators. A definition decorated by a function of the project is reached when that
function, or something it names (the registry dict it fills), is reached; one decorated by a
library's decorator, or by one that cannot be found, is reached as soon as its file is imported.

A module named whole by `getattr(module, name)(...)` offers only what accepts one of the calls
made with it (a class whose `__init__` takes no `in_channels` is not what
`getattr(flows, args.flow)(in_channels=3)` builds), when its signature is known: its own
`__init__`, and decorators, if any, that return the class they are given.

A class no such path names cannot be built there: a layer only a model nobody builds uses, a
class nothing instantiates. The answer is unknown (None: any class may run) when the walk meets
code that looks names up at run time, or a file of the project whose facts are not at hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from ..base.names import LOCAL_PREFIX
from .hierarchy import OUTSIDE, ClassRef, Hierarchy
from .mentions import MODULE_CODE, accepts

Definition = Tuple[Path, str]  # (file, top-level name or MODULE_CODE)
_MAX_DEFINITIONS = 20000  # a walk this large is answered "unknown" rather than finished


class _Unknown(Exception):
    """The walk met code it cannot follow: any class may be built."""


class Construction:
    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        self._reached: Dict[Tuple[Path, str], Optional[Set[Definition]]] = {}
        self._located: Dict[Tuple[str, Path], Optional[List[Definition]]] = {}
        self._links: Dict[Path, Dict[str, List[List[str]]]] = {}

    def may_build(self, builder: Path, ref: ClassRef, wrapped: Optional[dict] = None) -> bool:
        """May code that `builder` (or a file importing it) runs build an object of class
        `ref`, or of a subclass that runs its methods? With `wrapped` (wrapped_model.py's
        slice of one wrap: the names the code building and changing its model mentions, and
        whether files importing the builder count too), only what those names reach."""
        builder = Path(os.path.abspath(builder))
        key = (builder, repr(wrapped))
        if key not in self._reached:
            try:
                self._reached[key] = _Walk(self, builder).run(wrapped)
            except _Unknown:
                self._reached[key] = None
        reached = self._reached[key]
        return reached is None or (Path(os.path.abspath(ref.path)), ref.name) in reached

    def facts(self, path: Path) -> dict:
        facts = self.hierarchy.facts_at(path)
        if facts is None or "mentions" not in facts:
            raise _Unknown(path)
        return facts

    def locate(self, qualname: str, importer: Path) -> List[Definition]:
        """The definitions a name used in `importer` stands for (none: not the project's)."""
        key = (qualname, importer)
        if key not in self._located:
            found = self.hierarchy.locate(qualname, importer)
            if found is None:
                self._located[key] = None
            elif found == OUTSIDE:
                self._located[key] = []
            else:
                path, name = found
                self._located[key] = [(Path(os.path.abspath(path)), name)]
        located = self._located[key]
        if located is None:
            raise _Unknown(qualname)
        return located

    def may_call(self, definition: Definition, shapes: List[str]) -> bool:
        """May a call in one of `shapes` (mentions.py's `_call_shape`) of the function or class
        `definition` succeed? Yes unless its signature is known and accepts none of them; a
        class's signature counts only when each of its decorators returns what it is given."""
        path, name = definition
        facts = self.facts(path)
        signature = facts.get("signatures", {}).get(name)
        if signature is None:
            return True
        for decorator in facts.get("decorated", {}).get(name, ()):
            located = [] if decorator == "?" else self.locate(decorator, path)
            if not located or any(
                d[1] not in self.facts(d[0]).get("identities", ()) for d in located
            ):
                return True
        return accepts(signature, shapes)

    def links_of(self, path: Path, facts: dict) -> Dict[str, List[List[str]]]:
        """Top-level name -> the module-level statements of its file that name it."""
        if path not in self._links:
            index: Dict[str, List[List[str]]] = {}
            for group in facts.get("links", ()):
                for qualname in group:
                    if qualname.startswith(LOCAL_PREFIX):
                        name = qualname[len(LOCAL_PREFIX) :].split(".")[0]
                        index.setdefault(name, []).append(group)
            self._links[path] = index
        return self._links[path]


class _Walk:
    """One walk from a builder file over what its code names."""

    def __init__(self, construction: Construction, builder: Path) -> None:
        self.construction = construction
        self.hierarchy = construction.hierarchy
        self.builder = builder
        self.reached: Set[Definition] = set()
        self.todo: List[Definition] = []
        self.imported: Set[Path] = set()
        # A registry (a decorator's definition, or what it names) -> the definitions it
        # decorates, in the files imported so far.
        self.registered: Dict[Definition, List[Definition]] = {}

    def run(self, wrapped: Optional[dict] = None) -> Set[Definition]:
        # The files that may hold the model: what runs in them (their definitions and their
        # own statements), not every name they import. With a slice of the wrapped value,
        # the builder contributes only what the slice names.
        starts = sorted(self.hierarchy.importers(self.builder))
        if wrapped is not None:
            self._import(self.builder)
            self.todo.extend(self._located(wrapped["names"], self.builder))
            starts = [p for p in starts if p != self.builder] if wrapped["importers"] else []
        for path in starts:
            facts = self.construction.facts(path)
            if MODULE_CODE in facts.get("dynamic", ()):
                raise _Unknown(path)
            self.todo.extend((path, name) for name in facts["mentions"])
            self.todo.extend(self._located(facts.get("top_level", ()), path))
        while self.todo:
            definition = self.todo.pop()
            if definition in self.reached:
                continue
            self.reached.add(definition)
            if len(self.reached) > _MAX_DEFINITIONS:
                raise _Unknown(self.builder)
            self._import(definition[0])
            self.todo.extend(self._named_by(definition))
            self.todo.extend(self.registered.get(definition, ()))
        return self.reached

    def _named_by(self, definition: Definition) -> List[Definition]:
        """What `definition` reaches: what its code names, the module-level statements that
        name it, and, for a module named as a whole, every top-level name the module binds."""
        path, name = definition
        facts = self.construction.facts(path)
        out_of_package: List[Definition] = []
        dynamic = facts.get("dynamic", ())
        if name in dynamic or MODULE_CODE in dynamic:
            raise _Unknown(definition)
        if name == MODULE_CODE:
            named = [LOCAL_PREFIX + n for n in facts["mentions"]]
            named += [LOCAL_PREFIX + n for n in facts.get("imports", {})]
            named += list(facts.get("star_imports", ()))
            for submodule in self.hierarchy.submodules(path, facts):
                out_of_package.append((submodule, MODULE_CODE))
        else:
            named = list(facts["mentions"].get(name, ()))
        for group in self.construction.links_of(path, facts).get(name, ()):
            named.extend(group)
        return out_of_package + self._located(named, path)

    def _located(self, named, path: Path) -> List[Definition]:
        out: List[Definition] = []
        for qualname in named:
            qualname, _, shapes = qualname.partition("(")
            found = self.construction.locate(qualname, path)
            if shapes and len(found) == 1 and found[0][1] == MODULE_CODE:
                out.extend(self._callable_in(found[0][0], shapes.rstrip(")").split("|")))
            else:
                out.extend(found)
        return out

    def _callable_in(self, module: Path, shapes: List[str]) -> List[Definition]:
        """What `getattr(module, name)(...)` may build, called in one of `shapes`: every name
        the module binds whose signature accepts one of them (or is not known)."""
        facts = self.construction.facts(module)
        out: List[Definition] = [(m, MODULE_CODE) for m in self.hierarchy.submodules(module, facts)]
        for star in facts.get("star_imports", ()):
            out.extend(self.construction.locate(star, module))
        for name in [*facts["mentions"], *facts.get("imports", {})]:
            for definition in self.construction.locate(LOCAL_PREFIX + name, module):
                if definition[1] == MODULE_CODE or self.construction.may_call(definition, shapes):
                    out.append(definition)
        return out

    def _import(self, path: Path) -> None:
        """Importing a file runs its decorators, and imports what it imports."""
        pending = [path]
        while pending:
            current = pending.pop()
            if current in self.imported:
                continue
            self.imported.add(current)
            facts = self.hierarchy.facts_at(current)
            if facts is None:
                continue  # no import, no class, no torch: registers nothing
            if "mentions" not in facts:
                raise _Unknown(current)
            for name, decorators in facts.get("decorated", {}).items():
                self._register((current, name), decorators)
            pending.extend(self.hierarchy.imported_files(current))
            pending.extend(self.hierarchy.submodules(current, facts))

    def _register(self, decorated: Definition, decorators: List[str]) -> None:
        registries: List[Definition] = []
        for qualname in decorators:
            located = [] if qualname == "?" else self.construction.locate(qualname, decorated[0])
            if not located:
                self.todo.append(decorated)  # a library's decorator: it may be built anywhere
                return
            for registry in located:
                registries.append(registry)
                if registry[1] != MODULE_CODE:
                    facts = self.construction.facts(registry[0])
                    for named in facts["mentions"].get(registry[1], ()):
                        registries.extend(self.construction.locate(named, registry[0]))
        for registry in registries:
            self.registered.setdefault(registry, []).append(decorated)
            if registry in self.reached:
                self.todo.append(decorated)
