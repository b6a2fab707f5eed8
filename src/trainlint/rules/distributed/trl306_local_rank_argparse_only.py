"""TRL306 local-rank-argparse-only."""

from __future__ import annotations

import builtins
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from ...analysis.base.callgraph import CallGraph
from ...analysis.base.calls import keyword, method_call
from ...analysis.base.frameworks import Frameworks
from ...analysis.base.names import dotted_name
from ...analysis.base.scopes import reads_of_binding
from ...analysis.parallel.parallel import Parallel
from ...analysis.parallel.wraps import DDP_WRAP_SIGNAL, Wraps
from ...analysis.project.hierarchy import Hierarchy, candidate_files, import_qualnames
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule
from ...analysis.base.nodes import loops_over_range, positional_params

_FLAGS = ("--local_rank", "--local-rank")


class LocalRankArgparseOnly(Rule):
    """## What it does
    Reports `parser.add_argument("--local_rank", ...)` in a file that never reads the
    `LOCAL_RANK` environment variable.

    ## Why is this bad
    The flag comes from `python -m torch.distributed.launch`, and launchers changed:

    - `torchrun` (and `torch.distributed.launch --use-env`) passes no flag at all; it sets
      `LOCAL_RANK` in the environment. `args.local_rank` keeps its default on every rank, so
      every process picks the same GPU (usually `cuda:0`) or believes it is not distributed.
    - Since PyTorch 2.0, `torch.distributed.launch` passes `--local-rank` (with a hyphen); a
      parser that only knows `--local_rank` exits with
      `error: unrecognized arguments: --local-rank=0`.

    DeepSpeed scripts are not reported (the `deepspeed` launcher passes `--local_rank` and sets
    `LOCAL_RANK`), nor files whose process groups all use the MPI backend
    (`init_process_group(backend="mpi")`: `mpirun` or `srun --mpi` starts the processes and
    MPI gives each its rank, so no torch launcher passes the flag), nor files that read `LOCAL_RANK` themselves or import a project file that
    does (`init_distributed()` of dist_utils.py, also through a helper of that file that looks
    each launcher's name up in turn: `env2int(["OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"])`;
    under flake8, which sees one file, an imported project file may, so such a file is not
    reported there), nor files whose workers take their rank from a
    launcher instead: `def main_worker(local_rank, args): args.local_rank = local_rank` handed to
    `mp.spawn(main_worker, ...)` (or a project's `launch(main_worker, ...)`) gets each process's
    index, which replaces the parsed flag (a worker the file calls itself with
    `args.local_rank` still gets the flag and is reported), nor files that start their
    processes themselves and set each one's rank: `for rank in range(n): args.local_rank =
    rank` in the loop that makes a `Process(target=..., args=(..., args))` for each (a loop
    that starts processes without setting it is reported).
    Nor is a parser copied into a script nobody launches per process: the file is not
    distributed at all (no DDP wrap, no `init_process_group`), uses the flag at most in
    comparisons that decide who logs (`args.local_rank > 0`) and in device arguments
    (`map_location=f"cuda:{args.local_rank}"`, `torch.device(...)`, a dict of locations bound
    to a name and passed as `map_location`), and hands the rank or the parsed namespace to no
    function that may start a process group (`init_distributed(args)` could). A function
    defined in a project module may not when its code, the code of the functions of its
    module it calls or hands on, and the project functions those call (two levels) name
    neither `DistributedDataParallel` nor `init_process_group`: an evaluation script's
    `train.get_loaders(args)` is not suspect because train.py's `create_trainer` starts the
    group, while `train.create_validator(args)`, which does, makes the script one launched per
    process. Another name of a project module (a class, a re-export) may not when the module
    and the project files it imports (two levels) name neither (a model zoo's
    `get_model(name, local_rank=args.local_rank)`); a library's function may, and under
    flake8, which sees one file, any may. Builtins (`getattr(args, name)` while logging the
    options) start nothing. A parser built by
    a factory that returns it unparsed (`get_args_parser()`) is still
    reported: the script importing it may well be launched per process. It is not when the
    project files importing it start their processes with `mp.spawn` and neither they nor
    its file read the flag (`args.local_rank`, `getattr(args, "local_rank")`): example
    scripts that take the GPU from the index spawn passes (under flake8, which sees one file,
    the scripts are unknown, so it is not reported there). Both spellings
    count wherever the file adds them (`--local-rank` on one PyTorch version, `--local_rank` on
    another).

    ## Example
    ```python
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group("nccl")
    ```

    ## Use instead
    ```python
    parser.add_argument(
        "--local_rank", "--local-rank", type=int, default=os.environ.get("LOCAL_RANK", -1)
    )
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group("nccl")
    ```

    ## Fix safety
    The fix adds the missing spelling (`--local-rank` or `--local_rank`) and makes the default
    `os.environ.get("LOCAL_RANK", <old default>)`. argparse converts a string default with the
    argument's `type`, so `type=int` still yields an int. It is safe: an explicit flag still
    wins, and without `LOCAL_RANK` in the environment the default is unchanged. It needs `os`
    imported and is not offered for `action=` arguments.
    """

    code = "TRL306"
    name = "local-rank-argparse-only"
    severity = Severity.WARNING
    fix = "safe"
    # "LOCAL_RANK": the project's helper files that read it for the script (project phase).
    markers = ("local_rank", "local-rank", "LOCAL_RANK")
    project = True

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.parallel: Parallel = ctx.analysis(Parallel)
        self.frameworks: Frameworks = ctx.analysis(Frameworks)
        self._is_distributed: Optional[bool] = None
        # candidate key -> the imported functions a file that is not distributed itself hands
        # the rank to (`get_model(..., local_rank=args.local_rank)`): the project phase reports
        # it only if one of them may start the process group.
        self._handoffs: Dict[str, List[str]] = {}
        # candidate keys of parsers a factory returns unparsed: the project phase reports them
        # only when a file that uses the factory reads the flag.
        self._factory_keys: List[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        if method_call(node, "add_argument") is None:
            return
        flags = self._flag_args(node)
        if not flags:
            return
        if self.parallel.reads_env("LOCAL_RANK") or self.frameworks.uses("deepspeed"):
            return
        if self.parallel.mpi_launched():
            return  # mpirun / srun start the processes: torch's launchers never run it
        if self._rank_from_a_spawner():
            return
        handoffs: Optional[List[str]] = None
        leaves = self._parser_leaves(node)
        if not self._distributed() and not leaves:
            handoffs = self._flag_handoffs()
            if handoffs == []:
                return  # a copied parser in a script nobody launches per process
        spellings = {_string(a.value) for a in flags} | self._other_spellings(node)
        default = keyword(node, "default")
        default_text = self.ctx.code(default) if default is not None else "None"
        parts = []
        if "--local-rank" not in spellings:
            parts.append(
                "`python -m torch.distributed.launch` (PyTorch >= 2.0) passes `--local-rank`, "
                'which this parser rejects ("unrecognized arguments: --local-rank=0")'
            )
        elif "--local_rank" not in spellings:
            parts.append("older launchers pass `--local_rank`, which this parser rejects")
        parts.append(
            "torchrun passes no flag at all, so `local_rank` stays "
            f"`{default_text}` on every rank"
        )
        key = f"flag:{len(self.candidates)}"
        if handoffs:
            self._handoffs[key] = handoffs
        if leaves:
            self._factory_keys.append(key)
        self.candidate(
            key,
            node,
            "`--local_rank` comes only from the command line; nothing here reads the LOCAL_RANK "
            "environment variable",
            help=_sentence("; ".join(parts))
            + '. Default it from `os.environ["LOCAL_RANK"]` and accept both spellings.',
            fix=self._fix(node, flags, spellings, default),
        )

    def facts(self) -> Optional[Dict[str, object]]:
        return {
            "imports": import_qualnames(self.ctx),
            "reads_local_rank": self.parallel.reads_env("LOCAL_RANK"),
            "handoffs": self._handoffs,
            "factory_keys": self._factory_keys,
            "reads_flag": self._reads_flag(),
            "functions": self._function_facts(),
        }

    def _reads_flag(self) -> bool:
        """Does the file read a parsed `local_rank` at all: `args.local_rank` (not only assigned),
        `getattr(args, "local_rank")` or `vars(args)["local_rank"]`, or a name `local_rank` (a
        worker's parameter filled from the namespace)?"""
        for node in self.ctx.nodes(cst.Attribute):
            if node.attr.value == "local_rank" and not _is_store(self.ctx, node):
                return True
        for name in self.ctx.nodes(cst.Name):
            if name.value != "local_rank" or _is_store(self.ctx, name):
                continue
            parent = self.ctx.parent(name)
            if type(parent) is cst.Attribute and parent.attr is name:
                continue  # the attribute itself was judged above
            if type(parent) is cst.Param or (type(parent) is cst.Arg and parent.keyword is name):
                continue  # a parameter or a keyword binds the name; reading it is what counts
            return True
        return any(_string(s) == "local_rank" for s in self.ctx.nodes(cst.SimpleString))

    def _function_facts(self) -> Dict[str, Dict[str, object]]:
        """For each function defined at the top of the file: does its code, or that of a
        function of the file it calls or hands on (`mp.spawn(main_worker, ...)`), name
        `DistributedDataParallel` or `init_process_group` ("starts"), and which imported
        functions of other modules does that code call ("calls", for the project phase to
        follow)? Another file handing the rank to `train.get_loaders(args)` asks this, so that
        a module that starts the group in `create_trainer` does not make every helper beside
        it suspect."""
        top = {
            statement.name.value: statement
            for statement in self.ctx.tree.module.body
            if type(statement) is cst.FunctionDef
        }
        reached: Dict[str, Set[str]] = {}
        own_calls: Dict[str, Set[str]] = {}
        for name, function in top.items():
            reached[name] = set()
            own_calls[name] = set()
            for node in self.ctx.tree.descendants(function):
                if type(node) is cst.Name and node.value in top and node.value != name:
                    reached[name].add(node.value)  # called, or handed on to a spawner
                elif type(node) is cst.Call:
                    qualified = self._qualified_import(node.func)
                    if qualified is not None and not qualified.startswith("<"):
                        own_calls[name].add(qualified)
        # each function's own text, once: `starts` below is whether any function it reaches names one
        starts_here = {n: bool(_STARTS_PROCESSES.search(self.ctx.code(f))) for n, f in top.items()}
        out: Dict[str, Dict[str, object]] = {}
        for name in top:
            closure, todo = {name}, [name]
            while todo:
                for other in reached[todo.pop()]:
                    if other not in closure:
                        closure.add(other)
                        todo.append(other)
            starts = any(starts_here[f] for f in closure)
            calls = sorted(set().union(*(own_calls[f] for f in closure)))
            out[name] = {"starts": starts, "calls": calls}
        return out

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        for hierarchy, display, path, keys in candidate_files(project, cls.code):
            if _imports_a_local_rank_reader(hierarchy, path):
                continue  # `init_distributed()` of dist_utils.py reads LOCAL_RANK for it
            facts = hierarchy.facts_at(path) or {}
            handoffs = facts.get("handoffs") or {}
            for key in keys:
                if key in handoffs and not _may_distribute(hierarchy, path, handoffs[key]):
                    continue  # the rank only reaches project code that starts no process group
                if key in (facts.get("factory_keys") or ()) and _spawned_without_the_flag(
                    hierarchy, path
                ):
                    continue  # the scripts using `get_base_parser()` spawn their ranks
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    yield diagnostic

    def _distributed(self) -> bool:
        """Does the file set up distributed training (a DDP wrap, `init_process_group`)? A
        launcher named in a comment says less: a sweep driver may mention torchrun."""
        if self._is_distributed is None:
            signals = self.ctx.analysis(Wraps).signals
            self._is_distributed = bool(
                signals & {DDP_WRAP_SIGNAL, "init_process_group"}
            )
        return self._is_distributed

    def _rank_from_a_spawner(self) -> bool:
        """`def main_worker(local_rank, args): args.local_rank = local_rank`, where the file hands
        `main_worker` to a launcher (`mp.spawn(main_worker, ...)`, `launch(main_worker, ...)`):
        the launcher passes each process its index, which replaces the parsed flag. (A worker
        the file calls itself, `main_worker(args.local_rank, args)`, still gets the flag.) Or the
        file starts its processes itself: `for rank in range(n): args.local_rank = rank` in the
        loop that makes a `Process(...)` for each."""
        handed = {
            arg.value.value
            for call in self.ctx.nodes(cst.Call)
            for arg in call.args
            if type(arg.value) is cst.Name
        }
        for assign in self.ctx.nodes(cst.Assign):
            value = assign.value
            if type(value) is not cst.Name or not any(
                type(t.target) is cst.Attribute and t.target.attr.value == "local_rank"
                for t in assign.targets
            ):
                continue
            if self._starts_a_process_per_rank(assign, value.value):
                return True
            function = self.ctx.scopes.enclosing_function(assign)
            if function is None or function.name.value not in handed:
                continue
            params = positional_params(function)
            if params and params[0].name.value == value.value:
                return True
        return False

    def _starts_a_process_per_rank(self, assign: cst.Assign, rank: str) -> bool:
        """Is `assign` in a `for <rank> in range(...)` loop whose body makes a `Process(...)`?"""
        loop = next((a for a in self.ctx.ancestors(assign) if type(a) is cst.For), None)
        if loop is None or type(loop.target) is not cst.Name or loop.target.value != rank:
            return False
        if not loops_over_range(loop):
            return False
        return any(
            type(node) is cst.Call
            and (dotted_name(node.func) or "").split(".")[-1] == "Process"
            for node in self.ctx.tree.descendants(loop.body)
        )

    def _flag_handoffs(self) -> Optional[List[str]]:
        """In a file that is not distributed itself: does it use the parsed rank at most to
        gate main-process chores and to place tensors, handing it (or the namespace holding
        it) to nothing but functions imported from elsewhere? Then those functions' qualified
        names (empty: nothing leaves the file, a copied parser nobody launches per process);
        None when the rank is used in a way that means one process per GPU.

        Gates are comparisons (`args.local_rank > 0` deciding who logs); placement is a
        `map_location`, `torch.device(...)`, `set_device` or `.cuda()`/`.to()` argument (an
        evaluation script loading weights onto its GPU). A file that passes the rank to a
        library (`Trainer(local_rank=...)`) or to a function of its own that is not followed
        means to run once per process."""
        # the namespace the parser fills, also where the file never reads the rank itself
        # (`args = parser.parse_args()` ... `train.create_validator(args)`)
        holders: Set[str] = set(self._parsed_namespaces())
        handoffs: List[str] = []
        for node in self.ctx.nodes(cst.Attribute):
            if node.attr.value != "local_rank" or _is_store(self.ctx, node):
                continue
            if type(node.value) is cst.Name:
                holders.add(node.value.value)
            if self._compared(node) or self._placement(node):
                continue
            callee = self._imported_callee(node)
            if callee is None:
                return None
            handoffs.append(callee)
        for call in self.ctx.nodes(cst.Call):
            if not any(type(a.value) is cst.Name and a.value.value in holders for a in call.args):
                continue
            if self.ctx.analysis(CallGraph).callee(call) is not None:
                continue  # main_worker(args): its reads are this file's reads
            leaf = (dotted_name(call.func) or "").split(".")[-1]
            if leaf in _ONLY_SHOWS or self._builtin(call.func):
                continue  # `getattr(args, name)` while logging the options
            qualified = self._qualified_import(call.func)
            if qualified is None:
                return None
            handoffs.append(qualified)  # `init_distributed(args)` may start the group
        return sorted(set(handoffs))

    def _placement(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Is `node` part of a device argument: `map_location=...`, `torch.device(...)`,
        `torch.cuda.set_device(...)`, `.cuda(...)`, `.to(...)` (also inside an f-string or a
        dict of locations, and in a name bound to one that is read only there:
        `locations = {"cuda:0": "cuda:{}".format(args.local_rank)}` ...
        `torch.load(path, map_location=locations)`)?"""
        for ancestor in self.ctx.ancestors(node):
            if type(ancestor) is cst.Assign and depth < 2:
                reads = self._reads_of(ancestor)
                return bool(reads) and all(self._placement(read, depth + 1) for read in reads)
            if type(ancestor) is cst.Arg:
                if ancestor.keyword is not None and ancestor.keyword.value == "map_location":
                    return True
                call = self.ctx.parent(ancestor)
                if type(call) is not cst.Call:
                    return False
                func = call.func
                if type(func) is cst.Attribute and func.attr.value in ("cuda", "to"):
                    return True
                if type(func) is cst.Attribute and func.attr.value == "format":
                    continue  # `"cuda:{}".format(args.local_rank)`: the text is the argument
                return bool(self.ctx.names.qualified(func) & _PLACEMENT_CALLS)
            if type(ancestor) in (cst.SimpleStatementLine, cst.FunctionDef, cst.Lambda):
                return False
        return False

    def _parsed_namespaces(self) -> Iterator[str]:
        """Names bound to `parser.parse_args()` / `parse_known_args()` (the first of the pair)."""
        for assign in self.ctx.nodes(cst.Assign):
            value = assign.value
            if type(value) is not cst.Call or type(value.func) is not cst.Attribute:
                continue
            if value.func.attr.value not in ("parse_args", "parse_known_args"):
                continue
            for target in assign.targets:
                bound = target.target
                if type(bound) is cst.Tuple and bound.elements:
                    bound = bound.elements[0].value
                if type(bound) is cst.Name:
                    yield bound.value

    def _builtin(self, func: cst.BaseExpression) -> bool:
        """Is `func` a builtin the file does not rebind (`getattr`, `vars`, `sorted`)?"""
        return (
            type(func) is cst.Name
            and hasattr(builtins, func.value)
            and not self.ctx.scopes.lookup(func.value, func)
        )

    def _reads_of(self, assign: cst.Assign) -> List[cst.Name]:
        """The reads of the one name `assign` binds (none for other targets: `self.x = ...`,
        tuples, chains)."""
        if len(assign.targets) != 1 or type(assign.targets[0].target) is not cst.Name:
            return []
        return reads_of_binding(self.ctx, assign.targets[0].target, assign)

    def _imported_callee(self, node: cst.CSTNode) -> Optional[str]:
        """The qualified name of the imported function whose argument `node` is directly
        (`get_model(name, local_rank=args.local_rank)`); None otherwise."""
        arg = self.ctx.parent(node)
        if type(arg) is not cst.Arg:
            return None
        call = self.ctx.parent(arg)
        if type(call) is not cst.Call or self.ctx.analysis(CallGraph).callee(call) is not None:
            return None
        return self._qualified_import(call.func)

    def _qualified_import(self, func: cst.BaseExpression) -> Optional[str]:
        """`pkg.mod.fn` for a function name the file imports (not torch's); else None."""
        qualified = [q for q in self.ctx.names.qualified(func) if "." in q]
        if len(qualified) != 1 or qualified[0].startswith("torch."):
            return None
        return qualified[0]

    def _parser_leaves(self, call: cst.Call) -> bool:
        """Is the parser built by a factory that returns it unparsed (`get_args_parser()`,
        imported by the training script that is launched per process)? A function returning
        `parser.parse_args()` parses for this file."""
        function = self.ctx.scopes.enclosing_function(call)
        if function is None:
            return False
        receiver = self.ctx.code(call.func.value)  # type: ignore[attr-defined]
        for ret in self.ctx.nodes(cst.Return):
            value = ret.value
            if type(value) is not cst.Name or self.ctx.scopes.enclosing_function(ret) is not function:
                continue
            if value.value == receiver:
                return True
            for binding in self.ctx.scopes.lookup(value.value, ret):
                bound = binding.value
                if type(bound) is cst.Call and (dotted_name(bound.func) or "").endswith("ArgumentParser"):
                    return True
        return False

    def _compared(self, node: cst.Attribute) -> bool:
        parent = self.ctx.parent(node)
        if type(parent) is cst.ComparisonTarget:
            parent = self.ctx.parent(parent)
        return type(parent) is cst.Comparison

    def _other_spellings(self, call: cst.Call) -> Set[Optional[str]]:
        """Spellings added by the file's other `add_argument` calls (one per PyTorch version:
        `if torch.__version__ >= "2": add_argument("--local-rank") else: ("--local_rank")`)."""
        found: Set[Optional[str]] = set()
        parser = self.ctx.code(call.func.value)  # type: ignore[attr-defined]
        scope = self.ctx.scopes.enclosing_function(call)
        for other in self.ctx.nodes(cst.Call):
            if other is call or method_call(other, "add_argument") is None:
                continue
            if self.ctx.code(other.func.value) != parser:
                continue  # another parser (or argument group) of the file
            if self.ctx.scopes.enclosing_function(other) is scope:
                found |= {_string(a.value) for a in self._flag_args(other)}
        return found - {None}

    def _flag_args(self, call: cst.Call) -> List[cst.Arg]:
        out = []
        for arg in call.args:
            if arg.keyword is not None or arg.star:
                break
            if _string(arg.value) in _FLAGS:
                out.append(arg)
        return out

    def _fix(
        self,
        call: cst.Call,
        flags: List[cst.Arg],
        spellings: set[Optional[str]],
        default: Optional[cst.BaseExpression],
    ) -> Optional[PendingFix]:
        if keyword(call, "action") is not None:
            return None
        os_name = self.parallel.module_name("os", call)
        if os_name is None:
            return None
        flag = flags[-1].value
        assert type(flag) is cst.SimpleString  # _flag_args keeps only simple-string flags
        quote = flag.value[-1]
        edits = []
        missing = "--local-rank" if "--local-rank" not in spellings else "--local_rank"
        if len(spellings) < 2:
            edits.append(self.ctx.insert_after(flag, f", {quote}{missing}{quote}"))
        env = f"{os_name}.environ.get({quote}LOCAL_RANK{quote}"
        if default is not None:
            edits.append(self.ctx.replace(default, f"{env}, {self.ctx.code(default)})"))
        else:
            edits.append(self.ctx.append_argument(call, f"default={env})"))
        return self.safe_fix(
            f'Accept `{missing}` too and default from `{os_name}.environ["LOCAL_RANK"]`', *edits
        )


# Calls whose argument places tensors on a device: the rank picks a GPU there.
_PLACEMENT_CALLS = frozenset({"torch.device", "torch.cuda.set_device", "torch.cuda.device"})

# Calls that only show a namespace (`logging.info("args: %s", args)`).
_ONLY_SHOWS = frozenset(
    {"print", "pprint", "str", "repr", "vars", "format", "info", "debug", "warning", "log"}
)


def _string(node: cst.CSTNode) -> Optional[str]:
    if type(node) is cst.SimpleString:
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _is_store(ctx, node: cst.CSTNode) -> bool:
    parent = ctx.parent(node)
    return type(parent) is cst.AssignTarget or (
        type(parent) in (cst.AugAssign, cst.AnnAssign) and parent.target is node
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _may_distribute(hierarchy: Hierarchy, path, callees: List[str], levels: int = 2) -> bool:
    """May one of `callees` (functions `path` hands the rank to) start a process group? A
    function defined at the top of a project module may not when its code and the code of the
    module's functions it calls name neither `DistributedDataParallel` nor `init_process_group`,
    and the project functions that code calls (`levels` deep) may not either; the other
    functions of its module do not count (`train.get_loaders(args)` beside `create_trainer`,
    which starts the group). Any other name of a project module (a class, a re-export) may not
    when the module's text, and that of the project files it imports (two levels), names
    neither. A library's function, or a module whose text is not at hand (flake8), may."""
    for callee in callees:
        start = hierarchy.module_file(callee.rpartition(".")[0], Path(path))
        if start is None:
            return True
        if _function_may_distribute(hierarchy, start, callee.rpartition(".")[2], levels):
            return True
    return False


def _function_may_distribute(hierarchy: Hierarchy, module: Path, name: str, levels: int) -> bool:
    functions = (hierarchy.facts_at(module) or {}).get("functions")
    entry = functions.get(name) if isinstance(functions, dict) else None
    if not isinstance(entry, dict):
        for file in [module, *hierarchy.imported_closure(module, depth=2)]:
            text = hierarchy.project.text_of(file)
            if text is None or _STARTS_PROCESSES.search(text):
                return True
        return False
    if entry.get("starts"):
        return True
    for call in entry.get("calls") or ():
        other = hierarchy.module_file(str(call).rpartition(".")[0], module)
        if other is None:
            continue  # a library function the helper calls (monai's DataLoader, numpy, ...)
        if levels == 0 or _function_may_distribute(
            hierarchy, other, str(call).rpartition(".")[2], levels - 1
        ):
            return True
    return False


_STARTS_PROCESSES = re.compile(r"DistributedDataParallel|init_process_group")


def _imports_a_local_rank_reader(hierarchy: Hierarchy, path) -> bool:
    """Does a project file that `path` imports (directly, or through one more import) read
    LOCAL_RANK from the environment, or may it (flake8 hands over one file: the others are
    unknown)? In a full run a file without facts has nothing this rule looks for."""
    for file in hierarchy.imported_closure(path, depth=2):
        facts = hierarchy.facts_at(file)
        if facts is None and not hierarchy.project.complete:
            return True
        if facts is not None and facts.get("reads_local_rank"):
            return True
    return False


def _spawned_without_the_flag(hierarchy: Hierarchy, path) -> bool:
    """Do the project files that import the parser's file (directly or through other project
    modules) start their processes themselves (`mp.spawn(main_worker, ...)`), while neither
    they nor the parser's file read the parsed `local_rank`? Then no launcher passes the flag
    and nothing looks at it. Under flake8, which hands over one file, they are unknown, and
    the finding waits on them: left out."""
    if not hierarchy.project.complete:
        return True
    users = hierarchy.importers(path)
    # In a full run a file without facts has no `local_rank` to read; its text says whether
    # it spawns (`mp.spawn(...)`, `torch.multiprocessing.spawn(...)`).
    if any((hierarchy.facts_at(file) or {}).get("reads_flag") for file in users):
        return False
    return any(_SPAWNS.search(hierarchy.project.text_of(file) or "") for file in users)


_SPAWNS = re.compile(r"\bspawn\s*\(")
