"""The walk behind `BatchFlow.flow`: statements in order, with the abstract values of the batch's
elements (moved, derived, on the device), branches joined conservatively.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Set, TYPE_CHECKING, Tuple, Union, cast

import libcst as cst

from ...walk import own_nodes
from ..base.names import dotted_name
from ..base.nodes import counts_in_ints, target_names
from ..device.moves import WRAPPED, Move
from .batchvalues import (
    BINARY_METHODS,
    COMPARISON_OPS,
    DEVICE,
    Element,
    Flow,
    MOVING_TYPES,
    NON_TENSOR_WORDS,
    NOT_TENSOR_ATTRS,
    NOT_TENSOR_RESULTS,
    TENSOR_ID_WORDS,
    TENSOR_ATTRS,
    TENSOR_PRESERVING,
    TEXT_CALLEE,
    TEXT_METHODS,
    Unmoved,
    name_words,
)
from .structure import BatchSource, statements_of


if TYPE_CHECKING:
    from .batchflow import BatchFlow


class BatchWalker:
    """Abstract interpretation of one batch source's statements (names -> Element | DEVICE)."""

    def __init__(
        self,
        analysis: BatchFlow,
        source: BatchSource,
        flow: Flow,
        body: Sequence[cst.CSTNode],
        reported: Optional[Set[int]] = None,
        stack: Tuple[cst.FunctionDef, ...] = (),
    ) -> None:
        self.a = analysis
        self.ctx = analysis.ctx
        self.moves = analysis.moves
        self.source = source
        self.flow = flow
        self.body = body
        self.state: Dict[str, object] = {}
        self.reported: Set[int] = set() if reported is None else reported
        self.textual: Optional[Set[str]] = None
        self.structured: Set[str] = set()
        # Moves seen in the batch's own code (a helper's moves name the helper's variables).
        self.sibling_moves: list = flow.moves if not stack else []
        self.stack = stack
        # The loop's moves of items of this batch (on any path); only those that can run with a
        # call count as evidence that the call's model is on the device.
        self.batch_moves: List[cst.CSTNode] = []
        self._nodes: Optional[List[cst.CSTNode]] = None
        # One path through the body (`BatchFlow`'s path check): condition text -> whether the
        # `if` body runs. An `if` whose condition is not listed is walked both ways and joined.
        self.choices: Optional[Dict[str, bool]] = None
        self.moved_here = False  # did this walk move an item of the batch?
        self.moved_in_helpers = False  # did a function of the file it was handed to move one?
        # On one path: it left the iteration (`continue`, `break`, `return`, `raise` outside
        # a nested loop or `try`), so what follows does not run on it.
        self.exited = False
        self.nesting = 0

    def body_nodes(self) -> List[cst.CSTNode]:
        """The nodes of the statements that see the batch (own_nodes of each), walked once."""
        if self._nodes is None:
            self._nodes = [node for statement in self.body for node in own_nodes(statement)]
        return self._nodes

    def start(self) -> None:
        source = self.source
        bound_at = source.binding_statement
        if type(bound_at) is cst.Assign:
            bound_at = self.ctx.parent(bound_at)
        for root in source.roots:
            self.state[root] = Element(
                root, source, bound_at, root=True, fix_target=root, helper=self.flow.helper
            )
        for name, path in source.elements.items():
            fix = name if "*" not in path else None
            self.state[name] = Element(
                name, source, bound_at, fix_target=fix, helper=self.flow.helper
            )
        self.structured = self._structured_names()
        self.batch_moves = self._batch_item_moves()

    # -- statements ---------------------------------------------------------------------------

    def block(self, statements) -> None:
        for statement in statements:
            if self.exited:
                return
            self.statement(statement)

    def statement(self, stmt: cst.CSTNode) -> None:
        if type(stmt) is cst.SimpleStatementLine or type(stmt) is cst.SimpleStatementSuite:
            for small in stmt.body:
                self.small(small, stmt)
                if self.choices is not None and self.nesting == 0 and type(small) in _EXITS:
                    self.exited = True  # this path leaves the iteration here
                    return
        elif type(stmt) is cst.If:
            self.sinks_in(stmt.test)
            taken = self.choices.get(condition_key(self.ctx, stmt)) if self.choices else None
            if taken is not None:
                if taken:
                    self.block(statements_of(stmt.body))
                elif type(stmt.orelse) is cst.Else:
                    self.block(statements_of(stmt.orelse.body))
                elif type(stmt.orelse) is cst.If:
                    self.statement(stmt.orelse)
                return
            before = dict(self.state)
            self.block(statements_of(stmt.body))
            after_body, body_exited = self.state, self.exited
            self.state, self.exited = dict(before), False
            if type(stmt.orelse) is cst.Else:
                self.block(statements_of(stmt.orelse.body))
            elif type(stmt.orelse) is cst.If:
                self.statement(stmt.orelse)
            if body_exited:
                return  # only the other branch goes on (both left: the path is over)
            if self.exited:
                self.state, self.exited = after_body, False
                return
            self.state = _join(after_body, self.state)
        elif type(stmt) is cst.For:
            self.sinks_in(stmt.iter)
            for name in target_names(stmt.target):
                self.state.pop(name, None)
            self._bind_batch_items(stmt)
            self.nesting += 1
            self.block(statements_of(stmt.body))
            if stmt.orelse is not None:
                self.block(statements_of(stmt.orelse.body))
            self.nesting -= 1
        elif type(stmt) is cst.While:
            self.sinks_in(stmt.test)
            self.nesting += 1
            self.block(statements_of(stmt.body))
            self.nesting -= 1
        elif type(stmt) is cst.With:
            for item in stmt.items:
                self.sinks_in(item.item)
                if item.asname is not None:
                    for name in target_names(item.asname.name):
                        self.state.pop(name, None)
            self.block(statements_of(stmt.body))
        elif type(stmt) is cst.Try:
            self.nesting += 1  # a `raise` or `return` in it may be caught or run `finally`
            self._try(stmt)
            self.nesting -= 1

    def _bind_batch_items(self, loop: cst.For) -> None:
        """`for k, v in batch.items():` / `for v in batch.values():` over the whole batch: `v`
        is each item as the loader gave it (so `batch[k] = v.float()` still leaves it on the
        CPU, and `batch[k] = v.cuda()` moves it)."""
        call = loop.iter
        if type(call) is not cst.Call or type(call.func) is not cst.Attribute or call.args:
            return
        batch = self.value(call.func.value)
        if not isinstance(batch, Element) or not batch.root:
            return
        method = call.func.attr.value
        item: Optional[cst.BaseExpression] = loop.target
        if method == "items" and type(loop.target) in (cst.Tuple, cst.List):
            elements = cast(Union[cst.Tuple, cst.List], loop.target).elements
            item = elements[1].value if len(elements) == 2 else None
        elif method != "values":
            return
        if type(item) is cst.Name:
            self.state[item.value] = batch.derive(item.value, loop)

    def _try(self, stmt: cst.Try) -> None:
        before = dict(self.state)
        self.block(statements_of(stmt.body))
        after_body = self.state
        for handler in stmt.handlers:
            self.state = dict(before)
            self.block(statements_of(handler.body))
            after_body = _join(after_body, self.state)
        self.state = after_body
        if stmt.orelse is not None:
            self.block(statements_of(stmt.orelse.body))
        if stmt.finalbody is not None:
            self.block(statements_of(stmt.finalbody.body))

    def small(self, node: cst.CSTNode, line: cst.CSTNode) -> None:
        self.sinks_in(node)
        if type(node) is cst.Assign:
            self._note_moves(node.value)
            for target in node.targets:
                self.bind(target.target, node.value, line)
        elif type(node) is cst.AnnAssign and node.value is not None:
            self._note_moves(node.value)
            self.bind(node.target, node.value, line)
        elif type(node) is cst.AugAssign:
            left, right = self.value(node.target), self.value(node.value)
            self._pair(left, right, node.target, node.value, node, "arithmetic")
        elif type(node) is cst.Expr and type(node.value) is cst.Call:
            self._statement_call(node.value)
        elif type(node) is cst.Del:
            for name in target_names(node.target):
                self.state.pop(name, None)

    def _note_moves(self, value: cst.BaseExpression) -> None:
        """Moves of this batch's elements: the device expression a fix should use."""
        if not self.moves.is_moved(value):
            return
        names = {n.value for n in _walk_names(value)}
        if any(isinstance(self.state.get(n), Element) for n in names):
            moves = [m for m in self.moves.moves_in(value) if not self._to_batch_item_device(m)]
            self.sibling_moves.extend(moves)
            if moves:
                self.moved_here = True

    def _moves_to_device(self, value: cst.BaseExpression) -> bool:
        """Is `value` on the device: a move, or made of moves? Not a move that follows a batch
        item never moved (`std = stats.to(inputs.device)` beside a CPU `inputs`)."""
        if type(value) is cst.Call:
            move = self.moves.move(value)
            if move is not None and self._to_batch_item_device(move):
                return False
        return self.moves.is_moved(value)

    def _to_batch_item_device(self, move: Move) -> bool:
        """`grad.to(imgs.device)` or `torch.tensor(std, device=imgs.device)` where `imgs` is a
        batch item never moved: the result goes to the item's device (the CPU), so it is no
        move to the device."""
        device = move.device
        if move.method not in ("to", "tensor") or type(device) is not cst.Attribute:
            return False
        if device.attr.value != "device":
            return False
        return isinstance(self.value(device.value), Element)

    def _statement_call(self, call: cst.Call) -> None:
        move = self.moves.move(call)
        if move is not None and self._to_batch_item_device(move):
            return
        if move is not None and type(move.receiver) is cst.Name:
            current = self.state.get(move.receiver.value)
            if isinstance(current, Element):
                if current.root:
                    # BatchEncoding.to / a dict-like batch moves in place.
                    self.state[move.receiver.value] = DEVICE
                    self.moved_here = True
                else:
                    changed = _copy(current)
                    changed.discarded = call
                    self.state[move.receiver.value] = changed
            return
        for index, arg in enumerate(call.args):
            if type(arg.value) is not cst.Name:
                continue
            current = self.state.get(arg.value.value)
            if not isinstance(current, Element):
                continue
            if self.moves.mover_call(call, index):
                self.state[arg.value.value] = DEVICE  # moved in place by a helper
                self.moved_here = True
                continue
            helper = self.a.project_helper(call.func)
            if helper is not None:
                changed = _copy(current)
                changed.helper = (helper, index)
                self.state[arg.value.value] = changed

    # -- bindings -----------------------------------------------------------------------------

    def bind(self, target: cst.BaseExpression, value: cst.BaseExpression, line) -> None:
        if type(target) is cst.Name:
            new = self.assigned(value, target.value, line)
            if new is None:
                self.state.pop(target.value, None)
            else:
                self.state[target.value] = new
            return
        if type(target) in (cst.Tuple, cst.List):
            self._bind_many(target, value, line)
            return
        if (
            type(target) is cst.Subscript or type(target) is cst.Attribute
        ) and type(target.value) is cst.Name:
            base = self.state.get(target.value.value)
            if not isinstance(base, Element):
                return
            placed = self.value(value)
            key = _key_text(self.ctx, target)
            if placed is None and base.root:
                # `batch[k] = to_var(v)` for every item, `batch["x"] = prepare(x)`: a value the
                # walk cannot place (a helper of another module may move it) replaces the item
                if key is None:
                    self.state.pop(target.value.value, None)
                else:
                    changed = _copy(base)
                    changed.rebound_keys = set(base.rebound_keys) | {key}
                    self.state[target.value.value] = changed
                return
            if placed is not DEVICE:
                return
            self.moved_here = True
            if key is None:
                self.state[target.value.value] = DEVICE  # batch[k] = v.to(dev) for every k
            else:
                changed = _copy(base)
                changed.moved_keys = set(base.moved_keys) | {key}
                self.state[target.value.value] = changed

    def _bind_many(self, target, value, line) -> None:
        elements = [e.value for e in target.elements]
        if (
            type(value) in (cst.Tuple, cst.List)
            and len(value.elements) == len(elements)
            and not any(type(e) is cst.StarredElement for e in value.elements)
            and not any(type(e) is cst.StarredElement for e in target.elements)
        ):
            for t, v in zip(elements, value.elements):
                self.bind(t, v.value, line)
            return
        current = DEVICE if self._moves_to_device(value) else self.value(value)
        for t in elements:
            for name in target_names(t):
                if current is DEVICE:
                    self.state[name] = DEVICE
                elif isinstance(current, Element):
                    fix = name if type(t) is cst.Name else None
                    self.state[name] = current.derive(name, line, fix_target=fix)
                else:
                    self.state.pop(name, None)

    def assigned(self, value: cst.BaseExpression, name: str, line) -> object:
        if self._moves_to_device(value):
            return DEVICE
        current = self.value(value)
        if current is DEVICE or current is None:
            return current
        assert isinstance(current, Element)
        alias = current.root and type(value) is cst.Name
        derived = current.derive(name, line, root=alias, fix_target=name)
        if alias:
            derived.moved_keys = set(current.moved_keys)
        return derived

    # -- values -------------------------------------------------------------------------------

    def value(self, expr: cst.CSTNode, depth: int = 0) -> object:
        """Element (not on the device), DEVICE, or None (anything else / unknown)."""
        if depth > 12:
            return None
        d = depth + 1
        if type(expr) is cst.Name:
            return self.state.get(expr.value)
        if type(expr) is cst.Attribute:
            return self._attribute(expr, d)
        if type(expr) is cst.Subscript:
            return self._subscript(expr, d)
        if type(expr) is cst.Call:
            return self._call_value(expr, d)
        if type(expr) is cst.BinaryOperation:
            return _combine(self.value(expr.left, d), self.value(expr.right, d))
        if type(expr) is cst.UnaryOperation:
            return self.value(expr.expression, d)
        if type(expr) is cst.Comparison:
            found = self.value(expr.left, d)
            for target in expr.comparisons:
                found = _combine(found, self.value(target.comparator, d))
            return found
        if type(expr) is cst.IfExp:
            body, orelse = self.value(expr.body, d), self.value(expr.orelse, d)
            if DEVICE in (body, orelse):
                return DEVICE
            if isinstance(body, Element) and isinstance(orelse, Element):
                return body
            return None
        if type(expr) in (cst.ListComp, cst.GeneratorExp, cst.DictComp, cst.List, cst.Tuple):
            return DEVICE if self.moves.is_moved(expr) else None
        return None

    def _attribute(self, expr: cst.Attribute, d: int) -> object:
        base = self.value(expr.value, d)
        attr = expr.attr.value
        if isinstance(base, Element):
            if base.root:
                return self._child(base, f"{base.name}.{attr}", attr, None)
            return base if attr in ("T", "mT", "H", "data") else None
        if base is DEVICE:
            return None if attr in NOT_TENSOR_ATTRS else DEVICE
        return None

    def _subscript(self, expr: cst.Subscript, d: int) -> object:
        base = self.value(expr.value, d)
        if isinstance(base, Element):
            key = _key_text(self.ctx, expr)
            if not base.root:
                if base.moved_keys:  # a list of tensors moved item by item: images[0] = ...
                    return DEVICE if key in base.moved_keys else None
                return base  # a slice of a tensor stays where the tensor is
            display = self.ctx.code(expr)
            if "\n" in display or len(display) > 40:
                return None
            fix = display if key is not None and key.startswith(("'", '"')) else None
            return self._child(base, display, key, fix)
        return DEVICE if base is DEVICE else None

    def _dict_item(self, root: Element, method: str, call: cst.Call) -> object:
        """`batch.pop("labels")` / `batch.get("labels")`: the item, like `batch["labels"]`."""
        if method not in ("pop", "get") or not call.args or call.args[0].keyword is not None:
            return None
        key = call.args[0].value
        if type(key) is not cst.SimpleString:
            return None
        return self._child(root, f"{root.name}[{key.value}]", key.value, None)

    def _child(self, root: Element, display: str, key, fix) -> object:
        if key is not None and key in root.moved_keys:
            return DEVICE
        if key is not None and key in root.rebound_keys:
            return None
        found = root.children.get(display)
        if found is None:
            found = root.children[display] = Element(
                name=display,
                source=root.source,
                bound_at=root.bound_at,
                fix_target=fix,
                origin=root,
                helper=root.helper,
            )
        elif found.helper != root.helper:
            found = _copy(found)
            found.helper = root.helper
        return found

    def _call_value(self, call: cst.Call, d: int) -> object:
        move = self.moves.move(call)
        if move is not None and self._to_batch_item_device(move):
            return None  # on the CPU item's device: not a device tensor (nor known to be CPU)
        if move is not None or self.moves.is_moved(call):
            return DEVICE
        func = call.func
        if type(func) is cst.Attribute:
            receiver = self.value(func.value, d)
            method = func.attr.value
            if isinstance(receiver, Element):
                if receiver.root:
                    return self._dict_item(receiver, method, call)
                return receiver if method in TENSOR_PRESERVING else None
            if receiver is DEVICE:
                if method in NOT_TENSOR_RESULTS or self.moves.to_cpu(call):
                    return None  # `model(x).detach().to("cpu")`: back on the host
                return DEVICE
        args = [self.value(a.value, d) for a in call.args]
        if self.a.is_torch_function(call):
            if DEVICE in args:
                return DEVICE
            return next((a for a in args if isinstance(a, Element) and not a.root), None)
        on_device, _ = self.a.model_call(call, DEVICE in args)
        return DEVICE if on_device else None

    # -- sinks --------------------------------------------------------------------------------

    def sinks_in(self, node: cst.CSTNode) -> None:
        for child in own_nodes(node):
            if type(child) is cst.Call:
                self._call_sink(child)
            elif type(child) is cst.BinaryOperation:
                left, right = self.value(child.left), self.value(child.right)
                self._pair(left, right, child.left, child.right, child, "arithmetic")
            elif type(child) is cst.Comparison:
                left_expr = child.left
                for target in child.comparisons:
                    if isinstance(target.operator, COMPARISON_OPS):
                        left, right = self.value(left_expr), self.value(target.comparator)
                        self._pair(left, right, left_expr, target.comparator, child, "comparison")
                    left_expr = target.comparator

    def _pair(self, left, right, left_expr, right_expr, sink, kind) -> None:
        if left is DEVICE and isinstance(right, Element):
            if not self._one_element(right_expr):
                self.report(right, right_expr, sink, kind)
        elif right is DEVICE and isinstance(left, Element):
            if not self._one_element(left_expr):
                self.report(left, left_expr, sink, kind)

    def _one_element(self, expr: cst.BaseExpression) -> bool:
        """`labels[j]` with `j` from `range(...)`, or `labels[0]`: an item indexed by integers
        only. Indexed down to one element it is a zero-dim tensor, and PyTorch lets a zero-dim
        CPU tensor meet CUDA tensors as it lets a Python number (`predict[j] == labels[j]` runs);
        whether the item has more dimensions is not visible, so such a pair proves nothing."""
        if type(expr) is not cst.Subscript:
            return False
        for element in expr.slice:
            index = element.slice
            if type(index) is not cst.Index:
                return False
            value = index.value
            if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
                value = value.expression
            if type(value) is cst.Integer:
                continue
            if type(value) is not cst.Name or not self._counts_up(value):
                return False
        return True

    def _counts_up(self, name: cst.Name) -> bool:
        """Is every binding of `name` a loop that counts in ints (`for j in range(...)`, the
        counter of `for k, item in enumerate(...)`)?"""
        bindings = self.a.scopes.lookup(name.value, name)
        return bool(bindings) and all(
            b.kind in ("for", "comprehension")
            and b.statement is not None
            and counts_in_ints(b.statement, b.node)
            for b in bindings
        )

    def _call_sink(self, call: cst.Call) -> None:
        move = self.moves.move(call)
        if move is not None and self._to_batch_item_device(move):
            return
        if move is not None:
            if move.receiver is not None and isinstance(self.value(move.receiver), Element):
                self.sibling_moves.append(move)  # `model(images.to(device))`: a sibling move
                self.moved_here = True
            return
        func = call.func
        values = [(arg, self.value(arg.value)) for arg in call.args]
        on_device_args = any(v is DEVICE for _, v in values)
        if self.a.is_join(call) and call.args:
            items = call.args[0].value
            if type(items) is cst.List or type(items) is cst.Tuple:
                found = [(e.value, self.value(e.value)) for e in items.elements]
                if any(v is DEVICE for _, v in found):
                    for expr, v in found:
                        if isinstance(v, Element):
                            self.report(v, expr, call, "cat")
            return
        if type(func) is cst.Attribute and func.attr.value in BINARY_METHODS and call.args:
            receiver = self.value(func.value)
            first = values[0][1]
            self._pair(receiver, first, func.value, call.args[0].value, call, "comparison")
            return
        if self.a.is_loss(call):
            if on_device_args and not self._scattered(call):
                cpu_targets = self.a.takes_cpu_targets(call)
                for position, (arg, v) in enumerate(values):
                    if cpu_targets and (position > 0 or arg.keyword is not None):
                        continue  # a CTC loss's targets and lengths may stay on the CPU
                    if isinstance(v, Element) and not arg.star:
                        self.report(v, arg.value, call, "loss")
            return
        if self.a.is_torch_function(call):
            return
        _, inputs = self.a.model_call(call, on_device_args, self._siblings_moved_with(call))
        if not inputs:
            self._follow(call, values)
            return
        for arg, v in values:
            if not isinstance(v, Element):
                continue
            if arg.star == "*":
                continue
            index = next((i for i, a in enumerate(call.args) if a is arg), -1)
            if index >= 0 and not arg.star and self.a.moved_by_forward(call, index):
                continue  # `forward` starts with `x = x.to("cuda")`: the model places it
            if arg.star != "*" and (v.moved_keys or v.rebound_keys):
                # `data["pixel_values"] = data["pixel_values"].to(device)`, then `model(**data)`
                # or `model(data)`: the items it moves by key are moved; which other keys the
                # batch holds, and which of them the model reads, is unknown here (a
                # collator's or dataset's dict)
                continue
            if arg.star != "**" and v.name in self.structured:
                # the model gets the whole structured batch, or an item the loop takes tensors
                # out of (`graph.ndata["feat"].to(device)`, a DGL graph), and may place it itself
                continue
            self.report(v, arg.value, call, "model")
            classes = self.a.project_model_classes(call)
            if classes is not None and self.flow.findings:
                last = self.flow.findings[-1]
                if last.element is v and last.sink is call:
                    last.forward_of = (classes, arg.keyword.value if arg.keyword else index)
                    last.wrapped_init = self.a.wrapped_constructor_args(call)

    def _scattered(self, call: cst.Call) -> bool:
        """A loss module wrapped in DataParallel (`criterion = nn.DataParallel(criterion)`, on
        some path): the wrapper scatters every input to its replicas' GPUs, CPU ones
        included, so a CPU label beside device features is no mismatch there."""
        func = call.func
        if type(func) not in (cst.Name, cst.Attribute):
            return False
        return WRAPPED in self.moves.placement(func)

    def report(self, element: Element, use: cst.CSTNode, sink: cst.CSTNode, kind: str) -> None:
        lineage = element.lineage()
        if any(id(e) in self.reported for e in lineage):
            return
        if not self._tensor_like(lineage):
            return
        # One finding per element and what it was derived from (the whole batch aside: its
        # other items are still reported).
        self.reported.update(id(e) for e in lineage if e is element or not e.root)
        self.flow.findings.append(Unmoved(element, use, sink, kind))

    # -- same-file helpers --------------------------------------------------------------------

    def _follow(self, call: cst.Call, values) -> None:
        """An element handed to a function of this file: follow it into the function's body."""
        if len(self.stack) >= 2:
            return
        function = self.moves.callgraph.function_for(call.func)
        if function is None or function in self.stack:
            return
        if not any(isinstance(v, Element) and not v.root for _, v in values):
            return
        params = [p.name.value for p in function.params.params]
        offset = (
            1
            if params and params[0] in ("self", "cls") and type(call.func) is cst.Attribute
            else 0
        )
        state: Dict[str, object] = {}
        position = offset
        for arg, value in values:
            if arg.star:
                return  # *args / **kwargs: cannot tell which parameter gets what
            if arg.keyword is not None:
                name = arg.keyword.value
            elif position < len(params):
                name = params[position]
                position += 1
            else:
                continue
            if value is DEVICE:
                state[name] = DEVICE
            elif isinstance(value, Element) and not value.root:
                param = value.derive(name, None)
                param.via = call
                state[name] = param
        if not any(isinstance(v, Element) for v in state.values()):
            return
        body = statements_of(function.body)
        inner = BatchWalker(
            self.a, self.source, self.flow, body, self.reported, self.stack + (function,)
        )
        inner.batch_moves = self._moves_with(call)
        inner.state = state
        inner.block(body)
        if inner.moved_here or inner.moved_in_helpers:
            self.moved_in_helpers = True

    # -- what an element is -------------------------------------------------------------------

    def _tensor_like(self, lineage: List[Element]) -> bool:
        if self.textual is None:
            self.textual = self._textual_names()
        for element in lineage:
            name = element.name
            if not _looks_tensor(name):
                return False
            if name in self.textual:
                return False
        return True

    def _textual_names(self) -> Set[str]:
        """Batch names used as text: handed to a tokenizer, split, opened, formatted."""
        found: Set[str] = set()
        tracked = set(self.state)
        for node in self.body_nodes():
            if type(node) is not cst.Call:
                continue
            func = node.func
            if type(func) is cst.Attribute and func.attr.value in TEXT_METHODS:
                if type(func.value) is cst.Name and func.value.value in tracked:
                    found.add(func.value.value)
            dotted = dotted_name(func) or ""
            if dotted and TEXT_CALLEE.search(dotted):
                for arg in node.args:
                    if type(arg.value) is cst.Name and arg.value.value in tracked:
                        found.add(arg.value.value)
        return found

    def _moves_with(self, node: cst.CSTNode) -> List[cst.CSTNode]:
        """The batch moves that can run in the same iteration as `node`: a move in the other arm
        of an `if isinstance(net, nn.Module): ... else: net(X)` says nothing about `net`."""
        exclusive = self.a.conditions.exclusive
        return [move for move in self.batch_moves if not exclusive(move, node)]

    def _siblings_moved_with(self, node: cst.CSTNode) -> bool:
        return bool(self._moves_with(node))

    def _batch_item_moves(self) -> List[cst.CSTNode]:
        """The moves of items of the batch in the code that sees it (anywhere, on any path)."""
        names = set(self.source.elements) | set(self.source.roots)
        nodes = self.body_nodes()
        # What each assignment's value mentions does not change between the rounds. A model's
        # output is not an item of the batch: `loss(output.cuda(), label)` after `output =
        # self.model(data)` moves the output, which says nothing about where the model is.
        assigns = [
            (node, _names_of(node.value))
            for node in nodes
            if type(node) is cst.Assign
            and not (type(node.value) is cst.Call and self.a.runs_a_named_model(node.value))
        ]
        for _ in range(2):  # names taken from the batch: `image, mask = batch["image"], ...`
            for assign, mentioned in assigns:
                if mentioned & names:
                    for target in assign.targets:
                        names |= target_names(target.target)
        found = []
        for node in nodes:
            if type(node) in MOVING_TYPES and self.moves.is_moved(node):
                if self.moves._data_names(node) & names and not _follows_a_tensor(
                    self.moves, node
                ):
                    found.append(node)
        return found

    def _structured_names(self) -> Set[str]:
        """Whole-batch names the code takes apart (subscripts, unpacking, `.items()`), and
        batch items it reads an attribute of that no tensor has (`batch_graphs.ndata`): objects
        that hold tensors, not tensors."""
        roots = set(self.source.roots)
        items = set(self.source.elements)
        found: Set[str] = set()
        for node in self.body_nodes():
            if type(node) is cst.Subscript or type(node) is cst.Attribute:
                value = node.value
                if type(value) is not cst.Name:
                    continue
                if value.value in roots:
                    found.add(value.value)
                elif (
                    value.value in items
                    and type(node) is cst.Attribute
                    and node.attr.value not in TENSOR_ATTRS
                    and not self._called(node)
                ):
                    found.add(value.value)
            elif type(node) is cst.Assign and type(node.value) is cst.Name:
                if node.value.value in roots and any(
                    type(t.target) in (cst.Tuple, cst.List) for t in node.targets
                ):
                    found.add(node.value.value)
        return found

    def _called(self, attribute: cst.Attribute) -> bool:
        """`images.float()`: the attribute is a method being called."""
        parent = self.ctx.parent(attribute)
        return type(parent) is cst.Call and parent.func is attribute


