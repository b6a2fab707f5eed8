"""MMEngine / MMCV / MMDetection-style Python config files, read without executing them.

An MM config is a Python file of module-level assignments that the framework executes and merges
with the files its `_base_` names:

    _base_ = ["../_base_/models/detr_r50.py", "../_base_/default_runtime.py"]
    model = dict(backbone=dict(with_cp=True), encoder=dict(num_layers=6, with_cp=4))
    find_unused_parameters = True
    model_wrapper_cfg = dict(type="MMDistributedDataParallel", static_graph=True)

trainlint never runs one. Per file, `MMConfig(ctx)` says whether the file is such a config
(`is_config`: only assignments, imports and docstrings at the top level, no function or class,
and at least one `_base_` or well-known config key bound to a dict) and reads its structure into
plain data (`facts()`): `dict(...)` calls and `{...}` literals, lists and tuples, constants, and
names bound earlier at the top level of the same file (`backbone=dict(norm_cfg=norm_cfg)`).
Anything else (`{{_base_.model}}`, calls, arithmetic) is "unknown" and never guessed. A line
written as a comment (`#find_unused_parameters = True`) is not a setting: it is not code.

The values trainlint follows (`TRACKED`) keep their value and their position; every other leaf
is kept only as "something is set here" (it still replaces what a base file set). `_base_` may be
a string or a list/tuple of strings (paths relative to the config file) or, in MMEngine's pure
Python style, `with read_base(): from .._base_.models.detr_r50 import *`.

Across files, `resolve(path, facts, facts_of)` merges a config with its `_base_` chain the way
MMEngine's `Config` does: bases are merged in order, then the child on top of them; a key the
child sets replaces the base's value, except that a dict set over a dict merges key by key
(recursively) unless the child's dict says `_delete_=True`, which replaces it whole. The merged
tree's leaves remember the file and position they came from, so a finding can point at both the
child's `find_unused_parameters = True` and the base's `with_cp=True`.

Queries on a merged tree: `find_unused_setting(tree)` (what MMEngine's runner hands to
MMDistributedDataParallel: `model_wrapper_cfg`'s `find_unused_parameters` when the config has a
model_wrapper_cfg, the top-level `find_unused_parameters` otherwise; `static_graph=True` in the
wrapper cancels it), and `checkpointed_layers(tree)` (every `with_cp` / `use_checkpoint` in the
`model` dict that is True or a positive number of layers).

For other rules: `ctx.analysis(MMConfig).is_config` answers "is this file an MM config" (a config
in the project means the project trains with MMEngine/MMCV's distributed launcher; record it in
the rule's facts for the project phase), and `MM_CONFIG_MARKERS` are substrings one of which an
MM config contains (add them to the rule's `markers`: configs rarely mention "torch").
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst

from .. import Analysis
from ..base.calls import int_literal

if TYPE_CHECKING:  # pragma: no cover - typing.TypeGuard is Python 3.10+; annotations are strings
    from typing import TypeGuard


# Substrings that every MM config contains (for rule markers: MM configs often lack "torch").
MM_CONFIG_MARKERS = (
    "_base_",
    "model = dict",
    "model=dict",
    "model = {",
    "_cfg = dict",
    "dict(type=",
)

# Top-level keys that make a file of plain assignments an MM config when bound to a dict (or, for
# _base_, to paths).
CONFIG_KEYS = frozenset(
    {
        "model",
        "train_cfg",
        "test_cfg",
        "val_cfg",
        "optim_wrapper",
        "optimizer",
        "optimizer_config",
        "lr_config",
        "data",
        "train_dataloader",
        "val_dataloader",
        "test_dataloader",
        "runner",
        "default_hooks",
        "env_cfg",
        "model_wrapper_cfg",
        "checkpoint_config",
        "log_config",
        "evaluation",
        "dist_params",
        "param_scheduler",
        "auto_scale_lr",
    }
)

# Keys that turn activation checkpointing on in MM model configs: `with_cp` (MMCV/MMDet/MMPretrain
# backbones and transformer layers) and `use_checkpoint` (Swin and InternImage backbones).
CHECKPOINT_KEYS = frozenset({"with_cp", "use_checkpoint"})

# Keys whose values (not just their presence) the queries below need; findings point at the
# POSITIONED ones.
POSITIONED = CHECKPOINT_KEYS | {"find_unused_parameters"}
TRACKED = POSITIONED | {"static_graph", "type"}

# Top-level keys whose whole structure is kept; every other top-level key is kept as a leaf.
DEEP_KEYS = frozenset({"model", "model_wrapper_cfg"})

DELETE_KEY = "_delete_"

_MAX_DEPTH = 40  # nesting of dicts and lists, and name look-ups, followed in one config
_MAX_BASES = 12  # `_base_` levels followed from one config

Node = Any  # plain data: see `_Reader` for the shapes


class MMConfig(Analysis):
    """The config structure of one file (see the module docstring)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._done = False
        self._is_config = False
        self._facts: Optional[Dict[str, Any]] = None
        # key -> the node written in this file for a tracked setting, for rules that report
        # there (the key is also stored in the leaf: `leaf["key"]`).
        self.sites: Dict[str, cst.CSTNode] = {}
        self.base_node: Optional[cst.CSTNode] = None

    @property
    def is_config(self) -> bool:
        self._read()
        return self._is_config

    def facts(self) -> Optional[Dict[str, Any]]:
        """{"base": [{"path": <relative to this file>}], "cfg": <the top-level dict node>}; None
        for files that are not MM configs. `base_node` is the `_base_` statement."""
        self._read()
        return self._facts

    # -- reading ------------------------------------------------------------------------------

    def _read(self) -> None:
        if self._done:
            return
        self._done = True
        body = self.ctx.module.body
        if not _only_config_statements(body):
            return
        reader = _Reader(self.ctx, self.sites)
        top: Dict[str, Node] = {}
        bases: List[Dict[str, Any]] = []
        looks_like_config = False
        for statement in body:
            if type(statement) is cst.With:
                bases.extend(self._read_base_imports(statement))
                looks_like_config = looks_like_config or bool(bases)
                continue
            if type(statement) is not cst.SimpleStatementLine:
                continue
            for small in statement.body:
                target, value = _assignment(small)
                if target is None or value is None:
                    continue
                if target == "_base_":
                    self.base_node = small
                    bases.extend(self._read_base_paths(value))
                    looks_like_config = True
                    continue
                if target in CONFIG_KEYS and _is_dict(reader.deref(value, 0)):
                    looks_like_config = True
                reader.bind(target, value)
                if target in DEEP_KEYS:
                    top[target] = reader.read(value, 0)
                elif target in TRACKED:
                    top[target] = reader.leaf(small, target, value)
                else:
                    top[target] = None
        if not looks_like_config:
            return
        reader.place()
        self._is_config = True
        self._facts = {"base": bases, "cfg": {"dict": top}}

    def _read_base_paths(self, value: cst.BaseExpression) -> List[Dict[str, Any]]:
        elements: List[cst.BaseExpression]
        if type(value) is cst.List or type(value) is cst.Tuple:
            elements = [e.value for e in value.elements if type(e) is not cst.StarredElement]
        else:
            elements = [value]
        found = []
        for element in elements:
            if type(element) is cst.SimpleString:
                text = element.evaluated_value
                if isinstance(text, str) and text.endswith(".py"):
                    found.append({"path": text})
        return found

    def _read_base_imports(self, statement: cst.With) -> List[Dict[str, Any]]:
        """`with read_base(): from .._base_.models.x import *` (MMEngine's pure Python style)."""
        if not any(
            type(item.item) is cst.Call
            and type(item.item.func) is cst.Name
            and item.item.func.value == "read_base"
            for item in statement.items
        ):
            return []
        found = []
        for line in getattr(statement.body, "body", ()):
            for small in getattr(line, "body", ()):
                if type(small) is not cst.ImportFrom or not small.relative:
                    continue
                if small.module is None:
                    continue
                levels = len(small.relative)
                module = self.ctx.code(small.module).replace(" ", "")
                path = "../" * (levels - 1) + module.replace(".", "/") + ".py"
                if levels == 1:
                    path = "./" + path
                self.base_node = self.base_node or statement
                found.append({"path": path})
        return found


