"""A fake installed environment for the tests of installed frameworks (environment.py,
library.py): a site-packages tree written for the tests, with a detection framework `fakedet`
whose `dense_heads` package star re-exports its heads, a namespace package spread over two
folders, a `.pth` path entry, two editable installs, a single-file module, an extension module,
and code that leaves a marker file (or raises) if anything ever executes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

# Every package __init__ and finder module of the fake environment starts with this: run, it
# writes a marker file beside itself and fails. Reading it must never run it.
TRAP = (
    "import pathlib as _pathlib\n"
    "_pathlib.Path(__file__).with_name('EXECUTED').write_text('this code ran')\n"
    "raise RuntimeError('installed code must never be executed by trainlint')\n"
)

DETR_HEAD = '''
import torch
from torch import nn


class DETRHead(nn.Module):
    """The parent head: forward reads the layers its own __init__ builds."""

    def __init__(self, num_classes=80, embed_dims=256):
        super().__init__()
        self.num_classes = num_classes
        self.embed_dims = embed_dims
        self._init_layers()

    def _init_layers(self):
        self.cls_branch = nn.Linear(self.embed_dims, self.num_classes)
        self.reg_branch = nn.Linear(self.embed_dims, 4)

    def forward(self, hidden_states):
        logits = self.cls_branch(hidden_states)
        boxes = self.reg_branch(hidden_states).sigmoid()
        return logits, boxes

    def loss(self, hidden_states, targets):
        logits, boxes = self(hidden_states)
        return logits.mean() + boxes.mean()
'''

DINO_HEAD = '''
from .detr_head import DETRHead

__all__ = ["DINOHead"]


class DINOHead(DETRHead):
    """Denoising queries on top of the DETR head."""

    def forward(self, hidden_states, dn_meta=None):
        logits, boxes = super().forward(hidden_states)
        return logits, boxes
'''

WALKING_HEAD = '''
from torch import nn


class WalkingHead(nn.Module):
    """A parent that touches every submodule of whatever subclass it is."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        for child in self.children():
            x = child(x)
        return x
'''

TRACKING_HEAD = '''
from torch import nn


class TrackingHead(nn.Module):
    """A parent whose helper reads what a subclass\'s forward leaves on the module."""

    def attention_map(self):
        return self.last_attention.mean(0)
'''


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def populate_site(site: Path, extra: Path, editable_src: Path) -> None:
    """Write the fake framework and friends into `site` (a site-packages folder); `extra` is a
    folder a `.pth` line adds, `editable_src` the source tree of an editable install."""
    pkg = site / "fakedet"
    write(pkg / "__init__.py", TRAP)
    write(pkg / "models" / "__init__.py", TRAP + "from .dense_heads import *\n")
    heads = pkg / "models" / "dense_heads"
    # The star re-export comes after the trap: a reader, never a runner, must follow it.
    write(
        heads / "__init__.py",
        TRAP
        + "from .dino_head import *\nfrom .walking_head import *\nfrom .tracking_head import *\n",
    )
    write(heads / "tracking_head.py", TRACKING_HEAD)
    write(heads / "detr_head.py", DETR_HEAD)
    write(heads / "dino_head.py", DINO_HEAD)
    write(heads / "walking_head.py", WALKING_HEAD)
    write(site / "fakedet-1.2.0.dist-info" / "METADATA", "Name: fakedet\nVersion: 1.2.0\n\n")
    write(site / "fakedet-1.2.0.dist-info" / "top_level.txt", "fakedet\n")
    # A namespace package: fakens/vision here, fakens/text in the folder the .pth adds.
    write(site / "fakens" / "vision" / "heads.py", "class VisionHead:\n    pass\n")
    write(extra / "fakens" / "text" / "heads.py", "class TextHead:\n    pass\n")
    write(extra / "pthonly.py", "VALUE = 1\n")
    # A .pth file: a path line (followed), an import line (never executed).
    marker = site / "PTH_EXECUTED"
    write(
        site / "extra.pth",
        f"# comment\n{extra}\nimport pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n",
    )
    # An editable install by setuptools' finder (the finder module would run if imported)...
    write(editable_src / "fakeedit" / "__init__.py", TRAP)
    write(editable_src / "fakeedit" / "layers.py", "class EditableLayer:\n    pass\n")
    write(
        site / "__editable__.fakeedit-0.1.pth",
        "import __editable___fakeedit_0_1_finder; __editable___fakeedit_0_1_finder.install()\n",
    )
    write(
        site / "__editable___fakeedit_0_1_finder.py",
        TRAP + f"MAPPING: dict = {{'fakeedit': {str(editable_src / 'fakeedit')!r}}}\n",
    )
    # ... and one by a plain path line (the older style, and flit/hatch's).
    write(editable_src / "plainedit" / "__init__.py", TRAP)
    write(site / "__editable__.plainedit-0.1.pth", f"{editable_src}\n")
    write(site / "single.py", "class Single:\n    pass\n")
    (site / "fastops.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    write(site / "fastops.py", "class NotThisOne:\n    pass\n")


def executed_markers(*roots: Path) -> List[Path]:
    """Marker files any executed trap left under `roots`."""
    found: List[Path] = []
    for root in roots:
        for name in ("EXECUTED", "PTH_EXECUTED"):
            found.extend(root.rglob(name))
    return found


def make_venv(where: Path) -> Dict[str, Path]:
    """A real virtual environment (no pip: cheap) with the fake packages in its
    site-packages: {"python": its interpreter, "site": its site-packages, "prefix": it}."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)],
        check=True,
        capture_output=True,
    )
    bindir = "Scripts" if os.name == "nt" else "bin"
    python = where / bindir / ("python.exe" if os.name == "nt" else "python")
    site = next(where.glob("lib/python*/site-packages"))
    populate_site(site, where / "extra", where / "editable-src")
    return {"python": python, "site": site, "prefix": where}
