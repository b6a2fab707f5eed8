"""Every rule's documentation is checked code: its `## Example` must make the rule report, and its
`## Use instead` must not (Fixit's INVALID/VALID idea, applied to the docstrings that
`trainlint rule CODE` prints and docs/rules.md shows).

The examples are snippets, as in any linter's docs: they take the usual imports for granted and
leave out what does not matter (where `train_set` comes from). The test puts those imports in
front and checks the snippet as one file named `train.py`, alone in its project, so a project
rule (TRL203, TRL301, TRL302) sees the whole project the snippet describes. A snippet must be
valid Python: TRL001 is selected too and must stay quiet (except for TRL001's own example).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import List

import pytest

from fixture_support import lint
from trainlint.rules import all_rules

# The imports a reader of the docs assumes; nothing here names a device or an accelerator, so a
# rule that needs such evidence must find it in the example itself.
ASSUMED_IMPORTS = """\
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, DistributedSampler

"""

RULES = all_rules()
NOQA_CODES = re.compile(r"#\s*noqa:\s*(TRL\d{3}(?:\s*,\s*TRL\d{3})*)")


def section(explanation: str, title: str) -> str:
    """The text of `## <title>` up to the next heading ('' when there is none)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", explanation, re.S | re.M)
    return match.group(1) if match else ""


def python_blocks(text: str) -> List[str]:
    return [textwrap.dedent(block) for block in re.findall(r"```python\n(.*?)```", text, re.S)]


def findings(code: str, snippet: str, tmp_path: Path) -> List[str]:
    """The codes reported on `snippet` with `code` (and TRL001) selected. A code named in a noqa
    comment of the snippet is selected too: TRL002 judges noqa comments of rules that ran."""
    project = tmp_path / "project"
    project.mkdir(parents=True)
    path = project / "train.py"
    path.write_text(ASSUMED_IMPORTS + snippet, encoding="utf-8")
    named = [c.strip() for m in NOQA_CODES.findall(snippet) for c in m.split(",")]
    result = lint([path], sorted({code, "TRL001", *named}), root=project)
    assert not result.crashes, result.crashes
    assert not result.errors, result.errors
    return [d.code for d in result.diagnostics]


@pytest.mark.parametrize("code", sorted(RULES))
def test_example_is_reported(code, tmp_path):
    blocks = python_blocks(section(RULES[code].explanation(), "Example"))
    assert blocks, f"{code}'s docstring has no ```python block under ## Example"
    for index, snippet in enumerate(blocks):
        found = findings(code, snippet, tmp_path / str(index))
        assert code in found, f"{code}'s example is not reported:\n{snippet}"
        if code != "TRL001":
            assert "TRL001" not in found, f"{code}'s example is not valid Python:\n{snippet}"


@pytest.mark.parametrize("code", sorted(RULES))
def test_use_instead_is_not_reported(code, tmp_path):
    blocks = python_blocks(section(RULES[code].explanation(), "Use instead"))
    assert blocks, f"{code}'s docstring has no ```python block under ## Use instead"
    for index, snippet in enumerate(blocks):
        found = findings(code, snippet, tmp_path / str(index))
        assert code not in found, f"{code}'s corrected example is reported:\n{snippet}"
        assert "TRL001" not in found, f"{code}'s corrected example is not valid Python:\n{snippet}"


def test_snippets_are_split_where_the_docs_put_them():
    # The extraction itself: a rule's Example is its own code, not the next section's.
    text = RULES["TRL104"].explanation()
    (example,) = python_blocks(section(text, "Example"))
    (corrected,) = python_blocks(section(text, "Use instead"))
    assert "map_location" not in example and "map_location" in corrected