class _Reader:
    """Reads config expressions into plain data.

    Shapes: {"dict": {key: node}, "delete": True?} for dict(...) / {...}; {"list": [node]} for
    lists and tuples; for a TRACKED key, a leaf {"value": <bool|int|float|str|None>} or
    {"unknown": True}, for a POSITIONED one with "at": [row, col] (where `key=` is written) and
    "key" (the name rules record their candidates under); None for any other value (it
    replaces what a base set, nothing more).
    """

    def __init__(self, ctx, sites: Dict[str, cst.CSTNode]) -> None:
        self.ctx = ctx
        self.sites = sites
        self.names: Dict[str, cst.BaseExpression] = {}
        self._unplaced: List[Tuple[Dict[str, Any], cst.CSTNode]] = []

    def bind(self, name: str, value: cst.BaseExpression) -> None:
        self.names[name] = value

    def deref(self, expr: cst.BaseExpression, depth: int) -> cst.BaseExpression:
        """A name bound earlier at the top level of the config -> its value."""
        while type(expr) is cst.Name and expr.value in self.names and depth < _MAX_DEPTH:
            found = self.names[expr.value]
            if found is expr:
                break
            expr = found
            depth += 1
        return expr

    def read(self, expr: cst.BaseExpression, depth: int) -> Node:
        if depth > _MAX_DEPTH:
            return None
        expr = self.deref(expr, depth)
        if type(expr) is cst.Call and _is_dict(expr):
            items: Dict[str, Node] = {}
            delete = False
            for arg in expr.args:
                if arg.keyword is None:
                    continue  # dict(**other) / dict(pairs): contents unknown, nothing tracked
                delete = delete or self._delete(arg.keyword.value, arg.value)
                items[arg.keyword.value] = self._item(arg, arg.keyword.value, arg.value, depth)
            return _dict_node(items, delete)
        if type(expr) is cst.Dict:
            items = {}
            delete = False
            for element in expr.elements:
                if type(element) is not cst.DictElement:
                    continue
                key = element.key
                if type(key) is not cst.SimpleString:
                    continue
                name = key.evaluated_value
                if not isinstance(name, str):
                    continue
                delete = delete or self._delete(name, element.value)
                items[name] = self._item(element, name, element.value, depth)
            return _dict_node(items, delete)
        if type(expr) is cst.List or type(expr) is cst.Tuple:
            return {
                "list": [
                    self.read(e.value, depth + 1)
                    for e in expr.elements
                    if type(e) is not cst.StarredElement
                ]
            }
        return None

    def _item(self, site: cst.CSTNode, key: str, value: cst.BaseExpression, depth: int) -> Node:
        if key in TRACKED:
            return self.leaf(site, key, value)
        return self.read(value, depth + 1)

    def leaf(self, site: cst.CSTNode, key: str, value: cst.BaseExpression) -> Node:
        literal = _literal(self.deref(value, 0))
        leaf: Dict[str, Any] = {"unknown": True} if literal is _UNKNOWN else {"value": literal}
        if key in POSITIONED:
            leaf["name"] = key
            self._unplaced.append((leaf, site))
        return leaf

    def place(self) -> None:
        """Positions of the settings findings point at, computed together (one regeneration of
        each statement, however many settings it holds)."""
        self.ctx.positions.prepare([site for _, site in self._unplaced])
        for leaf, site in self._unplaced:
            row, col = self.ctx.span(site)[:2]
            leaf["at"] = [row, col]
            leaf["key"] = f"{leaf.pop('name')}@{row}:{col}"
            self.sites[leaf["key"]] = site
        self._unplaced = []

    def _delete(self, key: str, value: cst.BaseExpression) -> bool:
        return key == DELETE_KEY and _literal(value) is True


