"""check(source, settings) -> FileResult: parse once, one pass, every enabled rule.

Data flows one way: Source -> libcst parse -> Tree (parents, order, nodes by type) -> FileContext
(analyses built lazily on first use) -> rules -> pending reports -> positions (only for reported
nodes) -> Diagnostics. `# noqa` filtering happens later (runner for the CLI, flake8 itself for the
plugin) because project-phase findings and the unused-noqa rule need the same information.
"""

from __future__ import annotations

import re
import traceback
from functools import lru_cache
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, TypeVar

import libcst as cst

from . import noqa, parse_guard
from .config import Settings
from .diagnostics import (
    Diagnostic,
    Edit,
    FileResult,
    Fix,
    RuleCrash,
    Severity,
    make_diagnostic,
)
from .positions import PositionIndex, Span
from .rules import all_rules
from .rules.base import PendingReport, Rule
from .source import Source
from .walk import Tree

A = TypeVar("A")

SYNTAX_ERROR = "TRL001"


class EditSpec:
    """An edit that still points at nodes; resolved to offsets once positions are known.

    kinds: replace (node -> content), insert_before / insert_after (at the node's start / end),
    line_after / line_before (a new line, indented like the statement's first line, after the
    statement's last line or before its first), body_start (a new line before the first
    statement of a compound statement's indented body).
    """

    __slots__ = ("kind", "node", "content")

    def __init__(self, kind: str, node: cst.CSTNode, content: str) -> None:
        self.kind = kind
        self.node = node
        self.content = content

    def anchor_node(self) -> cst.CSTNode:
        if self.kind == "body_start":
            return self.node.body.body[0]  # type: ignore[attr-defined]
        return self.node


class FileContext:
    """What a rule may read about the file under analysis."""

    def __init__(self, source: Source, module: cst.Module, tree: Tree, settings: Settings):
        self.source = source
        self.module = module
        self.tree = tree
        self.settings = settings
        self.path = source.path
        self._analyses: Dict[type, Any] = {}
        self._names: Any = None
        self._scopes: Any = None
        self._code: Dict[int, str] = {}  # id(node) -> its text, for nodes of this tree
        self.positions = PositionIndex(module, source, tree.parent)

    # -- analyses -----------------------------------------------------------------------------

    def analysis(self, cls: Type[A]) -> A:
        found = self._analyses.get(cls)
        if found is None:
            found = self._analyses[cls] = cls(self)  # type: ignore[call-arg]
        return found

    # Rules ask for these two on almost every node: kept in attributes, past the import and the
    # analysis lookup.
    @property
    def names(self):
        found = self._names
        if found is None:
            from .analysis.base.names import Names

            found = self._names = self.analysis(Names)
        return found

    @property
    def scopes(self):
        found = self._scopes
        if found is None:
            from .analysis.base.scopes import Scopes

            found = self._scopes = self.analysis(Scopes)
        return found

    # -- tree ---------------------------------------------------------------------------------

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.tree.parent(node)

    def ancestors(self, node: cst.CSTNode):
        return self.tree.ancestors(node)

    def nodes(self, node_type):
        return self.tree.nodes(node_type)

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The innermost statement containing `node` (small statement or compound)."""
        current: Optional[cst.CSTNode] = node
        while current is not None:
            if isinstance(current, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
                return current
            current = self.tree.parent(current)
        return None

    def code(self, node: cst.CSTNode) -> str:
        """The node's source text (libcst round-trips it exactly)."""
        # Regenerating text is libcst's codegen over the whole subtree; analyses ask for the same
        # nodes' text repeatedly. Remembered only for nodes of this tree (their ids stay theirs).
        key = id(node)
        found = self._code.get(key)
        if found is None:
            found = self.module.code_for_node(node)
            if self.tree.parent(node) is not None:
                self._code[key] = found
        return found

    def span(self, node: cst.CSTNode) -> Span:
        return self.positions.span(node)

    # -- edits --------------------------------------------------------------------------------

    def replace(self, node: cst.CSTNode, content: str) -> EditSpec:
        return EditSpec("replace", node, content)

    def insert_before(self, node: cst.CSTNode, content: str) -> EditSpec:
        return EditSpec("insert_before", node, content)

    def insert_after(self, node: cst.CSTNode, content: str) -> EditSpec:
        return EditSpec("insert_after", node, content)

    def line_after(self, statement: cst.CSTNode, code: str) -> EditSpec:
        return EditSpec("line_after", statement, code)

    def line_before(self, statement: cst.CSTNode, code: str) -> EditSpec:
        return EditSpec("line_before", statement, code)

    def body_start(self, compound: cst.CSTNode, code: str) -> Optional[EditSpec]:
        """A line at the start of a compound statement's body; None for one-line bodies."""
        body = getattr(compound, "body", None)
        if type(body) is not cst.IndentedBlock or not body.body:
            return None
        return EditSpec("body_start", compound, code)


