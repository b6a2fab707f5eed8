"""Framework-managed code: where a library, not the user's code, moves data and runs the loop.

Device and loop rules stay quiet in such code (docs/architecture.md, "Frameworks that run the
loop"):
- Lightning: every method of a `LightningModule` subclass (the Trainer moves batches and runs
  the loops), and `LightningDataModule`s.
- Accelerate: a function (or the module's top level) that calls `accelerator.prepare(...)` or
  `accelerator.backward(...)`; the prepared loaders yield batches already on the device.
- Hugging Face: subclasses of `transformers.Trainer` (compute_loss, training_step, ...).
- MMEngine / MMDetection / MMCV: subclasses of their models, hooks and runners.
- detectron2: subclasses of its trainers and hooks.
- ignite: process functions handed to `Engine(...)`, and handlers decorated with `@x.on(...)`.
- DeepSpeed: functions that call `deepspeed.initialize(...)` or use the engine's
  `backward`/`step`.
- Default devices: a module that calls `torch.set_default_device(...)` (everything is created on
  that device) and code inside `with torch.device(...):`.

`managed(node)` answers with the framework's name (for messages and tests) or None.
"""

from __future__ import annotations

from typing import Dict, Optional, Set

import libcst as cst

from .names import Names, dotted_name
from .. import Analysis


# Base classes (canonical qualified names, or suffixes after the last dot) whose methods a
# framework calls with data it has already placed.
MANAGED_BASES: Dict[str, str] = {
    "pytorch_lightning.LightningModule": "lightning",
    "pytorch_lightning.core.LightningModule": "lightning",
    "pytorch_lightning.core.module.LightningModule": "lightning",
    "lightning.LightningModule": "lightning",
    "lightning.pytorch.LightningModule": "lightning",
    "lightning.pytorch.core.LightningModule": "lightning",
    "pytorch_lightning.LightningDataModule": "lightning",
    "lightning.LightningDataModule": "lightning",
    "lightning.pytorch.LightningDataModule": "lightning",
    "lightning.fabric.Fabric": "lightning",
    "transformers.Trainer": "transformers",
    "transformers.Seq2SeqTrainer": "transformers",
    "transformers.trainer.Trainer": "transformers",
    "trl.SFTTrainer": "transformers",
    "mmengine.model.BaseModel": "mmengine",
    "mmengine.runner.Runner": "mmengine",
    "mmengine.hooks.Hook": "mmengine",
    "mmengine.model.BaseDataPreprocessor": "mmengine",
    "mmdet.models.detectors.BaseDetector": "mmengine",
    "mmdet.models.detectors.base.BaseDetector": "mmengine",
    "mmcv.runner.BaseModule": "mmengine",
    "mmcv.runner.Hook": "mmengine",
    "detectron2.engine.DefaultTrainer": "detectron2",
    "detectron2.engine.SimpleTrainer": "detectron2",
    "detectron2.engine.AMPTrainer": "detectron2",
    "detectron2.engine.HookBase": "detectron2",
    "detectron2.engine.train_loop.HookBase": "detectron2",
    "detectron2.engine.TrainerBase": "detectron2",
    "ignite.engine.Engine": "ignite",
}
_MANAGED_SUFFIXES = ("LightningModule", "LightningDataModule")

_DEFAULT_DEVICE_CALLS = ("torch.set_default_device", "torch.set_default_tensor_type")

# Libraries whose models and losses are PyTorch's, though a file using them may never write
# `torch` itself.
_TORCH_LIBRARIES = frozenset(
    {
        "lightning", "accelerate", "transformers", "deepspeed", "ignite", "detectron2",
        "mmengine", "mmcv", "mmdet", "mmseg", "mmpretrain", "mmcls", "timm", "fastai",
        "diffusers", "peft", "trl", "dgl", "monai", "kornia", "sentence_transformers",
        "allennlp", "fairseq", "speechbrain", "nemo", "espnet", "catalyst", "skorch",
        "pyro", "gpytorch", "botorch", "einops", "x_transformers", "open_clip", "clip",
        "segmentation_models_pytorch", "pytorch_lightning", "flash", "ultralytics",
    }
)