_UNKNOWN = object()

# The string literal nodes (exact types: libcst's concrete node classes have no subclasses).
_STRINGS = (cst.SimpleString, cst.ConcatenatedString)


def _literal(expr: cst.BaseExpression) -> Any:
    if type(expr) is cst.Name and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if type(expr) is cst.Float:
        return float(expr.evaluated_value)
    if type(expr) is cst.SimpleString:
        value = expr.evaluated_value
        return value if isinstance(value, str) else _UNKNOWN
    number = int_literal(expr)
    return _UNKNOWN if number is None else number


def _dict_node(items: Dict[str, Node], delete: bool) -> Node:
    node: Dict[str, Any] = {"dict": items}
    if delete:
        node["delete"] = True
    return node


def _is_dict(expr: cst.CSTNode) -> bool:
    return type(expr) is cst.Dict or (
        type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "dict"
    )


def _assignment(small: cst.CSTNode) -> Tuple[Optional[str], Optional[cst.BaseExpression]]:
    """`name = value` / `name: T = value` -> (name, value); anything else -> (None, None)."""
    if type(small) is cst.Assign and len(small.targets) == 1:
        target = small.targets[0].target
        if type(target) is cst.Name:
            return target.value, small.value
    if type(small) is cst.AnnAssign and type(small.target) is cst.Name:
        return small.target.value, small.value
    return None, None


