"""`trainlint server` driven end to end by a real LSP client (pytest-lsp) over stdio.

pygls and pytest-lsp come with the `test` extra (`pip install -e ".[test]"`).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import List

import attrs
import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

BUGGY = """\
import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(4, 2)).to(f"cuda:{args.gpu}")
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\n", encoding="utf-8")
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    return tmp_path


def with_notebooks(capabilities: types.ClientCapabilities) -> types.ClientCapabilities:
    """The client's capabilities, declaring LSP 3.17 notebook document sync (VS Code supports
    it; the capability set pytest-lsp records for it does not say so)."""
    return attrs.evolve(
        capabilities,
        notebook_document=types.NotebookDocumentClientCapabilities(
            synchronization=types.NotebookDocumentSyncClientCapabilities()
        ),
    )


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=[sys.executable, "-m", "trainlint", "server"])
)
async def client(lsp_client: LanguageClient, workspace: Path):
    lsp_client.initialize_result = await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=with_notebooks(client_capabilities("visual-studio-code")),
            root_uri=workspace.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="ws")],
        )
    )
    yield
    await lsp_client.shutdown_session()


# The server with the cache in its default place (.trainlint_cache in the project root): the
# suite's conftest points TRAINLINT_CACHE_DIR elsewhere for every test, and the server inherits it.
_DEFAULT_CACHE_SERVER = (
    "import os, sys; os.environ.pop('TRAINLINT_CACHE_DIR', None); "
    "from trainlint.cli import main; sys.exit(main(['server']))"
)


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=[sys.executable, "-c", _DEFAULT_CACHE_SERVER])
)
async def cached_client(lsp_client: LanguageClient, workspace: Path):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=with_notebooks(client_capabilities("visual-studio-code")),
            root_uri=workspace.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="ws")],
        )
    )
    yield
    await lsp_client.shutdown_session()


async def open_document(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, text))
    )
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return uri


async def change_document(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=uri),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)