_EXITS = (cst.Continue, cst.Break, cst.Return, cst.Raise)


def condition_key(ctx, stmt: cst.If) -> str:
    """An `if`'s condition as text: two `if`s with the same text take the same branch. A
    condition that calls something (`random.random() < p`) may differ between two tests, so
    each such `if` is its own decision."""
    text = " ".join(ctx.code(stmt.test).split())
    if any(type(node) is cst.Call for node in own_nodes(stmt.test)):
        return f"{text} @{id(stmt)}"
    return text


def _follows_a_tensor(moves, node: cst.CSTNode) -> bool:
    """`target.to(output.device)`: a move to wherever another tensor already is, which says
    nothing about where the model lives (device-agnostic code, model parallelism)."""
    found = moves.moves_in(node)
    return bool(found) and all(
        type(m.device) is cst.Attribute and m.device.attr.value == "device" for m in found
    )


def _names_of(node: cst.CSTNode) -> Set[str]:
    return {n.value for n in _walk_names(node)}


def _walk_names(node: cst.CSTNode):
    return (n for n in own_nodes(node) if type(n) is cst.Name)


def _copy(element: Element) -> Element:
    from dataclasses import replace

    return replace(
        element, moved_keys=set(element.moved_keys), rebound_keys=set(element.rebound_keys)
    )