def _only_config_statements(body) -> bool:
    """Assignments, imports, docstrings, method calls on names (`custom_keys.update(...)`) and
    `with read_base():` only: no function, class, loop, `if` or plain call statement (a training
    script always has some)."""
    if not body:
        return False
    for statement in body:
        if type(statement) is cst.With:
            if not any(
                type(item.item) is cst.Call
                and type(item.item.func) is cst.Name
                and item.item.func.value == "read_base"
                for item in statement.items
            ):
                return False
            continue
        if type(statement) is not cst.SimpleStatementLine:
            return False
        for small in statement.body:
            if type(small) in (cst.Assign, cst.AnnAssign, cst.Import, cst.ImportFrom):
                continue
            if type(small) is cst.AugAssign:
                continue  # `total_epochs += 1` style arithmetic on settings
            if type(small) is cst.Expr and type(small.value) in _STRINGS:
                continue
            if type(small) is cst.Expr and _is_method_call_on_name(small.value):
                continue  # `custom_keys.update({...})`, `train_pipeline.append(...)`
            if type(small) in (cst.Pass, cst.Del):
                continue
            return False
    return True


def _is_method_call_on_name(expr: cst.BaseExpression) -> bool:
    return (
        type(expr) is cst.Call
        and type(expr.func) is cst.Attribute
        and type(expr.func.value) is cst.Name
    )


# -- merging a chain (plain data only: runs in the project phase) ------------------------------


class Resolved:
    """A config merged with its `_base_` chain."""

    def __init__(self, tree: Node, files: List[str], missing: List[str]) -> None:
        self.tree = tree  # the merged top-level dict node; leaves carry "file"
        self.files = files  # display paths of the configs read, child first
        self.missing = missing  # `_base_` entries that could not be read


def resolve(
    path: Path,
    facts: Dict[str, Any],
    facts_of: Callable[[Path], Optional[Dict[str, Any]]],
    display: Callable[[Path], str],
    memo: Optional[Dict[Path, "Resolved"]] = None,
    _depth: int = 0,
    _seen: Tuple[Path, ...] = (),
) -> Resolved:
    """Merge the config at `path` (whose facts are `facts`) with its bases, as MMEngine does.

    `facts_of(path)` returns the `MMConfig.facts()` of another config file (None when it cannot
    be read or is not a config); `display(path)` names a file in findings. `memo` (path ->
    Resolved) lets the configs of one run share the chains of their common bases; merged trees
    are never modified, so sharing them is safe."""
    path = Path(os.path.abspath(path))
    if memo is not None and path in memo:
        return memo[path]
    seen = _seen + (path,)
    merged: Node = {"dict": {}}
    files = [display(path)]
    missing: List[str] = []
    for base in facts.get("base", ()):
        base_path = Path(os.path.normpath(path.parent / base["path"]))
        if base_path in seen or _depth >= _MAX_BASES:
            missing.append(base["path"])
            continue
        base_facts = facts_of(base_path)
        if not base_facts:
            missing.append(base["path"])
            continue
        inner = resolve(base_path, base_facts, facts_of, display, memo, _depth + 1, seen)
        files.extend(inner.files)
        missing.extend(inner.missing)
        # Keys of different bases do not merge with each other (MMEngine refuses duplicates);
        # the later one wins here.
        merged["dict"].update(inner.tree["dict"])
    own = _tagged(copy.deepcopy(facts["cfg"]), display(path))
    resolved = Resolved(merge(merged, own), files, missing)
    if memo is not None:  # (a chain with a cycle, which MMEngine refuses, is cut where it loops)
        memo[path] = resolved
    return resolved


