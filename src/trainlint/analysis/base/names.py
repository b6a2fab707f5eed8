"""Qualified names through imports and aliases.

`nn.DataParallel`, `DP` (from `from torch.nn import DataParallel as DP`),
`torch.nn.parallel.DataParallel` and `torch.nn.parallel.data_parallel.DataParallel` all resolve
to the canonical `torch.nn.DataParallel`. Resolution follows the bindings in effect where the
expression is evaluated (imports inside functions count; a local `class DataParallel` is not
torch's), simple alias assignments (`DP = nn.DataParallel`) and star imports (a name only a
star import binds may also be the package of that name the file's own imports name; the
globals every module has, `__name__`, `__file__`, `__doc__`, are the file's own and never a star
import's, so `if __name__ == "__main__":` under `from pkg import *` does not name the package).

This is a small import-alias table over the `Scopes` analysis; libcst's QualifiedNameProvider
would cost more than the parse itself.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

import libcst as cst

from .memo import Summaries
from .scopes import Scope, Scopes
from .. import Analysis


# Public re-exports and defining modules -> the name users see in the docs.
CANONICAL = {
    "torch.nn.parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.DataParallel",
    # PyTorch Geometric's subclass: it replicates the module and scatters a list of graphs to
    # the GPUs (from `device_ids[0]`) as torch's wrapper scatters tensors.
    "torch_geometric.nn.DataParallel": "torch.nn.DataParallel",
    "torch_geometric.nn.data_parallel.DataParallel": "torch.nn.DataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": (
        "torch.nn.parallel.DistributedDataParallel"
    ),
    "torch.nn.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.modules.module.Module": "torch.nn.Module",
    "torch.nn.modules.Module": "torch.nn.Module",
    "torch.nn.parameter.Parameter": "torch.nn.Parameter",
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.utils.data.distributed.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.utils.data.sampler.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.nn.modules.batchnorm.SyncBatchNorm": "torch.nn.SyncBatchNorm",
    "torch.distributed.distributed_c10d.init_process_group": (
        "torch.distributed.init_process_group"
    ),
    "torch.cuda.device_count": "torch.cuda.device_count",
}

# Samplers, datasets and launchers the distributed rules (TRL3xx) look for.
CANONICAL.update(
    {
        "torch.utils.data.sampler.BatchSampler": "torch.utils.data.BatchSampler",
        "torch.utils.data.dataset.IterableDataset": "torch.utils.data.IterableDataset",
        "torch.multiprocessing.spawn.spawn": "torch.multiprocessing.spawn",
        "torch.distributed.elastic.multiprocessing.start_processes": (
            "torch.multiprocessing.start_processes"
        ),
    }
)

LOCAL_PREFIX = "<local>."  # qualified name of something defined in this file
# Globals every module has from the start: a free `__name__` is the file's own, never a name
# a star import brought (a star import hands on no underscored name its `__all__` leaves out).
MODULE_GLOBALS = frozenset(
    {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__",
     "__cached__", "__path__"}
)


def canonical(qualname: str) -> str:
    found = CANONICAL.get(qualname)
    if found is not None:
        return found
    # Prefix forms: torch.nn.parallel.data_parallel.DataParallel.forward etc.
    parts = qualname.split(".")
    for cut in range(len(parts) - 1, 1, -1):
        head = ".".join(parts[:cut])
        if head in CANONICAL:
            return CANONICAL[head] + "." + ".".join(parts[cut:])
    return qualname


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """`a.b.c` for Name/Attribute chains, else None (calls, subscripts, ...)."""
    parts = []
    # Exact types: a parsed tree holds exactly these classes, and isinstance on a libcst class
    # is a Python-level ABCMeta call (this runs for most calls of every file).
    while type(node) is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def dotted_targets(target: cst.CSTNode) -> List[str]:
    """The dotted names an assignment or loop target binds, in order: `x` -> ["x"],
    `self.h, (c, *rest)` -> ["self.h", "c", "rest"]; subscripts bind no name."""
    text = dotted_name(target)
    if text is not None:
        return [text]
    out: List[str] = []
    if type(target) is cst.Tuple or type(target) is cst.List:
        for element in target.elements:
            out.extend(dotted_targets(element.value))
    elif type(target) is cst.StarredElement:
        out.extend(dotted_targets(target.value))
    return out


class Names(Analysis):
    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.scopes: Scopes = ctx.analysis(Scopes)
        # id(node) -> (node, its names): a node's hash is a Python-level call, id() is not; the
        # node is kept with its entry, so its id cannot be reused while the entry lives.
        self._cache: Dict[int, Tuple[cst.CSTNode, FrozenSet[str]]] = {}
        # An alias resolves through the name it was assigned from, however long the chain
        # (`d2 = d1; d1 = d0`); a name that comes back around (`a = b; b = a`) denotes nothing.
        self._resolved: Summaries[cst.CSTNode, FrozenSet[str]] = Summaries(
            self._resolve, frozenset()
        )

    def qualified(self, node: cst.CSTNode) -> FrozenSet[str]:
        """Every canonical qualified name `node` may denote (empty when unknown)."""
        entry = self._cache.get(id(node))
        if entry is not None and entry[0] is node:
            return entry[1]
        found = self._resolved.get(node)
        self._cache[id(node)] = (node, found)
        return found

    def is_(self, node: cst.CSTNode, *qualnames: str) -> bool:
        entry = self._cache.get(id(node))
        found = entry[1] if entry is not None and entry[0] is node else self.qualified(node)
        return not found.isdisjoint(qualnames)

    def matches_suffix(self, node: cst.CSTNode, *suffixes: str) -> bool:
        """True when a qualified name ends with one of `suffixes` (e.g. "DataLoader")."""
        return any(q == s or q.endswith("." + s) for q in self.qualified(node) for s in suffixes)

    def imports(self, prefix: str) -> bool:
        """Does the file import `prefix` or something under it (anywhere)?"""
        for scope in self.scopes.iter_scopes():
            for bindings in scope.bindings.values():
                for b in bindings:
                    if (
                        b.kind == "import"
                        and b.qualname
                        and (b.qualname == prefix or b.qualname.startswith(prefix + "."))
                    ):
                        return True
            for star in scope.star_imports:
                if star == prefix or star.startswith(prefix + "."):
                    return True
        return False

    def imported_names(self) -> Iterable[str]:
        for scope in self.scopes.iter_scopes():
            for bindings in scope.bindings.values():
                for b in bindings:
                    if b.kind == "import" and b.qualname:
                        yield b.qualname

    # -- resolution ---------------------------------------------------------------------------

    def _resolve(self, node: cst.CSTNode) -> FrozenSet[str]:
        if type(node) is cst.Name:
            return frozenset(self._resolve_name(node))
        if type(node) is cst.Attribute:
            return frozenset(
                canonical(f"{base}.{node.attr.value}") for base in self._resolved.get(node.value)
            )
        return frozenset()

    def _resolve_name(self, node: cst.Name) -> Set[str]:
        bindings = self.scopes.lookup(node.value, node)
        out: Set[str] = set()
        if not bindings:
            if node.value in MODULE_GLOBALS:
                return out
            for star in self._star_imports_for(node):
                out.add(canonical(f"{star}.{node.value}"))
                if node.value in self._package_roots():
                    # `from seq_model import *` then `torch.set_grad_enabled(False)`, in a file
                    # that itself imports `torch.nn as nn`: the star import hands on the package
                    # that file imported, the one the file's own imports name
                    out.add(node.value)
            return out
        for binding in bindings:
            if binding.kind == "import" and binding.qualname:
                out.add(canonical(binding.qualname))
            elif (
                binding.kind in ("assign", "annassign")
                and binding.value is not None
                and type(binding.value) in (cst.Name, cst.Attribute)
            ):
                # `DP = nn.DataParallel`: an alias, not a new object.
                resolved = self._resolved.get(binding.value)
                out.update(resolved or {LOCAL_PREFIX + node.value})
            else:
                out.add(LOCAL_PREFIX + node.value)
        return out

    def _package_roots(self) -> FrozenSet[str]:
        """The top-level packages the file's absolute imports name (`import torch.nn as nn`,
        `from torch.utils.data import DataLoader`: "torch")."""
        roots = getattr(self, "_roots", None)
        if roots is None:
            roots = self._roots = frozenset(
                q.split(".")[0] for q in self.imported_names() if not q.startswith(".")
            )
        return roots

    def _star_imports_for(self, node: cst.CSTNode):
        scope: Optional[Scope] = self.scopes.scope_of(node)
        while scope is not None:
            yield from scope.star_imports
            scope = scope.parent


# -- names of the project or of a library ------------------------------------------------------


STDLIB = frozenset(
    getattr(
        __import__("sys"),
        "stdlib_module_names",
        {"os", "sys", "re", "json", "math", "time", "random", "logging", "functools", "copy"},
    )
)
# Packages whose loaders and tensor functions make batches on the CPU unless told a device.
TORCH_PACKAGES = frozenset({"torch", "torchvision", "torchaudio", "torchtext"})
THIRD_PARTY = TORCH_PACKAGES | frozenset(
    {
        "numpy",
        "scipy",
        "pandas",
        "sklearn",
        "PIL",
        "cv2",
        "tqdm",
        "wandb",
        "tensorboard",
        "tensorboardX",
        "transformers",
        "datasets",
        "tokenizers",
        "accelerate",
        "timm",
        "lightning",
        "pytorch_lightning",
        "mmcv",
        "mmengine",
        "mmdet",
        "mmseg",
        "mmpretrain",
        "detectron2",
        "ignite",
        "deepspeed",
        "apex",
        "einops",
        "matplotlib",
        "yaml",
        "omegaconf",
        "hydra",
        "clip",
        "open_clip",
        "fairseq",
        "peft",
        "evaluate",
        "torchmetrics",
        "kornia",
        "albumentations",
        "h5py",
        "pycocotools",
    }
)


def may_be_project(qualname: str) -> bool:
    """May an imported name belong to this project: neither this file's (`<local>.`) nor of
    torch, a known library or the standard library? A relative import (`.utils.f`) may."""
    if qualname.startswith(LOCAL_PREFIX):
        return False
    if qualname.startswith("."):
        return True
    top = qualname.split(".")[0]
    return top not in THIRD_PARTY and top not in STDLIB
