"""TRL302 find-unused-with-reentrant-checkpoint."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import libcst as cst

from ...analysis.base.calls import argument, has_star_args, is_true, keyword
from ...analysis.project.hierarchy import Hierarchy, import_qualnames
from ...analysis.project.launch_configs import accelerate_may_build_ddp
from ...analysis.project.mmconfig import (
    MMConfig,
    Resolved,
    checkpointed_layers,
    find_unused_setting,
    resolve,
)
from ...analysis.base.names import dotted_name
from ...analysis.parallel.parallel import DDP_NAMES
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule

CHECKPOINT_FUNCTIONS = (
    "torch.utils.checkpoint.checkpoint",
    "torch.utils.checkpoint.checkpoint_sequential",
)
# Module wrappers that always checkpoint reentrantly (a custom autograd Function that re-runs the
# module inside backward).
REENTRANT_WRAPPERS = (
    "fairscale.nn.checkpoint_wrapper",
    "fairscale.nn.checkpoint.checkpoint_wrapper",
    "fairscale.nn.checkpoint.checkpoint_activations.checkpoint_wrapper",
)
# Wrappers and strategy objects that hand `find_unused_parameters` on to DDP.
_DDP_OPTION_HOLDERS = (
    "MMDistributedDataParallel",
    "MMSeparateDistributedDataParallel",
    "DDPStrategy",
    "DistributedDataParallelKwargs",
)
_LIGHTNING_FIND_UNUSED = "ddp_find_unused_parameters_true"
_HF_FLAG = re.compile(r"--ddp_find_unused_parameters(?:[= ]+(?P<value>\S+))?")
_TRUE_WORDS = {"true", "1", "yes", "y", "t"}

_HF_WHY = "Hugging Face's default"
ERROR_TEXT = '"Expected to mark a variable ready only once"'


@dataclasses.dataclass
class _Site:
    node: cst.CSTNode
    text: str  # how the message names it
    fix: Optional[PendingFix] = None
    why: str = "no `use_reentrant=False`"  # why it is reentrant
    when: str = ""  # the flag the checkpoint runs under (`self.use_checkpoint`), if any
    # Accelerate's `DistributedDataParallelKwargs`: it reaches DDP only when the launch config
    # makes Accelerate build DDP (analysis/project/launch_configs.py)
    accelerate: bool = False


class FindUnusedWithReentrantCheckpoint(Rule):
    """## What it does
    Reports DDP's `find_unused_parameters=True` together with reentrant activation checkpointing
    in the same project. The two sides are:

    - find_unused: `find_unused_parameters=True` on `DistributedDataParallel(...)` (or Lightning's
      `DDPStrategy`, Accelerate's `DistributedDataParallelKwargs`), Hugging Face
      `TrainingArguments(ddp_find_unused_parameters=True)` / `--ddp_find_unused_parameters`, or
      an MMEngine/MMDetection config's `find_unused_parameters = True` (top level, or in
      `model_wrapper_cfg`);
    - reentrant checkpointing: `torch.utils.checkpoint.checkpoint(...)` or
      `checkpoint_sequential(...)` without `use_reentrant=False`, fairscale's
      `checkpoint_wrapper(...)`, `gradient_checkpointing_enable()`
      or `TrainingArguments(gradient_checkpointing=True)` without
      `gradient_checkpointing_kwargs={"use_reentrant": False}`, or `with_cp=True` / `with_cp=<n>`
      (or Swin's `use_checkpoint=True`) anywhere in an MM config's `model`, following its
      `_base_` files.

    In code the finding is at the checkpoint call; in an MM config it is at the config's own
    `find_unused_parameters = True`, else at the `with_cp` it sets itself, else (when the two
    come from different bases) at its `_base_`; the other site is a note. The CLI reads a
    config's whole `_base_` chain (also when pre-commit passes only the child) and pairs a
    training script's `find_unused_parameters=True` with reentrant checkpoint calls in the
    project modules it imports (also through a package `__init__.py`). Given only some files,
    it answers as a whole-tree run does for them: a changed model module is reported when a
    script outside the run imports it with `find_unused_parameters=True`; a script given
    without the module gets no finding, since the finding belongs at the checkpoint call.
    Under flake8, which sees one file, only that file counts.

    Accelerate's `DistributedDataParallelKwargs` reaches DDP only when Accelerate builds DDP,
    which its launch config decides (`distributed_type: MULTI_GPU`). A project that ships
    Accelerate configs (YAML files with a `distributed_type`) and none of them for DDP, only
    FSDP or DeepSpeed ones, is run with those: the handler's `find_unused_parameters=True`
    never meets the checkpoint there, and nothing is reported. A project that ships none is
    run with its user's own configuration, which may be DDP: reported. (Under flake8 the
    configs cannot be read: reported.)

    ## Why is this bad
    With `find_unused_parameters=True`, DDP walks the autograd graph after every forward and
    marks every parameter it cannot reach as "ready" (unused) right away. A reentrant
    checkpoint hides the parameters of the checkpointed block from that graph: they look unused.
    Then the backward pass re-runs the block and their gradients arrive after all, DDP's hook
    fires a second time for each of them, and the first backward fails with

        RuntimeError: Expected to mark a variable ready only once. This error is caused by one
        of the following reasons: ... 2) Reused parameters in multiple reentrant backward
        passes. ... Parameter at index 3 with name block.0.bias has been marked as ready twice.

    In PyTorch 2.x `checkpoint(...)` without `use_reentrant` still means the reentrant variant
    (with a warning), and Hugging Face's `gradient_checkpointing_enable()` passes
    `use_reentrant=True` unless told otherwise. MMDetection/MMPretrain backbones and
    transformer layers with `with_cp` call the reentrant variant. This is the usual reason a
    project ships `#find_unused_parameters = True` commented out next to `with_cp=4`: a user
    who turns it on to cure an unused parameter gets this error instead.

    Non-reentrant checkpointing (`use_reentrant=False`) keeps the parameters in the graph and
    works with `find_unused_parameters=True`; so does DDP's `static_graph=True` (or
    `_set_static_graph()`, or `static_graph=True` in `model_wrapper_cfg`), which is not
    reported.

    ## Example
    ```python
    class Encoder(nn.Module):
        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x)
            return x

    model = DDP(Encoder().cuda(rank), device_ids=[rank], find_unused_parameters=True)
    ```

    ## Use instead
    ```python
    class Encoder(nn.Module):
        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False)
            return x

    model = DDP(Encoder().cuda(rank), device_ids=[rank], find_unused_parameters=True)
    ```

    In an MM config, turn checkpointing off where `find_unused_parameters = True` is needed
    (`with_cp=False`), or make every parameter take part in the loss and drop
    `find_unused_parameters`.

    ## Fix safety
    The fix passes `use_reentrant=False` to the checkpoint call (or
    `gradient_checkpointing_kwargs={"use_reentrant": False}`), only in the file that has the
    call. It is unsafe: the non-reentrant variant differs in corner cases (it saves and
    recomputes differently, supports inputs that do not require grad, and can stop
    recomputation early), so training changes in memory use and, rarely, in behaviour.
    MM configs get no fix: `with_cp` is implemented inside the library.
    """

    code = "TRL302"
    name = "find-unused-with-reentrant-checkpoint"
    severity = Severity.ERROR
    fix = "unsafe"
    markers = (
        "find_unused",
        "with_cp",
        "_base_",
        "checkpoint",
        "read_base",
        "static_graph",
        "model_wrapper_cfg",
    )
    project = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._facts: Optional[Dict[str, Any]] = None

    def finish(self) -> None:
        config = self.ctx.analysis(MMConfig)
        if config.is_config:
            self._facts = {"config": config.facts()}
            # Where a config finding may go: its own settings, or its `_base_` line.
            for key, node in config.sites.items():
                self.candidate(key, node, "")
            if config.base_node is not None and len(self._facts["config"]["base"]) > 1:
                # Only several bases can meet in this file without one of them (reported
                # itself) already holding both settings.
                self.candidate("_base_", config.base_node, "")
            return
        find_unused = list(self._find_unused_sites())
        checkpoints = list(self._reentrant_sites())
        self._record(find_unused, checkpoints)
        # Accelerate's handler alone waits for the project phase, which reads the launch
        # configs (`_check_code`).
        direct = [site for site in find_unused if not site.accelerate]
        if not direct or not checkpoints:
            return
        first = direct[0]
        for site in checkpoints:
            self.report(
                site.node,
                _message(site.text, first.text, site.when),
                help=_help(site.why),
                fix=site.fix,
                related=[(first.node, f"`{first.text}` is set here")],
            )

    def facts(self) -> Optional[Dict[str, Any]]:
        return self._facts

    # -- what a file of code does -------------------------------------------------------------

    def _find_unused_sites(self) -> Iterable[_Site]:
        names = self.ctx.names
        if self._sets_static_graph():
            return
        for call in self.ctx.nodes(cst.Call):
            value = keyword(call, "find_unused_parameters")
            if value is not None and self._true(value):
                if not (
                    names.is_(call.func, *DDP_NAMES)
                    or names.matches_suffix(call.func, *_DDP_OPTION_HOLDERS)
                ):
                    continue
                if is_true(keyword(call, "static_graph")):
                    continue
                yield _Site(
                    _arg_of(call, "find_unused_parameters"),
                    "find_unused_parameters=True",
                    accelerate=names.matches_suffix(call.func, "DistributedDataParallelKwargs"),
                )
            value = keyword(call, "ddp_find_unused_parameters")
            if value is not None and self._true(value):
                yield _Site(
                    _arg_of(call, "ddp_find_unused_parameters"), "ddp_find_unused_parameters=True"
                )
        for string in self.ctx.nodes(cst.SimpleString):
            text = string.evaluated_value
            if not isinstance(text, str):
                continue
            if text == _LIGHTNING_FIND_UNUSED:
                yield _Site(string, f'strategy="{_LIGHTNING_FIND_UNUSED}"')
                continue
            match = _HF_FLAG.search(text)
            if match is None:
                continue
            value_text = match.group("value")
            if value_text is None and text.strip() == "--ddp_find_unused_parameters":
                value_text = self._next_string(string)
            if value_text is None or value_text.strip("'\"").lower() in _TRUE_WORDS:
                yield _Site(string, "--ddp_find_unused_parameters")

    def _reentrant_sites(self) -> Iterable[_Site]:
        names = self.ctx.names
        for call in self.ctx.nodes(cst.Call):
            if names.is_(call.func, *CHECKPOINT_FUNCTIONS):
                if has_star_args(call) and keyword(call, "use_reentrant") is None:
                    continue  # `**kwargs` may carry use_reentrant
                reentrant = keyword(call, "use_reentrant")
                if reentrant is not None and not is_true(reentrant):
                    continue
                yield _Site(
                    call,
                    _short(self.ctx.code(call)),
                    self._checkpoint_fix(call),
                    when=self._flag_guarding(call),
                )
                continue
            if names.is_(call.func, *REENTRANT_WRAPPERS):
                text = _short(self.ctx.code(call))
                yield _Site(call, text, why="fairscale's wrapper is reentrant")
                continue
            func = call.func
            if _method_name(func) == "gradient_checkpointing_enable":
                kwargs = argument(call, 0, "gradient_checkpointing_kwargs")
                if _reentrant_kwargs(call, kwargs):
                    yield _Site(
                        call, _short(self.ctx.code(call)), self._kwargs_fix(call, "enable"), _HF_WHY
                    )
                continue
            enabled = keyword(call, "gradient_checkpointing")
            if enabled is None or not is_true(enabled) or not self._training_arguments(call):
                continue
            if _reentrant_kwargs(call, keyword(call, "gradient_checkpointing_kwargs")):
                yield _Site(
                    _arg_of(call, "gradient_checkpointing"),
                    "gradient_checkpointing=True",
                    self._kwargs_fix(call, "arguments"),
                    _HF_WHY,
                )

    def _flag_guarding(self, node: cst.CSTNode) -> str:
        """`self.use_checkpoint` for a call under `if self.use_checkpoint (and ...):` in its
        function: the checkpoint runs only when that option is on."""
        child = node
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return ""
            if type(ancestor) in (cst.If, cst.IfExp) and child is ancestor.body:
                test = ancestor.test
                while type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
                    test = test.left
                if type(test) in (cst.Name, cst.Attribute):
                    return _short(self.ctx.code(test))
            child = ancestor
        return ""

    def _training_arguments(self, call: cst.Call) -> bool:
        """Hugging Face `TrainingArguments` and the trainer configs built on it (TRL's
        `SFTConfig`, ...), or any call that also takes `ddp_find_unused_parameters`."""
        if keyword(call, "ddp_find_unused_parameters") is not None:
            return True
        name = dotted_name(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        return last.endswith("TrainingArguments") or (
            last.endswith("Config") and last[:1].isupper() and len(last) > len("Config")
        )

    def _sets_static_graph(self) -> bool:
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "_set_static_graph":
                return True
        return False

    def _true(self, value: cst.BaseExpression) -> bool:
        if is_true(value):
            return True
        if type(value) is cst.Name:
            bindings = self.ctx.scopes.lookup(value.value, value)
            return bool(bindings) and all(
                b.kind in ("assign", "annassign") and is_true(b.value) for b in bindings
            )
        return False

    def _next_string(self, string: cst.SimpleString) -> Optional[str]:
        """In `["--ddp_find_unused_parameters", "True"]`, the element after the flag."""
        element = self.ctx.parent(string)
        sequence = self.ctx.parent(element) if element is not None else None
        if not (type(sequence) is cst.List or type(sequence) is cst.Tuple):
            return None
        elements = list(sequence.elements)
        index = next((i for i, e in enumerate(elements) if e is element), None)
        if index is None or index + 1 >= len(elements):
            return None
        after = elements[index + 1].value
        if type(after) is cst.SimpleString:
            value = after.evaluated_value
            if isinstance(value, str) and not value.startswith("--"):
                return value
        return None  # the flag alone means True

    # -- fixes --------------------------------------------------------------------------------

    def _checkpoint_fix(self, call: cst.Call) -> Optional[PendingFix]:
        existing = keyword(call, "use_reentrant")
        if existing is not None:
            edit = self.ctx.replace(existing, "False")
        elif call.args:
            edit = self.ctx.append_argument(call, "use_reentrant=False")
        else:
            return None
        return self.unsafe_fix("Use non-reentrant checkpointing: `use_reentrant=False`", edit)

    def _kwargs_fix(self, call: cst.Call, kind: str) -> Optional[PendingFix]:
        text = 'gradient_checkpointing_kwargs={"use_reentrant": False}'
        if keyword(call, "gradient_checkpointing_kwargs") is not None or has_star_args(call):
            return None
        if call.args:
            edit = self.ctx.append_argument(call, text)
        elif kind == "enable":
            edit = self.ctx.replace(call, f"{self.ctx.code(call.func)}({text})")
        else:
            return None
        return self.unsafe_fix(f"Use non-reentrant checkpointing: `{text}`", edit)

    # -- the project phase --------------------------------------------------------------------

    def _record(self, find_unused: List[_Site], checkpoints: List[_Site]) -> None:
        """Both halves as facts, and every checkpoint site as a candidate: the other half may be
        in another file of the project."""
        facts: Dict[str, Any] = {"find_unused": [], "checkpoints": [], "imports": {}}
        for kind, sites in (("find_unused", find_unused), ("checkpoints", checkpoints)):
            for site in sites:
                row, col = self.ctx.span(site.node)[:2]
                key = f"{kind}@{row}:{col}"
                facts[kind].append(
                    {
                        "key": key,
                        "at": [row, col],
                        "text": site.text,
                        "why": site.why,
                        "when": site.when,
                        "accelerate": site.accelerate,
                    }
                )
                if kind == "checkpoints":
                    self.candidate(key, site.node, "", fix=site.fix)
        if find_unused or checkpoints:
            facts["imports"] = import_qualnames(self.ctx)
            self._facts = facts

    @classmethod
    def check_project(cls, project) -> Iterable[Diagnostic]:
        yield from _check_configs(cls.code, project)
        yield from _check_code(cls.code, project)


# -- MM configs ------------------------------------------------------------------------------


def _path_of(project, display: str) -> Path:
    """The absolute path of a file of the run (under flake8 the display path is the path)."""
    return Path(os.path.abspath(project.paths.get(display, display)))


class _Chains:
    """The configs of a run and their `_base_` files, each read and merged once."""

    def __init__(self, code: str, project) -> None:
        self.code = code
        self.project = project
        self.memo: Dict[Path, Resolved] = {}

    def facts(self, path: Path) -> Optional[Dict[str, Any]]:
        facts = self.project.facts_of(path, self.code)
        return facts.get("config") if isinstance(facts, dict) else None

    def display(self, path: Path) -> str:
        return self.project.display_of(path) or os.path.relpath(path)

    def resolve(self, path: Path, facts: Dict[str, Any]) -> Resolved:
        return resolve(path, facts, self.facts, self.display, self.memo)


def _check_configs(code: str, project) -> Iterable[Diagnostic]:
    chains = _Chains(code, project)
    for display, facts in sorted(project.facts(code).items()):
        own = facts.get("config") if isinstance(facts, dict) else None
        if not own:
            continue
        path = _path_of(project, display)
        conflict = _conflict(chains.resolve(path, own))
        if conflict is None:
            continue
        find_unused, layers = conflict
        where = _primary(display, find_unused, layers, own, path, chains)
        if where is None:
            continue
        message, help = _config_message(find_unused, layers, display)
        diagnostic = project.candidate(display, code, where, message=message, help=help)
        if diagnostic is None:
            continue
        related = []
        if where != find_unused["key"] or find_unused["file"] != display:
            related.append(_note(find_unused, "`find_unused_parameters=True` is set here"))
        for dotted, leaf in layers[:3]:
            if leaf["key"] == where and leaf["file"] == display:
                continue
            value = leaf.get("value")
            related.append(_note(leaf, f"`{dotted}={value}` turns on reentrant checkpointing"))
        yield dataclasses.replace(diagnostic, related=tuple(related))


def _conflict(merged: Resolved) -> Optional[Tuple[Dict[str, Any], List[Tuple[str, Any]]]]:
    find_unused = find_unused_setting(merged.tree)
    if find_unused is None:
        return None
    layers = checkpointed_layers(merged.tree)
    if not layers:
        return None
    return find_unused, layers


def _primary(display, find_unused, layers, own, path: Path, chains: _Chains) -> Optional[str]:
    """Which candidate of this config carries the finding: its own `find_unused_parameters`,
    else its own first `with_cp`, else its `_base_` line when no single base already has the
    conflict (a base that has it is reported itself, when it is checked)."""
    if find_unused["file"] == display:
        return find_unused["key"]
    for _, leaf in layers:
        if leaf["file"] == display:
            return leaf["key"]
    for base in own.get("base", ()):
        base_path = Path(os.path.normpath(path.parent / base["path"]))
        base_facts = chains.facts(base_path)
        if base_facts and _conflict(chains.resolve(base_path, base_facts)):
            return None
    return "_base_"


def _note(leaf: Dict[str, Any], text: str) -> Tuple[str, int, int, str]:
    row, col = leaf["at"]
    return (leaf["file"], row, col, text)


def _config_message(find_unused, layers, display: str) -> Tuple[str, str]:
    dotted, leaf = layers[0]
    key = dotted.rsplit(".", 1)[-1]
    more = f" and {len(layers) - 1} more" if len(layers) > 1 else ""
    setting = f"{dotted}={leaf.get('value')}"
    if len(setting) > 30:  # the related notes name the full key
        setting = f"{key}={leaf.get('value')}"
    origins = "".join(
        f"`{what}` comes from {where}. "
        for what, where in (
            ("find_unused_parameters=True", _origin(find_unused, display)),
            (f"{dotted}={leaf.get('value')}", _origin(leaf, display)),
        )
        if where
    )
    return (
        f"`find_unused_parameters=True` with reentrant checkpointing from `{setting}`{more}",
        f"{origins}DDP raises {ERROR_TEXT} in the first backward. Set `{key}=False` where "
        "find_unused_parameters is needed, or make every parameter reach the loss and drop "
        "`find_unused_parameters`.",
    )


def _origin(leaf: Dict[str, Any], display: str) -> str:
    """`path:row` for a setting that comes from another config of the chain, else ""."""
    return "" if leaf["file"] == display else f"{leaf['file']}:{leaf['at'][0]}"


# -- code in several files ---------------------------------------------------------------------


def _check_code(code: str, project) -> Iterable[Diagnostic]:
    """Reentrant checkpoint calls of a file of the run that a script with
    `find_unused_parameters=True` imports (directly, or through other project modules such as a
    package `__init__.py`), the script in the run or not (analysis/project/hierarchy.py resolves the
    imports and reads files outside the run), or that the file sets itself through Accelerate's
    `DistributedDataParallelKwargs` (a file that sets it on DDP itself is reported by itself).
    Accelerate's setting counts only when the project's launch configs may make Accelerate build
    DDP: a project that ships only FSDP or DeepSpeed configs never meets it."""
    hierarchy = Hierarchy(project, code)
    reaches: Dict[str, bool] = {}

    def reaching(facts: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The settings of `find_unused_parameters=True` in a file that reach DDP."""
        sites = (facts or {}).get("find_unused") or []
        if any(site.get("accelerate") for site in sites) and "accelerate" not in reaches:
            reaches["accelerate"] = accelerate_may_build_ddp(project)
        return [s for s in sites if not s.get("accelerate") or reaches["accelerate"]]

    for display, data in sorted(project.facts(code).items()):
        if not isinstance(data, dict) or not data.get("checkpoints"):
            continue
        path = _path_of(project, display)
        script: Optional[Path] = None
        if data["find_unused"]:
            if any(not site.get("accelerate") for site in data["find_unused"]):
                continue  # reported by the file itself (`finish`)
            own = reaching(data)
            if not own:
                continue
            script, first = path, own[0]
        else:
            for importer in sorted(hierarchy.importers(path) - {path}, key=hierarchy.display):
                found = reaching(hierarchy.facts_at(importer))
                if found:
                    script, first = importer, found[0]
                    break
        if script is None:
            continue
        script_display = hierarchy.display(script) if script != path else display
        for site in data["checkpoints"]:
            diagnostic = project.candidate(
                display,
                code,
                site["key"],
                message=_message(site["text"], first["text"], site["when"]),
                help=_help(site["why"]),  # the related note names the script
            )
            if diagnostic is not None:
                note = (script_display, *first["at"], f"`{first['text']}` is set here")
                yield dataclasses.replace(diagnostic, related=(note,))