# -- running the rules ------------------------------------------------------------------------


def enabled_rules(settings: Settings, path: str) -> List[Type[Rule]]:
    codes = settings.codes_for(path)
    return [rule for code, rule in all_rules().items() if code in codes]


def might_match(text: str, rules: Sequence[Type[Rule]]) -> bool:
    """False when no rule's markers occur in the text: the file cannot produce a finding."""
    return any(_has_marker(rule, text) for rule in rules)


def _has_marker(rule: Type[Rule], text: str) -> bool:
    return not rule.markers or any(marker in text for marker in rule.markers)


def rules_to_run(text: str, rules: Sequence[Type[Rule]]) -> List[Type[Rule]]:
    """The rules that can report on this text: a rule none of whose markers occur in it cannot
    (the markers' contract, which already decides whether a file is parsed), so it is not run
    either when other rules make the file worth parsing. Project rules always run: their facts
    about this file serve other files' findings."""
    return [rule for rule in rules if rule.project or _has_marker(rule, text)]


def check(
    source: Source,
    settings: Settings,
    rules: Optional[Sequence[Type[Rule]]] = None,
) -> FileResult:
    if rules is None:
        rules = enabled_rules(settings, source.path)
    result = FileResult(path=source.path)
    result.noqa = noqa.scan(source.lines)
    if source.notebook is not None and any(r.code == SYNTAX_ERROR for r in rules):
        result.diagnostics.extend(_broken_cells(source))
    file_rules = [r for r in rules if r.code != SYNTAX_ERROR]
    if not file_rules and not any(r.code == SYNTAX_ERROR for r in rules):
        return result
    if not might_match(source.text, file_rules):
        # Cannot match, but a broken file is still worth a TRL001 if the user asked for it
        # (it is cheap to learn with Python's own compiler).
        if any(r.code == SYNTAX_ERROR for r in rules):
            error = _python_syntax_error(source)
            if error is not None:
                result.diagnostics.append(error)
        return result
    # Python's parser first: libcst's native parser crashes the process on deeply nested input.
    verdict = parse_guard.precheck(source.text)
    if verdict.problem is not None:
        if any(r.code == SYNTAX_ERROR for r in rules):
            result.diagnostics.append(_problem(source, verdict.problem))
        return result
    try:
        module = parse_guard.parse_checked(source.text)
    except cst.ParserSyntaxError as exc:
        if any(r.code == SYNTAX_ERROR for r in rules):
            result.diagnostics.append(_syntax_error(source, exc))
        return result
    except RecursionError:
        if any(r.code == SYNTAX_ERROR for r in rules):
            result.diagnostics.append(
                syntax_error_diagnostic(
                    source.path,
                    "the file is nested too deeply for the parser (RecursionError); not analysed",
                    1,
                    0,
                )
            )
        return result
    except Exception as exc:  # libcst failing in a way it does not document
        if any(r.code == SYNTAX_ERROR for r in rules):
            result.diagnostics.append(
                syntax_error_diagnostic(
                    source.path,
                    f"trainlint's parser (libcst) failed on this file ({type(exc).__name__}: "
                    f"{exc}); not analysed",
                    1,
                    0,
                )
            )
        return result
    try:
        tree = Tree(module)
        ctx = FileContext(source, module, tree, settings)
        ctx.positions.ast_tree = verdict.tree
    except Exception as exc:  # the engine's own bug: this file is lost, the run goes on
        result.crashes.append(_crash(source.path, "engine", exc))
        return result
    run_rules(ctx, rules_to_run(source.text, file_rules), result)
    return result


