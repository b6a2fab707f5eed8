"""check(source, selection) -> FileResult: parse once, one pass, every enabled rule.

Data flows one way: Source -> libcst parse -> Tree (parents, order, nodes by type) -> FileContext
(analyses built lazily on first use) -> rules -> pending reports -> positions (only for reported
nodes) -> Diagnostics. `# noqa` filtering happens later (runner for the CLI, flake8 itself for the
plugin) because project-phase findings and the unused-noqa rule need the same information.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

import libcst as cst

from . import budget, legacy_async, noqa, parse_guard
from .context import FileContext
from .diagnostics import (
    Applicability,
    Diagnostic,
    Edit,
    Fix,
    FileResult,
    RuleCrash,
    Severity,
    make_diagnostic,
)
from .pending import resolve_reports
from .rules.base import Rule
from .source import Source
from .walk import Tree

if TYPE_CHECKING:  # pragma: no cover
    # The engine is handed the run's selection; it needs the class for annotations only.
    from .selection import Selection

SYNTAX_ERROR = "TRL001"


# -- running the rules ------------------------------------------------------------------------


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
    selection: "Selection",
    rules: Optional[Sequence[Type[Rule]]] = None,
) -> FileResult:
    """The file's findings by the rules `selection` enables for it (or by `rules`, when given:
    the selection then only lends its settings). A check that takes longer than the
    `per-file-timeout` setting is stopped where it can be (budget.py): the file is then one
    TRL001 saying so."""
    if rules is None:
        rules = selection.rules_for(source.path)
    chosen = rules
    seconds = selection.settings.per_file_timeout
    result = budget.within(seconds, lambda: _check(source, selection, chosen))
    if result is None:
        return not_analysed(source, chosen, budget.overtime_message(seconds))
    return result


def not_analysed(source: Source, rules: Sequence[Type[Rule]], message: str) -> FileResult:
    """The result of a file whose check did not finish: one TRL001 saying why (when TRL001 is
    among `rules`), and nothing else of what the check had found so far."""
    result = FileResult(path=source.path, unfinished=True)
    result.noqa = noqa.scan(source.lines)
    if any(rule.code == SYNTAX_ERROR for rule in rules):
        result.diagnostics.append(_problem(source, parse_guard.Problem(message, 1, 0)))
    return result


def _check(source: Source, selection: "Selection", rules: Sequence[Type[Rule]]) -> FileResult:
    result = FileResult(path=source.path)
    result.noqa = noqa.scan(source.lines)
    report_syntax_errors = any(r.code == SYNTAX_ERROR for r in rules)
    file_rules = [r for r in rules if r.code != SYNTAX_ERROR]
    if not file_rules and not report_syntax_errors:
        return result
    if source.notebook is not None and report_syntax_errors:
        result.diagnostics.extend(_broken_cells(source))
    # Over the size limit nothing is parsed, not even by Python to look for syntax errors.
    too_large = parse_guard.size_problem(source.text, selection.settings.max_file_size or None)
    if too_large is not None:
        if report_syntax_errors:
            result.diagnostics.append(_problem(source, too_large))
        return result
    module, python_tree, why_not = _parse(source, file_rules)
    analysed = source
    if module is None and python_tree is not None:
        # Python reads the file but libcst's tokenizer does not: an indent mixing tabs and
        # spaces that Python resolves at tab stops of 8. The same text with those indents
        # expanded has the same blocks, so it is analysed instead; its findings keep their
        # rows but offer no fix, since edits of the expanded text are not edits of the file.
        analysed, module = _with_indent_tabs_expanded(source)
    if module is None:
        if why_not is not None and report_syntax_errors:
            broken = why_not()
            if broken is not None:
                result.diagnostics.append(broken)
        return result
    try:
        tree = Tree(module)
        ctx = FileContext(analysed, module, tree, selection.settings)
        ctx.positions.ast_tree = python_tree
    except Exception as exc:  # the engine's own bug: this file is lost, the run goes on
        result.crashes.append(RuleCrash.of(source.path, "engine", exc))
        return result
    run_rules(ctx, rules_to_run(analysed.text, file_rules), result)
    if analysed is not source:
        for diagnostic in result.diagnostics:
            diagnostic.fix = None
    return result


_INDENT_WITH_TAB = re.compile(r"^[ \t]*\t[ \t]*", re.MULTILINE)


def _with_indent_tabs_expanded(source: Source) -> Tuple[Source, Optional[cst.Module]]:
    """`source` with every indent that holds a tab expanded to Python's tab stops (8
    columns), and its libcst module; (source, None) when there is no such indent or libcst
    still cannot parse it. A notebook's cells keep their rows: the edits only widen indents."""
    edits = [
        Edit(m.start(), m.end(), m.group(0).expandtabs(8))
        for m in _INDENT_WITH_TAB.finditer(source.text)
    ]
    if not edits:
        return source, None
    text = _INDENT_WITH_TAB.sub(lambda m: m.group(0).expandtabs(8), source.text)
    try:
        return source.with_text(text, edits), parse_guard.parse_checked(text)
    except Exception:  # still not libcst's: the TRL001 of the original text stands
        return source, None


