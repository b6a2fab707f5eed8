"""The Rule base class.

A rule is one module under `rules/<family>/trlNNN_<name>.py` defining one `Rule` subclass. The
class docstring is the rule's explanation (What it does / Why is this bad / Example / Use instead /
Fix safety): `trainlint rule CODE` prints it and docs are generated from it.

A rule reads the `FileContext` (the parsed module, its parents, and lazily computed shared
analyses) and calls `self.report(...)`. It either implements `visit_<NodeType>` /
`leave_<NodeType>` methods, which the engine calls during its single pass over the tree, or does
its work in `finish()`, typically by asking an analysis. It never parses, reads files or formats.

Rules that need other files of the project also implement `facts()` (plain data saved per file)
and `check_project(project)` (run once per run, after every file). Such a rule usually knows
*where* a finding would go while it reads the file (the unused `self.p = nn.Parameter(...)`) but
only the project phase knows *whether* to report it: it records a `candidate(key, node, ...)`,
which the engine resolves like a report (position, notebook cell, fix edits) and keeps, as plain
data, in the file's result; `check_project` turns the ones it confirms into Diagnostics with
`project.candidate(path, code, key)`.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Iterable, List, Optional, Sequence, Tuple

from ..diagnostics import Applicability, Diagnostic, Severity

if TYPE_CHECKING:  # pragma: no cover
    # Annotations only: the base (and TRL002, which the runner imports for unused noqa
    # comments) must not import libcst in a run served by the cache.
    import libcst as cst

    from ..context import EditSpec, FileContext
    from ..project import Project


class PendingFix:
    """A fix whose edits still point at nodes; the engine turns them into text offsets."""

    __slots__ = ("applicability", "message", "edits")

    def __init__(self, applicability: Applicability, message: str, edits: Sequence["EditSpec"]):
        self.applicability = applicability
        self.message = message
        self.edits = tuple(edits)


class PendingReport:
    __slots__ = ("rule", "node", "end_node", "message", "severity", "fix", "related", "help")

    def __init__(self, rule, node, end_node, message, severity, fix, related, help=""):
        self.rule = rule
        self.node = node
        self.end_node = end_node
        self.message = message
        self.severity = severity
        self.fix = fix
        self.related = related
        self.help = help


class Rule:
    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.WARNING
    # When a finding can be more severe than the default ("error when ..."), for docs.
    severity_note: ClassVar[str] = ""
    # What fix the rule can offer: "safe", "unsafe", "sometimes" (safe or unsafe by case) or None.
    fix: ClassVar[Optional[str]] = None
    # A file that contains none of these substrings cannot produce a finding and is not parsed.
    # An empty tuple means "every file".
    markers: ClassVar[Tuple[str, ...]] = ("torch",)
    # Configuration keys this rule reads from [tool.trainlint] (name -> expected Python type).
    options: ClassVar[Dict[str, type]] = {}
    # True for rules whose findings need other files (they implement check_project).
    project: ClassVar[bool] = False
    # A preview rule is not in the default set until its measured precision on real code it was
    # never tuned on reaches the bar (benchmarks/precision.py); `--preview` / `preview = true`
    # adds it, or its exact code in `select`/`extend-select`.
    preview: ClassVar[bool] = False

    def __init__(self, ctx: "FileContext") -> None:
        self.ctx = ctx
        self.reports: List[PendingReport] = []
        self.candidates: Dict[str, PendingReport] = {}

    # -- reporting ----------------------------------------------------------------------------

    def report(
        self,
        node: cst.CSTNode,
        message: str,
        *,
        fix: Optional[PendingFix] = None,
        severity: Optional[Severity] = None,
        end_node: Optional[cst.CSTNode] = None,
        related: Iterable[Tuple[cst.CSTNode, str]] = (),
        help: str = "",
    ) -> None:
        """Report `node`. `message` is the headline: what is wrong, in about 100 characters,
        claiming only what the analysis established; `help` says what happens at run time (the
        PyTorch error) and how to fix it; `related` points at the other sites that prove it.
        Nothing is reported in code no run executes (`if False:`, `if __name__ ==
        'x__main__':`)."""
        # Imported here: a run served by the cache imports this module without libcst.
        from ..analysis.base.conditions import switched_off

        if switched_off(self.ctx, node):
            return
        self.reports.append(
            PendingReport(
                self,
                node,
                end_node,
                message,
                severity or self.severity,
                fix,
                tuple(related),
                help,
            )
        )

    def candidate(self, key: str, node: cst.CSTNode, message: str, **details: Any) -> None:
        """A finding the project phase may confirm (project rules only); `key` names it for
        `check_project` (e.g. "Head.class_embed"). `details` are `report()`'s keywords."""
        before = len(self.reports)
        self.report(node, message, **details)
        if len(self.reports) > before:
            self.candidates[key] = self.reports.pop()  # made like a report, kept aside

    def safe_fix(self, message: str, *edits: "EditSpec") -> PendingFix:
        return PendingFix(Applicability.SAFE, message, edits)

    def unsafe_fix(self, message: str, *edits: "EditSpec") -> PendingFix:
        return PendingFix(Applicability.UNSAFE, message, edits)

    # -- hooks --------------------------------------------------------------------------------

    def finish(self) -> None:
        """Called once after the pass over the tree."""

    def facts(self) -> Optional[Dict[str, Any]]:
        """Plain data about this file for the project phase (only for `project = True` rules)."""
        return None

    @classmethod
    def check_project(cls, project: "Project") -> Iterable[Diagnostic]:
        """Findings that need several files; runs once per run, after the per-file phase."""
        return ()

    # -- documentation ------------------------------------------------------------------------

    @classmethod
    def explanation(cls) -> str:
        return textwrap.dedent(inspect.cleandoc(cls.__doc__ or "")).strip()

    @classmethod
    def summary(cls) -> str:
        """The first sentence of the explanation's What-it-does section."""
        text = cls.explanation()
        lines = [ln.strip() for ln in text.splitlines()]
        body: List[str] = []
        started = False
        for line in lines:
            if line.lower().startswith("## what it does") or line.lower() == "what it does":
                started = True
                continue
            if started:
                if line.startswith("#") or (not line and body):
                    break
                if line:
                    body.append(line)
        sentence = " ".join(body) if body else (lines[0] if lines else cls.name)
        return sentence.split(". ")[0].rstrip(".") + "."

    @classmethod
    def default_enabled(cls) -> bool:
        return cls.severity is not Severity.INFO

    @classmethod
    def default_label(cls) -> str:
        """Whether a run without any selection runs the rule, as the docs say it."""
        if not cls.default_enabled():
            return "off (select it to enable)"
        if cls.preview:
            return "preview (on with `--preview`, or select its code)"
        return "on"

    @classmethod
    def fix_label(cls) -> str:
        return cls.fix or "none"