class Frameworks(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names: Names = ctx.analysis(Names)
        self._class_reason: Dict[cst.CSTNode, Optional[str]] = {}
        self.module_reason: Optional[str] = None
        self._managed_functions: Dict[cst.CSTNode, str] = {}
        self._scan()

    # -- queries ------------------------------------------------------------------------------

    def managed(self, node: cst.CSTNode) -> Optional[str]:
        """The framework that manages the code at `node` (device placement, loops), or None."""
        if self.module_reason is not None:
            return self.module_reason
        for ancestor in self._self_and_ancestors(node):
            if type(ancestor) is cst.With and self._is_device_context(ancestor):
                return "torch.device context"
            if type(ancestor) is cst.FunctionDef:
                reason = self._managed_functions.get(ancestor)
                if reason is not None:
                    return reason
            if type(ancestor) is cst.ClassDef:
                reason = self.class_framework(ancestor)
                if reason is not None:
                    return reason
        return None

    def class_framework(self, cls: cst.ClassDef) -> Optional[str]:
        if cls not in self._class_reason:
            self._class_reason[cls] = self._base_framework(cls)
        return self._class_reason[cls]

    def uses(self, framework: str) -> bool:
        """Does anything in the file belong to `framework` ("accelerate", "lightning", ...)?"""
        return framework in self._frameworks_in_file

    def without_torch(self) -> bool:
        """Is the file a script or notebook that uses no PyTorch: it imports neither torch
        (nor `torch*` packages) nor a library built on it, and no star import could bring one
        in? Such code (a NumPy-only homework framework with its own `model.backward(...)`)
        records no autograd graph; a model and loss it builds from a module of its project are
        taken to be that module's own. A module of helpers only (functions and classes, no
        loop of its own at the top level) is not judged so: its callers may hand it torch's
        models and losses without it ever importing torch."""
        if self.ctx.scopes.module_scope.star_imports or not self._runs_as_script():
            return False
        for name in self.names.imported_names():
            top = name.lstrip(".").split(".")[0]
            if top.startswith("torch") or top in _TORCH_LIBRARIES:
                return False
        return True

    def _runs_as_script(self) -> bool:
        """A notebook, or a module with a loop or an `if __name__ == "__main__":` block at
        its top level."""
        if self.ctx.source.notebook is not None:
            return True
        for statement in self.ctx.module.body:
            if type(statement) in (cst.For, cst.While):
                return True
            if type(statement) is cst.If and "__main__" in self.ctx.code(statement.test):
                return True
        return False

    # -- building -----------------------------------------------------------------------------

    def _scan(self) -> None:
        self._frameworks_in_file: Set[str] = set()
        for name in self.names.imported_names():
            top = name.lstrip(".").split(".")[0]
            if top in ("pytorch_lightning", "lightning"):
                self._frameworks_in_file.add("lightning")
            elif top in ("accelerate", "transformers", "deepspeed", "ignite", "detectron2"):
                self._frameworks_in_file.add(top)
            elif top in ("mmengine", "mmcv", "mmdet", "mmseg", "mmpretrain", "mmcls"):
                self._frameworks_in_file.add("mmengine")
        for call in self.ctx.nodes(cst.Call):
            reason = self._managing_call(call)
            if reason is None:
                continue
            function = self._enclosing_function(call)
            if function is None:
                # At module level (a script): the whole file is the managed program.
                self.module_reason = reason
            else:
                self._managed_functions.setdefault(function, reason)
        # ignite: functions handed to Engine(...) or decorated with @engine.on(...).
        for function in self.ctx.nodes(cst.FunctionDef):
            for decorator in function.decorators:
                expr = decorator.decorator
                if type(expr) is cst.Call and type(expr.func) is cst.Attribute:
                    if expr.func.attr.value == "on" and "ignite" in self._frameworks_in_file:
                        self._managed_functions.setdefault(function, "ignite")
        if "ignite" in self._frameworks_in_file:
            for call in self.ctx.nodes(cst.Call):
                if self.names.matches_suffix(call.func, "Engine") and call.args:
                    handler = call.args[0].value
                    if type(handler) is cst.Name:
                        for binding in self.ctx.scopes.lookup(handler.value, handler):
                            if type(binding.node) is cst.FunctionDef:
                                self._managed_functions.setdefault(binding.node, "ignite")

    def _managing_call(self, call: cst.Call) -> Optional[str]:
        func = call.func
        # One lookup of what the callee names for both checks (`names.is_` twice per call of
        # the file cost more than the rest of the scan).
        qualified = self.names.qualified(func)
        if qualified:
            if not qualified.isdisjoint(_DEFAULT_DEVICE_CALLS):
                return "torch.set_default_device"
            if "deepspeed.initialize" in qualified:
                return "deepspeed"
        if type(func) is cst.Attribute:
            attr = func.attr.value
            owner = dotted_name(func.value) or ""
            leaf = owner.split(".")[-1].lower()
            if attr in ("prepare", "prepare_model", "prepare_data_loader", "backward") and (
                "accelerat" in leaf or leaf in ("fabric",)
            ):
                return "accelerate" if "accelerat" in leaf else "lightning"
            if attr == "prepare" and self._is_accelerator(func.value):
                return "accelerate"
            if attr in ("backward", "step") and (
                "engine" in leaf and "deepspeed" in self._frameworks_in_file
            ):
                return "deepspeed"
        return None

    def _is_accelerator(self, expr: cst.CSTNode) -> bool:
        if type(expr) is cst.Name:
            for binding in self.ctx.scopes.lookup(expr.value, expr):
                value = binding.value
                if type(value) is cst.Call and self.names.is_(
                    value.func,
                    "accelerate.Accelerator",
                    "lightning.fabric.Fabric",
                    "lightning.Fabric",
                ):
                    return True
        return False

    def _base_framework(self, cls: cst.ClassDef) -> Optional[str]:
        for base in cls.bases:
            for qualname in self.names.qualified(base.value):
                if qualname in MANAGED_BASES:
                    return MANAGED_BASES[qualname]
                if qualname.endswith(_MANAGED_SUFFIXES):
                    return "lightning"
            dotted = dotted_name(base.value) or ""
            if dotted.endswith(_MANAGED_SUFFIXES):
                return "lightning"
        return None

    def _is_device_context(self, node: cst.With) -> bool:
        for item in node.items:
            expr = item.item
            if type(expr) is cst.Call and self.names.is_(expr.func, "torch.device"):
                return True
        return False

    def _enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.FunctionDef:
                return ancestor
        return None

    def _self_and_ancestors(self, node: cst.CSTNode):
        yield node
        yield from self.ctx.ancestors(node)


# -- loaders prepared by a framework (TRL101) ---------------------------------------------------

_LOADER_PREPARING = {
    "setup_dataloaders": "fabric",  # lightning.fabric
    "prepare_data_loader": "accelerat",
    "prepare": "accelerat",
}


def loaders_prepared_by_framework(ctx) -> Optional[str]:
    """The framework that prepares this file's DataLoaders anywhere in the file
    (`fabric.setup_dataloaders(...)`, `accelerator.prepare(...)`), or None. Their batches arrive
    on the device even in helper functions that receive the prepared loader as a parameter."""
    for call in ctx.nodes(cst.Call):
        func = call.func
        if type(func) is not cst.Attribute:
            continue
        owner_word = _LOADER_PREPARING.get(func.attr.value)
        if owner_word is None:
            continue
        owner = (dotted_name(func.value) or "").split(".")[-1].lower()
        if owner_word in owner:
            return "lightning" if owner_word == "fabric" else "accelerate"
    return None
