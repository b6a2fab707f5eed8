"""`trainlint server`: a Language Server (LSP over stdio) for editors.

An open buffer is checked with the settings found for its path (the nearest pyproject.toml,
trainlint.toml or .trainlint.toml above it) and shown with the path `trainlint check .` in the
project root shows. A buffer whose bytes are the file on disk (just opened, or saved) is checked
as that file, through the per-file cache the CLI uses (`.trainlint_cache/` in the project root,
or $TRAINLINT_CACHE_DIR, or `--cache-dir`; `--no-cache` turns it off), so a CLI run after editing
is warm and the editor is served from the CLI's entries. An unsaved buffer is checked the way
`trainlint check --stdin-filename PATH` checks standard input: its text stands in for the file's
and is never cached. Diagnostics are published when a buffer is opened, changed or saved, and
again for every open buffer when a configuration file is saved.

Code actions: one per fix ("Fix TRL201: ..." for safe fixes, "... (unsafe)" for the others),
"Suppress TRL201 with # noqa" on every finding, and "Fix all safe trainlint findings"
(`source.fixAll`). Hovering a finding shows its rule's documentation (`trainlint rule CODE`).

Notebooks, where the client supports LSP 3.17 notebook document sync (advertised for
`**/*.ipynb` with Python cells): the open notebook's cells are assembled into a notebook as
`notebook.py` reads a file (code cells joined, magics masked, cells numbered markdown included),
checked like a `.ipynb` file (through the cache when the cells are the file's on disk), and each
finding is published on its cell's document at the row inside the cell. Code actions and hover
are offered for `.py` buffers only, not for notebook cells.

pygls and lsprotocol are an optional extra (`lsp`: `pip install ".[lsp]"` in a clone).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from . import __version__
from .addnoqa import noqa_edit
from .config import ConfigError, Settings, load_settings
from .diagnostics import Diagnostic, Severity
from .fixes import fixable
from .source import Source, SourceError, read_regular_file

if TYPE_CHECKING:  # pragma: no cover
    from .cache import Cache

CONFIG_FILES = ("pyproject.toml", "trainlint.toml", ".trainlint.toml")
_SEVERITIES = {Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}  # LSP's numbers


@dataclass
class Checked:
    """One buffer's text as last checked, and what was found in it."""

    version: Optional[int]
    text: str
    source: Optional[Source]
    findings: List[Diagnostic]
    settings: Optional[Settings]


@dataclass(frozen=True)
class CacheChoice:
    """The per-file cache the server shares with `trainlint check`: off (`--no-cache`), or in
    `directory` ($TRAINLINT_CACHE_DIR, else `.trainlint_cache/` in each file's project root)."""

    enabled: bool = True
    directory: Optional[Path] = None

    def for_selection(self, selection) -> Optional["Cache"]:
        if not self.enabled:
            return None
        from .cache import Cache

        return Cache.for_selection(selection, self.directory)


def display_for(path: Path, settings: Settings) -> str:
    """The path a finding is shown with: relative to the project root, as `trainlint check .`
    run there shows it. The cache keys entries by this path, so the same file checked by the
    CLI and by the server shares one entry."""
    relative = settings.relative(str(path))
    return relative if not Path(relative).is_absolute() else str(path)


def saved_as(path: Path, data: bytes, settings: Settings) -> bool:
    """Are `data` the bytes of the file on disk (a saved buffer)?"""
    limit = settings.max_file_size or None
    try:
        return read_regular_file(path, limit + 1 if limit else None) == data
    except OSError:
        return False


def check_bytes(
    path: Path,
    data: bytes,
    settings: Settings,
    *,
    fix: bool = False,
    cache: CacheChoice = CacheChoice(enabled=False),
    on_disk: Optional[bool] = None,
):
    """`runner.run` over one editor buffer: (findings of this file, the RunResult).

    A buffer whose bytes are the file's on disk is checked as the file, through the cache the
    CLI uses (a CLI run afterwards is warm, and a buffer the CLI already checked is served from
    its entry). Any other buffer is checked the way standard input is: its bytes stand in for
    the file's and are never cached. A fix run never uses the cache and never writes: the
    editor owns the buffer."""
    from .runner import run
    from .selection import Selection

    display = display_for(path, settings)
    selection = Selection.of(settings)
    if on_disk is None:
        on_disk = saved_as(path, data, settings)
    cacheable = on_disk and not fix
    result = run(
        [(path, display)],
        selection,
        fix=fix,
        unsafe=False,
        diff=fix,  # fixes stay in the result, never written
        contents=None if cacheable else {display: data},
        cache=cache.for_selection(selection) if cacheable else None,
    )
    return [d for d in result.diagnostics if d.path == display], result