def apply(text: str, edits) -> str:
    """Apply LSP text edits (ASCII text: characters are UTF-16 units) to `text`."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: types.Position) -> int:
        return starts[pos.line] + pos.character if pos.line < len(lines) else len(text)

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text


def actions_at(client: LanguageClient, uri: str, diagnostic: types.Diagnostic, only=None):
    return client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic], only=only),
        )
    )


@pytest.mark.asyncio
async def test_diagnostics_fix_action_and_hover(client: LanguageClient, workspace: Path):
    uri = await open_document(client, workspace / "train.py", BUGGY)
    [diagnostic] = client.diagnostics[uri]
    assert diagnostic.code == "TRL201"
    assert diagnostic.source == "trainlint"
    assert diagnostic.range.start == types.Position(3, 8)

    hover = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(uri), diagnostic.range.start)
    )
    assert hover is not None
    assert "dataparallel-wrap-then-move" in hover.contents.value
    assert "What it does" in hover.contents.value  # the rule's documentation, not the headline

    actions = await actions_at(client, uri, diagnostic)
    titles = [action.title for action in actions]
    fix = next(a for a in actions if a.title.startswith("Fix TRL201"))
    assert not fix.title.endswith("(unsafe)") and fix.is_preferred
    assert "Suppress TRL201 with # noqa: TRL201" in titles
    assert "Fix all safe trainlint findings" in titles

    fixed = apply(BUGGY, fix.edit.changes[uri])
    assert "DataParallel" in fixed and fixed != BUGGY
    await change_document(client, uri, 2, fixed)
    assert not client.diagnostics[uri]


@pytest.mark.asyncio
async def test_noqa_action_silences_the_finding(client: LanguageClient, workspace: Path):
    uri = await open_document(client, workspace / "train.py", BUGGY)
    [diagnostic] = client.diagnostics[uri]
    actions = await actions_at(client, uri, diagnostic)
    suppress = next(a for a in actions if a.title.startswith("Suppress"))
    suppressed = apply(BUGGY, suppress.edit.changes[uri])
    assert suppressed.splitlines()[3].endswith("# noqa: TRL201")
    await change_document(client, uri, 2, suppressed)
    assert not client.diagnostics[uri]


@pytest.mark.asyncio
async def test_unsaved_buffer_and_unsafe_label(client: LanguageClient, workspace: Path):
    # The buffer is checked, not the file on disk (which stays clean here).
    path = workspace / "loop.py"
    path.write_text("x = 1\n", encoding="utf-8")
    text = (
        "import torch\n"
        "def train(model, loader, device):\n"
        "    for images, labels in loader:\n"
        "        images = images.to(device)\n"
        "        loss = torch.nn.functional.cross_entropy(model(images), labels)\n"
        "        loss.backward()\n"
    )
    uri = await open_document(client, path, text)
    codes = [d.code for d in client.diagnostics[uri]]
    assert "TRL101" in codes
    trl101 = next(d for d in client.diagnostics[uri] if d.code == "TRL101")
    actions = await actions_at(client, uri, trl101)
    fixes = [a for a in actions if a.title.startswith("Fix TRL101")]
    assert fixes and all(a.title.endswith("(unsafe)") and not a.is_preferred for a in fixes)


@pytest.mark.asyncio
async def test_workspace_configuration_is_read(client: LanguageClient, workspace: Path):
    (workspace / "pyproject.toml").write_text(
        '[tool.trainlint]\nignore = ["TRL201"]\n', encoding="utf-8"
    )
    uri = await open_document(client, workspace / "train.py", BUGGY)
    assert not client.diagnostics[uri]


@pytest.mark.asyncio
async def test_fix_all_safe(client: LanguageClient, workspace: Path):
    uri = await open_document(client, workspace / "train.py", BUGGY)
    [diagnostic] = client.diagnostics[uri]
    actions = await actions_at(
        client, uri, diagnostic, only=[types.CodeActionKind.SourceFixAll]
    )
    [fix_all] = actions
    assert fix_all.kind == types.CodeActionKind.SourceFixAll
    await change_document(client, uri, 2, apply(BUGGY, fix_all.edit.changes[uri]))
    assert not client.diagnostics[uri]


def test_server_without_pygls_says_how_to_install(monkeypatch, capsys):
    import trainlint.server as server

    monkeypatch.setitem(sys.modules, "pygls.lsp.server", None)
    assert server.serve() == 2
    assert "needs pygls and lsprotocol, the `lsp` extra" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_configuration_error_is_shown_once(client: LanguageClient, workspace: Path):
    (workspace / "pyproject.toml").write_text('[tool.trainlint]\nselct = ["TRL2"]\n')
    uri = await open_document(client, workspace / "train.py", BUGGY)
    await change_document(client, uri, 2, BUGGY + "\n")
    errors = [m.message for m in client.messages if m.type == types.MessageType.Error]
    assert errors == [
        f"trainlint: {workspace / 'pyproject.toml'}: unknown key 'selct' in [tool.trainlint] "
        "(did you mean 'select'?)"
    ]
    assert not client.diagnostics[uri]


def _entries(workspace: Path):
    return sorted((workspace / ".trainlint_cache" / "entries").rglob("*.json"))


def _cli_check(workspace: Path, monkeypatch, capsys, name: str = "train.py"):
    """`trainlint check NAME` run in the project root: (exit code, cache hits, misses)."""
    from trainlint import cli
    from trainlint.cache import Cache

    seen = []
    original = Cache.get

    def spy(self, display, path, data):
        found = original(self, display, path, data)
        seen.append(found is not None)
        return found

    monkeypatch.chdir(workspace)
    monkeypatch.delenv("TRAINLINT_CACHE_DIR", raising=False)
    monkeypatch.setattr(Cache, "get", spy)
    code = cli.main(["check", name])
    out = capsys.readouterr().out
    assert "TRL201" in out
    return code, seen.count(True), seen.count(False)


@pytest.mark.asyncio
async def test_saved_file_shares_the_cli_cache(
    cached_client: LanguageClient, workspace: Path, monkeypatch, capsys
):
    client = cached_client
    # The buffer is the file on disk: the server checks it through the project's cache...
    assert not _entries(workspace)
    uri = await open_document(client, workspace / "train.py", BUGGY)
    assert [d.code for d in client.diagnostics[uri]] == ["TRL201"]
    assert len(_entries(workspace)) == 1
    # ...so the CLI run afterwards is served from the entry the server wrote.
    assert _cli_check(workspace, monkeypatch, capsys) == (1, 1, 0)


@pytest.mark.asyncio
async def test_unsaved_buffer_is_not_cached(cached_client: LanguageClient, workspace: Path):
    client = cached_client
    uri = await open_document(client, workspace / "train.py", BUGGY + "\n\n")
    assert [d.code for d in client.diagnostics[uri]] == ["TRL201"]
    assert not _entries(workspace)  # checked like standard input: no entry under the file


@pytest.fixture
def warmed(workspace: Path, monkeypatch, capsys) -> Path:
    """A workspace the CLI checked first, its cache entry marked so a read of it shows."""
    assert _cli_check(workspace, monkeypatch, capsys) == (1, 0, 1)
    [entry] = _entries(workspace)
    entry.write_text(
        entry.read_text(encoding="utf-8").replace("DataParallel wrapper", "CACHED wrapper"),
        encoding="utf-8",
    )
    return workspace


@pytest.mark.asyncio
async def test_server_reads_what_the_cli_cached(warmed: Path, cached_client: LanguageClient):
    client = cached_client
    uri = await open_document(client, warmed / "train.py", BUGGY)
    [diagnostic] = client.diagnostics[uri]
    assert diagnostic.message.startswith("CACHED wrapper")  # the CLI's entry, not a new check


NOTEBOOK_CELLS = [
    # Cell 1 wraps the model; cell 3 moves the wrapper: the finding needs both cells.
    (types.NotebookCellKind.Code, "%matplotlib inline\nimport torch\nimport torch.nn as nn\n\n"
     "model = nn.DataParallel(nn.Linear(4, 2))\n"),
    (types.NotebookCellKind.Markup, "Move it to the GPU chosen below."),
    (types.NotebookCellKind.Code, "gpu = int(input())\nmodel = model.to(f\"cuda:{gpu}\")\n"),
]


async def open_notebook(client: LanguageClient, path: Path, cells) -> List[str]:
    """Open a notebook document of `cells` ((kind, text)); the cells' uris."""
    uri = path.as_uri()
    cell_uris = [f"vscode-notebook-cell:{path.as_posix()}#C{n}" for n in range(len(cells))]
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=uri,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[
                    types.NotebookCell(kind=kind, document=cell_uri)
                    for (kind, _), cell_uri in zip(cells, cell_uris)
                ],
            ),
            cell_text_documents=[
                types.TextDocumentItem(
                    cell_uri,
                    "python" if kind == types.NotebookCellKind.Code else "markdown",
                    1,
                    text,
                )
                for (kind, text), cell_uri in zip(cells, cell_uris)
            ],
        )
    )
    await published(client, cell_uris)
    return cell_uris


