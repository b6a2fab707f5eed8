"""TRL308 ddp-without-distributed-sampler."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import libcst as cst

from ...analysis.base.callgraph import CallGraph
from ...analysis.base.calls import argument, has_star_args, is_none
from ...analysis.base.frameworks import Frameworks
from ...analysis.base.names import dotted_name, may_be_project
from ...analysis.loop.loaders import LoaderFlow, is_torch_dataloader
from ...analysis.parallel.parallel import Parallel
from ...analysis.project.hierarchy import Hierarchy, deferred_candidates
from ...diagnostics import Diagnostic, Severity
from ..base import Rule

# Spellings that mean the data is already split between processes.
_SHARDED = re.compile(
    r"rank|world_size|num_replicas|shard|split_dataset_by_node|split_by_node|num_processes|"
    r"process_index|node_split",
    re.I,
)
_ITERABLE_BASE = re.compile(r"IterableDataset|IterDataPipe|WebDataset|Stream", re.I)


class DdpWithoutDistributedSampler(Rule):
    """## What it does
    Reports a DataLoader that feeds a training loop in a script that trains with
    DistributedDataParallel, when the loader has neither a `sampler` nor a `batch_sampler`.

    ## Why is this bad
    DDP does not split the data: each process iterates its own DataLoader. Without a
    `DistributedSampler` every rank walks the whole dataset, so one "epoch" is `world_size` passes
    over the data, learning-rate schedules and epoch counts are off by that factor, and ranks
    that share a seed draw identical batches (DDP then averages the same gradient N times). No
    error is raised; the run is just N times slower to see new data than it looks.

    Not reported: loaders with any sampler or batch sampler (custom distributed samplers
    included), loaders built on the non-distributed branch of the script, datasets that shard by
    rank themselves (an `IterableDataset` that reads the rank, `split_dataset_by_node`,
    `dataset.shard(...)`, `Subset(ds, range(rank, n, world_size))`) or are built from items
    split by rank (MONAI's `partition_dataset(files, num_partitions=world_size)[rank]`, through
    the names they pass on), datasets that a class or function of another project file builds
    when that file, or one it imports, names a rank or a world size (the project phase reads
    it; under flake8, which cannot, such a dataset is not judged), loaders that batch nothing
    (`batch_size=None`: a streaming dataset that hands out whole batches, and may shard by
    rank itself, as wenet's and webdataset's pipelines do), loaders handed only to calls of a
    shared epoch function that turn its backward off (`run_epoch(..., val_loader, is_train=False)` when the backward sits under
    `if is_train:`; a literal, or the parameter's literal default), loaders handed to a
    function or class defined elsewhere whose name says it trains (`Trainer(cfg, train_loader,
    test_loader)`, `fit(..., val_dataloaders=dl)`) under a name for evaluation data, their own
    or the keyword's (such a call is taken to train on the loaders it gets only when nothing
    says they are held out), and framework-managed code
    (Accelerate, Lightning, ... shard the loaders they prepare).

    ## Example
    ```python
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    for epoch in range(epochs):
        for x, y in train_loader:
            loss = criterion(model(x.to(local_rank)), y.to(local_rank))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    ```

    ## Use instead
    ```python
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    train_sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=64, sampler=train_sampler)
    for epoch in range(epochs):
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            loss = criterion(model(x.to(local_rank)), y.to(local_rank))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    ```

    ## Fix safety
    No fix: adding a sampler changes how much data each rank sees per epoch, which the user has
    to account for (epoch counts, schedules, `set_epoch`).
    """

    code = "TRL308"
    name = "ddp-without-distributed-sampler"
    severity = Severity.WARNING
    # A DDP script is where a finding can be; a file that builds a dataset with torch is read
    # too, for whether it splits the data by rank (its facts).
    markers = ("DistributedDataParallel", "torch")
    project = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # candidate key -> {"builders": the imported names that build its dataset}
        self.deferred: Dict[str, Dict[str, List[str]]] = {}

    def finish(self) -> None:
        ctx = self.ctx
        parallel: Parallel = ctx.analysis(Parallel)
        frameworks: Frameworks = ctx.analysis(Frameworks)
        wraps = [
            call
            for call, kind in parallel.wrap_calls()
            if kind == "DistributedDataParallel" and not frameworks.managed(call)
        ]
        if not wraps:
            return
        flow: LoaderFlow = ctx.analysis(LoaderFlow)
        for call in ctx.nodes(cst.Call):
            if not is_torch_dataloader(ctx.names, call) or has_star_args(call):
                continue
            if frameworks.managed(call):
                continue
            sampler = argument(call, 3, "sampler")
            batch_sampler = argument(call, 4, "batch_sampler")
            if (sampler is not None and not is_none(sampler)) or (
                batch_sampler is not None and not is_none(batch_sampler)
            ):
                continue
            if parallel.non_distributed_branch(call) is not None:
                continue
            batch_size = argument(call, 1, "batch_size")
            if batch_size is not None and is_none(batch_size):
                # `DataLoader(ds, batch_size=None)`: the dataset hands out whole batches, a
                # streaming pipeline (wenet, webdataset, lhotse) that may shard by rank itself
                continue
            dataset = argument(call, 0, "dataset")
            if dataset is None or self._sharded(dataset):
                continue
            builders = self._project_builders(dataset)
            refs = flow.references(call)
            uses = [u for u in flow.uses(call) if flow.is_training_use(u, refs)]
            if not uses or any(frameworks.managed(u.site) for u in uses):
                continue
            name = self._loader_name(call)
            message = f"{name} has no DistributedSampler but trains a DistributedDataParallel model"
            help = (
                "Every rank then iterates the whole dataset, so an epoch is world_size "
                "passes over the data (identical batches on every rank when seeds match). "
                "Pass `sampler=DistributedSampler(dataset)` and call `set_epoch` each epoch."
            )
            related = [(wraps[0], "the model is wrapped in DistributedDataParallel here")]
            if builders:
                # Built by another file of the project, which may split the items by rank
                # itself: the project phase reads it.
                key = f"loader:{len(self.deferred)}"
                self.deferred[key] = {"builders": builders}
                self.candidate(key, call, message, help=help, related=related)
            else:
                self.report(call, message, help=help, related=related)

    def facts(self) -> Optional[Dict[str, object]]:
        # Every file says whether its code names a rank or a world size: a training script
        # whose dataset this file builds asks (the file's names are already indexed).
        return {
            "deferred": self.deferred,
            "names_rank": any(_SHARDED.search(n.value) for n in self.ctx.nodes(cst.Name)),
        }

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        for hierarchy, display, path, key, entry in deferred_candidates(project, cls.code):
            if entry is not None and any(
                _may_shard(hierarchy, builder, path) for builder in entry["builders"]
            ):
                continue
            diagnostic = project.candidate(display, cls.code, key)
            if diagnostic is not None:
                yield diagnostic

    def _project_builders(self, dataset: cst.BaseExpression, depth: int = 0) -> List[str]:
        """What builds the dataset when another file of the project does: the qualified names of
        the imported class or function called (`init_dataset(...)`, `data.TokenBlocks(...)`),
        also through the names it is bound to (`train_set = init_dataset(...)`)."""
        if type(dataset) is cst.Call:
            return sorted(q for q in self.ctx.names.qualified(dataset.func) if may_be_project(q))
        found: List[str] = []
        if type(dataset) is cst.Name and depth < 4:
            for binding in self.ctx.scopes.lookup(dataset.value, dataset):
                if binding.value is not None:
                    found.extend(self._project_builders(binding.value, depth + 1))
        return sorted(set(found))

    # -- datasets that split themselves -------------------------------------------------------

    def _sharded(self, dataset: cst.BaseExpression, depth: int = 0) -> bool:
        """Does the dataset shard by rank itself, or is it one we cannot judge (iterable)? Also
        when what it is built from was split by rank: `CacheDataset(data=train_files)` with
        `train_files = partition_dataset(files, num_partitions=world_size)[rank]`."""
        if depth > 4:
            return False
        if _SHARDED.search(self._identifiers(dataset)):
            return True
        for cls in self._classes_built(dataset):
            if cls is None:
                continue
            if isinstance(cls, str):
                if _ITERABLE_BASE.search(cls):
                    return True  # a streaming dataset from elsewhere: it may shard itself
                continue
            # A dataset class of this file: does it split its items by rank itself?
            if _SHARDED.search(self._identifiers(cls.body)):
                return True
        if type(dataset) is cst.Call:
            # the items the dataset is built from (its arguments' names, through their values)
            arguments = [a.value for a in dataset.args]
            names = [n for a in arguments for n in [a, *self.ctx.tree.descendants(a)]]
            for name in names:
                if type(name) is cst.Name and self._bound_sharded(name, depth):
                    return True
        if type(dataset) is cst.Name:
            if self._bound_sharded(dataset, depth):
                return True
            # `ds = ds.shard(...)` after the first assignment
            for binding in self.ctx.scopes.lookup(dataset.value, dataset):
                if binding.kind in ("augassign", "param") and _SHARDED.search(dataset.value):
                    return True
        return False

    def _bound_sharded(self, name: cst.Name, depth: int) -> bool:
        """Is a value bound to `name` (`x = ...`, or `a, b = split(...)`) split by rank?"""
        for binding in self.ctx.scopes.lookup(name.value, name):
            value = binding.value
            if binding.kind == "unpack" and type(binding.statement) is cst.Assign:
                value = binding.statement.value  # train_files, val_files = partition(...)
            if value is not None and self._sharded(value, depth + 1):
                return True
            if binding.kind == "param" and type(binding.statement) is cst.FunctionDef:
                # `def prepare_data(train_files, ...)`: what the file's callers pass for it
                callgraph: CallGraph = self.ctx.analysis(CallGraph)
                for call in callgraph.callers(binding.statement):
                    passed = callgraph.argument_for(call, binding.statement, name.value)
                    if passed is not None and self._sharded(passed, depth + 1):
                        return True
        return False

    def _identifiers(self, node: cst.CSTNode) -> str:
        """The names used in `node` (not its strings: a file called shard-000 shards nothing)."""
        words = [n.value for n in self.ctx.tree.descendants(node) if type(n) is cst.Name]
        if type(node) is cst.Name:
            words.append(node.value)
        return " ".join(words)

    def _classes_built(self, expr: cst.BaseExpression) -> List[Optional[cst.ClassDef | str]]:
        """The classes a dataset expression constructs: a same-file ClassDef or a dotted name."""
        out: List[Optional[cst.ClassDef | str]] = []
        if type(expr) is not cst.Call:
            return out
        func = expr.func
        if type(func) is cst.Name:
            for binding in self.ctx.scopes.lookup(func.value, func):
                if type(binding.node) is cst.ClassDef:
                    out.append(binding.node)
                else:
                    out.append(binding.qualname or func.value)
            if not out:
                out.append(func.value)
        else:
            out.append(dotted_name(func))
        return out

    def _loader_name(self, call: cst.Call) -> str:
        parent = self.ctx.parent(call)
        if type(parent) is cst.Assign and len(parent.targets) == 1:
            text = dotted_name(parent.targets[0].target)
            if text is not None:
                return f"`{text}`"
        return "This DataLoader"


def _may_shard(hierarchy: Hierarchy, builder: str, importer: Path) -> bool:
    """May the class or function `builder` (as imported in `importer`) split the dataset's
    items by rank? Yes when the project file that defines it, or a project file that file
    imports (two levels: `init_dataset` building a `Dataset` of the next module), uses a rank
    or world size, and when that file is the project's but its text is not at hand (flake8).
    No for a name no project file defines (a library's dataset): as the rule judged before."""
    module = hierarchy.import_file(builder, importer)
    if module is None:
        return False
    for file in [module, *hierarchy.imported_closure(module, depth=2)]:
        facts = hierarchy.facts_at(file)
        if facts is not None:
            if facts.get("names_rank"):
                return True
            continue
        # Not read by this rule: flake8 (unknown), or a file nothing made worth parsing,
        # whose text is then all there is to go by.
        text = hierarchy.project.text_of(file)
        if text is None or _SHARDED.search(text):
            return True
    return False
