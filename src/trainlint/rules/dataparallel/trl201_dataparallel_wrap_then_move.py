"""TRL201 dataparallel-wrap-then-move."""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from ...analysis.base.calls import argument, int_list, method_call, needs_parentheses
from ...analysis.base.conditions import Conditions
from ...analysis.base.names import dotted_name
from ...analysis.base.vocabulary import DTYPE_WORDS
from ...analysis.device.choices import DeviceChoices
from ...analysis.device.expressions import Device, Devices
from ...diagnostics import Severity
from ..base import PendingFix, Rule

DATA_PARALLEL = "torch.nn.DataParallel"


class DataParallelWrapThenMove(Rule):
    """## What it does
    Reports a DataParallel *wrapper* moved to a device (`nn.DataParallel(model).to(device)`,
    `.cuda(...)`, or `model = nn.DataParallel(model)` followed by `model.to(device)`) when that
    device is known to differ from `device_ids[0]` (a literal `cuda:1`, `.cuda(2)`, `.cuda()`
    after `device_ids=[1, 2]`: an error) or may differ from it because its index is chosen at
    run time (`f"cuda:{args.gpu}"`, `.cuda(args.local_rank)`) or the file sets another current
    device (`torch.cuda.set_device(...)` before `.cuda()`): a warning.

    ## Why is this bad
    DataParallel keeps the module, and scatters every input batch, on `device_ids[0]`; without
    `device_ids` that is the first visible GPU, `cuda:0`. Its forward refuses to run when the
    parameters live anywhere else:

        RuntimeError: module must have its parameters and buffers on device cuda:0
        (device_ids[0]) but found one of them on device: cuda:1

    Move the module before wrapping, so that the placement is explicit and matches
    `device_ids[0]`; better, use DistributedDataParallel, which PyTorch recommends even on one
    machine.

    Not reported: a move to the device DataParallel uses anyway. Without `device_ids` and
    without `set_device`, `.cuda()`, `"cuda"`, `"cuda:0"` and a `device` bound only to one of
    those (or to `"cpu"`) all mean `cuda:0` = `device_ids[0]`, in the one-line form
    (`nn.DataParallel(model).cuda()`) as in the tutorial's two statements; so is a move to the
    same expression as `device_ids[0]` (`device_ids=[args.gpu]` with `.cuda(args.gpu)`, or
    `device_ids=device_ids` with `torch.device("cuda:{}".format(device_ids[0]))`, also through
    an options attribute every assignment of which builds that device: `opt.device =
    torch.device("cuda:{}".format(opt.gpus[0]))` with `device_ids=opt.gpus`).
    `CUDA_VISIBLE_DEVICES` changes which GPUs are visible, not that the first visible one is
    `cuda:0`. A device the analysis cannot resolve (a parameter of a helper, or an option such
    as `cfg.device.type` that may just as well hold `"cuda"`) is not reported: only an index
    the analysis sees being chosen (`f"cuda:{args.gpu}"`, `.cuda(local_rank)`) may differ.

    ## Example
    ```python
    model = nn.DataParallel(model).to(f"cuda:{args.gpu}")  # cuda:0 is device_ids[0]

    model = nn.DataParallel(model, device_ids=[1, 2])
    model.to("cuda:0")  # error: device_ids[0] is cuda:1
    ```

    ## Use instead
    ```python
    model = nn.DataParallel(model.to(f"cuda:{args.gpu}"), device_ids=[args.gpu])

    model = nn.DataParallel(model.to("cuda:1"), device_ids=[1, 2])
    ```

    ## Fix safety
    The fix rewrites `DataParallel(m, **kw).to(d)` to `DataParallel(m.to(d), **kw)` (and
    `.cuda(...)` likewise). It is safe: `Module.to` returns the module itself, so both
    expressions produce the same wrapper around the same, moved module. It makes the placement
    explicit at the wrap; it does not choose `device_ids`: when `d` is chosen at run time, start
    `device_ids` with it (the help says so). It is not offered when the device is known to
    differ from `device_ids[0]`: moving the module first would still fail; those findings are
    errors and the message says which device to use.
    """

    code = "TRL201"
    name = "dataparallel-wrap-then-move"
    severity = Severity.WARNING
    severity_note = "error when the device is known to differ from device_ids[0]"
    fix = "safe"
    markers = ("DataParallel",)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.names = ctx.names
        self.devices: Devices = ctx.analysis(Devices)
        self.choices: DeviceChoices = ctx.analysis(DeviceChoices)

    # -- the one-expression form --------------------------------------------------------------

    def visit_Call(self, node: cst.Call) -> None:
        if not self.names.is_(node.func, DATA_PARALLEL):
            return
        parent = self.ctx.parent(node)
        grand = self.ctx.parent(parent) if parent is not None else None
        if (
            type(parent) is cst.Attribute
            and type(grand) is cst.Call
            and grand.func is parent
        ):
            if parent.attr.value in ("to", "cuda"):
                self._one_expression(node, grand, parent.attr.value)
            return
        if type(parent) is cst.Assign and parent.value is node:
            self._two_statements(node, parent)

    def _one_expression(self, wrap: cst.Call, move: cst.Call, method: str) -> None:
        target = self._move_target(move, method)
        if target is None:
            return
        first_id, first_id_text = self._first_device_id(wrap)
        if self._known_mismatch(target, first_id, first_id_text):
            self._report_mismatch(move, target, first_id)
            return
        if not self._may_differ(target, first_id, first_id_text, move):
            return  # `.cuda()`, "cuda", "cuda:0" without device_ids: that is device_ids[0]
        self.report(
            move,
            f"DataParallel wrapper moved to {self._where(target, move)}, not necessarily "
            f"device_ids[0]{_first(first_id, first_id_text)}",
            help=_MAY_DIFFER_HELP,
            fix=self._fix(wrap, move, method),
        )

    def _fix(self, wrap: cst.Call, move: cst.Call, method: str) -> Optional[PendingFix]:
        args = list(wrap.args)
        index = None
        for i, arg in enumerate(args):
            if arg.star:
                return None
            if arg.keyword is None or arg.keyword.value == "module":
                index = i
                break
        if index is None:
            return None
        module_expr = args[index].value
        if needs_parentheses(module_expr):
            module_expr = module_expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        moved = cst.Call(
            func=cst.Attribute(value=module_expr, attr=cst.Name(method)),
            args=move.args,
            whitespace_before_args=move.whitespace_before_args,
        )
        args[index] = args[index].with_changes(value=moved)
        new_wrap = wrap.with_changes(args=args, lpar=move.lpar, rpar=move.rpar)
        code = self.ctx.module.code_for_node(new_wrap)
        module_text = self.ctx.module.code_for_node(module_expr)  # what `moved` moves
        if "\n" in module_text or len(module_text) > 40:
            module_text = "module"
        wrapper = self.ctx.code(wrap.func)
        return self.safe_fix(
            f"Move the module before wrapping: `{wrapper}({module_text}.{method}(...))`",
            self.ctx.replace(move, code),
        )

    # -- the two-statement form ---------------------------------------------------------------

    def _two_statements(self, wrap: cst.Call, assign: cst.Assign) -> None:
        if len(assign.targets) != 1:
            return
        target_expr = assign.targets[0].target
        target = dotted_name(target_expr)
        if target is None:
            return
        scope = self.ctx.scopes.scope_of(wrap)
        for call in self._later_calls(wrap):
            if self.ctx.scopes.scope_of(call) is not scope:
                continue
            if self._rebinds(call, target, wrap):
                return
            found = method_call(call, "to", "cuda")
            if found is None or dotted_name(found[0]) != target:
                continue
            move_target = self._move_target(call, found[1])
            if move_target is None:
                continue
            first_id, first_id_text = self._first_device_id(wrap)
            related = [(wrap, "wrapped in DataParallel here")]
            if self._known_mismatch(move_target, first_id, first_id_text):
                self._report_mismatch(call, move_target, first_id, related)
            elif self._may_differ(move_target, first_id, first_id_text, call):
                self.report(
                    call,
                    f"`{target}` (DataParallel) moved to {self._where(move_target, call)}, not "
                    f"necessarily device_ids[0]{_first(first_id, first_id_text)}",
                    help=_MAY_DIFFER_HELP,
                    related=related,
                )
            return  # only the first move after the wrap matters

    def _later_calls(self, wrap: cst.Call):
        """Calls after the wrap statement (not inside the wrap: `DataParallel(m.to(d))` moves
        the module, not the wrapper)."""
        tree = self.ctx.tree
        start = tree.index[wrap]
        inside = {id(node) for node in tree.descendants(wrap)}
        for call in self.ctx.nodes(cst.Call):
            if tree.index[call] > start and id(call) not in inside:
                yield call

    def _rebinds(self, call: cst.Call, target: str, wrap: cst.Call) -> bool:
        """Is `target` assigned something else between the wrap and this call?"""
        tree = self.ctx.tree
        for assign in self.ctx.nodes(cst.Assign):
            if not (tree.index[wrap] < tree.index[assign] < tree.index[call]):
                continue
            for t in assign.targets:
                if dotted_name(t.target) == target:
                    value = assign.value
                    # `model = model.to(device)` is the move itself, not a rebinding.
                    found = method_call(value, "to", "cuda")
                    if found is not None and value is call:
                        return False
                    return True
        return False

    # -- devices ------------------------------------------------------------------------------

    def _move_target(self, move: cst.Call, method: str) -> Optional[Device]:
        if method == "cuda":
            index = argument(move, 0, "device")
            if index is None:
                return Device("cuda", None, "current")
            return self.devices.cuda_index(index)
        device_expr = argument(move, 0, "device")
        if device_expr is None:
            return None  # .to(dtype=...) or .to(memory_format=...)
        name = dotted_name(device_expr) or ""
        if name.split(".")[-1] in DTYPE_WORDS and name.startswith("torch."):
            return None  # `.to(torch.float16)` casts, it does not move
        device = self.devices.device_of(device_expr)
        if device is not None and device.kind not in ("cuda", "unknown"):
            return None  # cpu / mps / meta: not DataParallel's business
        return device or Device("unknown", None, "unknown")

    def _first_device_id(self, wrap: cst.Call) -> Tuple[Optional[int], Optional[str]]:
        """(literal device_ids[0] or 0 when device_ids is absent, source text of device_ids[0])."""
        ids = argument(wrap, 1, "device_ids")
        if ids is None or (type(ids) is cst.Name and ids.value == "None"):
            return 0, None
        literal = int_list(ids)
        if literal:
            return literal[0], None
        if (type(ids) is cst.List or type(ids) is cst.Tuple) and ids.elements:
            return None, self.ctx.code(ids.elements[0].value)
        # A list built at run time: its first id is spelled `device_ids[0]`, as a device made
        # from it is (`torch.device("cuda:{}".format(device_ids[0]))`).
        return None, f"{self.ctx.code(ids)}[0]"

    def _known_mismatch(self, target: Device, first_id: Optional[int], first_text) -> bool:
        if first_id is None or target.kind != "cuda":
            return False
        if target.index is not None and target.origin == "literal":
            return target.index != first_id
        if target.origin == "current" and target.index is None and first_id != 0:
            # `.cuda()` / "cuda" is the current device: cuda:0 unless set_device was called.
            return not self._file_sets_device()
        return False

    def _may_differ(
        self, target: Device, first_id: Optional[int], first_text, move: cst.CSTNode
    ) -> bool:
        """Can the target's index differ from device_ids[0]? Only what the analysis sees
        counts: an index chosen at run time, or the current device when device_ids does not
        start at 0 or the file sets another current device."""
        if first_text is not None and target.index_text == first_text:
            return False  # device_ids=[args.gpu] with .cuda(args.gpu): the same device
        if target.user_chosen and target.kind == "cuda":
            return True  # `f"cuda:{args.gpu}"`, `.cuda(local_rank)`: an index chosen at run time
        if target.kind == "unknown" and isinstance(move, cst.Call):
            # An option the analysis cannot resolve (`cfg.device.type`, `args.device`) may as
            # well be "cuda", the current device: only its default, when it names another GPU
            # (`add_argument("--device", default="cuda:1")`), shows an index that may differ.
            index = self._default_index(move)
            return index is not None and index != first_id
        if target.origin == "current" and first_id not in (0, None):
            return True
        if target.origin == "current" and first_id == 0 and self._file_sets_device(move):
            return True  # set_device(local_rank) makes "cuda" another GPU than cuda:0
        return False

    def _default_index(self, move: cst.Call) -> Optional[int]:
        """The CUDA index the moved-to device has by default, when the analysis traces it to a
        literal (an option's or a parameter's default)."""
        expr = argument(move, 0, "device")
        choice = self.choices.trace(expr) if expr is not None else None
        return choice.device.index if choice is not None else None

    def _where(self, target: Device, move: cst.Call) -> str:
        if target.origin == "current" and target.index is None:
            return "the current CUDA device"
        if target.kind == "unknown":
            index = self._default_index(move)
            if index is not None:
                return f"a device defaulting to cuda:{index}"
        return target.describe()

    def _file_sets_device(self, move: Optional[cst.CSTNode] = None) -> bool:
        """Does a `torch.cuda.set_device` of the file run with the move? (One on an exclusive
        branch, the distributed side of `if is_distributed: ... else: DataParallel(m).cuda()`,
        leaves the current device at cuda:0.)"""
        calls = [
            c for c in self.ctx.nodes(cst.Call) if self.names.is_(c.func, "torch.cuda.set_device")
        ]
        if move is None:
            return bool(calls)
        conditions = self.ctx.analysis(Conditions)
        return any(not conditions.exclusive(call, move) for call in calls)

    def _report_mismatch(self, node, target: Device, first_id, related=()) -> None:
        where = target.describe() if target.index is not None else "the current device"
        found_on = target.describe() if target.index is not None else "cuda:0"
        self.report(
            node,
            f"DataParallel wrapper moved to {where} but device_ids[0] is cuda:{first_id}: "
            "forward will fail",
            severity=Severity.ERROR,
            related=related,
            help=(
                'DataParallel raises "module must have its parameters and buffers on device '
                f'cuda:{first_id} (device_ids[0]) but found one of them on device: {found_on}". '
                f"Move the module to cuda:{first_id} before wrapping, or start device_ids with "
                f"{found_on}."
            ),
        )


_MAY_DIFFER_HELP = (
    "DataParallel keeps the module on device_ids[0]; when the wrapper is moved elsewhere, "
    'forward raises "module must have its parameters and buffers on device cuda:0 '
    '(device_ids[0]) but found one of them on device: ...". Move the module before wrapping '
    "and start device_ids with its device (`DataParallel(model.to(d), device_ids=[d, ...])`), "
    "or use DistributedDataParallel."
)


def _first(first_id: Optional[int], first_text: Optional[str]) -> str:
    """What device_ids[0] is, for the headline: ` (cuda:1)`, `` (`args.gpu`)``; nothing when
    it is spelled `device_ids[0]` itself."""
    if first_id is not None:
        return f" (cuda:{first_id})"
    if first_text == "device_ids[0]":
        return ""
    return f" (`{first_text}`)"