def merge(base: Node, child: Node) -> Node:
    """MMEngine's merge of `child` over `base`: dicts merge key by key unless the child's dict
    has `_delete_=True`; everything else replaces."""
    if not (_is_dict_node(base) and _is_dict_node(child)) or child.get("delete"):
        return child
    items = dict(base["dict"])
    for key, value in child["dict"].items():
        items[key] = merge(items[key], value) if key in items else value
    return {"dict": items}


def _tagged(node: Node, file: str) -> Node:
    for leaf in _walk(node):
        if isinstance(leaf, dict) and "at" in leaf:
            leaf["file"] = file
    return node


def _walk(node: Node) -> Iterator[Node]:
    yield node
    if _is_dict_node(node):
        for value in node["dict"].values():
            yield from _walk(value)
    elif isinstance(node, dict) and "list" in node:
        for value in node["list"]:
            yield from _walk(value)


def _is_dict_node(node: Node) -> TypeGuard[Dict[str, Any]]:
    return isinstance(node, dict) and "dict" in node


def _true(leaf: Node) -> bool:
    return isinstance(leaf, dict) and leaf.get("value") is True


def find_unused_setting(tree: Node) -> Optional[Dict[str, Any]]:
    """The leaf that turns on DDP's `find_unused_parameters` for this config, or None.

    MMEngine's runner builds MMDistributedDataParallel from `model_wrapper_cfg` when the config
    has one (the top-level `find_unused_parameters` is then ignored) and from the top-level key
    otherwise (MMCV 1.x / MMDetection 2.x read only the top level). A wrapper that is not a
    DistributedDataParallel, or `static_graph=True`, makes it moot."""
    top = tree["dict"] if _is_dict_node(tree) else {}
    wrapper = top.get("model_wrapper_cfg")
    if _is_dict_node(wrapper):
        items = wrapper["dict"]
        kind = items.get("type")
        if isinstance(kind, dict) and "unknown" in kind:
            return None
        name = kind.get("value") if isinstance(kind, dict) else "MMDistributedDataParallel"
        if not isinstance(name, str) or "DistributedDataParallel" not in name:
            return None
        if _true(items.get("static_graph")):
            return None
        found = items.get("find_unused_parameters")
        return found if _true(found) else None
    # No readable model_wrapper_cfg (none, None, or an expression): the runner's default wrap.
    found = top.get("find_unused_parameters")
    return found if _true(found) else None


def checkpointed_layers(tree: Node) -> List[Tuple[str, Dict[str, Any]]]:
    """(dotted path, leaf) of every `with_cp` / `use_checkpoint` in the model dict that turns
    checkpointing on: True or a positive number of layers (`with_cp=4` checkpoints 4 layers)."""
    top = tree["dict"] if _is_dict_node(tree) else {}
    found: List[Tuple[str, Dict[str, Any]]] = []

    def visit(node: Node, where: str) -> None:
        if _is_dict_node(node):
            for key, value in node["dict"].items():
                if key in CHECKPOINT_KEYS:
                    if _checkpoints(value):
                        found.append((f"{where}.{key}", value))
                    continue
                visit(value, f"{where}.{key}")
        elif isinstance(node, dict) and "list" in node:
            for index, value in enumerate(node["list"]):
                visit(value, f"{where}[{index}]")

    visit(top.get("model"), "model")
    return found


def _checkpoints(leaf: Node) -> bool:
    if not isinstance(leaf, dict):
        return False
    value = leaf.get("value")
    if isinstance(value, bool):
        return value
    return isinstance(value, int) and value > 0


def type_names(tree: Node) -> List[str]:
    """The `type=` names a merged config builds anywhere (`'DINO'`, `'DenoisingHead'`)."""
    found: List[str] = []
    for node in _walk(tree):
        if _is_dict_node(node):
            kind = node["dict"].get("type")
            if isinstance(kind, dict) and isinstance(kind.get("value"), str):
                found.append(kind["value"])
    return found