# Why a file was not parsed, as the TRL001 finding to report when the user asked for it (None:
# nothing is wrong with the file). Built only when asked for: some cost a second parse.
WhyNotParsed = Callable[[], Optional[Diagnostic]]


def _parse(
    source: Source, file_rules: Sequence[Type[Rule]]
) -> Tuple[Optional[cst.Module], Any, Optional[WhyNotParsed]]:
    """(libcst module, Python's ast of the text, None) for a file worth analysing, else
    (None, Python's ast when only libcst refused the text, else None, why it was not parsed)."""
    if not might_match(source.text, file_rules):
        # Cannot match, but a broken file is still worth a TRL001 if the user asked for it
        # (it is cheap to learn with Python's own compiler).
        return None, None, lambda: _python_syntax_error(source)
    # Python's parser first: libcst's native parser crashes the process on deeply nested input.
    verdict = parse_guard.precheck(source.text, max_size=None)  # the size is checked already
    problem = verdict.problem
    if problem is not None:
        return None, None, lambda: _with_async_renamed(source, _problem(source, problem))
    try:
        # A tree of the text with its f-strings masked is not the file's (pep701.py).
        tree = None if verdict.masked else verdict.tree
        return parse_guard.parse_checked(source.text), tree, None
    except cst.ParserSyntaxError as exc:
        error = exc
        # Python's tree goes back with the refusal: the caller may retry libcst on a text of
        # the same blocks (`_with_indent_tabs_expanded`).
        return None, tree, lambda: _syntax_error(source, error)
    except RecursionError:
        message = "the file is nested too deeply for the parser (RecursionError); not analysed"
    except Exception as exc:  # libcst failing in a way it does not document
        message = (
            f"trainlint's parser (libcst) failed on this file ({type(exc).__name__}: {exc}); "
            "not analysed"
        )
    return None, None, lambda: syntax_error_diagnostic(source.path, message, 1, 0)


def run_rules(ctx: FileContext, rule_classes: Sequence[Type[Rule]], result: FileResult) -> None:
    instances: List[Rule] = []
    for cls in rule_classes:
        try:
            instances.append(cls(ctx))
        except Exception as exc:  # a rule's constructor is rule code too
            result.crashes.append(RuleCrash.of(ctx.path, cls.code, exc))
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
                    result.crashes.append(RuleCrash.of(ctx.path, rule.code, exc))
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
            result.crashes.append(RuleCrash.of(ctx.path, rule.code, exc))
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
                result.crashes.append(RuleCrash.of(ctx.path, rule.code, exc))


_VISITORS: Dict[type, Tuple[Tuple[type, str], ...]] = {}


