"""DP/DDP wrap sites of a file, the class each one wraps, and "this file trains with DDP".

Built on parallel.py (which recognises the wrap calls). For each wrap call this finds the class
of the wrapped object when the file shows it: `DDP(Net())`, `model = Net(...).to(d)` then
`DDP(model, ...)`, `model = DDP(model)` after `model = Net()`, `self.model = DDP(self.model)`, or
a `build_model()` of this file that returns `Net(...)`. Classes are qualified names
(`<local>.Net` for a class of this file, `models.head.Head` for an imported one); hierarchy.py
resolves them across files.

It also records what the project phase needs about DDP in general:

- `signals`: why this file trains with DDP (a DDP wrap, `init_process_group`, torchrun or
  `torch.distributed.launch` usage, a `LOCAL_RANK` read);
- `hand_reduced`: the file all-reduces gradients itself (`dist.all_reduce(param.grad.data)`):
  without a DDP wrap, its process group runs no reducer that waits for a parameter that got
  no gradient;
- `finds_unused`: the file asks DDP to tolerate unused parameters somewhere
  (`find_unused_parameters=True` on DDP, Lightning's `DDPStrategy`, Accelerate's
  `DistributedDataParallelKwargs`, HF `ddp_find_unused_parameters=True`, the
  `"ddp_find_unused_parameters_true"` strategy) or uses `static_graph=True` (an MM-style
  config's `find_unused_parameters = True` applies to the models it names, not to the file);
- `frozen`: attribute names frozen from outside their class (`model.backbone.requires_grad_(False)`,
  `for p in model.backbone.parameters(): p.requires_grad = False`), ALL when parameters are
  frozen by name patterns we cannot follow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import libcst as cst

from ..base.calls import argument, has_star_args, is_false, is_true, keyword, positional
from ..base.identity import same_module
from ..base.names import LOCAL_PREFIX, Names, dotted_name
from ..project.modules import ALL, freezes, frozen_by_loop
from .parallel import DDP_NAMES, INIT_PROCESS_GROUP, Parallel
from .settings import OptionSources
from .. import Analysis
from ..base.nodes import descendants, positional_params


DDP_KIND = "DistributedDataParallel"
DDP_WRAP_SIGNAL = "a DistributedDataParallel wrap"  # the `signals` entry of a file that wraps
DP_KIND = "DataParallel"
# Keywords that make DDP tolerate parameters without gradients.
TOLERANT_KEYWORDS = ("find_unused_parameters", "ddp_find_unused_parameters", "static_graph")
LAUNCHER_TEXT = ("torchrun", "torch.distributed.launch", "torch.distributed.run")
# Source text that may build PyTorch's DDP reducer somewhere in a project: the class's name
# outside a comment (every import or alias of it spells it out; a commented-out wrap builds
# nothing), a `DDP` alias, or an import of a framework that wraps the model for the user (HF
# Trainer, Accelerate, Lightning, DeepSpeed, MM runners, detectron2, fairseq, ignite, ...). A
# project with none of them may open a process group, but no reducer waits there for a
# parameter without a gradient.
REDUCER_LIBRARIES = (
    "transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric",
    "deepspeed", "mmcv", "mmengine", r"mm[a-z0-9]+", "detectron2", "fairseq", "ignite",
    "fastai", "speechbrain", "nemo", "espnet2?", "catalyst", "colossalai", "composer",
    "torchtnt", "ultralytics", "allennlp", "sentence_transformers", "trl", "flash", "apex",
)
REDUCER_TEXT = re.compile(
    r"^[^#\n]*(?:DistributedDataParallel|\bDDP\b)|^[ \t]*(?:from|import)[ \t]+(?:"
    + "|".join(REDUCER_LIBRARIES)
    + r")\b",
    re.M,
)


@dataclass
class WrapSite:
    kind: str  # DDP_KIND or DP_KIND
    call: cst.Call
    classes: Set[str] = field(default_factory=set)  # qualified names; empty: unknown
    module: Optional[cst.BaseExpression] = None  # the wrapped module's expression, if given
    # keyword -> "true" / "false" / "unknown" (an expression) / "config" (a configuration
    # read, in `settings`) for find_unused_parameters and static_graph; absent when not
    # given. With **kwargs both are "unknown".
    options: Dict[str, str] = field(default_factory=dict)
    settings: Dict[str, Dict[str, object]] = field(default_factory=dict)
    # A DataParallel given one device (`device_ids=[gpu]`, or the `device_ids` a DDP wrap of
    # the file is given, which holds at most one): it runs the module itself, no replicas.
    one_device: bool = False

    @property
    def tolerates_unused(self) -> bool:
        """DDP will not fail on unused parameters (or the file does not say)."""
        return any(self.options.get(k) in ("true", "unknown") for k in TOLERANT_KEYWORDS)

    def to_facts(self) -> Dict[str, object]:
        return {
            "kind": self.kind,
            "classes": sorted(self.classes),
            "options": self.options,
            "settings": self.settings,
            "one_device": self.one_device,
        }


class Wraps(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self.parallel: Parallel = ctx.analysis(Parallel)
        self.sources: OptionSources = ctx.analysis(OptionSources)
        self.sites: List[WrapSite] = []
        # Config reads that decide whether DDP tolerates unused parameters (settings.py),
        # from any call's keyword (a DDP wrap, MMDistributedDataParallel, DDPStrategy).
        self.settings: List[Dict[str, object]] = []
        for call, kind in self.parallel.wrap_calls():
            site = WrapSite(kind, call)
            module = call.args[0].value if call.args and not call.args[0].keyword else None
            module = keyword(call, "module") or module
            site.module = module
            if module is not None:
                site.classes = self.classes_of(module)
            if has_star_args(call):
                site.options = {k: "unknown" for k in ("find_unused_parameters", "static_graph")}
            for name in ("find_unused_parameters", "static_graph"):
                value = keyword(call, name)
                if value is not None:
                    site.options[name] = _truth(value)
                    unknown = site.options[name] == "unknown"
                    setting = self.sources.setting(value) if unknown else None
                    if setting is not None:
                        site.options[name] = "config"
                        site.settings[name] = setting
            self.sites.append(site)
        for site in self.sites:
            if site.kind == DP_KIND:
                site.one_device = self._one_device(site.call)
        self.signals = self._signals()
        self.finds_unused = self._finds_unused()
        self.frozen = self._frozen_outside()

    def facts(self) -> Dict[str, object]:
        return {
            "wraps": [site.to_facts() for site in self.sites],
            "signals": sorted(self.signals),
            "finds_unused": self.finds_unused,
            "hand_reduced": self._reduces_gradients_itself(),
            "unused_settings": self.settings,
            "frozen": sorted(self.frozen),
        }

    def _one_device(self, call: cst.Call) -> bool:
        """Is this DataParallel given exactly one device: a one-element `device_ids` list, or
        the same `device_ids` expression as a DistributedDataParallel wrap of the file (DDP
        takes one device per process; `if distributed: teacher = DataParallel(teacher,
        device_ids=device_ids); student = DDP(student, device_ids=device_ids)`)? With one
        device, DataParallel calls the module itself: nothing is replicated."""
        ids = argument(call, 1, "device_ids")
        if ids is None:
            return False
        if isinstance(ids, (cst.List, cst.Tuple)):
            return len(ids.elements) == 1 and type(ids.elements[0]) is cst.Element
        text = self.ctx.code(ids)
        return any(
            ddp is not None and self.ctx.code(ddp) == text
            for ddp in (argument(s.call, 1, "device_ids") for s in self.ddp_sites())
        )

    def ddp_sites(self) -> List[WrapSite]:
        return [site for site in self.sites if site.kind == DDP_KIND]

    # -- what is wrapped ----------------------------------------------------------------------

    def classes_of(self, expr: cst.CSTNode, depth: int = 0) -> Set[str]:
        """Qualified names of the classes `expr` may be an instance of (empty: unknown)."""
        if depth > 4:
            return set()
        expr = same_module(expr, self.names)
        if type(expr) is cst.Call:
            if self.parallel.wrap_kind(expr) is not None and expr.args:
                return self.classes_of(expr.args[0].value, depth + 1)
            out: Set[str] = set()
            if type(expr.func) is cst.Name:
                for binding in self.ctx.scopes.lookup(expr.func.value, expr.func):
                    if type(binding.node) is cst.FunctionDef:
                        out |= self._returned_classes(binding.node, depth)
            if out:
                return out
            for qualified in self.names.qualified(expr.func):
                if qualified.split(".")[-1][:1].isupper():
                    out.add(qualified)
            return out
        if type(expr) in (cst.Name, cst.Attribute):
            values = self.parallel.bound_values(expr, self.parallel.evaluation_point(expr))
            out = set()
            for value in values or ():
                if value is not None and value is not expr:
                    out |= self.classes_of(value, depth + 1)
            if not out and type(expr) is cst.Name:
                out = self._argument_classes(expr, depth)
            return out
        return set()

    def _argument_classes(self, name: cst.Name, depth: int) -> Set[str]:
        """A parameter of a function of this file (`def parallelize(config, model)`): the
        classes of what the file's calls of that function pass for it."""
        out: Set[str] = set()
        for binding in self.ctx.scopes.lookup(name.value, name):
            function = binding.statement
            if binding.kind != "param" or type(function) is not cst.FunctionDef:
                continue
            params = positional_params(function)
            index = next((i for i, p in enumerate(params) if p.name.value == name.value), None)
            for call in self.ctx.nodes(cst.Call):
                if not (type(call.func) is cst.Name and call.func.value == function.name.value):
                    continue
                value = keyword(call, name.value)
                if value is None and index is not None:
                    value = positional(call, index)
                if value is not None:
                    out |= self.classes_of(value, depth + 1)
        return out

    def _returned_classes(self, function: cst.FunctionDef, depth: int) -> Set[str]:
        """Classes a helper of this file returns (`def build_model(): return Net(...)`)."""
        out: Set[str] = set()
        for node in self.ctx.tree.descendants(function.body):
            if type(node) is cst.Return and node.value is not None:
                if self.ctx.scopes.enclosing_function(node) is function:
                    out |= self.classes_of(node.value, depth + 1)
        return out

    # -- the file as a whole ------------------------------------------------------------------

    def _signals(self) -> Set[str]:
        found: Set[str] = set()
        if any(site.kind == DDP_KIND for site in self.sites):
            found.add(DDP_WRAP_SIGNAL)
        elif self._own_ddp_wraps():
            # `from model import DistributedDataParallel as DDP`: the file wraps its models in a
            # class of its own (one that all-reduces what gradients there are, as NVIDIA's
            # sentiment-discovery does), not PyTorch's reducer; its process group and ranks
            # say nothing about how PyTorch's DDP would treat an unused parameter.
            return found
        if any(self.names.is_(call.func, INIT_PROCESS_GROUP) for call in self.ctx.nodes(cst.Call)):
            found.add("init_process_group")
        text = self.ctx.source.text
        if any(launcher in text for launcher in LAUNCHER_TEXT):
            found.add("torchrun / torch.distributed.launch")
        if self.parallel.reads_env("LOCAL_RANK"):
            found.add("LOCAL_RANK")
        return found

    def _reduces_gradients_itself(self) -> bool:
        """Does the file all-reduce gradients itself (`dist.all_reduce(param.grad.data, ...)`)?"""
        for call in self.ctx.nodes(cst.Call):
            if not call.args or not self.names.is_(call.func, "torch.distributed.all_reduce"):
                continue
            reduced = call.args[0].value
            if any(
                type(node) is cst.Attribute and node.attr.value == "grad"
                for node in [reduced, *descendants(reduced)]
            ):
                return True
        return False

    def _own_ddp_wraps(self) -> bool:
        """Does the file call a `DistributedDataParallel` that is neither PyTorch's nor apex's
        (a project class imported under that name or an alias of it)?"""
        for call in self.ctx.nodes(cst.Call):
            qualified = self.names.qualified(call.func)
            if any(q.split(".")[-1] == "DistributedDataParallel" for q in qualified) and not any(
                q in DDP_NAMES for q in qualified
            ):
                return True
        return False

    def _finds_unused(self) -> bool:
        """Code that makes DDP tolerate unused parameters (keywords, strategies, static graph).
        An MM-style config's top-level `find_unused_parameters = True` is not counted here: it
        applies to the models the config builds (TRL301 matches them by `type=`)."""
        found = False
        for call in self.ctx.nodes(cst.Call):
            for name in TOLERANT_KEYWORDS:
                value = keyword(call, name)
                if value is None or is_false(value):
                    continue
                # (HF's `ddp_find_unused_parameters=None` means "decide for me": not a setting)
                readable = name != "ddp_find_unused_parameters" and not is_true(value)
                setting = self.sources.setting(value) if readable else None
                if setting is None:
                    found = True
                elif setting not in self.settings:
                    # Decided against the project's configs in the project phase.
                    self.settings.append(setting)
            if found:
                return True
            if type(call.func) is cst.Attribute and call.func.attr.value == "_set_static_graph":
                return True
        for string in self.ctx.nodes(cst.SimpleString):
            if "find_unused_parameters_true" in string.value:
                return True
        return False

    def _frozen_outside(self) -> Set[str]:
        found: Set[str] = set()
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if type(func) is cst.Attribute and func.attr.value == "requires_grad_":
                if freezes(call):
                    _add_frozen(found, func.value)
        for loop in self.ctx.nodes(cst.For):
            receiver = frozen_by_loop(self.ctx, loop)
            if receiver is None or self._in_class(loop):
                # A class freezing a module handed to it (`backbone.named_parameters()` in
                # BackboneBase.__init__) freezes that object, not the attributes of others.
                continue
            walk = loop.iter.func.attr.value
            if walk == "named_parameters" and _add_frozen(set(), receiver) is None:
                found.add(ALL)  # frozen by name patterns over the whole model
            else:
                _add_frozen(found, receiver)
        return found

    def _in_class(self, node: cst.CSTNode) -> bool:
        return any(type(a) is cst.ClassDef for a in self.ctx.ancestors(node))


def _add_frozen(found: Set[str], receiver: cst.CSTNode) -> Optional[str]:
    """`model.backbone` -> "backbone" (added to `found` and returned). `self.x` is the class's
    own business (modules.py); a whole model (`teacher.requires_grad_(False)`, `model.module`)
    names no attribute: None."""
    chain = dotted_name(receiver)
    if chain is None:
        return None
    parts = chain.split(".")
    if parts[0] == "self" or len(parts) < 2 or parts[-1] == "module":
        return None
    found.add(parts[-1])
    return parts[-1]


def _truth(value: cst.CSTNode) -> str:
    if type(value) is cst.Name and value.value in ("True", "False"):
        return value.value.lower()
    return "unknown"


def is_local(qualname: str) -> bool:
    return qualname.startswith(LOCAL_PREFIX)


def local_name(qualname: str) -> str:
    return qualname[len(LOCAL_PREFIX) :]


__all__ = ["DDP_KIND", "DP_KIND", "WrapSite", "Wraps", "is_local", "local_name"]