def tolerates_unused(tree: Node) -> bool:
    """Does the DDP wrap of this merged config accept parameters without a gradient
    (`find_unused_parameters=True`, or `static_graph=True` in `model_wrapper_cfg`)?"""
    if find_unused_setting(tree) is not None:
        return True
    top = tree["dict"] if _is_dict_node(tree) else {}
    wrapper = top.get("model_wrapper_cfg")
    return _is_dict_node(wrapper) and _true(wrapper["dict"].get("static_graph"))


# Configs worth reading for a family (a text filter; the merged chain decides): MM-style configs
# (a `_base_ = ` or `model = ` line) naming one of its classes, and children that may tolerate
# unused parameters for a model their base builds.
_MM_CONFIG = re.compile(r"^(?:_base_|model)\s*=", re.M)
# Every `type='Name'` of a config (a lookahead, so that overlapping spellings are all found).
_TYPE_STRING = re.compile(r"(?=\btype\s*=\s*['\"]([^'\"]*)['\"])")
_MM_TOLERANT = re.compile(
    r"^_base_\s*=[\s\S]*\b(?:find_unused_parameters|static_graph)\s*=\s*True", re.M
)


class MMConfigs:
    """MM-style configs of the project (`_base_ = ...` / `model = dict(...)`), each merged with
    its `_base_` chain once. MMEngine/MMDet launch such configs with DDP, so a config that
    builds a class (`type='DETRHead'`, in it or in a base) says the class trains with DDP, and
    one whose merged DDP wrap tolerates unused parameters says it may not wait for them.
    Configs are found by their text, so a run given only some files answers like a whole-tree
    run; their facts are those the rule `code` records under `"mm_config"` (`MMConfig.facts()`),
    never another rule's."""

    def __init__(self, project, code: str) -> None:
        self.project = project
        self.code = code
        self._merged: Dict[Path, Optional[Tuple[Set[str], bool]]] = {}
        self._memo: Dict[Path, Resolved] = {}
        self._configs: Optional[List[Tuple[Path, Set[str], bool]]] = None
        self._exist: Optional[bool] = None

    def naming(self, class_names: List[str], tolerant: bool = False) -> List[Path]:
        """Configs that build one of `class_names`; with `tolerant`, only those whose DDP wrap
        accepts unused parameters."""
        if self._configs is None:
            # The project's configs and the `type='...'` strings each names, found once:
            # families are asked about one by one.
            self._configs = [
                (path, set(_TYPE_STRING.findall(text)), bool(_MM_TOLERANT.search(text)))
                for path in self.project.files_matching(_MM_CONFIG)
                for text in [self.project.text_of(path) or ""]
            ]
        wanted = set(class_names)
        found = []
        for path in [p for p, types, tolerant in self._configs if tolerant or types & wanted]:
            merged = self._merge(path)
            if merged is None or not merged[0] & set(class_names):
                continue
            if merged[1] or not tolerant:
                found.append(path)
        return found

    def _merge(self, path: Path) -> Optional[Tuple[Set[str], bool]]:
        """(the `type=` names the merged config builds, whether it tolerates unused parameters)."""
        if path not in self._merged:
            own = self._config_facts(path)
            merged = None
            if own:
                tree = resolve(path, own, self._config_facts, self._display, self._memo).tree
                merged = (set(type_names(tree)), tolerates_unused(tree))
            self._merged[path] = merged
        return self._merged[path]

    def _config_facts(self, path: Path) -> Optional[Dict[str, Any]]:
        facts = self.project.facts_of(path, self.code)
        return facts.get("mm_config") if isinstance(facts, dict) else None

    def exist(self) -> bool:
        """Does the project hold an MM config (one is enough: a run loads one of them)?"""
        if self._exist is None:
            self._exist = any(
                self._config_facts(path) for path in self.project.files_matching(_MM_CONFIG)
            )
        return self._exist

    def _display(self, path: Path) -> str:
        return self.project.display_of(path) or os.path.relpath(path)