def _message(checkpoint: str, find_unused: str, when: str = "") -> str:
    flag = f" (when `{when}` is on)" if when else ""
    if len(checkpoint) > 40:
        checkpoint = checkpoint.split("(", 1)[0] + "(...)"
    return f"`{checkpoint}`{flag} is reentrant while DDP has `{find_unused}`"


def _help(why: str) -> str:
    """Why the checkpoint is reentrant, what DDP then raises, and the fix."""
    if why == _HF_WHY:
        return (
            "Hugging Face passes `use_reentrant=True` unless gradient_checkpointing_kwargs say "
            f"False, so DDP raises {ERROR_TEXT} in the first backward. Pass "
            '`gradient_checkpointing_kwargs={"use_reentrant": False}`.'
        )
    return (
        f"The checkpoint is reentrant ({why}), so DDP raises {ERROR_TEXT} in the first "
        "backward. Use non-reentrant checkpointing."
    )


# -- small readers ---------------------------------------------------------------------------

_MISSING = object()


def _reentrant_kwargs(call: cst.Call, kwargs: Optional[cst.BaseExpression]) -> bool:
    """Do these `gradient_checkpointing_kwargs` leave Hugging Face's default
    `use_reentrant=True` (absent, None, or a dict without `use_reentrant: False`)?"""
    if kwargs is None:
        return not has_star_args(call)
    if _is_none(kwargs):
        return True
    setting = _dict_value(kwargs, "use_reentrant")
    if setting is _MISSING:
        return True
    return setting is not None and is_true(setting)


def _arg_of(call: cst.Call, name: str) -> cst.CSTNode:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return call


def _is_none(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _is_dict_call(node: cst.CSTNode) -> bool:
    return (
        type(node) is cst.Call
        and type(node.func) is cst.Name
        and node.func.value == "dict"
    )


def _method_name(func: cst.BaseExpression) -> Optional[str]:
    return func.attr.value if type(func) is cst.Attribute else None


def _dict_value(node: cst.CSTNode, key: str) -> Any:
    """The value of `key` in a `{...}` literal or `dict(...)` call; _MISSING when it is not
    there; None when the container cannot be read."""
    if type(node) is cst.Dict:
        for element in node.elements:
            if type(element) is not cst.DictElement:
                return None
            if type(element.key) is cst.SimpleString and element.key.evaluated_value == key:
                return element.value
        return _MISSING
    if _is_dict_call(node):
        if has_star_args(node):  # type: ignore[arg-type]
            return None
        found = keyword(node, key)  # type: ignore[arg-type]
        return _MISSING if found is None else found
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 50 else text[:47] + "..."