def run_rules(ctx: FileContext, rule_classes: Sequence[Type[Rule]], result: FileResult) -> None:
    instances: List[Rule] = []
    for cls in rule_classes:
        try:
            instances.append(cls(ctx))
        except Exception as exc:  # a rule's constructor is rule code too
            result.crashes.append(_crash(ctx.path, cls.code, exc))
    handlers: Dict[type, List[Tuple[Rule, Any]]] = {}
    for rule in instances:
        for node_type, attr in _visitors_of(type(rule)):
            handlers.setdefault(node_type, []).append((rule, getattr(rule, attr)))
    crashed: set = set()
    if handlers:
        for node in ctx.tree.order:
            todo = handlers.get(type(node))
            if not todo:
                continue
            for rule, method in todo:
                if rule in crashed:
                    continue
                try:
                    method(node)
                except Exception as exc:
                    crashed.add(rule)
                    result.crashes.append(_crash(ctx.path, rule.code, exc))
    for rule in instances:
        if rule in crashed:
            continue
        try:
            rule.finish()
            if rule.project:
                facts = rule.facts()
                if facts is not None:
                    result.facts[rule.code] = facts
                if rule.candidates:
                    keys = list(rule.candidates)
                    resolved = resolve_reports(ctx, [rule.candidates[k] for k in keys])
                    result.candidates[rule.code] = {
                        key: diagnostic.to_dict() for key, diagnostic in zip(keys, resolved)
                    }
        except Exception as exc:
            crashed.add(rule)
            result.crashes.append(_crash(ctx.path, rule.code, exc))
    pending = [report for rule in instances if rule not in crashed for report in rule.reports]
    try:
        result.diagnostics.extend(resolve_reports(ctx, pending))
    except Exception:
        # A report the engine cannot place (a node that is not in this file's tree, a bad
        # edit, a message that is not text): resolve rule by rule, so the crash names the rule
        # that made the report and every other rule's findings are kept.
        for rule in instances:
            if rule in crashed or not rule.reports:
                continue
            try:
                result.diagnostics.extend(resolve_reports(ctx, rule.reports))
            except Exception as exc:
                result.crashes.append(_crash(ctx.path, rule.code, exc))


@lru_cache(maxsize=None)
def _visitors_of(rule_class: Type[Rule]) -> Tuple[Tuple[type, str], ...]:
    """(node type, method name) for each `visit_<NodeType>` of a rule class, in `dir` order."""
    found = []
    for attr in dir(rule_class):
        if attr.startswith("visit_"):
            node_type = getattr(cst, attr[len("visit_") :], None)
            if isinstance(node_type, type):
                found.append((node_type, attr))
    return tuple(found)


def resolve_reports(ctx: FileContext, pending: Sequence[PendingReport]) -> List[Diagnostic]:
    if not pending:
        return []
    nodes: List[cst.CSTNode] = []
    for report in pending:
        nodes.append(report.node)
        if report.end_node is not None:
            nodes.append(report.end_node)
        for node, _ in report.related:
            nodes.append(node)
        if report.fix is not None:
            for spec in report.fix.edits:
                nodes.append(spec.anchor_node())
    for report in pending:
        _check_report(report)
    ctx.positions.prepare(nodes)
    out = []
    for report in pending:
        row, col, end_row, end_col = ctx.span(report.node)
        if report.end_node is not None:
            _, _, end_row, end_col = ctx.span(report.end_node)
        fix = None
        if report.fix is not None:
            edits = tuple(_resolve_edit(ctx, spec) for spec in report.fix.edits)
            fix = Fix(report.fix.applicability, report.fix.message, edits)
        related = tuple((ctx.path, *ctx.span(node)[:2], note) for node, note in report.related)
        out.append(
            make_diagnostic(
                ctx.source,
                report.rule.code,
                report.rule.name,
                report.message,
                report.severity,
                (row, col, end_row, end_col),
                fix,
                related,
            )
        )
    return out


def _check_report(report: PendingReport) -> None:
    """A report's parts must be what the reporters can print; say which part is wrong."""
    if not isinstance(report.message, str):
        raise TypeError(f"report() message must be a str, not {type(report.message).__name__}")
    if not isinstance(report.severity, Severity):
        raise TypeError(f"report() severity must be a Severity, not {report.severity!r}")
    for node in (report.node, report.end_node):
        if node is not None and not isinstance(node, cst.CSTNode):
            raise TypeError(f"report() needs a libcst node, not {type(node).__name__}")