def _visitors_of(rule_class: type) -> Tuple[Tuple[type, str], ...]:
    """(node type, method name) for each `visit_<NodeType>` of a rule class, in `dir` order
    (worked out once per class)."""
    found = _VISITORS.get(rule_class)
    if found is None:
        visitors = []
        for attr in dir(rule_class):
            if attr.startswith("visit_"):
                node_type = getattr(cst, attr[len("visit_") :], None)
                if isinstance(node_type, type):
                    visitors.append((node_type, attr))
        found = _VISITORS[rule_class] = tuple(visitors)
    return found


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


def _python_syntax_error(source: Source, newer_fstrings: bool = True) -> Optional[Diagnostic]:
    verdict = parse_guard.python_parse(source.text, newer_fstrings)
    if verdict.problem is not None:
        return _with_async_renamed(source, _problem(source, verdict.problem))
    if verdict.masked:
        # This Python read the file only with its f-strings masked (pep701.py): libcst, which
        # reads Python 3.12's f-strings, says whether they are well formed.
        checked = parse_guard.precheck(source.text, max_size=None)
        if checked.problem is not None:
            return _problem(source, checked.problem)
        try:
            parse_guard.parse_checked(source.text)
        except cst.ParserSyntaxError:
            return _python_syntax_error(source, newer_fstrings=False)
        except Exception:  # libcst failing in a way it does not document: not a finding
            return None
    return None


def _problem(source: Source, problem: parse_guard.Problem) -> Diagnostic:
    return _locate(
        source, syntax_error_diagnostic(source.path, problem.message, problem.row, problem.col)
    )


def _syntax_error(source: Source, exc: cst.ParserSyntaxError) -> Diagnostic:
    # Python's own message ("'(' was never closed", "Missing parentheses in call to 'print'")
    # is what users know; libcst's is a list of expected tokens. Prefer Python's when it agrees
    # that the file is broken. On a Python older than 3.12 that reads the file only with its
    # f-strings masked (pep701.py), libcst has just found one of them broken: this Python's
    # own message about the f-string says where.
    python = _python_syntax_error(source, newer_fstrings=False)
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


def _with_async_renamed(source: Source, diagnostic: Diagnostic) -> Diagnostic:
    """A file whose only syntax errors are PyTorch's old `async=` arguments (legacy_async.py)
    gets a message that says so and the rename to `non_blocking=` as a safe fix. (A notebook's
    broken cells are not in its analysed text; they are reported without a fix.)"""
    if source.notebook is not None:
        return diagnostic
    edits = legacy_async.renaming(source.text)
    if edits is None:
        return diagnostic
    first = edits[0]
    diagnostic.row = diagnostic.end_row = diagnostic.text_row = diagnostic.noqa_row = first.row
    diagnostic.col, diagnostic.end_col = first.col, first.end_col
    diagnostic.message = (
        "SyntaxError: `async=` is a reserved word since Python 3.7; "
        "PyTorch calls this argument `non_blocking=`"
    )
    diagnostic.help = (
        "PyTorch 0.4 renamed the `async` argument of `.cuda()`, `.to()`, `.copy_()` and "
        "`.type()` to `non_blocking` (the same asynchronous copy from pinned memory), and "
        "Python 3.7 made `async` a keyword, so this file does not compile on any Python that "
        "runs today's PyTorch. Rename the argument."
    )
    diagnostic.fix = Fix(
        Applicability.SAFE,
        f"Rename `async=` to `non_blocking=` ({len(edits)} argument"
        + ("s" if len(edits) != 1 else "")
        + ")",
        tuple(edits),
    )
    return diagnostic


def _broken_cells(source: Source) -> List[Diagnostic]:
    """TRL001 for each notebook cell left out of the analysis because it does not parse."""
    out: List[Diagnostic] = []
    if source.notebook is None:
        return out
    for cell, message, row, col in source.notebook.broken:
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


__all__ = [
    "check",
    "not_analysed",
    "make_diagnostic",
    "syntax_error_diagnostic",
]