def check_text(path: Path, text: str, settings: Settings, *, fix: bool = False, cache=None):
    """`check_bytes` over a buffer's text (UTF-8, as the editor holds it)."""
    choice = cache if isinstance(cache, CacheChoice) else CacheChoice(enabled=False)
    return check_bytes(path, text.encode("utf-8"), settings, fix=fix, cache=choice)


def notebook_json(cells: Sequence[Tuple[str, str]]) -> bytes:
    """An nbformat 4 notebook of `cells` ((cell_type, text), in order): what the editor's
    notebook holds, in the form `notebook.py` reads, so its code cells are joined and their
    magics masked exactly as for a notebook file."""
    made: List[Dict[str, Any]] = []
    for kind, text in cells:
        cell: Dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": text}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        made.append(cell)
    data = {
        "cells": made,
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(data, indent=1).encode("utf-8")


def notebook_on_disk(path: Path, cells: Sequence[Tuple[str, str]], settings: Settings):
    """The bytes of the notebook file when its cells are the editor's (same kinds, same text,
    same order: a saved notebook), else None."""
    limit = settings.max_file_size or None
    try:
        data = read_regular_file(path, limit + 1 if limit else None)
        stored = json.loads(data.decode("utf-8-sig"))
        disk = [
            (
                cell.get("cell_type"),
                "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"],
            )
            for cell in stored["cells"]
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return data if disk == list(cells) else None


def settings_for(path: Path) -> Settings:
    from .rules import rule_names

    return load_settings([path], rule_names())


def create_server(cache: CacheChoice = CacheChoice()):
    """The pygls server with trainlint's features registered (imports pygls)."""
    from lsprotocol import types
    from pygls.lsp.server import LanguageServer
    from pygls.uris import to_fs_path

    server = LanguageServer(
        "trainlint",
        __version__,
        notebook_document_sync=types.NotebookDocumentSyncOptions(
            notebook_selector=[
                types.NotebookDocumentFilterWithCells(
                    cells=[types.NotebookCellLanguage("python")],
                    notebook=types.NotebookDocumentFilterPattern(pattern="**/*.ipynb"),
                )
            ],
            save=True,
        ),
    )
    checked: Dict[str, Checked] = {}
    notebook_cells: Dict[str, List[str]] = {}  # notebook uri -> the cell uris last published
    shown_errors: Dict[str, str] = {}  # uri -> the configuration error last shown for it

    def lint(uri: str) -> Optional[Checked]:
        document = server.workspace.get_text_document(uri)
        path = Path(document.path)
        if path.suffix != ".py":
            return None
        text = document.source
        findings: List[Diagnostic] = []
        settings: Optional[Settings] = None
        source: Optional[Source] = None
        try:
            settings = settings_for(path)
            shown_errors.pop(uri, None)
        except ConfigError as exc:
            if shown_errors.get(uri) != str(exc):  # once, not on every keystroke
                shown_errors[uri] = str(exc)
                server.window_show_message(
                    types.ShowMessageParams(types.MessageType.Error, f"trainlint: {exc}")
                )
        if settings is not None and not settings.is_excluded(path):
            findings, result = check_text(path, text, settings, cache=cache)
            for error in list(result.errors) + [c.describe() for c in result.crashes]:
                server.window_log_message(
                    types.LogMessageParams(types.MessageType.Error, f"trainlint: {error}")
                )
            try:
                source = Source.from_bytes(str(path), text.encode("utf-8"))
            except SourceError:
                source = None
        state = Checked(document.version, text, source, findings, settings)
        checked[uri] = state
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(
                uri=uri,
                version=document.version,
                diagnostics=[to_lsp(document, state, d) for d in findings],
            )
        )
        return state

    def current(uri: str) -> Optional[Checked]:
        document = server.workspace.get_text_document(uri)
        state = checked.get(uri)
        if state is None or state.version != document.version or state.text != document.source:
            state = lint(uri)
        return state

    def position(document, state: Checked, row: int, col: int):
        """A report position (row 1-based, col 0-based, in characters) in the client's units."""
        if state.source is None:
            return types.Position(max(row - 1, 0), col)
        return document.client_position_at_offset(state.source.offset(row, col))

    def to_range(document, state: Checked, d: Diagnostic):
        return types.Range(
            position(document, state, d.row, d.col),
            position(document, state, d.end_row or d.row, d.end_col),
        )

    def to_lsp(document, state: Checked, d: Diagnostic):
        message = f"{d.message}\n{d.help}" if d.help else d.message
        return types.Diagnostic(
            range=to_range(document, state, d),
            message=message,
            severity=types.DiagnosticSeverity(_SEVERITIES[d.severity]),
            code=d.code,
            source="trainlint",
            data={"name": d.name},
        )

    def text_edit(document, start: int, end: int, content: str):
        return types.TextEdit(
            types.Range(
                document.client_position_at_offset(start), document.client_position_at_offset(end)
            ),
            content,
        )

    def overlaps(document, state: Checked, d: Diagnostic, wanted) -> bool:
        found = to_range(document, state, d)
        before = (found.end.line, found.end.character) < (wanted.start.line, wanted.start.character)
        after = (found.start.line, found.start.character) > (wanted.end.line, wanted.end.character)
        return not before and not after

    # -- notebooks (LSP 3.17 notebook document sync) ---------------------------------------

    def lint_notebook(notebook_uri: str) -> None:
        """Check an open notebook as `trainlint check` checks its file, and publish each
        finding on its cell's document."""
        notebook = server.workspace.get_notebook_document(notebook_uri=notebook_uri)
        if notebook is None:
            return
        documents = [server.workspace.get_text_document(c.document) for c in notebook.cells]
        cells: List[Tuple[str, str]] = []
        for cell, document in zip(notebook.cells, documents):
            if cell.kind == types.NotebookCellKind.Markup:
                cells.append(("markdown", document.source))
            elif (document.language_id or "python") == "python":
                cells.append(("code", document.source))
            else:  # another language's cell: kept for the numbering, never read as Python
                cells.append(("raw", document.source))
        path = Path(to_fs_path(notebook_uri) or notebook_uri)
        findings: List[Diagnostic] = []
        try:
            settings = settings_for(path)
        except ConfigError as exc:
            settings = None
            if shown_errors.get(notebook_uri) != str(exc):
                shown_errors[notebook_uri] = str(exc)
                server.window_show_message(
                    types.ShowMessageParams(types.MessageType.Error, f"trainlint: {exc}")
                )
        if settings is not None and not settings.is_excluded(path):
            shown_errors.pop(notebook_uri, None)
            saved = notebook_on_disk(path, cells, settings)
            data = saved if saved is not None else notebook_json(cells)
            findings, result = check_bytes(
                path, data, settings, cache=cache, on_disk=saved is not None
            )
            for error in list(result.errors) + [c.describe() for c in result.crashes]:
                server.window_log_message(
                    types.LogMessageParams(types.MessageType.Error, f"trainlint: {error}")
                )
        per_cell: Dict[str, List[Any]] = {cell.document: [] for cell in notebook.cells}
        for d in findings:
            number = d.cell if d.cell and d.cell <= len(documents) else 1
            if not documents:
                break
            document = documents[number - 1]
            per_cell[document.uri].append(cell_diagnostic(document, d))
        for uri in notebook_cells.get(notebook_uri, []):
            per_cell.setdefault(uri, [])  # a cell removed since: clear what it showed
        notebook_cells[notebook_uri] = [cell.document for cell in notebook.cells]
        for uri, diagnostics in per_cell.items():
            server.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics)
            )

    def cell_position(document, row: int, col: int):
        """A report position inside a cell (row 1-based, col 0-based in characters) in the
        client's units."""
        lines = document.lines
        row = min(max(row, 1), len(lines) + 1)
        offset = sum(len(line) for line in lines[: row - 1]) + col
        return document.client_position_at_offset(min(offset, len(document.source)))

    def cell_diagnostic(document, d: Diagnostic):
        message = f"{d.message}\n{d.help}" if d.help else d.message
        return types.Diagnostic(
            range=types.Range(
                cell_position(document, d.row, d.col),
                cell_position(document, d.end_row or d.row, d.end_col),
            ),
            message=message,
            severity=types.DiagnosticSeverity(_SEVERITIES[d.severity]),
            code=d.code,
            source="trainlint",
            data={"name": d.name},
        )

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(params: types.DidOpenNotebookDocumentParams) -> None:
        lint_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(params: types.DidChangeNotebookDocumentParams) -> None:
        lint_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(params: types.DidSaveNotebookDocumentParams) -> None:
        lint_notebook(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(params: types.DidCloseNotebookDocumentParams) -> None:
        for uri in notebook_cells.pop(params.notebook_document.uri, []):
            server.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
            )

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri.rsplit("/", 1)[-1] in CONFIG_FILES:
            for open_uri in list(checked):  # the settings may have changed: check again
                lint(open_uri)
            for notebook_uri in list(notebook_cells):
                lint_notebook(notebook_uri)
        elif uri in checked or uri.endswith(".py"):
            lint(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        checked.pop(uri, None)
        server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=[])
        )

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll]
        ),
    )
    def code_action(params: types.CodeActionParams) -> List[Any]:
        uri = params.text_document.uri
        document = server.workspace.get_text_document(uri)
        state = current(uri)
        if state is None or state.source is None:
            return []
        only = params.context.only
        actions: List[Any] = []
        if not only or any(str(kind).startswith("quickfix") for kind in only):
            for d in state.findings:
                if overlaps(document, state, d, params.range):
                    actions.extend(finding_actions(document, state, d))
        if not only or any(
            str(kind) == "source" or str(kind).startswith("source.fixAll") for kind in only
        ):
            fix_all = fix_all_action(document, state)
            if fix_all is not None:
                actions.append(fix_all)
        return actions

    def finding_actions(document, state: Checked, d: Diagnostic) -> List[Any]:
        uri = document.uri
        lsp = to_lsp(document, state, d)
        out = []
        if d.fix is not None and d.fix.edits:
            safe = fixable(d, unsafe=False)
            label = f"Fix {d.code}: {d.fix.message}" + ("" if safe else " (unsafe)")
            edits = [text_edit(document, e.start, e.end, e.content) for e in d.fix.edits]
            out.append(
                types.CodeAction(
                    title=label,
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp],
                    is_preferred=safe,
                    edit=types.WorkspaceEdit(changes={uri: edits}),
                )
            )
        edit = noqa_edit(state.source, d.text_row or d.row, {d.code}) if state.source else None
        if edit is not None:
            out.append(
                types.CodeAction(
                    title=f"Suppress {d.code} with # noqa: {d.code}",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[lsp],
                    edit=types.WorkspaceEdit(
                        changes={uri: [text_edit(document, edit.start, edit.end, edit.content)]}
                    ),
                )
            )
        return out

    def fix_all_action(document, state: Checked):
        if state.settings is None or not any(fixable(d, False) for d in state.findings):
            return None
        path = Path(document.path)
        _, result = check_text(path, state.text, state.settings, fix=True)
        fixed = result.states.get(display_for(path, state.settings))
        if fixed is None or fixed.source is None or fixed.source.text == state.text:
            return None
        return types.CodeAction(
            title="Fix all safe trainlint findings",
            kind=types.CodeActionKind.SourceFixAll,
            edit=types.WorkspaceEdit(
                changes={document.uri: [text_edit(document, 0, len(state.text), fixed.source.text)]}
            ),
        )

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(params: types.HoverParams):
        uri = params.text_document.uri
        document = server.workspace.get_text_document(uri)
        state = current(uri)
        if state is None:
            return None
        wanted = types.Range(params.position, params.position)
        docs = [rule_doc(d) for d in state.findings if overlaps(document, state, d, wanted)]
        if not docs:
            return None
        return types.Hover(
            contents=types.MarkupContent(types.MarkupKind.Markdown, "\n\n---\n\n".join(docs))
        )

    return server


def rule_doc(d: Diagnostic) -> str:
    """The hover text of one finding: its headline, then its rule's documentation."""
    from .rules import all_rules

    rule = all_rules()[d.code]
    help_text = f"\n\n{d.help}" if d.help else ""
    return f"**{d.code}** `{rule.name}`: {d.message}{help_text}\n\n{rule.explanation()}"


def serve(cache: bool = True, cache_dir: Optional[Path] = None) -> int:
    """`trainlint server`: serve LSP over stdin/stdout until the client says exit."""
    try:
        server = create_server(CacheChoice(cache, cache_dir))
    except ImportError as exc:
        print(
            f"error: `trainlint server` needs pygls and lsprotocol, the `lsp` extra ({exc})",
            file=sys.stderr,
        )
        return 2
    server.start_io()
    return 0


__all__ = ["CacheChoice", "check_bytes", "check_text", "create_server", "rule_doc", "serve"]