def _combine(left: object, right: object) -> object:
    if left is DEVICE or right is DEVICE:
        return DEVICE
    if isinstance(left, Element) and not left.root:
        return left
    if isinstance(right, Element) and not right.root:
        return right
    return None


def _join(a: Dict[str, object], b: Dict[str, object]) -> Dict[str, object]:
    """Two paths meet: an element stays unmoved only where both paths agree it is."""
    out: Dict[str, object] = {}
    for name in set(a) | set(b):
        left, right = a.get(name), b.get(name)
        if left is right:
            value = left
        elif isinstance(left, Element) and isinstance(right, Element):
            value = left if left.source is right.source and left.name == right.name else None
        elif left is DEVICE or right is DEVICE:
            value = (
                DEVICE
                if (left is DEVICE or isinstance(left, Element))
                and (right is DEVICE or isinstance(right, Element))
                else None
            )
        else:
            value = None
        if value is not None:
            out[name] = value
    return out


def _key_text(ctx, node: cst.CSTNode) -> Optional[str]:
    """The literal key of `batch["labels"]` / `batch[2]` / `batch.labels`, else None."""
    if type(node) is cst.Attribute:
        return node.attr.value
    if type(node) is cst.Subscript and len(node.slice) == 1:
        index = node.slice[0].slice
        if type(index) is cst.Index and type(index.value) in (cst.SimpleString, cst.Integer):
            return ctx.code(index.value)
    return None


# A word that ends in a length, written as one word (`seqlength`, `srclens`).
_LENGTHS = re.compile(r"(length|len)s?$")


def _looks_tensor(name: str) -> bool:
    """False for batch items named like paths, ids, texts, metadata or CPU-side lengths."""
    if "[" in name:  # batch["image_path"]: judge by the key
        inner = re.findall(r"\[['\"]?([^\]'\"]*)['\"]?\]", name)
        name = inner[-1] if inner else name
    elif "." in name:
        name = name.rsplit(".", 1)[-1]
    words = name_words(name)
    if not words:
        return True
    if name.lower() in NON_TENSOR_WORDS:
        return False
    last = words[-1]
    if words[0] in ("num", "n") and len(words) > 1:
        return False  # num_answers, n_boxes: counts
    if last in ("id", "ids"):
        return any(w in TENSOR_ID_WORDS for w in words[:-1])
    if _LENGTHS.search(last):
        return False  # seqlength, seqlens: lengths, which pack_padded_sequence wants on the CPU
    return last not in NON_TENSOR_WORDS