def _resolve_edit(ctx: FileContext, spec: EditSpec) -> Edit:
    source = ctx.source
    if spec.kind in ("replace", "insert_before", "insert_after"):
        row, col, end_row, end_col = ctx.span(spec.node)
        start = source.offset(row, col)
        end = source.offset(end_row, end_col)
        if spec.kind == "replace":
            return Edit(start, end, spec.content)
        at = start if spec.kind == "insert_before" else end
        return Edit(at, at, spec.content)
    newline = source.newline
    anchor = spec.anchor_node()
    row, _, end_row, _ = ctx.span(anchor)
    line = source.line(row)
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    text = "".join(indent + part + newline for part in spec.content.split("\n"))
    if spec.kind in ("line_before", "body_start"):
        at = source.offset(row, 0)
        return Edit(at, at, text)
    # line_after: after the physical line that ends the statement.
    starts = source.line_starts
    if end_row < len(starts) - 1:
        at = starts[end_row]
        return Edit(at, at, text)
    at = len(source.text)
    if source.text and not source.text.endswith(("\n", "\r")):
        text = newline + text
    return Edit(at, at, text)


# -- syntax errors ----------------------------------------------------------------------------

_LIBCST_AT = re.compile(r"error at (\d+):(\d+)")


def syntax_error_diagnostic(path: str, message: str, row: int, col: int) -> Diagnostic:
    return Diagnostic(
        code=SYNTAX_ERROR,
        message=message,
        path=path,
        row=row,
        col=col,
        end_row=row,
        end_col=col,
        severity=Severity.ERROR,
        name="syntax-error",
        text_row=row,
        noqa_row=row,
    )


def _python_syntax_error(source: Source) -> Optional[Diagnostic]:
    problem = parse_guard.python_parse(source.text).problem
    return None if problem is None else _problem(source, problem)


def _problem(source: Source, problem: parse_guard.Problem) -> Diagnostic:
    return _locate(
        source, syntax_error_diagnostic(source.path, problem.message, problem.row, problem.col)
    )


def _syntax_error(source: Source, exc: cst.ParserSyntaxError) -> Diagnostic:
    # Python's own message ("'(' was never closed", "Missing parentheses in call to 'print'")
    # is what users know; libcst's is a list of expected tokens. Prefer Python's when it agrees
    # that the file is broken.
    python = _python_syntax_error(source)
    if python is not None:
        return python
    match = _LIBCST_AT.search(exc.message)
    row, col = (int(match.group(1)), int(match.group(2))) if match else (exc.raw_line, 0)
    message = exc.message.replace("parser error: ", "").strip()
    return _locate(
        source,
        syntax_error_diagnostic(
            source.path,
            f"trainlint's parser (libcst) cannot parse this file, although Python can: {message}",
            max(row, 1),
            col,
        ),
    )


def _broken_cells(source: Source) -> List[Diagnostic]:
    """TRL001 for each notebook cell left out of the analysis because it does not parse."""
    out = []
    for cell, message, row, col in source.notebook.broken:  # type: ignore[union-attr]
        diagnostic = syntax_error_diagnostic(source.path, message, row, col)
        diagnostic.cell = cell
        # The cell is not in the analysed text, so no `# noqa` row of that text applies to it.
        diagnostic.text_row = -1
        out.append(diagnostic)
    return out


def _locate(source: Source, diagnostic: Diagnostic) -> Diagnostic:
    located = source.cell_of(diagnostic.row)
    if located is not None:
        diagnostic.cell, diagnostic.row = located
        diagnostic.end_row = diagnostic.row
        diagnostic.noqa_row = diagnostic.row
    return diagnostic


def _crash(path: str, code: str, exc: BaseException) -> RuleCrash:
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno})"
    return RuleCrash(path=path, code=code, error=f"{type(exc).__name__}: {exc}{where}")


__all__ = [
    "EditSpec",
    "FileContext",
    "check",
    "enabled_rules",
    "make_diagnostic",
    "syntax_error_diagnostic",
]
