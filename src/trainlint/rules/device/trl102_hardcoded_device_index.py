"""TRL102 hardcoded-device-index."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, Optional

import libcst as cst

from ...analysis.base.callgraph import CallGraph
from ...analysis.base.nodes import positional_params
from ...analysis.device.choices import DeviceChoices, HardcodedIndex, unread_option
from ...analysis.project.hierarchy import candidate_files
from ...diagnostics import Diagnostic, Severity
from ..base import PendingFix, Rule

_HELP = (
    'On a machine with fewer GPUs this fails with "CUDA error: invalid device ordinal", and the '
    "current device stays GPU 0, so `.cuda()`, custom CUDA ops and the CUDA context still use "
    'GPU 0. Use "cuda" and choose the GPU with CUDA_VISIBLE_DEVICES.'
)
_HELP_DEVICE_IDS = (
    'On a machine with fewer GPUs this fails with "CUDA error: invalid device ordinal", and the '
    "current device stays GPU 0, so `.cuda()`, custom CUDA ops and the CUDA context still use "
    "GPU 0. Leave `device_ids` out for DataParallel (it uses every visible GPU), or pass the "
    "local rank for DDP, and choose the GPUs with CUDA_VISIBLE_DEVICES."
)


_NO_FIX_FORMS = ("device_ids", "output_device", "set_device", "device_context", "trainer_devices")
_HELP_TRAINER_DEVICES = (
    "On a machine with fewer GPUs Lightning raises MisconfigurationException (\"You requested "
    'gpu: [1] But your machine only has: [0]"), and the run cannot move to a free GPU without '
    "editing the code. Pass a count (`devices=1`) and choose the GPU with CUDA_VISIBLE_DEVICES."
)


class HardcodedDeviceIndex(Rule):
    """## What it does
    Reports a literal CUDA index other than 0 written into placement code: `"cuda:1"`,
    `torch.device("cuda", 1)`, `.cuda(1)`, `.to(1)`, `torch.cuda.set_device(1)`,
    `device_ids=[1, 2]`, `output_device=1`, and the defaults that choose a GPU: a parameter
    `device="cuda:1"`, a dataclass or config field, an argparse option
    `add_argument("--device", default="cuda:1")` or `add_argument("--gpu", type=int, default=1)`.

    ## Why is this bad
    The script now runs only on machines with at least two GPUs, and only with GPU 1 free. On a
    laptop, a one-GPU node or under a scheduler that hands out `CUDA_VISIBLE_DEVICES=3` it fails:

        RuntimeError: CUDA error: invalid device ordinal

    Worse, `"cuda:1"` moves tensors but does not change the *current* device: `.cuda()`,
    `torch.cuda.*` calls, the CUDA context and custom CUDA ops (compiled extensions that launch
    on the current device) keep using GPU 0 (see TRL103). The portable way to choose a GPU is
    outside the code: `CUDA_VISIBLE_DEVICES=1 python train.py` with `device = "cuda"`.

    Lightning's `Trainer(accelerator="gpu", devices=[1])` (or `gpus=[1]`) pins GPU 1 the same
    way; `devices=2` is a count and is not reported.

    Not reported: `"cuda"` and `"cuda:0"`; code that deliberately places parts of one model on
    several GPUs (a class, function or script that uses two or more different literal indices:
    model parallelism; one module moved to `"cuda:0"` and again to `"cuda:1"` is not that);
    code under `if torch.cuda.device_count() > 1:`; tests; and strings that
    are only compared, printed, offered as `choices=` or used as mapping keys
    (`map_location={"cuda:1": "cuda:0"}`), and an option default when nothing reads the option:
    its name appears nowhere else in the file nor in another file of the project (under flake8,
    which sees one file, an option read only by other files is not reported); and a parameter
    default every call overrides: each call of the function in its own file and in the files
    that import it (by its name or by its module's) passes the parameter, `train(cfg,
    device=device)`, and none hands the function on as a callback (`fire.Fire(train)`, whose
    command line may leave it out), or a function nested in another whose calls all pass it.
    A function nothing calls keeps its finding (whoever calls it gets the default), and so does
    a method called from another file (which class `x.fit(...)` reaches is not known there);
    under flake8 only the calls of the function's own file count.

    ## Example
    ```python
    parser.add_argument("--device", default="cuda:1")
    model = Detector().to("cuda:1")
    ```

    ## Use instead
    ```python
    parser.add_argument("--device", default="cuda")  # CUDA_VISIBLE_DEVICES=1 python train.py
    model = Detector().to("cuda")
    ```

    ## Fix safety
    The fix replaces the literal device with `"cuda"` (`.cuda(1)` becomes `.cuda()`,
    `torch.device("cuda", 1)` becomes `torch.device("cuda")`). It is unsafe: the code then runs
    on the current device, GPU 0 unless `CUDA_VISIBLE_DEVICES` or `torch.cuda.set_device` says
    otherwise, so the GPU must now be chosen when launching. Device lists, `set_device(1)` and
    integer option defaults get no fix, nor do other literals of the statement they are in.
    Nor does a device the current device is set from (`device = torch.device("cuda:1")` passed
    to `set_device`, or to be passed by TRL103's fix): `set_device` needs the index, and
    `set_device(torch.device("cuda"))` raises ValueError.
    """

    code = "TRL102"
    name = "hardcoded-device-index"
    severity = Severity.WARNING
    fix = "unsafe"
    markers = ("cuda", "device", "gpu", "dev_id")
    # An option default nothing in its file reads may be read by another file of the project.
    project = True

    def finish(self) -> None:
        # key -> the option name, for option defaults this file never reads
        self.unread_options: Dict[str, str] = {}
        # key -> [name, parameter, position, method, called here], for parameter defaults every
        # call of this file overrides (or that no code of this file calls)
        self.overridden: Dict[str, list] = {}
        self.callgraph: CallGraph = self.ctx.analysis(CallGraph)
        choices = self.ctx.analysis(DeviceChoices)
        sites = choices.hardcoded_indices()
        # `DataParallel(m.to("cuda:1"), device_ids=[1, 2])`: the literals of one statement go
        # together; rewriting only the fixable ones would split the placement.
        unfixable = set()
        for site in sites:
            if site.form in _NO_FIX_FORMS:
                unfixable.add(self.ctx.statement_of(site.node))
        for site in sites:
            fix = None
            if self.ctx.statement_of(site.node) not in unfixable:
                if not choices.current_device_follows(site.node):
                    fix = self._fix(site)
            help = {"device_ids": _HELP_DEVICE_IDS, "trainer_devices": _HELP_TRAINER_DEVICES}.get(
                site.form, _HELP
            )
            if site.form == "param_default":
                default = self._default_of(site)
                if default == "quiet":
                    continue  # a local function whose every call passes the parameter
                if default is not None:
                    key = f"default:{len(self.candidates)}"
                    self.overridden[key] = default
                    self.candidate(key, site.node, self._message(site), help=help, fix=fix)
                    continue
            unread = unread_option(self.ctx, site)
            if unread is None:
                self.report(site.node, self._message(site), help=help, fix=fix)
                continue
            key = f"option:{len(self.candidates)}"
            self.unread_options[key] = unread
            self.candidate(key, site.node, self._message(site), help=help, fix=fix)

    def _default_of(self, site: HardcodedIndex):
        """For a parameter default: None when a call of this file can take it (or it cannot be
        told); "quiet" for a local function every call of which passes the parameter; else what
        the project phase needs to ask the files that import the function."""
        param = next((a for a in self.ctx.ancestors(site.node) if type(a) is cst.Param), None)
        parameters = self.ctx.parent(param) if param is not None else None
        function = self.ctx.parent(parameters) if parameters is not None else None
        if param is None or type(function) is not cst.FunctionDef:
            return None
        name = param.name.value
        used = self.callgraph.default_used(function, name)
        if used is True:
            return None
        block = self.ctx.parent(function)
        owner = self.ctx.parent(block) if block is not None else None
        if self.ctx.scopes.enclosing_function(function) is not None:
            return "quiet" if used is False else None
        method = type(owner) is cst.ClassDef and function.name.value != "__init__"
        public = owner.name.value if type(owner) is cst.ClassDef and not method else None
        params = [p.name.value for p in positional_params(function)]
        if type(owner) is cst.ClassDef and params and params[0] in ("self", "cls"):
            params = params[1:]
        position = params.index(name) if name in params else None
        return [public or function.name.value, name, position, method, used is False]

    # -- the project phase: an option read in another file ------------------------------------

    def facts(self) -> Optional[Dict[str, object]]:
        found: Dict[str, object] = {}
        if self.unread_options:
            found["unread_options"] = self.unread_options
        if self.overridden:
            found["overridden"] = self.overridden
        calls, named = self.callgraph.imported_uses()
        if calls or named:
            found["imported_uses"] = {"calls": calls, "named": named}
        return found or None

    @classmethod
    def check_project(cls, project) -> Iterator[Diagnostic]:
        """An option default is a device choice only where something reads the option: keep
        the finding when another file of the project mentions its name (`opt.gpu_id` in
        train.py for the options of options.py); nothing does (or, under flake8, nothing is
        seen): the option chooses nothing."""
        for hierarchy, display, path, keys in candidate_files(project, cls.code):
            facts = hierarchy.facts_at(path) or {}
            unread = facts.get("unread_options", {})
            overridden = facts.get("overridden", {})
            for key in keys:
                if key in overridden:
                    if not cls._default_taken(project, hierarchy, path, overridden[key]):
                        continue
                    diagnostic = project.candidate(display, cls.code, key)
                    if diagnostic is not None:
                        yield diagnostic
                    continue
                name = unread.get(key)
                if name is not None:
                    word = re.compile(rf"\b{re.escape(name)}\b")
                    readers = [p for p in project.files_matching(word) if p != path]
                    if not readers:
                        continue
                diagnostic = project.candidate(display, cls.code, key)
                if diagnostic is not None:
                    yield diagnostic

    @classmethod
    def _default_taken(cls, project, hierarchy, path: Path, default: list) -> bool:
        """Can a parameter default take effect: does a file that imports the function (by its
        name or its module's) call it without the parameter, or hand it on as a callback? A
        file trainlint has no facts for (it ran no TRL102 there) may do anything with it. When
        no file imports it, the default is taken unless this file calls it and always passes
        the parameter (a function nobody calls keeps its finding: whoever calls it gets it)."""
        name, param, position, method, called_here = default
        importers = project.importers_of(name, path)
        if method:  # an instance may come from anywhere: any `.fit(` of another file counts
            importers |= set(project.files_matching(re.compile(rf"\.{re.escape(name)}\s*\(")))
        importers.discard(Path(path))
        if not importers:
            return not called_here
        for importer in sorted(importers):
            if method:
                return True  # `x.fit(...)` of another file: which class it calls is not known
            uses = (hierarchy.facts_at(importer) or {}).get("imported_uses")
            if uses is None:
                return True
            if name in uses["named"]:
                return True
            for positional, keywords, star in uses["calls"].get(name, []):
                if not (star or param in keywords or (position is not None and positional > position)):
                    return True
        return False

    # -- messages -----------------------------------------------------------------------------

    def _message(self, site: HardcodedIndex) -> str:
        code = self.ctx.code(site.node)
        where = f"GPU {site.index}"
        if site.form == "device_ids":
            return f"`device_ids={code}` hardcodes GPU numbers"
        if site.form == "trainer_devices":
            arg = self.ctx.parent(site.node)
            word = arg.keyword.value if type(arg) is cst.Arg and arg.keyword else "devices"
            return f"`{word}={code}` picks {where} by number"
        if site.form == "set_device":
            return f"`set_device({code})` hardcodes {where}"
        if site.form == "option_default":
            return f"this option defaults to {code}, hardcoding {where}"
        if site.form == "param_default":
            return f"this parameter defaults to {code}, hardcoding {where}"
        if site.form == "field_default":
            return f"this field defaults to {code}, hardcoding {where}"
        if site.form == "output_device":
            return f"`output_device={code}` hardcodes {where}"
        if site.form == "constant":
            return f"{code} hardcodes {where} as a setting"
        if site.form in ("cuda", "to", "device", "keyword", "output_device", "device_context"):
            call = self.ctx.code(site.call) if site.call is not None else code
            if len(call) > 60 or "\n" in call:
                method = getattr(getattr(site.call, "func", None), "attr", None)
                call = f".{method.value}({code})" if method is not None else code
            return f"`{call}` hardcodes {where}"
        return f"{code} hardcodes {where}"

    # -- fixes --------------------------------------------------------------------------------

    def _fix(self, site: HardcodedIndex) -> Optional[PendingFix]:
        ctx = self.ctx
        node = site.node
        if site.form in ("string", "option_default", "param_default", "field_default"):
            if type(node) is not cst.SimpleString or "f" in node.prefix.lower():
                return None
            if "b" in node.prefix.lower():
                return None
            text = f"{node.prefix}{node.quote}cuda{node.quote}"
            return self.unsafe_fix(f"Use {text}", ctx.replace(node, text))
        call = site.call
        if call is None or type(node) is not cst.Integer:
            return None
        if site.form in ("to", "keyword"):
            return self.unsafe_fix('Use "cuda"', ctx.replace(node, '"cuda"'))
        if site.form == "cuda" or (site.form == "device" and len(call.args) > 1):
            args = [a for a in call.args if a.value is not node]
            if len(args) == len(call.args):
                return None
            if not args:
                return self.unsafe_fix("Use the current device", ctx.replace(node, ""))
            last = args[-1]
            if call.args[-1].comma is cst.MaybeSentinel.DEFAULT or type(call.args[-1].comma) is not cst.Comma:
                args[-1] = last.with_changes(comma=cst.MaybeSentinel.DEFAULT)
            new_call = call.with_changes(args=args)
            return self.unsafe_fix(
                "Use the current device", ctx.replace(call, ctx.module.code_for_node(new_call))
            )
        if site.form == "device":
            return self.unsafe_fix('Use "cuda"', ctx.replace(node, '"cuda"'))
        return None