async def published(client: LanguageClient, uris: List[str]) -> None:
    """Wait until every one of `uris` has diagnostics published (one notification per cell,
    which may all arrive before a wait for the next notification would start)."""

    async def every_cell():
        while not all(uri in client.diagnostics for uri in uris):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(every_cell(), 60)


@pytest.mark.asyncio
async def test_notebook_finding_lands_on_its_cell(client: LanguageClient, workspace: Path):
    # Advertised because the client declares notebook support (VS Code's capabilities).
    sync = client.initialize_result.capabilities.notebook_document_sync
    assert sync is not None and sync.notebook_selector[0].notebook.pattern == "**/*.ipynb"
    cell_uris = await open_notebook(client, workspace / "explore.ipynb", NOTEBOOK_CELLS)
    assert not client.diagnostics[cell_uris[0]] and not client.diagnostics[cell_uris[1]]
    [diagnostic] = client.diagnostics[cell_uris[2]]
    assert diagnostic.code == "TRL201"
    # Row 2 of cell 3 (0-based line 1), from `model.to(` on: not a row of the joined text.
    assert diagnostic.range.start == types.Position(1, 8)
    assert diagnostic.range.end.line == 1

    # Fixing cell 3 in the editor clears it.
    client.diagnostics.clear()
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(
                version=2, uri=(workspace / "explore.ipynb").as_uri()
            ),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(
                                uri=cell_uris[2], version=2
                            ),
                            changes=[
                                types.TextDocumentContentChangeWholeDocument(
                                    text="gpu = 0\nmodel = model.to('cuda:0')\n"
                                )
                            ],
                        )
                    ]
                )
            ),
        )
    )
    await published(client, cell_uris)
    assert not client.diagnostics[cell_uris[2]]


@pytest.mark.asyncio
async def test_saved_notebook_shares_the_cli_cache(
    cached_client: LanguageClient, workspace: Path, monkeypatch, capsys
):
    kinds = {types.NotebookCellKind.Code: "code", types.NotebookCellKind.Markup: "markdown"}
    notebook = {
        "cells": [
            {"cell_type": kinds[kind], "metadata": {}, "source": text.splitlines(keepends=True)}
            for kind, text in NOTEBOOK_CELLS
        ],
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (workspace / "explore.ipynb").write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    cell_uris = await open_notebook(cached_client, workspace / "explore.ipynb", NOTEBOOK_CELLS)
    assert [d.code for d in cached_client.diagnostics[cell_uris[2]]] == ["TRL201"]
    assert len(_entries(workspace)) == 1  # the file's cells: checked as the file, cached
    assert _cli_check(workspace, monkeypatch, capsys, "explore.ipynb") == (1, 1, 0)
